//! Proof that whoever holds a session is its owner, for the changes a stolen session cookie must
//! not make: enrolling, replacing or removing the second factor (issue 15).
//!
//! Proof is either the current password in the body (`"password"`), or a sign-in younger than
//! `CONSOLED_REAUTH_SECONDS`: the session's own creation, which is a password login, a completed
//! second factor or a provider sign-in (each starts a new session; nothing else does). An account
//! without a password proves itself by signing in again through its provider. Otherwise 403
//! `reauth_required`. Wrong passwords count toward the sign-in throttle of the address, so a
//! stolen cookie gives no way round it.

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
    let (user, throttle) = {
        let mut c = db::conn(&app.pool)?;
        let user = users::find(&mut *c, session.user_id)?
            .ok_or_else(|| ApiError::new(Code::Unauthorized))?;
        let ip = req
            .client_ip(&app.config.trusted_proxies)
            .map_or("unknown".to_string(), |ip| ip.to_string());
        let throttle = super::login::Throttle::new(&Email::normalise(&user.email), &ip);
        throttle.check(&mut *c)?;
        (user, throttle)
    };
    let Some(stored) = user.password_hash.as_deref() else {
        return Err(ApiError::new(Code::ReauthRequired)
            .message("This account has no password: sign in again through your provider."));
    };
    // No connection is held while hashing.
    app.hasher.admit()?;
    if app.hasher.verify(password, Some(stored))? {
        return Ok(());
    }
    let mut c = db::conn(&app.pool)?;
    throttle.record(&mut *c)?;
    log::info!("reauth wrong password user_id={}", user.id);
    Err(ApiError::new(Code::ReauthRequired).message("The password is not correct."))
}
