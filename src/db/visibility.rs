//! What the change stream asks the database about who may see what: the organizations of users,
//! the organization of a project, and which sessions and tokens are still live. Read by the
//! listener on its own connection (memberships, sessions and api_tokens are owned elsewhere;
//! these are read-only queries).

use std::collections::HashMap;

use super::Sql;

/// Organization ids of each given user (users without memberships are absent).
pub fn orgs_of(c: &mut impl Sql, users: &[i64]) -> Result<HashMap<i64, Vec<i64>>, postgres::Error> {
    let rows = c.query(
        "SELECT user_id, org_id FROM memberships WHERE user_id = ANY($1)",
        &[&users],
    )?;
    let mut map: HashMap<i64, Vec<i64>> = HashMap::new();
    for r in rows {
        map.entry(r.get(0)).or_default().push(r.get(1));
    }
    Ok(map)
}

pub fn org_of_project(c: &mut impl Sql, project_id: i64) -> Result<Option<i64>, postgres::Error> {
    let row = c.query_opt("SELECT org_id FROM projects WHERE id = $1", &[&project_id])?;
    Ok(row.map(|r| r.get(0)))
}

/// The given sessions that still exist.
pub fn live_sessions(c: &mut impl Sql, ids: &[i64]) -> Result<Vec<i64>, postgres::Error> {
    let rows = c.query("SELECT id FROM sessions WHERE id = ANY($1)", &[&ids])?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The given API tokens that are live (`live_api_tokens`: not revoked, not expired...).
pub fn live_tokens(c: &mut impl Sql, ids: &[i64]) -> Result<Vec<i64>, postgres::Error> {
    let rows = c.query("SELECT id FROM live_api_tokens WHERE id = ANY($1)", &[&ids])?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
