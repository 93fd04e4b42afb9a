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

/// The live token for a secret.
pub fn find(c: &mut impl Sql, secret: &str) -> Result<Option<ApiToken>, postgres::Error> {
    let row = c.query_opt(
        "SELECT t.id, t.project_id, p.org_id FROM api_tokens t JOIN projects p ON p.id = t.project_id
          WHERE t.token_hash = $1 AND t.revoked_at IS NULL",
        &[&token_hash(secret)],
    )?;
    Ok(row.map(|r| ApiToken {
        id: r.get(0),
        project_id: r.get(1),
        org_id: r.get(2),
    }))
}

pub fn is_live(c: &mut impl Sql, id: i64) -> Result<bool, postgres::Error> {
    Ok(c.query_opt(
        "SELECT 1 FROM api_tokens WHERE id = $1 AND revoked_at IS NULL",
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
