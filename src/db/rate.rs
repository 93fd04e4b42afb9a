//! Sliding-window rate limits in table `rate_events`, shared by every instance.
//!
//! Buckets, their limits and windows are `crate::limits` (the only place a bucket key is
//! formatted); each counted event is a row. `take` checks and inserts under a
//! transaction-scoped advisory lock on the bucket, and `take_all` does it for several buckets at
//! once, so concurrent requests on several instances cannot both take the last slot. Whether a bucket is spent, and the refusal, is decided by
//! `admission::Budgets`, which is what handlers ask; handlers only count events here.

use super::Sql;

use crate::limits::{Bucket, Limits};

/// Seconds until the bucket has room again, or `None` when it has room now.
pub fn blocked(
    c: &mut impl Sql,
    limits: &Limits,
    bucket: &Bucket,
) -> Result<Option<u64>, postgres::Error> {
    let limit = limits.limit(bucket.kind());
    let row = c.query_one(
        "SELECT count(*), extract(epoch FROM min(at) + make_interval(secs => $2) - now())::float8
           FROM (SELECT at FROM rate_events
                  WHERE bucket = $1 AND at > now() - make_interval(secs => $2)
                  ORDER BY at DESC LIMIT $3) recent",
        &[&bucket.key(), &bucket.window().as_secs_f64(), &limit],
    )?;
    let count: i64 = row.get(0);
    if count < limit {
        return Ok(None);
    }
    let wait: Option<f64> = row.get(1);
    Ok(Some(wait.unwrap_or(1.0).ceil().max(1.0) as u64))
}

/// The first of `buckets` that is full, and seconds until it has room; one round trip.
///
/// The buckets are a `VALUES` list of parameters, not arrays: PostgreSQL then knows the row
/// count when it plans the kept statement and settles on one generic plan after five runs,
/// where `unnest` of three arrays was planned anew at every sign-in (0.21 of its 0.26 ms).
pub fn first_blocked(
    c: &mut impl Sql,
    limits: &Limits,
    buckets: &[Bucket],
) -> Result<Option<(usize, u64)>, postgres::Error> {
    if buckets.is_empty() {
        return Ok(None);
    }
    let keys: Vec<String> = buckets.iter().map(Bucket::key).collect();
    let windows: Vec<f64> = buckets.iter().map(|b| b.window().as_secs_f64()).collect();
    let caps: Vec<i64> = buckets.iter().map(|b| limits.limit(b.kind())).collect();
    type Param<'a> = &'a (dyn postgres::types::ToSql + Sync);
    let mut rows_sql = Vec::with_capacity(buckets.len());
    let mut params: Vec<Param> = Vec::with_capacity(3 * buckets.len());
    for i in 0..buckets.len() {
        let p = params.len() + 1;
        rows_sql.push(format!(
            "({i}, ${p}::text, ${}::float8, ${}::int8)",
            p + 1,
            p + 2
        ));
        params.extend::<[Param; 3]>([&keys[i], &windows[i], &caps[i]]);
    }
    let sql = format!(
        "SELECT b.i, r.n, r.wait
           FROM (VALUES {}) AS b(i, key, secs, cap)
          CROSS JOIN LATERAL (
                SELECT count(*) AS n,
                       extract(epoch FROM min(at) + make_interval(secs => b.secs) - now())::float8
                         AS wait
                  FROM (SELECT at FROM rate_events
                         WHERE bucket = b.key AND at > now() - make_interval(secs => b.secs)
                         ORDER BY at DESC LIMIT b.cap) recent) r
          ORDER BY b.i",
        rows_sql.join(", ")
    );
    for row in c.query(&sql, &params)? {
        let (i, n, wait): (i32, i64, Option<f64>) = (row.get(0), row.get(1), row.get(2));
        let i = i as usize;
        if n >= caps[i] {
            return Ok(Some((i, wait.unwrap_or(1.0).ceil().max(1.0) as u64)));
        }
    }
    Ok(None)
}

