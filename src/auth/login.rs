//! `POST /auth/login`, `POST /auth/logout` and `GET /auth/session`.

use super::Event;
use crate::admission::{BudgetError, Budgets};
use crate::app::{App, Reply};
use crate::db::{self, devices, rate, sessions, users};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::client::Client;
use crate::http::cookies::SetCookie;
use crate::http::json::{Email, Fields};
use crate::http::{Request, Response};
use crate::limits::{self, Bucket, Kind};

/// The device cookie: issued on every successful sign-in, bound to that account.
pub const DEVICE_COOKIE: &str = "svc_device";

/// The screen of `POST /auth/login` (steps 1 and 3's first look below, from memory, on the
/// connection's thread): a flood from an address already over its budget is refused without a
/// worker, a query or a hash.
pub fn screen(app: &App, req: &Request) -> ApiResult<()> {
    let client = req.client(&app.config.client_source);
    if presented_device(req).is_none() {
        if let Some(wait) = app.signin_blocks.check(client) {
            return Err(refused(app, wait));
        }
    }
    app.hasher.check(client)
}

fn presented_device(req: &Request) -> Option<String> {
    req.cookie(DEVICE_COOKIE)
        .filter(|t| super::is_token_shaped(t))
}

/// `POST /auth/login`. Order matters: every refusal by a limit comes before the hash and before
/// any write, and costs no log line.
///
/// 1. Without a device cookie, an address remembered as over its failed-sign-in budget is
///    refused from memory (`admission::Blocks`).
/// 2. A device cookie that is live, of this account and under its own failure budget lets the
///    sign-in past the address's and the account's limits (OWASP's device cookies: guessing
///    cannot lock the owner's browser out). Otherwise the three failed-sign-in buckets
///    (per address, per account and address, per account) are looked at.
/// 3. The hash admission is asked first (cheaply, before the database: `Hasher::check`), then
///    the password is verified through the fair hash admission, keyed by the client address.
/// 4. A failure is counted on the cookie (trusted device) or on the three buckets; a success
///    renews or issues the device cookie.
pub fn post(app: &App, req: &Request) -> ApiResult<Reply> {
    let fields = Fields::parse(&req.body)?;
    let email = Email::parse(fields.string("email")?)?;
    super::oauth::policy::password_signin_allowed(app, req, &email)?;
    let password = fields.string("password")?;
    if password.chars().count() > 1024 {
        return Err(ApiError::invalid("password", "at most 1024 characters"));
    }
    let client = req.client(&app.config.client_source);
    let device = presented_device(req);
    if device.is_none() {
        if let Some(wait) = app.signin_blocks.check(client) {
            return Err(refused(app, wait));
        }
    }
    app.hasher.check(client)?;
    let limits = &app.config.limits;
    let (user, trusted) = {
        let mut c = db::conn(&app.pool)?;
        // Without a device cookie the limits come first: a refusal costs one query.
        if device.is_none() {
            check_limits(app, &mut *c, &email, client)?;
        }
        let user = users::find_by_email(&mut *c, &email)?;
        let trusted = match (&device, &user) {
            (Some(token), Some(user)) => devices::valid(
                &mut *c,
                token,
                user.id,
                limits.limit(Kind::DeviceCookieFailures),
            )?,
            _ => false,
        };
        if device.is_some() && !trusted {
            check_limits(app, &mut *c, &email, client)?;
        }
        (user, trusted)
    };
    // Unknown address or no password: the same hash work, then the same answer.
    let stored = user.as_ref().and_then(|u| u.password_hash.as_deref());
    let ok = app.hasher.verify(client, password, stored)?;

    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let user = match (user, &device) {
        (Some(user), _) if ok => user,
        (user, Some(token)) if trusted => {
            devices::failed(&mut tx, token)?;
            tx.commit()?;
            let id = user.map(|u| u.id);
            super::audit(
                app,
                req,
                Event::SigninFailed,
                id,
                &[("trusted_device", true.into())],
            );
            return Err(ApiError::new(Code::InvalidCredentials));
        }
        (user, _) => {
            rate::record_all(&mut tx, &failure_buckets(&email, client))?;
            tx.commit()?;
            // An unknown address has no user id; the address itself is not logged.
            let reason = if user.is_some() {
                "wrong_password"
            } else {
                "unknown_account"
            };
            let id = user.map(|u| u.id);
            super::audit(
                app,
                req,
                Event::SigninFailed,
                id,
                &[("reason", reason.into())],
            );
            return Err(ApiError::new(Code::InvalidCredentials));
        }
    };
    let lifetime = device_lifetime();
    let token = match device {
        Some(token) if trusted => {
            devices::succeeded(&mut tx, &token, lifetime)?;
            token
        }
        _ => devices::create(&mut tx, user.id, lifetime)?,
    };
    let response = super::start_session(app, req, &mut tx, 200, &user, user.mfa_enabled)?
        .header("Set-Cookie", device_cookie(app, &token));
    tx.commit()?;
    let pending = ("mfa_pending", user.mfa_enabled.into());
    super::audit(app, req, Event::SigninSucceeded, Some(user.id), &[pending]);
    Ok(response.into())
}

