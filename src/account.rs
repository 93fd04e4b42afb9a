//! An account's life beyond signing in (issue 32), shared by the user's own endpoints
//! (`auth::account`, `auth::email_change`) and the operator's commands (`cli::users`): the
//! locales a profile may name, deletion with its one refusal, and signing a user out everywhere.
//!
//! What goes with a deleted or disabled user is the database's rule (migration 0012), so that
//! these, a plain SQL statement and any other tool agree. What this module adds: the answer that
//! names why a deletion cannot happen, the notice to the address, and forgetting the address's
//! rate-limit counts.

use postgres::error::SqlState;
use serde_json::{json, Value};

use crate::db::{outbox, rate, sessions, users, Sql};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::Email;
use crate::limits;

/// The locales a profile may name (BCP 47 language tags): what the console's front end offers.
/// consoled itself writes its mails and messages in English whatever the locale.
pub const LOCALES: &[&str] = &["de", "en", "es", "fr", "it", "ja", "nl", "pl", "pt", "zh"];

/// A locale of `LOCALES`, else 400 `invalid_input` naming them.
pub fn parse_locale(raw: &str) -> ApiResult<&'static str> {
    LOCALES
        .iter()
        .find(|l| **l == raw)
        .copied()
        .ok_or_else(|| ApiError::invalid("locale", &format!("one of {}", LOCALES.join(", "))))
}

/// Deletes `user` inside `c` (a transaction the caller commits). While the user alone owns a
/// team organization: 409 `last_owner`, naming them. Otherwise the address is told (`details`:
/// by whom and from where), the address's rate-limit counts are forgotten, and the user goes
/// with what the database takes along (sessions and their streams, devices, links, codes, mail
/// tokens, memberships, the tokens the user made, the personal organization and its projects).
pub fn delete(c: &mut impl Sql, user: &users::User, details: &Value) -> ApiResult<()> {
    let alone = users::teams_owned_alone(c, user.id)?;
    if !alone.is_empty() {
        return Err(last_owner(&alone));
    }
    outbox::enqueue_with_details(c, "account_deleted", None, &user.email, details)?;
    let keys = limits::keys_of_account(&Email::normalise(&user.email), user.id);
    rate::forget_account(c, &keys)?;
    match users::delete(c, user.id) {
        Ok(_) => Ok(()),
        // Another owner left meanwhile: the database's own rule refused.
        Err(e) if e.code() == Some(&SqlState::RESTRICT_VIOLATION) => {
            Err(ApiError::new(Code::LastOwner).message(
                "You are the last owner of a team organization: make another member an owner, \
                 or close it, before deleting the account.",
            ))
        }
        Err(e) => Err(e.into()),
    }
}

fn last_owner(orgs: &[(i64, String)]) -> ApiError {
    let names: Vec<String> = orgs
        .iter()
        .map(|(id, name)| format!("{name} (id {id})"))
        .collect();
    let listed: Vec<Value> = orgs
        .iter()
        .map(|(id, name)| json!({ "id": id, "name": name }))
        .collect();
    ApiError::new(Code::LastOwner)
        .message(format!(
            "You are the last owner of the team organization(s) {}: make another member an \
             owner, or close it, before deleting the account.",
            names.join(", ")
        ))
        .with_details(json!({ "organizations": listed }))
}

/// Ends every session of the user (each ends its event streams on every instance) and tells
/// every instance to drop what it remembers of the user; the number of sessions ended.
pub fn sign_out_everywhere(c: &mut impl Sql, user_id: i64) -> Result<u64, postgres::Error> {
    let ended = sessions::delete_for_user(c, user_id, None)?;
    users::notify_access_changed(c, user_id)?;
    Ok(ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locales_are_the_documented_list() {
        assert_eq!(parse_locale("de").unwrap(), "de");
        for bad in ["", "EN", "en-US", "xx", " en"] {
            let e = parse_locale(bad).unwrap_err();
            assert_eq!(e.code, Code::InvalidInput, "{bad:?}");
            assert!(
                e.more.message.contains("one of de, en"),
                "{}",
                e.more.message
            );
        }
        let api = include_str!("../docs/API.md");
        let listed: Vec<String> = LOCALES.iter().map(|l| format!("`{l}`")).collect();
        assert!(
            api.contains(&listed.join(", ")),
            "docs/API.md lists the locales as {}",
            listed.join(", ")
        );
        let mut sorted = LOCALES.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, LOCALES);
    }
}
