//! What consoled holds about one user, read for the user's export (GDPR articles 15 and 20;
//! `GET /auth/account/export`): one query per table, each naming its columns, so that no secret
//! or hash can come along by accident. Tokens, codes and secrets appear only as facts about them
//! (when made, when used), never as values.
//!
//! `TABLES` names every table read here; a test holds it to the schema (every table that refers
//! to a user is exported), so a new table about users cannot be forgotten.

use serde_json::{json, Map, Value};

use super::Sql;

/// The tables the export reads.
pub const TABLES: &[&str] = &[
    "users",
    "memberships",
    "organizations",
    "projects",
    "sessions",
    "device_cookies",
    "external_identities",
    "recovery_codes",
    "mail_tokens",
    "outbox",
    "api_tokens",
    "invitations",
    "stream_leases",
    "rate_events",
];

/// `to_char` of a timestamp column in the interface's form (UTC, ISO 8601).
macro_rules! utc {
    ($col:literal) => {
        concat!(
            "to_char(",
            $col,
            " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
        )
    };
}

/// The sections that are lists: (name, the rows, as a query that reads the user from `me`: its
/// `uid` and `address`).
const LISTS: &[(&str, &str)] = &[
    (
        "organizations",
        concat!(
            "SELECT o.id, o.name, o.kind, o.status, m.role, ",
            utc!("m.created_at"),
            " AS member_since FROM me, memberships m JOIN organizations o ON o.id = m.org_id
              WHERE m.user_id = me.uid ORDER BY m.created_at, o.id"
        ),
    ),
    (
        "projects",
        concat!(
            "SELECT p.id, p.org_id, p.name, ",
            utc!("p.created_at"),
            " AS created_at FROM me, projects p JOIN organizations o ON o.id = p.org_id
              JOIN memberships m ON m.org_id = o.id
              WHERE m.user_id = me.uid AND
              o.kind = 'personal' ORDER BY p.id"
        ),
    ),
    (
        "sessions",
        concat!(
            "SELECT public_id AS id, ",
            utc!("created_at"),
            " AS created_at, ",
            utc!("last_seen_at"),
            " AS last_seen_at, ",
            utc!("expires_at"),
            " AS expires_at, client_address, user_agent, mfa_pending
              FROM me, sessions WHERE user_id = me.uid ORDER BY created_at"
        ),
    ),
    (
        "devices",
        concat!(
            "SELECT ",
            utc!("created_at"),
            " AS created_at, ",
            utc!("expires_at"),
            " AS expires_at, failures
              FROM me, device_cookies WHERE user_id = me.uid ORDER BY created_at"
        ),
    ),
    (
        "external_identities",
        concat!(
            "SELECT provider, subject, email, ",
            utc!("created_at"),
            " AS created_at FROM me, external_identities
              WHERE user_id = me.uid ORDER BY created_at"
        ),
    ),
    (
        "recovery_codes",
        concat!(
            "SELECT ",
            utc!("created_at"),
            " AS created_at, ",
            utc!("used_at"),
            " AS used_at FROM me, recovery_codes
              WHERE user_id = me.uid ORDER BY created_at, id"
        ),
    ),
    (
        "mail_links",
        concat!(
            "SELECT purpose, email, ",
            utc!("created_at"),
            " AS created_at, ",
            utc!("expires_at"),
            " AS expires_at, ",
            utc!("used_at"),
            " AS used_at FROM me, mail_tokens
              WHERE user_id = me.uid ORDER BY created_at, id"
        ),
    ),
    (
        "queued_mails",
        concat!(
            "SELECT kind, recipient, ",
            utc!("created_at"),
            " AS created_at, attempts, details FROM me, outbox
              WHERE user_id = me.uid OR recipient = me.address ORDER BY created_at, id"
        ),
    ),
    (
        "api_tokens",
        concat!(
            "SELECT id, name, project_id, scope, ",
            utc!("created_at"),
            " AS created_at, ",
            utc!("last_used_at"),
            " AS last_used_at, ",
            utc!("expires_at"),
            " AS expires_at, ",
            utc!("revoked_at"),
            " AS revoked_at FROM me, api_tokens
              WHERE created_by = me.uid ORDER BY id"
        ),
    ),
    // The invitations the user made (the address given), and those to the user: to the
    // account's address, or accepted by the user (perhaps under an earlier address).
    (
        "invitations_sent",
        concat!(
            "SELECT id, org_id, email, role, ",
            utc!("created_at"),
            " AS created_at, ",
            utc!("expires_at"),
            " AS expires_at, ",
            utc!("accepted_at"),
            " AS accepted_at FROM me, invitations
              WHERE invited_by = me.uid ORDER BY created_at, id"
        ),
    ),
    (
        "invitations_received",
        concat!(
            "SELECT id, org_id, role, invited_by, ",
            utc!("created_at"),
            " AS created_at, ",
            utc!("expires_at"),
            " AS expires_at, ",
            utc!("accepted_at"),
            " AS accepted_at FROM me, invitations
              WHERE email = me.address OR accepted_by = me.uid ORDER BY created_at, id"
        ),
    ),
];