/// The failed-password buckets of a sign-in; every other check of a password (re-authentication)
/// counts into the same ones.
pub(super) fn failure_buckets(email: &Email, client: Client) -> [Bucket<'_>; 3] {
    [
        Bucket::LoginClient(client),
        Bucket::LoginAccountClient(email, client),
        Bucket::LoginAccount(email),
    ]
}

/// 429 when any failed-sign-in bucket is full; an address over its own budget is remembered.
pub(super) fn check_limits(
    app: &App,
    c: &mut impl crate::db::Sql,
    email: &Email,
    client: Client,
) -> ApiResult<()> {
    let buckets = failure_buckets(email, client);
    match Budgets::new(&app.config.limits).check(c, &buckets) {
        Err(BudgetError::Spent(spent)) => {
            if let Bucket::LoginClient(_) = buckets[spent.index] {
                app.signin_blocks.block(client, spent.wait);
            }
            Err(refused(app, spent.wait))
        }
        other => Ok(other?),
    }
}

/// A refusal by a failed-sign-in limit: counted in /metrics, never logged.
fn refused(app: &App, wait: u64) -> ApiError {
    app.metrics
        .signins_refused
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Budgets::refusal(Kind::LoginFailuresPerClient, wait).into()
}

fn device_lifetime() -> std::time::Duration {
    Kind::DeviceCookieFailures.rule().window
}

/// Sent only to the login endpoint; the browser keeps it across sign-outs.
fn device_cookie(app: &App, token: &str) -> String {
    SetCookie {
        name: DEVICE_COOKIE,
        value: token,
        http_only: true,
        same_site: "Strict",
        secure: app.config.cookie_secure,
        path: "/auth/login",
        max_age: Some(device_lifetime().as_secs()),
    }
    .render()
}

/// Forgets the failed sign-ins of an address, from every client (after a password reset).
pub fn clear_failures(c: &mut impl crate::db::Sql, email: &Email) -> Result<(), postgres::Error> {
    rate::clear_account(c, limits::account_keys(email))
}

/// Revokes the current session (pending or full) and clears the cookie.
pub fn logout(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = match super::any_session(app, req) {
        Ok(s) => s,
        Err(e) if e.code == Code::Unauthorized => {
            // Nothing to revoke; still tell the browser to drop whatever it holds.
            return Err(e.with_cookie(super::clear_session_cookie(app)));
        }
        Err(e) => return Err(e),
    };
    let mut c = db::conn(&app.pool)?;
    sessions::delete(&mut *c, session.id)?;
    super::audit(app, req, Event::Logout, Some(session.user_id), &[]);
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
