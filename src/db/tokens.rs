//! Table `api_tokens`: a token belongs to one project; the secret is shown once and stored
//! hashed (`tokens::secret` gives it its form). Revoking a token ends its open streams on every
//! instance (trigger).
//!
//! What makes a token live (not revoked, not expired, its maker still a member and not
//! disabled) is said once, in the view `live_api_tokens` (migrations 0010 and 0012): `find`
//! below is the one lookup of a token by its secret, and it, `is_live` and the stream openings
//! all read that view.

use serde::Serialize;

use super::Sql;

use crate::crypto::token_hash;
use crate::tokens::secret;

/// What a token may do: a sibling service reads it from `GET /auth/check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenScope {
    Read,
    ReadWrite,
}

impl TokenScope {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Read => "read",
            TokenScope::ReadWrite => "read_write",
        }
    }

    pub fn parse(s: &str) -> Option<TokenScope> {
        [TokenScope::Read, TokenScope::ReadWrite]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// A token to make.
pub struct Issue<'a> {
    pub project_id: i64,
    pub name: &'a str,
    pub scope: TokenScope,
    /// Seconds from now; `None`: never expires.
    pub expires_in: Option<f64>,
    /// The user who makes it; `None`: the command line.
    pub created_by: Option<i64>,
}

/// Makes a token; returns (id, secret). The secret exists only in the answer.
pub fn issue(c: &mut impl Sql, token: &Issue) -> Result<(i64, String), postgres::Error> {
    let secret = secret::mint();
    let row = c.query_one(
        "INSERT INTO api_tokens (project_id, name, token_hash, scope, created_by, expires_at)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6)) RETURNING id",
        &[
            &token.project_id,
            &token.name,
            &token_hash(&secret),
            &token.scope.as_str(),
            &token.created_by,
            &token.expires_in,
        ],
    )?;
    Ok((row.get(0), secret))
}

/// A token as the command line made them before expiry and scope existed: `read_write`, never
/// expires, no maker.
pub fn create(
    c: &mut impl Sql,
    project_id: i64,
    name: &str,
) -> Result<(i64, String), postgres::Error> {
    let token = Issue {
        project_id,
        name,
        scope: TokenScope::ReadWrite,
        expires_in: None,
        created_by: None,
    };
    issue(c, &token)
}

/// A live token, as a check of its secret finds it (never one of a suspended or closed
/// organization: such a token is refused as a revoked one is).
#[derive(Debug, Clone)]
pub struct Found {
    pub id: i64,
    pub project_id: i64,
    pub org_id: i64,
    pub scope: TokenScope,
    /// Seconds until it expires; `None`: never.
    pub expires_in: Option<f64>,
    /// Its maker; `None` for the command line's.
    pub created_by: Option<Maker>,
}

/// The user who made a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Maker {
    pub id: i64,
    pub email: String,
}

fn maker(id: Option<i64>, email: Option<String>) -> Option<Maker> {
    id.zip(email).map(|(id, email)| Maker { id, email })
}

/// The live token of a secret: the one lookup of a token by its secret. Reads only (its use is
/// noted by the caller, in batches: `mark_used`).
pub fn find(c: &mut impl Sql, secret: &str) -> Result<Option<Found>, postgres::Error> {
    let row = c.query_opt(
        "SELECT t.id, t.project_id, p.org_id, t.scope,
                extract(epoch FROM t.expires_at - now())::float8, t.created_by, u.email
           FROM live_api_tokens t JOIN projects p ON p.id = t.project_id
           JOIN organizations o ON o.id = p.org_id
           LEFT JOIN users u ON u.id = t.created_by
          WHERE t.token_hash = $1 AND o.status = 'active'",
        &[&token_hash(secret)],
    )?;
    Ok(row.map(|r| Found {
        id: r.get(0),
        project_id: r.get(1),
        org_id: r.get(2),
        // The column's CHECK admits only the two names.
        scope: TokenScope::parse(r.get(3)).unwrap_or(TokenScope::Read),
        expires_in: r.get(4),
        created_by: maker(r.get(5), r.get(6)),
    }))
}