/// The export of a user, `None` when there is no such user. `rate_events` are the user's
/// rate-limit events (`db::rate::events_of_account`), as (kind, time).
pub fn of_user(
    c: &mut impl Sql,
    user_id: i64,
    rate_events: &[(String, String)],
) -> Result<Option<Value>, postgres::Error> {
    let Some((user, email)) = user(c, user_id)? else {
        return Ok(None);
    };
    let mut out = Map::new();
    out.insert("format".into(), json!("consoled-account-export/1"));
    out.insert("user".into(), user);
    for (name, sql) in LISTS {
        out.insert(name.to_string(), list(c, sql, user_id, &email)?);
    }
    let streams: i64 = c
        .query_one(
            "SELECT count(*) FROM stream_leases WHERE user_id = $1",
            &[&user_id],
        )?
        .get(0);
    out.insert("open_streams".into(), json!(streams));
    let events: Vec<Value> = rate_events
        .iter()
        .map(|(kind, at)| json!({ "kind": kind, "at": at }))
        .collect();
    out.insert("rate_limit_events".into(), json!(events));
    Ok(Some(Value::Object(out)))
}

/// The user's own row: every column but the secrets, which appear as whether they are set.
fn user(c: &mut impl Sql, user_id: i64) -> Result<Option<(Value, String)>, postgres::Error> {
    let sql = concat!(
        "SELECT json_build_object('id', id, 'email', email, 'name', name, 'locale', locale,
                'email_verified', email_verified, 'has_password', password_hash IS NOT NULL,
                'mfa_enabled', totp_secret IS NOT NULL, 'mfa_enabled_unproven', totp_unproven,
                'mfa_setup_pending', totp_pending IS NOT NULL, 'created', ",
        utc!("created_at"),
        ", 'updated', ",
        utc!("updated_at"),
        ", 'disabled_at', ",
        utc!("disabled_at"),
        ")::text, email FROM users WHERE id = $1"
    );
    let Some(row) = c.query_opt(sql, &[&user_id])? else {
        return Ok(None);
    };
    let text: String = row.get(0);
    let user = serde_json::from_str(&text).expect("PostgreSQL writes valid JSON");
    Ok(Some((user, row.get(1))))
}

/// One list section: its rows as JSON objects, in the query's order.
fn list(c: &mut impl Sql, sql: &str, user_id: i64, email: &str) -> Result<Value, postgres::Error> {
    let wrapped = format!(
        "WITH me AS (SELECT $1::bigint AS uid, $2::text AS address)
         SELECT coalesce(json_agg(row_to_json(r)), '[]'::json)::text FROM ({sql}) r"
    );
    let text: String = c.query_one(&wrapped, &[&user_id, &email])?.get(0);
    Ok(serde_json::from_str(&text).expect("PostgreSQL writes valid JSON"))
}
