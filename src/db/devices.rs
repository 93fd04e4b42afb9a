//! Table `device_cookies`: cookies a browser received on a successful sign-in, bound to that
//! account, stored only as SHA-256 hashes (see migrations/0003_device_cookies.sql).

use std::time::Duration;

use super::Sql;

use crate::crypto::{new_token, token_hash};

/// Mints a cookie for `user_id`; returns the value to send (never stored).
pub fn create(
    c: &mut impl Sql,
    user_id: i64,
    lifetime: Duration,
) -> Result<String, postgres::Error> {
    let token = new_token();
    c.execute(
        "INSERT INTO device_cookies (token_hash, user_id, expires_at)
         VALUES ($1, $2, now() + make_interval(secs => $3))",
        &[&token_hash(&token), &user_id, &lifetime.as_secs_f64()],
    )?;
    Ok(token)
}

/// Whether `token` is a live cookie of `user_id` with fewer than `budget` failures.
pub fn valid(
    c: &mut impl Sql,
    token: &str,
    user_id: i64,
    budget: i64,
) -> Result<bool, postgres::Error> {
    let row = c.query_opt(
        "SELECT 1 FROM device_cookies
          WHERE token_hash = $1 AND user_id = $2 AND failures < $3 AND expires_at > now()",
        &[&token_hash(token), &user_id, &(budget as i32)],
    )?;
    Ok(row.is_some())
}

/// Counts a failed sign-in with the cookie.
pub fn failed(c: &mut impl Sql, token: &str) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE device_cookies SET failures = failures + 1 WHERE token_hash = $1",
        &[&token_hash(token)],
    )?;
    Ok(())
}

/// A successful sign-in with the cookie: its failures are forgiven and its lifetime renewed.
pub fn succeeded(c: &mut impl Sql, token: &str, lifetime: Duration) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE device_cookies SET failures = 0, expires_at = now() + make_interval(secs => $2)
          WHERE token_hash = $1",
        &[&token_hash(token), &lifetime.as_secs_f64()],
    )?;
    Ok(())
}

pub fn purge_expired(c: &mut impl Sql) -> Result<u64, postgres::Error> {
    c.execute("DELETE FROM device_cookies WHERE expires_at < now()", &[])
}
