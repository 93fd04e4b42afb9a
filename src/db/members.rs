//! Table `memberships` as an organization's list of members: who, with which role. Every change
//! here is announced by the table's trigger (`membership` changes) and reaches every instance's
//! streams at once (`u:<user>` first: the member's visible organizations are read again).

use postgres::Row;
use serde_json::{json, Value};

use super::Sql;
use crate::access::Role;
use crate::http::json::Email;

#[derive(Debug, Clone)]
pub struct Member {
    pub user_id: i64,
    pub name: String,
    pub email: String,
    pub role: Role,
    pub joined: String,
}

const SELECT: &str = "SELECT u.id, u.name, u.email, m.role, \
     to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') \
     FROM memberships m JOIN users u ON u.id = m.user_id";

impl Member {
    fn from_row(r: &Row) -> Member {
        Member {
            user_id: r.get(0),
            name: r.get(1),
            email: r.get(2),
            // The table's CHECK admits only the four names.
            role: Role::parse(r.get(3)).unwrap_or(Role::Viewer),
            joined: r.get(4),
        }
    }

    /// The Member resource (docs/API.md).
    pub fn to_json(&self) -> Value {
        json!({
            "user_id": self.user_id, "name": self.name, "email": self.email,
            "role": self.role.as_str(), "joined": self.joined,
        })
    }
}

/// The members of an organization, owners first, then by when they joined.
pub fn list(c: &mut impl Sql, org_id: i64) -> Result<Vec<Member>, postgres::Error> {
    let sql = format!(
        "{SELECT} WHERE m.org_id = $1
          ORDER BY array_position(ARRAY['owner', 'admin', 'member', 'viewer'], m.role), m.id"
    );
    Ok(c.query(&sql, &[&org_id])?
        .iter()
        .map(Member::from_row)
        .collect())
}

pub fn find(
    c: &mut impl Sql,
    org_id: i64,
    user_id: i64,
) -> Result<Option<Member>, postgres::Error> {
    let sql = format!("{SELECT} WHERE m.org_id = $1 AND m.user_id = $2");
    Ok(c.query_opt(&sql, &[&org_id, &user_id])?
        .as_ref()
        .map(Member::from_row))
}

/// Whether the account of `email` is a member already.
pub fn has_address(c: &mut impl Sql, org_id: i64, email: &Email) -> Result<bool, postgres::Error> {
    let row = c.query_opt(
        "SELECT 1 FROM memberships m JOIN users u ON u.id = m.user_id
          WHERE m.org_id = $1 AND u.email = $2",
        &[&org_id, &email.as_str()],
    )?;
    Ok(row.is_some())
}

/// Adds a member; false when the user is one already.
pub fn add(
    c: &mut impl Sql,
    org_id: i64,
    user_id: i64,
    role: Role,
) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, $3)
         ON CONFLICT (org_id, user_id) DO NOTHING",
        &[&org_id, &user_id, &role.as_str()],
    )?;
    Ok(n == 1)
}

pub fn set_role(
    c: &mut impl Sql,
    org_id: i64,
    user_id: i64,
    role: Role,
) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE memberships SET role = $3 WHERE org_id = $1 AND user_id = $2 AND role <> $3",
        &[&org_id, &user_id, &role.as_str()],
    )?;
    Ok(())
}

pub fn remove(c: &mut impl Sql, org_id: i64, user_id: i64) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "DELETE FROM memberships WHERE org_id = $1 AND user_id = $2",
        &[&org_id, &user_id],
    )?;
    Ok(n == 1)
}

/// How many owners the organization has (read under its lock: `orgs::lock`).
pub fn owners(c: &mut impl Sql, org_id: i64) -> Result<i64, postgres::Error> {
    let row = c.query_one(
        "SELECT count(*) FROM memberships WHERE org_id = $1 AND role = 'owner'",
        &[&org_id],
    )?;
    Ok(row.get(0))
}