/// Takes one place in each of `buckets` for `claim`, all or none (`consoled_rate_take`: under the
/// buckets' advisory locks, so that concurrent checks on any number of instances never take more
/// places than there are); one round trip, outside any transaction. `Some((index, wait))` when
/// bucket `index` is full and nothing was taken.
pub fn take_all(
    c: &mut impl Sql,
    limits: &Limits,
    buckets: &[Bucket],
    claim: i64,
) -> Result<Option<(usize, u64)>, postgres::Error> {
    let keys: Vec<String> = buckets.iter().map(Bucket::key).collect();
    let windows: Vec<f64> = buckets.iter().map(|b| b.window().as_secs_f64()).collect();
    let caps: Vec<i64> = buckets.iter().map(|b| limits.limit(b.kind())).collect();
    let row = c.query_opt(
        "SELECT item, wait FROM consoled_rate_take($1, $2, $3, $4)",
        &[&keys, &windows, &caps, &claim],
    )?;
    Ok(row.map(|r| {
        let (i, wait): (i32, Option<f64>) = (r.get(0), r.get(1));
        (i as usize, wait.unwrap_or(1.0).ceil().max(1.0) as u64)
    }))
}

/// Gives back the places `take_all` took for `claim` in `buckets`.
pub fn give_back(c: &mut impl Sql, buckets: &[Bucket], claim: i64) -> Result<(), postgres::Error> {
    let keys: Vec<String> = buckets.iter().map(Bucket::key).collect();
    c.execute(
        "DELETE FROM rate_events WHERE bucket = ANY($1) AND claim = $2",
        &[&keys, &claim],
    )?;
    Ok(())
}

/// Counts one event in each of `buckets`; one round trip.
pub fn record_all(c: &mut impl Sql, buckets: &[Bucket]) -> Result<(), postgres::Error> {
    let keys: Vec<String> = buckets.iter().map(Bucket::key).collect();
    c.execute(
        "INSERT INTO rate_events (bucket) SELECT unnest($1::text[])",
        &[&keys],
    )?;
    Ok(())
}

pub fn record(c: &mut impl Sql, bucket: &Bucket) -> Result<(), postgres::Error> {
    c.execute(
        "INSERT INTO rate_events (bucket) VALUES ($1)",
        &[&bucket.key()],
    )?;
    Ok(())
}

/// Counts one event if the bucket has room: `Ok(None)` when counted, `Ok(Some(secs))` when full.
/// Call inside a transaction: the advisory lock lasts until it ends.
pub fn take(
    c: &mut impl Sql,
    limits: &Limits,
    bucket: &Bucket,
) -> Result<Option<u64>, postgres::Error> {
    lock(c, &bucket.key())?;
    if let Some(wait) = blocked(c, limits, bucket)? {
        return Ok(Some(wait));
    }
    record(c, bucket)?;
    Ok(None)
}

/// A transaction-scoped advisory lock on any key (a bucket's, or another component's).
pub fn lock(c: &mut impl Sql, key: &str) -> Result<(), postgres::Error> {
    c.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&key],
    )?;
    Ok(())
}

/// Deletes the events of one account's failed sign-ins (`limits::account_keys`).
pub fn clear_account(
    c: &mut impl Sql,
    (own, per_client_prefix): (String, String),
) -> Result<(), postgres::Error> {
    c.execute(
        "DELETE FROM rate_events WHERE bucket = $1 OR starts_with(bucket, $2)",
        &[&own, &per_client_prefix],
    )?;
    Ok(())
}

/// Drops events older than the longest window in use (24 hours).
pub fn purge_old(c: &mut impl Sql) -> Result<u64, postgres::Error> {
    c.execute(
        "DELETE FROM rate_events WHERE at < now() - interval '25 hours'",
        &[],
    )
}

/// The events of the buckets `limits::keys_of_account` names: (bucket kind, time), oldest
/// first. The kind is the key's prefix: the rest of a key may name a client address.
pub fn events_of_account(
    c: &mut impl Sql,
    (exact, prefixes): &(Vec<String>, Vec<String>),
) -> Result<Vec<(String, String)>, postgres::Error> {
    let rows = c.query(
        "SELECT split_part(bucket, ':', 1),
                to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')
           FROM rate_events
          WHERE bucket = ANY($1)
             OR EXISTS (SELECT 1 FROM unnest($2::text[]) p WHERE starts_with(bucket, p))
          ORDER BY at",
        &[exact, prefixes],
    )?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Forgets the events of the buckets `limits::keys_of_account` names (a deleted account).
pub fn forget_account(
    c: &mut impl Sql,
    (exact, prefixes): &(Vec<String>, Vec<String>),
) -> Result<u64, postgres::Error> {
    c.execute(
        "DELETE FROM rate_events
          WHERE bucket = ANY($1)
             OR EXISTS (SELECT 1 FROM unnest($2::text[]) p WHERE starts_with(bucket, p))",
        &[exact, prefixes],
    )
}
