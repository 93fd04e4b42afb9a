//! Tables `organizations`, `memberships` and `projects`: an organization as its members see it,
//! its projects. A member's place in it is `db::members`; who may do what, `crate::access`.

use super::Sql;
use serde_json::{json, Value};

use crate::access::Status;

#[derive(Debug, Clone)]
pub struct OrgSummary {
    pub id: i64,
    pub name: String,
    pub kind: String,
    pub role: String,
    pub status: String,
}

impl OrgSummary {
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id, "name": self.name, "kind": self.kind,
            "role": self.role, "status": self.status,
        })
    }
}

const SUMMARY: &str = "SELECT o.id, o.name, o.kind, m.role, o.status
       FROM memberships m JOIN organizations o ON o.id = m.org_id";

fn summary_of(r: &postgres::Row) -> OrgSummary {
    OrgSummary {
        id: r.get(0),
        name: r.get(1),
        kind: r.get(2),
        role: r.get(3),
        status: r.get(4),
    }
}

/// The organizations a user belongs to, oldest first.
pub fn for_user(c: &mut impl Sql, user_id: i64) -> Result<Vec<OrgSummary>, postgres::Error> {
    let sql = format!("{SUMMARY} WHERE m.user_id = $1 ORDER BY o.id");
    Ok(c.query(&sql, &[&user_id])?.iter().map(summary_of).collect())
}

/// One organization as its member `user_id` sees it; `None` when the user is not a member.
pub fn summary(
    c: &mut impl Sql,
    user_id: i64,
    org_id: i64,
) -> Result<Option<OrgSummary>, postgres::Error> {
    let sql = format!("{SUMMARY} WHERE m.user_id = $1 AND o.id = $2");
    Ok(c.query_opt(&sql, &[&user_id, &org_id])?
        .as_ref()
        .map(summary_of))
}

/// A team organization with `owner` as its owner (no project: its admins make them).
pub fn create_team(c: &mut impl Sql, name: &str, owner: i64) -> Result<i64, postgres::Error> {
    let org_id: i64 = c
        .query_one(
            "INSERT INTO organizations (name, kind, status) VALUES ($1, 'team', 'active') RETURNING id",
            &[&name],
        )?
        .get(0);
    c.execute(
        "INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, 'owner')",
        &[&org_id, &owner],
    )?;
    Ok(org_id)
}

pub fn rename(c: &mut impl Sql, org_id: i64, name: &str) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE organizations SET name = $2 WHERE id = $1 AND name <> $2",
        &[&org_id, &name],
    )?;
    Ok(())
}

/// An organization's status and whether it is personal; `None` when there is none.
pub fn status_of(c: &mut impl Sql, org_id: i64) -> Result<Option<(Status, bool)>, postgres::Error> {
    let row = c.query_opt(
        "SELECT status, kind FROM organizations WHERE id = $1",
        &[&org_id],
    )?;
    Ok(row.map(|r| {
        let status = Status::parse(r.get(0)).unwrap_or(Status::Suspended);
        (status, r.get::<_, &str>(1) == "personal")
    }))
}

/// Locks the organization's row until the transaction ends: membership changes of one
/// organization happen one at a time, so that two owners demoting each other cannot leave it
/// without one.
pub fn lock(c: &mut impl Sql, org_id: i64) -> Result<(), postgres::Error> {
    c.execute(
        "SELECT 1 FROM organizations WHERE id = $1 FOR UPDATE",
        &[&org_id],
    )?;
    Ok(())
}

/// The organization's status, its row locked until the transaction ends; `None` when there is
/// no such organization.
pub fn lock_status(c: &mut impl Sql, org_id: i64) -> Result<Option<Status>, postgres::Error> {
    let row = c.query_opt(
        "SELECT status FROM organizations WHERE id = $1 FOR UPDATE",
        &[&org_id],
    )?;
    Ok(row.map(|r| Status::parse(r.get(0)).unwrap_or(Status::Suspended)))
}

/// Sets the status. A change reaches every instance's streams through the table's trigger
/// (migration 0011).
pub fn set_status(c: &mut impl Sql, org_id: i64, status: Status) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE organizations SET status = $2 WHERE id = $1 AND status <> $2",
        &[&org_id, &status.as_str()],
    )?;
    Ok(())
}

