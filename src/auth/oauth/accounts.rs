//! Which account an external identity signs in to, decided and acted on in one transaction.
//!
//! First of all, the provider must assert that the person controls the address it reports.
//! Anyone can type any address into a provider account; if the provider has not verified it,
//! the sign-in is refused with `email_unverified` before anything else: it neither creates an
//! account, nor enters one (even through an existing link), nor is linked. Then:
//!
//! 1. a known (provider, subject) signs in its linked user;
//! 2. else the account whose email equals the provider's verified address is linked;
//! 3. else a new user is created, if the sign-up policy admits the address
//!    (`auth::signup_policy`, as for sign-up with a password): no password, address verified, a
//!    personal organization with its `default` project (as at signup).
//!
//! Linking to an account whose own address was never verified proves the address: that
//! account's password is removed, its sessions end, every other link goes, and so do a second
//! factor and device cookies enrolled before (see `auth::take_over_address`): whoever created
//! them never proved they own the address, while the person now signing in has (the
//! "pre-hijacked account" attack).
//!
//! Whatever the case, an address that signs in only through another provider (`policy`) is
//! refused, both the provider's and that of the account it would enter; a refusal leaves nothing
//! behind (the transaction is not committed).
//!
//! A new user is made in one place, `create`, where every rule about who may have an account
//! belongs.

use super::{policy, Declined, Identity, Provider};
use crate::app::App;
use crate::auth;
use crate::auth::signup_policy::{self, Evidence, Policy};
use crate::db::users::{self, User};
use crate::db::{self, identities, orgs, sessions};
use crate::http::json::Email;
use crate::http::names;
use crate::http::{Request, Response};

/// Finds or creates the user, starts a session, and redirects to the console (to the second
/// factor page when the user has one; the session is then pending).
pub fn sign_in(
    app: &App,
    req: &Request,
    provider: Provider,
    identity: &Identity,
) -> Result<Response, Declined> {
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let user = resolve(app, &mut tx, &app.config.signup, provider, identity)?;
    let cookie = auth::create_session_cookie(app, req, &mut tx, user.id, user.mfa_enabled)?;
    tx.commit()?;
    let fields = [
        ("provider", provider.name().into()),
        ("mfa_pending", user.mfa_enabled.into()),
    ];
    auth::audit(
        app,
        req,
        auth::Event::ProviderSignin,
        Some(user.id),
        &fields,
    );
    let page = if user.mfa_enabled { "/login/mfa" } else { "/" };
    let location = format!("{}{page}", app.config.console_url);
    Ok(Response::redirect(&location).header("Set-Cookie", cookie))
}

fn resolve(
    app: &App,
    tx: &mut impl db::Sql,
    signup: &Policy,
    provider: Provider,
    identity: &Identity,
) -> Result<User, Declined> {
    let email = match &identity.email {
        Some(email) if identity.email_verified => email,
        Some(_) => {
            return Err(Declined::unverified(
                "the provider has not verified the address",
            ))
        }
        None => return Err(Declined::unverified("the provider gave no email address")),
    };
    policy::provider_allowed(&app.config, &provider, email.as_str())?;
    let key = provider.link_key();
    let user = if let Some(user_id) = identities::find_user(tx, key, &identity.subject)? {
        identities::update_email(tx, key, &identity.subject, Some(email.as_str()))?;
        users::find(tx, user_id)?.ok_or_else(|| Declined::failed("the linked user is gone"))?
    } else {
        match users::find_by_email(tx, email)? {
            Some(user) => link_existing(tx, provider, identity, user)?,
            None => create(tx, signup, provider, identity, email)?,
        }
    };
    policy::provider_allowed(&app.config, &provider, &user.email)?;
    Ok(user)
}

fn link_existing(
    tx: &mut impl db::Sql,
    provider: Provider,
    identity: &Identity,
    user: User,
) -> Result<User, Declined> {
    link(tx, provider, identity, user.id)?;
    if !user.email_verified {
        auth::take_over_address(tx, user.id, Some((provider.link_key(), &identity.subject)))?;
        users::clear_password(tx, user.id)?;
        sessions::delete_for_user(tx, user.id, None)?;
    }
    log::info!("oauth {provider}: linked to existing user_id={}", user.id);
    users::find(tx, user.id)?.ok_or_else(|| Declined::failed("the user is gone"))
}

fn create(
    tx: &mut impl db::Sql,
    signup: &Policy,
    provider: Provider,
    identity: &Identity,
    email: &Email,
) -> Result<User, Declined> {
    signup_policy::admit(tx, signup, email, Evidence::VerifiedAddress)
        .map_err(Declined::signup_refused)?;
    let name = display_name(&identity.name, email);
    // Only a verified address gets this far (see `resolve`).
    let user = users::insert(tx, email, &name, None, true)?
        .ok_or_else(|| Declined::failed("the address was taken concurrently"))?;
    orgs::create_personal(tx, user.id, &name)?;
    link(tx, provider, identity, user.id)?;
    log::info!("oauth {provider}: new user_id={}", user.id);
    Ok(user)
}

fn link(
    tx: &mut impl db::Sql,
    provider: Provider,
    identity: &Identity,
    user_id: i64,
) -> Result<(), Declined> {
    let email = identity.email.as_ref().map(Email::as_str);
    if identities::link(tx, provider.link_key(), &identity.subject, user_id, email)? {
        Ok(())
    } else {
        Err(Declined::failed("the identity was linked concurrently"))
    }
}

/// The provider's name within signup's rules (1 to 100 characters, no control characters, no
/// bidirectional overrides or isolates, something visible: `http::names`), or the address's
/// local part when the provider has none.
fn display_name(provided: &str, email: &Email) -> String {
    let clean: String = provided
        .chars()
        .filter(|c| !c.is_control() && !names::is_bidi_control(*c))
        .collect();
    let name: String = clean.trim().chars().take(100).collect();
    let name = name.trim();
    if names::refusal(name).is_none() {
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
        assert_eq!(display_name("\u{202e}Ada", &email), "Ada");
        assert_eq!(display_name("\u{200b}\u{3164}", &email), "ada.l");
        assert_eq!(display_name(&"é".repeat(150), &email).chars().count(), 100);
    }
}
