//! Table `outbox`: mails queued in the transaction that causes them, delivered by the sender
//! thread. A row names the kind of mail and its user; any token is minted when it is sent.

use postgres::GenericClient;

pub fn enqueue(
    c: &mut impl GenericClient,
    kind: &str,
    user_id: i64,
    recipient: &str,
) -> Result<i64, postgres::Error> {
    let row = c.query_one(
        "INSERT INTO outbox (kind, user_id, recipient) VALUES ($1, $2, $3) RETURNING id",
        &[&kind, &user_id, &recipient],
    )?;
    // Wakes the sender thread of every instance; the payload is only the row id.
    c.execute(
        "SELECT pg_notify('consoled_outbox', $1)",
        &[&row.get::<_, i64>(0).to_string()],
    )?;
    Ok(row.get(0))
}
