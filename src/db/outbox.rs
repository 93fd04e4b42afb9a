//! Table `outbox`: mails queued in the transaction that causes them, delivered by the sender
//! thread. A row names the kind of mail and its user; any token is minted when it is sent.

use std::time::Duration;

use super::Sql;

pub fn enqueue(
    c: &mut impl Sql,
    kind: &str,
    user_id: i64,
    recipient: &str,
) -> Result<i64, postgres::Error> {
    insert(c, kind, Some(user_id), recipient, None, None)
}

/// Queues the mail of an invitation (kind `invitation`); its link's token is minted when it is
/// sent, and cancelling the invitation drops the row.
pub fn enqueue_invitation(
    c: &mut impl Sql,
    invitation_id: i64,
    recipient: &str,
) -> Result<i64, postgres::Error> {
    insert(c, "invitation", None, recipient, Some(invitation_id), None)
}

/// Queues a mail for an address whether or not it has an account: the sender looks the account
/// up and drops the row when there is none. The request that queues it cannot tell the two apart,
/// so neither can its timing.
pub fn enqueue_for_address(
    c: &mut impl Sql,
    kind: &str,
    recipient: &str,
) -> Result<i64, postgres::Error> {
    insert(c, kind, None, recipient, None, None)
}

/// Queues a mail that reports a change with its facts (`details`: the client of the change, a new
/// address; never a secret; the time is added), to a user, or to an address alone (`user_id` `None`:
/// the mail outlives the account, as the one telling that the account was deleted).
pub fn enqueue_with_details(
    c: &mut impl Sql,
    kind: &str,
    user_id: Option<i64>,
    recipient: &str,
    details: &serde_json::Value,
) -> Result<i64, postgres::Error> {
    insert(c, kind, user_id, recipient, None, Some(details.to_string()))
}

fn insert(
    c: &mut impl Sql,
    kind: &str,
    user_id: Option<i64>,
    recipient: &str,
    invitation_id: Option<i64>,
    details: Option<String>,
) -> Result<i64, postgres::Error> {
    let row = c.query_one(
        // The facts get the time of the change: this transaction's.
        "INSERT INTO outbox (kind, user_id, recipient, invitation_id, details)
         VALUES ($1, $2, $3, $4, ($5::text)::jsonb || jsonb_build_object('at',
                 to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')))
         RETURNING id",
        &[&kind, &user_id, &recipient, &invitation_id, &details],
    )?;
    // Wakes the sender thread of every instance; the payload is only the row id.
    c.execute(
        "SELECT pg_notify('consoled_outbox', $1)",
        &[&row.get::<_, i64>(0).to_string()],
    )?;
    Ok(row.get(0))
}

/// A queued mail that is due, locked by the transaction that claimed it.
#[derive(Debug, Clone)]
pub struct Due {
    pub id: i64,
    pub kind: String,
    pub user_id: Option<i64>,
    pub recipient: String,
    pub attempts: i32,
    pub invitation_id: Option<i64>,
    /// The facts the mail reports (`enqueue_with_details`), as JSON.
    pub details: Option<serde_json::Value>,
}

/// Claims the oldest due row for the caller's transaction. Rows another instance is sending are
/// skipped, never waited for, so no row is sent twice and no sender blocks another.
pub fn claim_due(c: &mut impl Sql) -> Result<Option<Due>, postgres::Error> {
    let row = c.query_opt(
        "SELECT id, kind, user_id, recipient, attempts, invitation_id, details::text FROM outbox
          WHERE next_attempt_at <= now()
          ORDER BY next_attempt_at, id
          LIMIT 1 FOR UPDATE SKIP LOCKED",
        &[],
    )?;
    Ok(row.map(|r| Due {
        id: r.get(0),
        kind: r.get(1),
        user_id: r.get(2),
        recipient: r.get(3),
        attempts: r.get(4),
        invitation_id: r.get(5),
        details: r
            .get::<_, Option<String>>(6)
            .and_then(|d| serde_json::from_str(&d).ok()),
    }))
}

pub fn delete(c: &mut impl Sql, id: i64) -> Result<(), postgres::Error> {
    c.execute("DELETE FROM outbox WHERE id = $1", &[&id])?;
    Ok(())
}

/// Drops the queued mails of `kind` to the user `user_id` or to `recipient` (queued by address).
/// A row that is being sent is waited for (its sender holds it), so that the token that mail
/// carries has committed when this returns, and a later look sees it.
pub fn drop_queued(
    c: &mut impl Sql,
    kind: &str,
    user_id: i64,
    recipient: &str,
) -> Result<u64, postgres::Error> {
    c.execute(
        "DELETE FROM outbox WHERE kind = $1 AND (user_id = $2 OR recipient = $3)",
        &[&kind, &user_id, &recipient],
    )
}

/// Records a failed attempt and when to try again. `error` must not contain a secret.
pub fn defer(
    c: &mut impl Sql,
    id: i64,
    delay: Duration,
    error: &str,
) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE outbox SET attempts = attempts + 1, last_error = $3,
                next_attempt_at = now() + make_interval(secs => $2)
          WHERE id = $1",
        &[&id, &delay.as_secs_f64(), &error],
    )?;
    Ok(())
}

/// Time until the earliest row is due (zero when one is due now); `None` when the outbox is empty.
pub fn next_due_in(c: &mut impl Sql) -> Result<Option<Duration>, postgres::Error> {
    let row = c.query_one(
        "SELECT extract(epoch FROM min(next_attempt_at) - now())::float8 FROM outbox",
        &[],
    )?;
    let secs: Option<f64> = row.get(0);
    Ok(secs.map(|s| Duration::from_secs_f64(s.max(0.0))))
}

/// Queued mails due now, and all queued mails (the mail-queue gauges of `/metrics`).
pub fn counts(c: &mut impl Sql) -> Result<(i64, i64), postgres::Error> {
    let row = c.query_one(
        "SELECT count(*) FILTER (WHERE next_attempt_at <= now()), count(*) FROM outbox",
        &[],
    )?;
    Ok((row.get(0), row.get(1)))
}
