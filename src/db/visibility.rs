//! What the change stream asks the database about who may see what: the organizations of users,
//! the organization of a project, and which sessions and tokens are still live. Read by the
//! listener on its own connection (memberships, sessions and api_tokens are owned elsewhere;
//! these are read-only queries).
//!
//! A suspended or closed organization is seen by nobody: its members' streams do not carry its
//! changes (`orgs_of` names only active organizations) and its projects' tokens are not live.

use std::collections::HashMap;

use super::Sql;

/// The active organizations of each given user (users without any are absent).
pub fn orgs_of(c: &mut impl Sql, users: &[i64]) -> Result<HashMap<i64, Vec<i64>>, postgres::Error> {
    let rows = c.query(
        "SELECT m.user_id, m.org_id FROM memberships m JOIN organizations o ON o.id = m.org_id
          WHERE m.user_id = ANY($1) AND o.status = 'active'",
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

/// The given sessions that still exist, each with the tag of its current token
/// (`sessions::token_tag`).
pub fn live_sessions(c: &mut impl Sql, ids: &[i64]) -> Result<HashMap<i64, u64>, postgres::Error> {
    let rows = c.query(
        "SELECT id, substring(token_hash FROM 1 FOR 8) FROM sessions WHERE id = ANY($1)",
        &[&ids],
    )?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), super::sessions::token_tag(r.get(1))))
        .collect())
}

/// The given API tokens that are live (`live_api_tokens`: not revoked, not expired, its maker
/// not disabled...) and whose organization is active.
pub fn live_tokens(c: &mut impl Sql, ids: &[i64]) -> Result<Vec<i64>, postgres::Error> {
    let rows = c.query(
        "SELECT t.id FROM live_api_tokens t
           JOIN projects p ON p.id = t.project_id JOIN organizations o ON o.id = p.org_id
          WHERE t.id = ANY($1) AND o.status = 'active'",
        &[&ids],
    )?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
