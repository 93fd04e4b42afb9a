//! `POST /auth/login`, `POST /auth/logout` and `GET /auth/session`.

use std::time::Duration;

use crate::app::{App, Reply};
use crate::db::{self, rate, sessions, users};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::{Email, Fields};
use crate::http::{Request, Response};

const WINDOW: Duration = Duration::from_secs(15 * 60);
const FAILURES_PER_ADDRESS_AND_IP: i64 = 10;
const FAILURES_PER_ADDRESS: i64 = 100;

pub fn post(app: &App, req: &Request) -> ApiResult<Reply> {
    let fields = Fields::parse(&req.body)?;
    let email = Email::parse(fields.string("email")?)?;
    let password = fields.string("password")?;
    if password.chars().count() > 1024 {
        return Err(ApiError::invalid("password", "at most 1024 characters"));
    }
    let ip = req
        .client_ip(&app.config.trusted_proxies)
        .map_or("unknown".to_string(), |ip| ip.to_string());
    app.hasher.admit()?;
    let by_ip = format!("login:{}:{ip}", email.as_str());
    let by_address = format!("login:{}", email.as_str());

    let user = {
        let mut c = db::conn(&app.pool)?;
        let wait = match rate::blocked(&mut *c, &by_ip, FAILURES_PER_ADDRESS_AND_IP, WINDOW)? {
            Some(w) => Some(w),
            None => rate::blocked(&mut *c, &by_address, FAILURES_PER_ADDRESS, WINDOW)?,
        };
        if let Some(wait) = wait {
            return Err(
                ApiError::rate_limited(wait).message("Too many failed sign-ins; try again later.")
            );
        }
        users::find_by_email(&mut *c, &email)?
    };
    // Unknown address or no password: the same hash work, then the same answer.
    let stored = user.as_ref().and_then(|u| u.password_hash.as_deref());
    let ok = app.hasher.verify(password, stored)?;

    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let user = match user {
        Some(user) if ok => user,
        _ => {
            rate::record(&mut tx, &by_ip)?;
            rate::record(&mut tx, &by_address)?;
            tx.commit()?;
            return Err(ApiError::new(Code::InvalidCredentials));
        }
    };
    let response = super::start_session(app, &mut tx, 200, user.id, user.mfa_enabled)?;
    tx.commit()?;
    log::info!("login user_id={} mfa_pending={}", user.id, user.mfa_enabled);
    Ok(response.into())
}

/// Forgets the failed sign-ins of an address, from every client (after a password reset).
pub fn clear_failures(
    c: &mut impl postgres::GenericClient,
    email: &Email,
) -> Result<(), postgres::Error> {
    let by_address = format!("login:{}", email.as_str());
    rate::clear(c, &by_address)?;
    // The per-client buckets are `login:<address>:<ip>`; an address has no ':'.
    rate::clear_prefix(c, &format!("{by_address}:"))
}

/// Revokes the current session (pending or full) and clears the cookie.
pub fn logout(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = match super::any_session(app, req) {
        Ok(s) => s,
        Err(e) if e.code == Code::Unauthorized => {
            // Nothing to revoke; still tell the browser to drop whatever it holds.
            let mut r = Response::from_error(&e);
            r.headers
                .push(("Set-Cookie".into(), super::clear_session_cookie(app)));
            return Ok(r.into());
        }
        Err(e) => return Err(e),
    };
    let mut c = db::conn(&app.pool)?;
    sessions::delete(&mut *c, session.id)?;
    log::info!("logout user_id={}", session.user_id);
    Ok(Response::empty(204)
        .header("Set-Cookie", super::clear_session_cookie(app))
        .into())
}

/// `GET /auth/session` (an addition): the Auth state of the current full session.
pub fn get(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    let mut c = db::conn(&app.pool)?;
    let body = super::auth_state(&mut *c, session.user_id, false)?;
    Ok(Response::json(200, &body).into())
}
