//! Table `api_tokens`: a token belongs to one project; the secret is shown once and stored hashed.
//! Revoking a token ends its open streams on every instance (trigger).

use super::Sql;

use crate::crypto::{new_token, token_hash};

/// Prefix that makes a leaked token easy to recognise (secret scanners, logs).
pub const PREFIX: &str = "csd_";

#[derive(Debug, Clone)]
pub struct ApiToken {
    pub id: i64,
    pub project_id: i64,
    pub org_id: i64,
}

/// Creates a token; returns (id, secret).
pub fn create(
    c: &mut impl Sql,
    project_id: i64,
    name: &str,
) -> Result<(i64, String), postgres::Error> {
    let secret = format!("{PREFIX}{}", new_token());
    let row = c.query_one(
        "INSERT INTO api_tokens (project_id, name, token_hash) VALUES ($1, $2, $3) RETURNING id",
        &[&project_id, &name, &token_hash(&secret)],
    )?;
    Ok((row.get(0), secret))
}

/// The live token for a secret, noting its use (`last_used_at`, to the minute: at most one
/// write a minute per token, however many streams it opens). A token of a suspended or closed
/// organization is refused as a revoked one is.
pub fn find(c: &mut impl Sql, secret: &str) -> Result<Option<ApiToken>, postgres::Error> {
    let row = c.query_opt(
        "WITH t AS (
             SELECT t.id, t.project_id, p.org_id, t.last_used_at
               FROM api_tokens t JOIN projects p ON p.id = t.project_id
               JOIN organizations o ON o.id = p.org_id
              WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND o.status = 'active'),
         used AS (
             UPDATE api_tokens a SET last_used_at = now() FROM t
              WHERE a.id = t.id
                AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute'))
         SELECT id, project_id, org_id FROM t",
        &[&token_hash(secret)],
    )?;
    Ok(row.map(|r| ApiToken {
        id: r.get(0),
        project_id: r.get(1),
        org_id: r.get(2),
    }))
}

/// Whether the token may be used now: not revoked, and its organization active.
pub fn is_live(c: &mut impl Sql, id: i64) -> Result<bool, postgres::Error> {
    Ok(c.query_opt(
        "SELECT 1 FROM api_tokens t
           JOIN projects p ON p.id = t.project_id JOIN organizations o ON o.id = p.org_id
          WHERE t.id = $1 AND t.revoked_at IS NULL AND o.status = 'active'",
        &[&id],
    )?
    .is_some())
}

/// Revokes a token; false when there is no live token with that id.
pub fn revoke(c: &mut impl Sql, id: i64) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "UPDATE api_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL",
        &[&id],
    )?;
    Ok(n == 1)
}

/// One token as `consoled token list` shows it: never its secret or hash.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listed {
    pub id: i64,
    pub name: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// The tokens of a project, oldest first, revoked ones included (with when).
pub fn list(c: &mut impl Sql, project_id: i64) -> Result<Vec<Listed>, postgres::Error> {
    let rfc3339 =
        |col: &str| format!("to_char({col} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')");
    let sql = format!(
        "SELECT id, name, {}, {}, {} FROM api_tokens WHERE project_id = $1 ORDER BY id",
        rfc3339("created_at"),
        rfc3339("last_used_at"),
        rfc3339("revoked_at")
    );
    Ok(c.query(&sql, &[&project_id])?
        .iter()
        .map(|r| Listed {
            id: r.get(0),
            name: r.get(1),
            created_at: r.get(2),
            last_used_at: r.get(3),
            revoked_at: r.get(4),
        })
        .collect())
}
