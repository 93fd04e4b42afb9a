//! The operator's user commands (issue 32): `consoled user find|show|disable|enable|signout|
//! delete`. Each prints one JSON object; each change is a security event marked `by=operator`.
//! What disabling and deleting do is the database's rule (migration 0012), the same as for the
//! user's own deletion (`account::delete`).

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::account;
use crate::config::Config;
use crate::db::{export, rate, users};
use crate::failure::Failure;
use crate::http::json::Email;
use crate::limits;
use crate::logging::security::{self, Event};

/// The most users `user find` prints.
const FIND_LIMIT: i64 = 100;

fn db(e: postgres::Error) -> Failure {
    Failure::from(crate::db::reach::describe(&e))
}

/// A user as the commands print it: never a secret or hash.
fn summary(u: &users::User) -> Value {
    let mut v = u.to_json();
    v["disabled_at"] = json!(u.disabled_at);
    v
}

/// `user find --email TEXT | --id N`: `{"users": [...]}`, by id; the addresses containing TEXT
/// (any case), at most 100.
pub fn find(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    let mut c = super::connect(config)?;
    let found = match (flags.get("id"), flags.get("email")) {
        (Some(_), None) => users::find(&mut c, super::id_flag(flags, "id")?)
            .map_err(db)?
            .into_iter()
            .collect(),
        (None, Some(part)) if !part.trim().is_empty() => {
            users::search(&mut c, part.trim(), FIND_LIMIT).map_err(db)?
        }
        _ => return Err(one_of().into()),
    };
    let list: Vec<Value> = found.iter().map(summary).collect();
    Ok(json!({ "users": list }))
}

/// `user show`: everything consoled holds about the user, as the user's own export.
pub fn show(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    let mut c = super::connect(config)?;
    let user = target(&mut c, flags)?;
    let keys = limits::keys_of_account(&Email::normalise(&user.email), user.id);
    let events = rate::events_of_account(&mut c, &keys).map_err(db)?;
    export::of_user(&mut c, user.id, &events)
        .map_err(db)?
        .ok_or_else(|| Failure::from(format!("user {} was deleted meanwhile", user.id)))
}

/// `user disable` and `user enable`: `{"user_id", "disabled", "changed", "sessions_ended"}`.
pub fn set_disabled(
    config: &Config,
    flags: &HashMap<String, String>,
    disabled: bool,
) -> Result<Value, Failure> {
    let mut c = super::connect(config)?;
    let mut tx = c.transaction().map_err(db)?;
    let user = target(&mut tx, flags)?;
    // The database ends them with the change (trigger `users_access`); counted first to say so.
    let sessions: i64 = tx
        .query_one(
            "SELECT count(*) FROM sessions WHERE user_id = $1",
            &[&user.id],
        )
        .map_err(db)?
        .get(0);
    let changed = users::set_disabled(&mut tx, user.id, disabled).map_err(db)?;
    tx.commit().map_err(db)?;
    let ended = if changed && disabled { sessions } else { 0 };
    if changed {
        let event = if disabled {
            Event::AccountDisabled
        } else {
            Event::AccountEnabled
        };
        let fields = [("by", "operator".into()), ("sessions_ended", ended.into())];
        security::event(event, None, Some(user.id), &fields);
    }
    Ok(
        json!({ "user_id": user.id, "disabled": disabled, "changed": changed,
               "sessions_ended": ended }),
    )
}

/// `user signout`: every session of the user ends; `{"user_id", "sessions_ended"}`.
pub fn signout(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    let mut c = super::connect(config)?;
    let mut tx = c.transaction().map_err(db)?;
    let user = target(&mut tx, flags)?;
    let ended = account::sign_out_everywhere(&mut tx, user.id).map_err(db)?;
    tx.commit().map_err(db)?;
    let fields = [("by", "operator".into()), ("sessions_ended", ended.into())];
    security::event(Event::SignedOutEverywhere, None, Some(user.id), &fields);
    Ok(json!({ "user_id": user.id, "sessions_ended": ended }))
}

/// `user delete`: `{"user_id", "deleted": true}`; refused, naming them, while the user alone
/// owns a team organization.
pub fn delete(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    let mut c = super::connect(config)?;
    let mut tx = c.transaction().map_err(db)?;
    let user = target(&mut tx, flags)?;
    account::delete(&mut tx, &user, &json!({ "by": "operator" }))
        .map_err(|e| Failure::from(format!("user {}: {}", user.id, e.more.message)))?;
    tx.commit().map_err(db)?;
    let by = [("by", "operator".into())];
    security::event(Event::AccountDeleted, None, Some(user.id), &by);
    Ok(json!({ "user_id": user.id, "deleted": true }))
}

/// The user `--id N` or `--email ADDRESS` names (exactly one of them).
fn target(
    c: &mut impl crate::db::Sql,
    flags: &HashMap<String, String>,
) -> Result<users::User, Failure> {
    let found = match (flags.get("id"), flags.get("email")) {
        (Some(_), None) => {
            let id = super::id_flag(flags, "id")?;
            users::find(c, id)
                .map_err(db)?
                .ok_or_else(|| format!("no user with id {id}"))?
        }
        (None, Some(raw)) => {
            let email = Email::parse(raw)
                .map_err(|_| format!("--email {raw:?} is not an email address"))?;
            users::find_by_email(c, &email)
                .map_err(db)?
                .ok_or_else(|| format!("no account with the address {}", email.as_str()))?
        }
        _ => return Err(one_of().into()),
    };
    Ok(found)
}

fn one_of() -> &'static str {
    "give exactly one of --id N and --email ADDRESS"
}
