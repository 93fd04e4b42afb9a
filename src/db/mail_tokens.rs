//! Table `mail_tokens`: the single-use tokens of verification, password-reset and email-change
//! links. Only the SHA-256 of a token is stored; the token itself exists only in the mail that
//! carries it.

use std::time::Duration;

use super::Sql;

use crate::crypto::{new_token, token_hash};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    VerifyEmail,
    PasswordReset,
    /// The link to a new address that makes the change (`auth::email_change`).
    EmailChange,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::VerifyEmail => "verify_email",
            Purpose::PasswordReset => "password_reset",
            Purpose::EmailChange => "email_change",
        }
    }

    pub fn lifetime(self) -> Duration {
        match self {
            Purpose::VerifyEmail | Purpose::EmailChange => Duration::from_secs(24 * 3600),
            Purpose::PasswordReset => Duration::from_secs(3600),
        }
    }
}

/// Mints a token for `email` and stores its hash; returns the token (for the mail only).
/// A new reset or email-change token voids the user's older unused ones of its purpose.
pub fn create(
    c: &mut impl Sql,
    user_id: i64,
    purpose: Purpose,
    email: &str,
) -> Result<String, postgres::Error> {
    if matches!(purpose, Purpose::PasswordReset | Purpose::EmailChange) {
        void_unused(c, user_id, purpose)?;
    }
    let token = new_token();
    c.execute(
        "INSERT INTO mail_tokens (user_id, purpose, token_hash, email, expires_at)
         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))",
        &[
            &user_id,
            &purpose.as_str(),
            &token_hash(&token),
            &email,
            &purpose.lifetime().as_secs_f64(),
        ],
    )?;
    Ok(token)
}

/// A live token: its user and the address it was sent to.
#[derive(Debug, Clone)]
pub struct Live {
    pub user_id: i64,
    pub email: String,
}

/// The live (unused, unexpired) token, without using it.
pub fn find_live(
    c: &mut impl Sql,
    token: &str,
    purpose: Purpose,
) -> Result<Option<Live>, postgres::Error> {
    let row = c.query_opt(
        "SELECT user_id, email FROM mail_tokens
          WHERE token_hash = $1 AND purpose = $2 AND used_at IS NULL AND expires_at > now()",
        &[&token_hash(token), &purpose.as_str()],
    )?;
    Ok(row.map(|r| Live {
        user_id: r.get(0),
        email: r.get(1),
    }))
}

/// Uses a live token. One statement, so of two concurrent uses exactly one gets `Some`.
pub fn consume(
    c: &mut impl Sql,
    token: &str,
    purpose: Purpose,
) -> Result<Option<Live>, postgres::Error> {
    let row = c.query_opt(
        "UPDATE mail_tokens SET used_at = now()
          WHERE token_hash = $1 AND purpose = $2 AND used_at IS NULL AND expires_at > now()
          RETURNING user_id, email",
        &[&token_hash(token), &purpose.as_str()],
    )?;
    Ok(row.map(|r| Live {
        user_id: r.get(0),
        email: r.get(1),
    }))
}

/// Whether the token was used already (kept a day after its use: `purge_dead`).
pub fn was_used(c: &mut impl Sql, token: &str, purpose: Purpose) -> Result<bool, postgres::Error> {
    let row = c.query_opt(
        "SELECT 1 FROM mail_tokens
          WHERE token_hash = $1 AND purpose = $2 AND used_at IS NOT NULL",
        &[&token_hash(token), &purpose.as_str()],
    )?;
    Ok(row.is_some())
}

/// Ends every unused token of a user for a purpose (kept, expired, for the record).
pub fn void_unused(
    c: &mut impl Sql,
    user_id: i64,
    purpose: Purpose,
) -> Result<u64, postgres::Error> {
    c.execute(
        "UPDATE mail_tokens SET expires_at = least(expires_at, now())
          WHERE user_id = $1 AND purpose = $2 AND used_at IS NULL AND expires_at > now()",
        &[&user_id, &purpose.as_str()],
    )
}

/// Deletes tokens that can no longer be used (spent, voided or expired) a day after the fact.
pub fn purge_dead(c: &mut impl Sql) -> Result<u64, postgres::Error> {
    c.execute(
        "DELETE FROM mail_tokens
          WHERE expires_at < now() - interval '1 day' OR used_at < now() - interval '1 day'",
        &[],
    )
}
