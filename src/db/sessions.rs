//! Table `sessions`. The cookie carries a random token; only its SHA-256 is stored. A session is
//! valid until its absolute end (`expires_at`) and while it has been used within the idle
//! timeout. Deleting a row ends the session's open event streams on every instance (trigger).
//!
//! Its owner sees a session by its `public_id` (random, unrelated to the token) with the client
//! address and a short user-agent description of its sign-in, then of its latest use.

use std::time::Duration;

use super::Sql;

use crate::crypto::{new_token, token_hash};

#[derive(Debug, Clone)]
pub struct Session {
    pub id: i64,
    /// The name its owner sees (`GET /auth/sessions`); never the token nor derived from it.
    pub public_id: String,
    pub user_id: i64,
    pub mfa_pending: bool,
    pub failed_codes: i32,
    /// Seconds until the session ends if it is not used again (min of idle and absolute end).
    pub remaining: f64,
    /// Seconds since the session was last marked as used.
    pub since_seen: f64,
    /// Seconds since the sign-in that created it (password, second factor or provider).
    pub age: f64,
}

/// Where a session is used from, as its owner sees it.
#[derive(Debug, Clone)]
pub struct UsedFrom {
    /// The client's address (through trusted proxies), if known.
    pub address: Option<String>,
    /// A short description of the user agent (`http::user_agent`).
    pub agent: String,
}

/// Creates a session; returns the cookie token (shown once) and the session, or `None` when the
/// account is disabled (or gone). This is where every sign-in meets a disabled account: the
/// user's row is share-locked, so a concurrent `consoled user disable` waits for this
/// transaction and then ends the session it made, or commits first and is seen here.
pub fn create(
    c: &mut impl Sql,
    user_id: i64,
    mfa_pending: bool,
    lifetime: Duration,
    seen: &UsedFrom,
) -> Result<Option<(String, Session)>, postgres::Error> {
    let token = new_token();
    let secs = lifetime.as_secs_f64();
    let row = c.query_opt(
        "INSERT INTO sessions (token_hash, user_id, mfa_pending, expires_at, client_address, user_agent)
         SELECT $1, u.id, $3, now() + make_interval(secs => $4), $5, $6
           FROM users u WHERE u.id = $2 AND u.disabled_at IS NULL FOR SHARE
         RETURNING id, public_id",
        &[
            &token_hash(&token),
            &user_id,
            &mfa_pending,
            &secs,
            &seen.address,
            &seen.agent,
        ],
    )?;
    let Some(row) = row else {
        return Ok(None);
    };
    let session = Session {
        id: row.get(0),
        public_id: row.get(1),
        user_id,
        mfa_pending,
        failed_codes: 0,
        remaining: secs,
        since_seen: 0.0,
        age: 0.0,
    };
    Ok(Some((token, session)))
}

/// The live session of a cookie token. Pending sessions have only their absolute end.
pub fn find_valid(
    c: &mut impl Sql,
    token: &str,
    idle: Duration,
) -> Result<Option<Session>, postgres::Error> {
    let row = c.query_opt(
        "SELECT id, public_id, user_id, mfa_pending, failed_codes,
                extract(epoch FROM least(expires_at,
                    CASE WHEN mfa_pending THEN expires_at
                         ELSE last_seen_at + make_interval(secs => $2) END) - now())::float8,
                extract(epoch FROM now() - last_seen_at)::float8,
                extract(epoch FROM now() - created_at)::float8
           FROM sessions
          WHERE token_hash = $1 AND expires_at > now()
            AND (mfa_pending OR last_seen_at > now() - make_interval(secs => $2))",
        &[&token_hash(token), &idle.as_secs_f64()],
    )?;
    Ok(row.map(|r| Session {
        id: r.get(0),
        public_id: r.get(1),
        user_id: r.get(2),
        mfa_pending: r.get(3),
        failed_codes: r.get(4),
        remaining: r.get(5),
        since_seen: r.get(6),
        age: r.get(7),
    }))
}

/// Marks the session as used now, from where `seen` says.
pub fn touch(c: &mut impl Sql, id: i64, seen: &UsedFrom) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE sessions SET last_seen_at = now(), client_address = $2, user_agent = $3
          WHERE id = $1",
        &[&id, &seen.address, &seen.agent],
    )?;
    Ok(())
}

/// Marks sessions as used now, each from where its `UsedFrom` says: one statement for a batch
/// (`identity::seen`).
pub fn touch_many(c: &mut impl Sql, used: &[(i64, UsedFrom)]) -> Result<u64, postgres::Error> {
    let ids: Vec<i64> = used.iter().map(|(id, _)| *id).collect();
    let addresses: Vec<Option<&str>> = used.iter().map(|(_, s)| s.address.as_deref()).collect();
    let agents: Vec<&str> = used.iter().map(|(_, s)| s.agent.as_str()).collect();
    c.execute(
        "UPDATE sessions s SET last_seen_at = now(), client_address = u.address, user_agent = u.agent
           FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u(id, address, agent)
          WHERE s.id = u.id",
        &[&ids, &addresses, &agents],
    )
}

