//! Proof that whoever holds a session is its owner, for the changes a stolen session cookie must
//! not make: enrolling, replacing or removing the second factor (issue 15), and ending the
//! owner's other sessions (issue 37).
//!
//! Proof is either the current password in the body (`"password"`), or a sign-in younger than
//! `CONSOLED_REAUTH_SECONDS`: the session's own creation, which is a password login, a completed
//! second factor or a provider sign-in (each starts a new session; nothing else does). An account
//! without a password proves itself by signing in again through its provider. Otherwise 403
//! `reauth_required`. Wrong passwords count toward the sign-in throttle of the address, so a
//! stolen cookie gives no way round it.

use super::attempt;
use crate::app::App;
use crate::db::sessions::Session;
use crate::db::{self, users};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::{Email, Fields};
use crate::http::Request;

/// Ok when the request proves the owner is present; else 403 `reauth_required` (429 while the
/// address's failed passwords are over the sign-in limit).
pub fn require(app: &App, req: &Request, session: &Session) -> ApiResult<()> {
    let fields = Fields::parse(&req.body)?;
    let Some(password) = fields.optional_string("password")? else {
        if session.age <= app.config.reauth.as_secs_f64() {
            return Ok(());
        }
        return Err(ApiError::new(Code::ReauthRequired));
    };
    if password.chars().count() > 1024 {
        return Err(ApiError::invalid("password", "at most 1024 characters"));
    }
    let client = req.client(&app.config.client_source);
    let user = users::find(&mut *db::conn(&app.pool)?, session.user_id)?
        .ok_or_else(|| ApiError::new(Code::Unauthorized))?;
    let Some(stored) = user.password_hash.as_deref() else {
        return Err(ApiError::new(Code::ReauthRequired)
            .message("This account has no password: sign in again through your provider."));
    };
    app.hasher.would_admit(client)?;
    let email = Email::normalise(&user.email);
    if attempt::verify(app, &email, client, password, stored)?.is_right() {
        return Ok(());
    }
    super::audit(app, req, super::Event::ReauthFailed, Some(user.id), &[]);
    Err(ApiError::new(Code::ReauthRequired).message("The password is not correct."))
}
