//! `POST /auth/password/change {current_password, password}`: a signed-in user changes the
//! password (OWASP ASVS 6.2.2 and 6.2.3).
//!
//! The new password passes the same rules as at sign-up (length, not common, not the account's
//! address or name) before anything is hashed. The current one is verified like a sign-in:
//! refused while the address's failed sign-ins are over their limit (429), and a wrong one
//! counts in the same budgets (401 `invalid_credentials`), so a stolen session cookie is no way
//! round the sign-in throttle. An account without a password (provider sign-in only) sets one
//! without `current_password` within `CONSOLED_REAUTH_SECONDS` of its sign-in (else 403
//! `reauth_required`: sign in through the provider again).
//!
//! On success, in one transaction: the new hash (only if the stored one is still the one just
//! verified), every other session of the user ends (and with it its event streams), this
//! session gets a new token (the old cookie stops working, and the streams opened with it end),
//! the failed sign-ins of the address are forgotten, the reset links mailed before are void,
//! and a mail tells the owner.

use crate::app::{App, Reply};
use crate::db::mail_tokens::{self, Purpose};
use crate::db::sessions::{self, Session};
use crate::db::{self, outbox, users};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::client::Client;
use crate::http::json::{Email, Fields, Password};
use crate::http::{Request, Response};

use super::{attempt, login, passwords, Event};

pub fn change(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    let fields = Fields::parse(&req.body)?;
    let password = Password::parse(fields.string("password")?, "password")?;
    passwords::refuse_common(&password, "password")?;
    let current = fields.optional_string("current_password")?;
    if current.is_some_and(|p| p.chars().count() > 1024) {
        return Err(ApiError::invalid(
            "current_password",
            "at most 1024 characters",
        ));
    }
    let client = req.client(&app.config.client_source);
    let user = users::find(&mut *db::conn(&app.pool)?, session.user_id)?
        .ok_or_else(|| ApiError::new(Code::Unauthorized))?;
    passwords::refuse_personal(&password, "password", &user.email, &user.name)?;
    let email = Email::normalise(&user.email);
    prove_current(app, req, (&session, &user), current, (&email, client))?;
    app.hasher.would_admit(client)?;
    let hash = app.hasher.hash(client, password.as_str())?;
    let (cookie, ended) = replace(app, (&session, &user), &email, &hash)?;
    let fields = [
        ("first_password", user.password_hash.is_none().into()),
        ("sessions_ended", ended.into()),
    ];
    super::audit(app, req, Event::PasswordChanged, Some(user.id), &fields);
    Ok(Response::empty(204).header("Set-Cookie", cookie).into())
}

/// The current password, verified like a sign-in; or, for an account without one, a sign-in
/// recent enough.
fn prove_current(
    app: &App,
    req: &Request,
    (session, user): (&Session, &users::User),
    current: Option<&str>,
    (email, client): (&Email, Client),
) -> ApiResult<()> {
    match (user.password_hash.as_deref(), current) {
        (Some(_), None) => Err(ApiError::invalid("current_password", "required")),
        (Some(stored), Some(current)) => {
            app.hasher.would_admit(client)?;
            if !attempt::verify(app, email, client, current, stored)?.is_right() {
                super::audit(app, req, Event::PasswordChangeRefused, Some(user.id), &[]);
                return Err(ApiError::new(Code::InvalidCredentials)
                    .message("The current password is not correct."));
            }
            Ok(())
        }
        (None, _) if session.age > app.config.reauth.as_secs_f64() => {
            Err(ApiError::new(Code::ReauthRequired).message(format!(
                "This account has no password yet: sign in again through your provider, then \
                 set one within {} seconds.",
                app.config.reauth.as_secs()
            )))
        }
        (None, _) => Ok(()),
    }
}

/// The new hash and what must go with it, in one transaction: this session's new cookie, and
/// how many other sessions ended.
fn replace(
    app: &App,
    (session, user): (&Session, &users::User),
    email: &Email,
    hash: &str,
) -> ApiResult<(String, u64)> {
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    if !users::replace_password(&mut tx, user.id, user.password_hash.as_deref(), hash)? {
        // Changed by a concurrent request since it was verified here.
        return Err(ApiError::new(Code::InvalidCredentials)
            .message("The password was changed meanwhile; sign in again with the new one."));
    }
    // Deleting the sessions also ends their event streams (trigger).
    let ended = sessions::delete_for_user(&mut tx, user.id, Some(session.id))?;
    let cookie = super::renew_token(app, &mut tx, session)?;
    // Reset links mailed before the change would undo it: queued ones go (after any being sent
    // now, whose token is then committed), then every unused one is void.
    outbox::drop_queued(&mut tx, "password_reset", user.id, email.as_str())?;
    mail_tokens::void_unused(&mut tx, user.id, Purpose::PasswordReset)?;
    outbox::enqueue(&mut tx, "password_changed", user.id, &user.email)?;
    // The failed sign-ins guarded the old password; they must not lock out the new one.
    login::clear_failures(&mut tx, email)?;
    tx.commit()?;
    Ok((cookie, ended))
}