/// Seconds until a session ends unless used again; `None` once it is gone or expired.
pub fn remaining(
    c: &mut impl Sql,
    id: i64,
    idle: Duration,
) -> Result<Option<f64>, postgres::Error> {
    let row = c.query_opt(
        "SELECT extract(epoch FROM least(expires_at, last_seen_at + make_interval(secs => $2)) - now())::float8
           FROM sessions WHERE id = $1",
        &[&id, &idle.as_secs_f64()],
    )?;
    Ok(row.map(|r| r.get::<_, f64>(0)).filter(|s| *s > 0.0))
}

pub fn delete(c: &mut impl Sql, id: i64) -> Result<(), postgres::Error> {
    c.execute("DELETE FROM sessions WHERE id = $1", &[&id])?;
    Ok(())
}

/// Locks a live pending session for a second-factor attempt, so that attempts on one session run
/// one at a time; false when it is gone, expired or already complete.
pub fn lock_pending(c: &mut impl Sql, id: i64) -> Result<bool, postgres::Error> {
    let row = c.query_opt(
        "SELECT 1 FROM sessions WHERE id = $1 AND mfa_pending AND expires_at > now() FOR UPDATE",
        &[&id],
    )?;
    Ok(row.is_some())
}

/// Counts a wrong second-factor code on a session; returns the new count.
pub fn add_failed_code(c: &mut impl Sql, id: i64) -> Result<i32, postgres::Error> {
    let row = c.query_one(
        "UPDATE sessions SET failed_codes = failed_codes + 1 WHERE id = $1 RETURNING failed_codes",
        &[&id],
    )?;
    Ok(row.get(0))
}

/// Ends every session of a user except `keep`.
pub fn delete_for_user(
    c: &mut impl Sql,
    user_id: i64,
    keep: Option<i64>,
) -> Result<u64, postgres::Error> {
    c.execute(
        "DELETE FROM sessions WHERE user_id = $1 AND id IS DISTINCT FROM $2",
        &[&user_id, &keep],
    )
}

/// Deletes sessions past their absolute end, and idle ones a day after their idle end: validity is
/// decided when a session is used, so this is only clean-up, kept well clear of the idle timeout
/// (instances with different settings may share a database).
pub fn purge_expired(c: &mut impl Sql, idle: Duration) -> Result<u64, postgres::Error> {
    c.execute(
        "DELETE FROM sessions WHERE expires_at <= now()
            OR (NOT mfa_pending AND last_seen_at <= now() - make_interval(secs => $1) - interval '1 day')",
        &[&idle.as_secs_f64()],
    )
}

/// A live session as its owner sees it in the list.
#[derive(Debug, Clone)]
pub struct ListedSession {
    pub public_id: String,
    pub created_at: String,
    pub last_seen_at: String,
    pub client_address: Option<String>,
    pub user_agent: Option<String>,
    pub mfa_pending: bool,
}

const UTC: &str = "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'";

/// The live sessions of a user (full and pending, as `find_valid` decides), most recently used
/// first.
pub fn list_for_user(
    c: &mut impl Sql,
    user_id: i64,
    idle: Duration,
) -> Result<Vec<ListedSession>, postgres::Error> {
    let sql = format!(
        "SELECT public_id, to_char(created_at AT TIME ZONE 'UTC', {UTC}),
                to_char(last_seen_at AT TIME ZONE 'UTC', {UTC}),
                client_address, user_agent, mfa_pending
           FROM sessions
          WHERE user_id = $1 AND expires_at > now()
            AND (mfa_pending OR last_seen_at > now() - make_interval(secs => $2))
          ORDER BY last_seen_at DESC, id DESC"
    );
    let rows = c.query(&sql, &[&user_id, &idle.as_secs_f64()])?;
    Ok(rows
        .iter()
        .map(|r| ListedSession {
            public_id: r.get(0),
            created_at: r.get(1),
            last_seen_at: r.get(2),
            client_address: r.get(3),
            user_agent: r.get(4),
            mfa_pending: r.get(5),
        })
        .collect())
}

/// Ends the session of `user_id` named `public_id`; false when the user has none by that name
/// (another user's session is not found either).
pub fn delete_public(
    c: &mut impl Sql,
    user_id: i64,
    public_id: &str,
) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "DELETE FROM sessions WHERE user_id = $1 AND public_id = $2",
        &[&user_id, &public_id],
    )?;
    Ok(n > 0)
}

/// Gives a session a new token (the old one stops working at once) and returns it with the
/// seconds left to the session's absolute end, for the new cookie. The session keeps its id
/// and its place in the owner's list; the event streams opened with the old token end on every
/// instance (trigger `sessions_rotated`), and a browser's `EventSource` reconnects with the new
/// cookie.
pub fn rotate_token(c: &mut impl Sql, id: i64) -> Result<Option<(String, u64)>, postgres::Error> {
    let token = new_token();
    let row = c.query_opt(
        "UPDATE sessions SET token_hash = $2 WHERE id = $1
         RETURNING greatest(extract(epoch FROM expires_at - now()), 0)::float8",
        &[&id, &token_hash(&token)],
    )?;
    Ok(row.map(|r| (token, r.get::<_, f64>(0) as u64)))
}

/// What names the token a stream was opened with, without the token: the first 8 bytes of its
/// stored hash (`token_hash`), as the `sessions_rotated` trigger sends them.
pub fn token_tag(hash: &[u8]) -> u64 {
    let mut first = [0u8; 8];
    let n = hash.len().min(8);
    first[..n].copy_from_slice(&hash[..n]);
    u64::from_be_bytes(first)
}
