//! Tables `organizations`, `memberships` and `projects`.

use super::Sql;
use serde_json::{json, Value};

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

/// The organizations a user belongs to, oldest first.
pub fn for_user(c: &mut impl Sql, user_id: i64) -> Result<Vec<OrgSummary>, postgres::Error> {
    let rows = c.query(
        "SELECT o.id, o.name, o.kind, m.role, o.status
           FROM memberships m JOIN organizations o ON o.id = m.org_id
          WHERE m.user_id = $1 ORDER BY o.id",
        &[&user_id],
    )?;
    Ok(rows
        .iter()
        .map(|r| OrgSummary {
            id: r.get(0),
            name: r.get(1),
            kind: r.get(2),
            role: r.get(3),
            status: r.get(4),
        })
        .collect())
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
}

/// Creates a project; `None` when the organization has one of that name.
pub fn create_project(
    c: &mut impl Sql,
    org_id: i64,
    name: &str,
) -> Result<Option<Project>, postgres::Error> {
    let row = c.query_opt(
        "INSERT INTO projects (org_id, name) VALUES ($1, $2)
         ON CONFLICT (org_id, name) DO NOTHING RETURNING id",
        &[&org_id, &name],
    )?;
    Ok(row.map(|r| Project {
        id: r.get(0),
        org_id,
        name: name.to_string(),
    }))
}

pub fn org_exists(c: &mut impl Sql, org_id: i64) -> Result<bool, postgres::Error> {
    Ok(
        c.query_opt("SELECT 1 FROM organizations WHERE id = $1", &[&org_id])?
            .is_some(),
    )
}

pub fn find_project(c: &mut impl Sql, id: i64) -> Result<Option<Project>, postgres::Error> {
    let row = c.query_opt(
        "SELECT id, org_id, name FROM projects WHERE id = $1",
        &[&id],
    )?;
    Ok(row.map(|r| Project {
        id: r.get(0),
        org_id: r.get(1),
        name: r.get(2),
    }))
}
