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
    let throttle = Throttle::new(&email, &ip);

    let user = {
        let mut c = db::conn(&app.pool)?;
        throttle.check(&mut *c)?;
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
            throttle.record(&mut tx)?;
            tx.commit()?;
            return Err(ApiError::new(Code::InvalidCredentials));
        }
    };
    let response = super::start_session(app, &mut tx, 200, user.id, user.mfa_enabled)?;
    tx.commit()?;
    log::info!("login user_id={} mfa_pending={}", user.id, user.mfa_enabled);
    Ok(response.into())
}

/// The failed-password counters of an address: per (address, client) and per address. Login
/// and every other check of a password (re-authentication) count into the same ones.
pub struct Throttle {
    by_ip: String,
    by_address: String,
}

impl Throttle {
    pub fn new(email: &Email, ip: &str) -> Throttle {
        Throttle {
            by_ip: format!("login:{}:{ip}", email.as_str()),
            by_address: format!("login:{}", email.as_str()),
        }
    }

    /// 429 `rate_limited` while either counter is full, whether the next password is right or not.
    pub fn check(&self, c: &mut impl postgres::GenericClient) -> ApiResult<()> {
        let wait = match rate::blocked(c, &self.by_ip, FAILURES_PER_ADDRESS_AND_IP, WINDOW)? {
            Some(w) => Some(w),
            None => rate::blocked(c, &self.by_address, FAILURES_PER_ADDRESS, WINDOW)?,
        };
        match wait {
            Some(wait) => {
                Err(ApiError::rate_limited(wait)
                    .message("Too many failed sign-ins; try again later."))
            }
            None => Ok(()),
        }
    }

    /// Counts a wrong password.
    pub fn record(&self, c: &mut impl postgres::GenericClient) -> Result<(), postgres::Error> {
        rate::record(c, &self.by_ip)?;
        rate::record(c, &self.by_address)
    }
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
