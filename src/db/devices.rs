//! Table `device_cookies`: cookies a browser received on a successful sign-in, bound to that
//! account, stored only as SHA-256 hashes (see migrations/0003_device_cookies.sql). The value is
//! minted by `auth::device`.

use std::time::Duration;

use super::Sql;

use crate::crypto::token_hash;

/// Stores a cookie `token` of `user_id` (only its hash).
pub fn create(
    c: &mut impl Sql,
    token: &str,
    user_id: i64,
    lifetime: Duration,
) -> Result<(), postgres::Error> {
    c.execute(
        "INSERT INTO device_cookies (token_hash, user_id, expires_at)
         VALUES ($1, $2, now() + make_interval(secs => $3))",
        &[&token_hash(token), &user_id, &lifetime.as_secs_f64()],
    )?;
    Ok(())
}

/// Takes a place in the failure budget of `token`, a live cookie of `user_id` with fewer than
/// `budget` failures, before its password is checked: counted as a failure until the sign-in
/// succeeds (`succeeded`) or is not made (`give_back`). False when it is no such cookie. One
/// conditional UPDATE, so concurrent sign-ins with one cookie never take more than `budget`.
pub fn take(
    c: &mut impl Sql,
    token: &str,
    user_id: i64,
    budget: i64,
) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "UPDATE device_cookies SET failures = failures + 1
          WHERE token_hash = $1 AND user_id = $2 AND failures < $3 AND expires_at > now()",
        &[&token_hash(token), &user_id, &(budget as i32)],
    )?;
    Ok(n == 1)
}

/// Gives back a place `take` took, for a sign-in that was not made after all.
pub fn give_back(c: &mut impl Sql, token: &str) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE device_cookies SET failures = greatest(failures - 1, 0) WHERE token_hash = $1",
        &[&token_hash(token)],
    )?;
    Ok(())
}

/// Removes every device cookie of a user (the address was proven by someone else than whoever
/// signed in before).
pub fn delete_for_user(c: &mut impl Sql, user_id: i64) -> Result<u64, postgres::Error> {
    c.execute("DELETE FROM device_cookies WHERE user_id = $1", &[&user_id])
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
