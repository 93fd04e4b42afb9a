//! Table `stream_leases`: one row per open event stream, so the per-user and per-token stream limit
//! holds across every instance. An instance renews its rows by heartbeat; the rows of a crashed
//! instance lapse on their own after `TTL`.

use std::time::Duration;

use super::Sql;

use crate::db::rate;

/// How long a lease lives without a heartbeat.
pub const TTL: Duration = Duration::from_secs(60);

/// Whose streams a lease counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    User(i64),
    Token(i64),
}

impl Holder {
    fn user(self) -> Option<i64> {
        match self {
            Holder::User(id) => Some(id),
            Holder::Token(_) => None,
        }
    }

    fn token(self) -> Option<i64> {
        match self {
            Holder::Token(id) => Some(id),
            Holder::User(_) => None,
        }
    }

    fn lock_key(self) -> String {
        match self {
            Holder::User(id) => format!("streams:user:{id}"),
            Holder::Token(id) => format!("streams:token:{id}"),
        }
    }
}

/// Takes a lease if the holder has fewer than `limit` live ones: `Ok(None)` when full.
/// Call inside a transaction: the per-holder advisory lock makes count-then-insert atomic across
/// instances.
pub fn acquire(
    c: &mut impl Sql,
    instance: &str,
    holder: Holder,
    limit: usize,
) -> Result<Option<i64>, postgres::Error> {
    rate::lock(c, &holder.lock_key())?;
    let (user, token) = (holder.user(), holder.token());
    let live: i64 = c
        .query_one(
            "SELECT count(*) FROM stream_leases
              WHERE (user_id = $1 OR token_id = $2) AND expires_at > now()",
            &[&user, &token],
        )?
        .get(0);
    if live >= limit as i64 {
        return Ok(None);
    }
    let row = c.query_one(
        "INSERT INTO stream_leases (instance_id, user_id, token_id, expires_at)
         VALUES ($1, $2, $3, now() + make_interval(secs => $4)) RETURNING id",
        &[&instance, &user, &token, &TTL.as_secs_f64()],
    )?;
    Ok(Some(row.get(0)))
}

pub fn release(c: &mut impl Sql, ids: &[i64]) -> Result<u64, postgres::Error> {
    c.execute("DELETE FROM stream_leases WHERE id = ANY($1)", &[&ids])
}

/// Extends this instance's live leases, recreating any row that is gone (deleted as expired by
/// another instance while this one could not reach the database), and deletes every instance's
/// expired rows. Rows of this instance that are not in `live` are left alone: a lease taken after
/// `live` was read is not touched, and releases are the keeper's job.
pub fn heartbeat(
    c: &mut impl Sql,
    instance: &str,
    live: &[(i64, Holder)],
) -> Result<(), postgres::Error> {
    let ids: Vec<i64> = live.iter().map(|(id, _)| *id).collect();
    let users: Vec<Option<i64>> = live.iter().map(|(_, h)| h.user()).collect();
    let tokens: Vec<Option<i64>> = live.iter().map(|(_, h)| h.token()).collect();
    c.execute(
        "INSERT INTO stream_leases (id, instance_id, user_id, token_id, expires_at)
         SELECT l.id, $1, l.u, l.t, now() + make_interval(secs => $5)
           FROM unnest($2::bigint[], $3::bigint[], $4::bigint[]) AS l(id, u, t)
          WHERE (l.u IS NULL OR EXISTS (SELECT 1 FROM users WHERE id = l.u))
            AND (l.t IS NULL OR EXISTS (SELECT 1 FROM api_tokens WHERE id = l.t))
         ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at",
        &[&instance, &ids, &users, &tokens, &TTL.as_secs_f64()],
    )?;
    // Leases of instances that stopped without cleaning up (crash, kill -9). (Not in one
    // transaction with the above: the rows just extended end after now.)
    c.execute("DELETE FROM stream_leases WHERE expires_at <= now()", &[])?;
    Ok(())
}

/// Drops every lease of an instance (shutdown).
pub fn release_instance(c: &mut impl Sql, instance: &str) -> Result<u64, postgres::Error> {
    c.execute(
        "DELETE FROM stream_leases WHERE instance_id = $1",
        &[&instance],
    )
}
