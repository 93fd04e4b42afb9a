//! Sliding-window rate limits in table `rate_events`, shared by every instance.
//!
//! A bucket is a string such as `login:ip:<addr>:<ip>`; each counted event is a row. The check
//! and the insert run under a transaction-scoped advisory lock on the bucket, so concurrent
//! requests on several instances cannot both take the last slot.

use std::time::Duration;

use postgres::GenericClient;

/// Seconds until the bucket has room again, or `None` when it has room now.
pub fn blocked(
    c: &mut impl GenericClient,
    bucket: &str,
    limit: i64,
    window: Duration,
) -> Result<Option<u64>, postgres::Error> {
    let row = c.query_one(
        "SELECT count(*), extract(epoch FROM min(at) + make_interval(secs => $2) - now())::float8
           FROM (SELECT at FROM rate_events
                  WHERE bucket = $1 AND at > now() - make_interval(secs => $2)
                  ORDER BY at DESC LIMIT $3) recent",
        &[&bucket, &window.as_secs_f64(), &limit],
    )?;
    let count: i64 = row.get(0);
    if count < limit {
        return Ok(None);
    }
    let wait: Option<f64> = row.get(1);
    Ok(Some(wait.unwrap_or(1.0).ceil().max(1.0) as u64))
}

pub fn record(c: &mut impl GenericClient, bucket: &str) -> Result<(), postgres::Error> {
    c.execute("INSERT INTO rate_events (bucket) VALUES ($1)", &[&bucket])?;
    Ok(())
}

/// Counts one event if the bucket has room: `Ok(None)` when counted, `Ok(Some(secs))` when full.
/// Call inside a transaction: the advisory lock lasts until it ends.
pub fn take(
    c: &mut impl GenericClient,
    bucket: &str,
    limit: i64,
    window: Duration,
) -> Result<Option<u64>, postgres::Error> {
    lock(c, bucket)?;
    if let Some(wait) = blocked(c, bucket, limit, window)? {
        return Ok(Some(wait));
    }
    record(c, bucket)?;
    Ok(None)
}

pub fn lock(c: &mut impl GenericClient, bucket: &str) -> Result<(), postgres::Error> {
    c.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&bucket],
    )?;
    Ok(())
}

pub fn clear(c: &mut impl GenericClient, bucket: &str) -> Result<(), postgres::Error> {
    c.execute("DELETE FROM rate_events WHERE bucket = $1", &[&bucket])?;
    Ok(())
}

/// Deletes every bucket whose name starts with `prefix`.
pub fn clear_prefix(c: &mut impl GenericClient, prefix: &str) -> Result<(), postgres::Error> {
    c.execute(
        "DELETE FROM rate_events WHERE starts_with(bucket, $1)",
        &[&prefix],
    )?;
    Ok(())
}

/// Drops events older than the longest window in use (24 hours).
pub fn purge_old(c: &mut impl GenericClient) -> Result<u64, postgres::Error> {
    c.execute(
        "DELETE FROM rate_events WHERE at < now() - interval '25 hours'",
        &[],
    )
}
