//! Table `stream_leases`: one row per open event stream, so the per-user and per-token stream limit
//! holds across every instance. An instance renews its rows by heartbeat; the rows of a crashed
//! instance lapse on their own after `TTL`.

use std::time::Duration;

use postgres::GenericClient;

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
    c: &mut impl GenericClient,
    instance: &str,
    holder: Holder,
    limit: usize,
) -> Result<Option<i64>, postgres::Error> {
    rate::lock(c, &holder.lock_key())?;
    let (user, token) = match holder {
        Holder::User(id) => (Some(id), None),
        Holder::Token(id) => (None, Some(id)),
    };
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

pub fn release(c: &mut impl GenericClient, ids: &[i64]) -> Result<u64, postgres::Error> {
    c.execute("DELETE FROM stream_leases WHERE id = ANY($1)", &[&ids])
}

/// Extends this instance's live leases and drops its rows that are not live any more (a release
/// that failed while the database was away).
pub fn heartbeat(
    c: &mut impl GenericClient,
    instance: &str,
    live: &[i64],
) -> Result<(), postgres::Error> {
    let mut tx = c.transaction()?;
    tx.execute(
        "UPDATE stream_leases SET expires_at = now() + make_interval(secs => $3)
          WHERE instance_id = $1 AND id = ANY($2)",
        &[&instance, &live, &TTL.as_secs_f64()],
    )?;
    tx.execute(
        "DELETE FROM stream_leases WHERE instance_id = $1 AND NOT (id = ANY($2))",
        &[&instance, &live],
    )?;
    // Leases of instances that stopped without cleaning up (crash, kill -9).
    tx.execute("DELETE FROM stream_leases WHERE expires_at <= now()", &[])?;
    tx.commit()
}

/// Drops every lease of an instance (shutdown).
pub fn release_instance(
    c: &mut impl GenericClient,
    instance: &str,
) -> Result<u64, postgres::Error> {
    c.execute(
        "DELETE FROM stream_leases WHERE instance_id = $1",
        &[&instance],
    )
}