/// Whether the token may be used now: not revoked, and its organization active.
pub fn is_live(c: &mut impl Sql, id: i64) -> Result<bool, postgres::Error> {
    Ok(c.query_opt(
        "SELECT 1 FROM live_api_tokens t
           JOIN projects p ON p.id = t.project_id JOIN organizations o ON o.id = p.org_id
          WHERE t.id = $1 AND o.status = 'active'",
        &[&id],
    )?
    .is_some())
}

/// Notes the use of tokens, to the minute: one statement for a batch.
pub fn mark_used(c: &mut impl Sql, ids: &[i64]) -> Result<u64, postgres::Error> {
    c.execute(
        "UPDATE api_tokens SET last_used_at = now()
          WHERE id = ANY($1) AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')",
        &[&ids],
    )
}

/// Revokes a token; false when there is no unrevoked token with that id (in `project_id`, when
/// given).
pub fn revoke(c: &mut impl Sql, id: i64, project_id: Option<i64>) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "UPDATE api_tokens SET revoked_at = now()
          WHERE id = $1 AND revoked_at IS NULL AND ($2::bigint IS NULL OR project_id = $2)",
        &[&id, &project_id],
    )?;
    Ok(n == 1)
}

/// Live tokens of a project, counted while no other request of this transaction's kind counts
/// for it (the cap on tokens per project holds under concurrent creations).
pub fn count_live_locked(c: &mut impl Sql, project_id: i64) -> Result<i64, postgres::Error> {
    c.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('tokens:project:' || $1::bigint, 0))",
        &[&project_id],
    )?;
    let row = c.query_one(
        "SELECT count(*) FROM live_api_tokens WHERE project_id = $1",
        &[&project_id],
    )?;
    Ok(row.get(0))
}

/// One token as its project's members and `consoled token list` see it: never its secret or hash.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub id: i64,
    pub name: String,
    pub scope: TokenScope,
    pub created_at: String,
    /// Null for the command line's.
    pub created_by: Option<Maker>,
    pub last_used_at: Option<String>,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// The unrevoked tokens of a project (expired ones included), oldest first; or only the token
/// `only`, revoked or not.
pub fn list(
    c: &mut impl Sql,
    project_id: i64,
    only: Option<i64>,
) -> Result<Vec<Listed>, postgres::Error> {
    list_where(c, project_id, only, false)
}

/// Every token of a project, revoked ones included (with when), for `consoled token list`.
pub fn list_all(c: &mut impl Sql, project_id: i64) -> Result<Vec<Listed>, postgres::Error> {
    list_where(c, project_id, None, true)
}

fn list_where(
    c: &mut impl Sql,
    project_id: i64,
    only: Option<i64>,
    revoked: bool,
) -> Result<Vec<Listed>, postgres::Error> {
    let rfc3339 =
        |col: &str| format!("to_char({col} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')");
    let sql = format!(
        "SELECT t.id, t.name, t.scope, {}, t.created_by, u.email, {}, {}, {}
           FROM api_tokens t LEFT JOIN users u ON u.id = t.created_by
          WHERE t.project_id = $1
            AND ($3::bigint IS NULL AND ($2 OR t.revoked_at IS NULL) OR t.id = $3)
          ORDER BY t.id",
        rfc3339("t.created_at"),
        rfc3339("t.last_used_at"),
        rfc3339("t.expires_at"),
        rfc3339("t.revoked_at")
    );
    Ok(c.query(&sql, &[&project_id, &revoked, &only])?
        .iter()
        .map(|r| Listed {
            id: r.get(0),
            name: r.get(1),
            scope: TokenScope::parse(r.get(2)).unwrap_or(TokenScope::Read),
            created_at: r.get(3),
            created_by: maker(r.get(4), r.get(5)),
            last_used_at: r.get(6),
            expires_at: r.get(7),
            revoked_at: r.get(8),
        })
        .collect())
}