/// The personal organization of a new user (the user as owner) with its `default` project.
/// Returns (organization id, project id).
pub fn create_personal(
    c: &mut impl Sql,
    user_id: i64,
    user_name: &str,
) -> Result<(i64, i64), postgres::Error> {
    let org_id: i64 = c
        .query_one(
            "INSERT INTO organizations (name, kind, status) VALUES ($1, 'personal', 'active') RETURNING id",
            &[&user_name],
        )?
        .get(0);
    c.execute(
        "INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, 'owner')",
        &[&org_id, &user_id],
    )?;
    let project =
        create_project(c, org_id, "default")?.expect("a new organization has no projects");
    Ok((org_id, project.id))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    pub id: i64,
    pub org_id: i64,
    pub name: String,
    pub created: String,
}

impl Project {
    fn from_row(r: &postgres::Row) -> Project {
        Project {
            id: r.get(0),
            org_id: r.get(1),
            name: r.get(2),
            created: r.get(3),
        }
    }

    /// The Project resource (docs/API.md).
    pub fn to_json(&self) -> Value {
        json!({ "id": self.id, "org_id": self.org_id, "name": self.name, "created": self.created })
    }
}

const PROJECT: &str =
    "id, org_id, name, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')";

/// Creates a project; `None` when the organization has one of that name.
pub fn create_project(
    c: &mut impl Sql,
    org_id: i64,
    name: &str,
) -> Result<Option<Project>, postgres::Error> {
    let sql = format!(
        "INSERT INTO projects (org_id, name) VALUES ($1, $2)
         ON CONFLICT (org_id, name) DO NOTHING RETURNING {PROJECT}"
    );
    Ok(c.query_opt(&sql, &[&org_id, &name])?
        .as_ref()
        .map(Project::from_row))
}

/// The projects of an organization, oldest first.
pub fn projects(c: &mut impl Sql, org_id: i64) -> Result<Vec<Project>, postgres::Error> {
    let sql = format!("SELECT {PROJECT} FROM projects WHERE org_id = $1 ORDER BY id");
    Ok(c.query(&sql, &[&org_id])?
        .iter()
        .map(Project::from_row)
        .collect())
}

/// Renames a project; `None` when its organization has another project of that name.
pub fn rename_project(
    c: &mut impl Sql,
    id: i64,
    name: &str,
) -> Result<Option<Project>, postgres::Error> {
    let taken = c.query_opt(
        "SELECT 1 FROM projects p JOIN projects q ON q.org_id = p.org_id
          WHERE p.id = $1 AND q.name = $2 AND q.id <> p.id",
        &[&id, &name],
    )?;
    if taken.is_some() {
        return Ok(None);
    }
    c.execute(
        "UPDATE projects SET name = $2 WHERE id = $1 AND name <> $2",
        &[&id, &name],
    )?;
    find_project(c, id)
}

/// Deletes a project. Its API tokens go with it (each deletion ends the token's streams on
/// every instance: the `api_tokens` trigger's `t:`), and the deletion is announced (`project
/// delete`). Returns how many tokens were live.
pub fn delete_project(c: &mut impl Sql, id: i64) -> Result<i64, postgres::Error> {
    let live: i64 = c
        .query_one(
            "SELECT count(*) FROM api_tokens WHERE project_id = $1 AND revoked_at IS NULL",
            &[&id],
        )?
        .get(0);
    c.execute("DELETE FROM api_tokens WHERE project_id = $1", &[&id])?;
    c.execute("DELETE FROM projects WHERE id = $1", &[&id])?;
    Ok(live)
}

pub fn org_exists(c: &mut impl Sql, org_id: i64) -> Result<bool, postgres::Error> {
    Ok(
        c.query_opt("SELECT 1 FROM organizations WHERE id = $1", &[&org_id])?
            .is_some(),
    )
}

pub fn find_project(c: &mut impl Sql, id: i64) -> Result<Option<Project>, postgres::Error> {
    let sql = format!("SELECT {PROJECT} FROM projects WHERE id = $1");
    Ok(c.query_opt(&sql, &[&id])?.as_ref().map(Project::from_row))
}
