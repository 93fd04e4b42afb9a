//! `consoled keys generate`, `consoled keys rotate` (the work is `keys::reseal::run`) and
//! `consoled mfa reset`.

use crate::logging::security::Event;
use std::collections::HashMap;

use serde_json::{json, Value};

use crate::config::Config;
use crate::db::{outbox, recovery_codes, sessions, totp, users};
use crate::failure::Failure;
use crate::http::json::Email;
use crate::keys::reseal;

pub fn generate() -> Value {
    let key = crate::keys::generate();
    let parsed = crate::config::keys::parse("key", &key).expect("a generated key parses");
    let settings = crate::config::keys::KeySettings {
        data: Some(parsed),
        ..Default::default()
    };
    let id = crate::keys::DataKeys::from_settings(&settings).current_id();
    json!({ "key": key, "key_id": id })
}

/// Removes the user's second factor in one transaction with the end of every session (and so of
/// the user's event streams) and the `mfa_disabled` mail the owner gets when it happens.
pub fn mfa_reset(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    let raw = flags.get("email").map_or("", String::as_str);
    let email =
        Email::parse(raw).map_err(|_| format!("--email {raw:?} is not an email address"))?;
    let mut c = super::connect(config)?;
    let db = |e: postgres::Error| e.to_string();
    let mut tx = c.transaction().map_err(db)?;
    let user = users::find_by_email(&mut tx, &email)
        .map_err(db)?
        .ok_or_else(|| format!("no account with the address {}", email.as_str()))?;
    totp::disable(&mut tx, user.id).map_err(db)?;
    recovery_codes::delete_for_user(&mut tx, user.id).map_err(db)?;
    let ended = sessions::delete_for_user(&mut tx, user.id, None).map_err(db)?;
    if user.mfa_enabled {
        outbox::enqueue(&mut tx, "mfa_disabled", user.id, &user.email).map_err(db)?;
    }
    tx.commit().map_err(db)?;
    // A security event like the user's own `mfa_disabled`, marked as the operator's.
    let by = [("by", "operator".into())];
    crate::logging::security::event(Event::MfaDisabled, None, Some(user.id), &by);
    Ok(json!({ "user_id": user.id, "mfa_enabled": false, "sessions_ended": ended }))
}

/// `consoled keys rotate`: every TOTP secret sealed under CONSOLED_DATA_KEY. Fails (after doing
/// what it can) when some secret opens with none of the configured keys.
pub fn rotate(config: &Config) -> Result<Value, Failure> {
    let keys = crate::keys::DataKeys::from_settings(&config.keys);
    let id = keys.current_id().ok_or(
        "CONSOLED_DATA_KEY is not set: set the new key there and the keys it replaces in \
         CONSOLED_DATA_KEY_OLD (docs/OPERATIONS.md, \"Sealed TOTP secrets\")",
    )?;
    let mut c = super::connect(config)?;
    let report =
        reseal::run(&mut c, &keys, reseal::Stale::NotCurrent).map_err(|e| e.to_string())?;
    if !report.unreadable.is_empty() {
        let users: Vec<String> = report
            .unreadable
            .iter()
            .take(20)
            .map(|(user, why)| format!("user {user}: {why}"))
            .collect();
        return Err(format!(
            "{} secret(s) re-sealed under key {id}, {} cannot be opened with the configured keys \
             (add their key to CONSOLED_DATA_KEY_OLD, or reset those users' second factor with \
             `consoled mfa reset`): {}",
            report.resealed,
            report.unreadable.len(),
            users.join("; ")
        )
        .into());
    }
    Ok(json!({ "key_id": id, "resealed": report.resealed, "already_current": report.kept }))
}
