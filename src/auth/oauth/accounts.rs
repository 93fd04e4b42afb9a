//! Which account an external identity signs in to, decided and acted on in one transaction:
//!
//! 1. a known (provider, subject) signs in its linked user;
//! 2. else an account whose email equals the provider's address is linked, but only when the
//!    provider asserts that the address is verified. If the provider has not verified it, the
//!    sign-in is refused (`oauth_failed`) rather than linked: anyone can claim an unverified
//!    address at a provider, and linking would hand them the account;
//! 3. else a new user is created: no password, `email_verified` as the provider asserts, a
//!    personal organization with its `default` project (as at signup), and a verification mail
//!    when the address is not verified.
//!
//! Linking to an account whose own address was never verified also removes that account's
//! password and ends its sessions: whoever created it never proved they own the address, while
//! the person now signing in has (the "pre-hijacked account" attack).

use super::{Identity, Provider, Refusal};
use crate::app::App;
use crate::auth;
use crate::db::users::{self, User};
use crate::db::{self, identities, orgs, outbox, sessions};
use crate::http::json::Email;
use crate::http::Response;

/// Finds or creates the user, starts a session, and redirects to the console (to the second
/// factor page when the user has one; the session is then pending).
pub fn sign_in(app: &App, provider: Provider, identity: &Identity) -> Result<Response, Refusal> {
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let user = resolve(&mut tx, provider, identity)?;
    let cookie = auth::create_session_cookie(app, &mut tx, user.id, user.mfa_enabled)?;
    tx.commit()?;
    log::info!(
        "oauth {provider}: sign-in user_id={} mfa_pending={}",
        user.id,
        user.mfa_enabled
    );
    let page = if user.mfa_enabled { "/login/mfa" } else { "/" };
    let location = format!("{}{page}", app.config.console_url);
    Ok(Response::redirect(&location).header("Set-Cookie", cookie))
}

fn resolve(
    tx: &mut postgres::Transaction,
    provider: Provider,
    identity: &Identity,
) -> Result<User, Refusal> {
    let email = identity.email.as_ref();
    if let Some(user_id) = identities::find_user(tx, provider.name(), &identity.subject)? {
        identities::update_email(
            tx,
            provider.name(),
            &identity.subject,
            email.map(Email::as_str),
        )?;
        return users::find(tx, user_id)?.ok_or_else(|| Refusal::failed("the linked user is gone"));
    }
    let email = email.ok_or_else(|| Refusal::failed("the provider gave no email address"))?;
    match users::find_by_email(tx, email)? {
        Some(user) if identity.email_verified => link_existing(tx, provider, identity, user),
        Some(user) => Err(Refusal::failed(format!(
            "user_id={} has this address, which the provider has not verified: not linked",
            user.id
        ))),
        None => create(tx, provider, identity, email),
    }
}

fn link_existing(
    tx: &mut postgres::Transaction,
    provider: Provider,
    identity: &Identity,
    user: User,
) -> Result<User, Refusal> {
    link(tx, provider, identity, user.id)?;
    if !user.email_verified {
        users::mark_verified(tx, user.id)?;
        users::clear_password(tx, user.id)?;
        sessions::delete_for_user(tx, user.id, None)?;
    }
    log::info!("oauth {provider}: linked to existing user_id={}", user.id);
    users::find(tx, user.id)?.ok_or_else(|| Refusal::failed("the user is gone"))
}

fn create(
    tx: &mut postgres::Transaction,
    provider: Provider,
    identity: &Identity,
    email: &Email,
) -> Result<User, Refusal> {
    let name = display_name(&identity.name, email);
    let user = users::insert(tx, email, &name, None, identity.email_verified)?
        .ok_or_else(|| Refusal::failed("the address was taken concurrently"))?;
    orgs::create_personal(tx, user.id, &name)?;
    link(tx, provider, identity, user.id)?;
    if !identity.email_verified {
        outbox::enqueue(tx, "verify_email", user.id, &user.email)?;
    }
    log::info!("oauth {provider}: new user_id={}", user.id);
    Ok(user)
}

fn link(
    tx: &mut postgres::Transaction,
    provider: Provider,
    identity: &Identity,
    user_id: i64,
) -> Result<(), Refusal> {
    let email = identity.email.as_ref().map(Email::as_str);
    if identities::link(tx, provider.name(), &identity.subject, user_id, email)? {
        Ok(())
    } else {
        Err(Refusal::failed("the identity was linked concurrently"))
    }
}

/// The provider's name within signup's rules (1 to 100 characters, no control characters), or
/// the address's local part when the provider has none.
fn display_name(provided: &str, email: &Email) -> String {
    let clean: String = provided.chars().filter(|c| !c.is_control()).collect();
    let name: String = clean.trim().chars().take(100).collect();
    let name = name.trim();
    if !name.is_empty() {
        return name.to_string();
    }
    let local = email.as_str().split('@').next().unwrap_or_default();
    local.chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_follow_signup_rules() {
        let email = Email::parse("ada.l@example.com").unwrap();
        assert_eq!(display_name("  Ada\u{7} Lovelace ", &email), "Ada Lovelace");
        assert_eq!(display_name("", &email), "ada.l");
        assert_eq!(display_name(" \n ", &email), "ada.l");
        assert_eq!(display_name(&"é".repeat(150), &email).chars().count(), 100);
    }
}
