//! `consoled keys generate` and `consoled mfa reset` (`keys rotate` is `keys::reseal::rotate`).

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::config::Config;
use crate::db::{outbox, recovery_codes, sessions, totp, users};
use crate::failure::Failure;
use crate::http::json::Email;

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
    log::info!("mfa reset by the operator user_id={}", user.id);
    Ok(json!({ "user_id": user.id, "mfa_enabled": false, "sessions_ended": ended }))
}
