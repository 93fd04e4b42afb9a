//! `POST /auth/login`, `POST /auth/logout` and `GET /auth/session`.

use super::{attempt, device, Event};
use crate::admission::Claim;
use crate::app::{App, Reply};
use crate::db::{self, devices, rate, sessions, users};
use crate::error::{ApiError, ApiResult, Code};
use crate::hashing::Verdict;
use crate::http::client::Client;
use crate::http::json::{Email, Fields};
use crate::http::{Request, Response};
use crate::limits::{self, Kind};

/// The screen of `POST /auth/login` (step 1 below, from memory, on the connection's thread,
/// before the body is read): a flood from an address already over its budget is refused without
/// a worker, a query or a hash, unless it carries a device cookie we minted (whose account the
/// handler checks before any query).
pub fn screen(app: &App, req: &Request) -> ApiResult<()> {
    let client = req.client(&app.config.client_source);
    refuse_early(app, client, device::ours(app, req).is_some())
}

/// Steps 1 and 2 below, from memory: the screen asks them before the body is read (any device
/// cookie we minted exempts), the handler again once it knows the account (its own cookie).
fn refuse_early(app: &App, client: Client, with_device_cookie: bool) -> ApiResult<()> {
    if !with_device_cookie {
        if let Some(wait) = app.signin_blocks.blocked_for(client) {
            return Err(attempt::refused(app, wait));
        }
    }
    app.hasher.would_admit(client)
}

/// How a sign-in's password check is counted before it is made.
enum Counted {
    /// On the live device cookie of the account, under its own small budget.
    Device(String),
    /// In the failed-sign-in buckets of (account, client address).
    Budgets(Claim),
}

/// `POST /auth/login`. Order matters: every refusal by a limit comes before the hash, and costs
/// no log line.
///
/// 1. Without a device cookie minted for this account, an address remembered as over its
///    failed-sign-in budget is refused from memory (`admission::Blocks`).
/// 2. The hash admission is asked (cheaply, before the database: `Hasher::would_admit`).
/// 3. The check is counted before it is made: on a live device cookie of this account under its
///    own failure budget (OWASP's device cookies: guessing cannot lock the owner's browser out),
///    else in the three failed-sign-in buckets (`attempt`); 429 when there is no place.
/// 4. The password is verified through the fair hash admission, keyed by the client address.
/// 5. A failure stays counted; a success gives the places back and renews or issues the device
///    cookie.
pub fn post(app: &App, req: &Request) -> ApiResult<Reply> {
    let fields = Fields::parse(&req.body)?;
    let email = Email::parse(fields.string("email")?)?;
    super::oauth::policy::password_signin_allowed(app, req, &email)?;
    let password = fields.string("password")?;
    if password.chars().count() > 1024 {
        return Err(ApiError::invalid("password", "at most 1024 characters"));
    }
    let client = req.client(&app.config.client_source);
    let device = device::for_account(app, req, &email);
    refuse_early(app, client, device.is_some())?;
    let (user, counted) = count(app, &email, client, device)?;
    // Unknown address or no password: the same hash work, then the same answer.
    let stored = user.as_ref().and_then(|u| u.password_hash.as_deref());
    let verdict = match app.hasher.verify(client, password, stored) {
        Ok(verdict) => verdict,
        Err(e) => {
            give_back(app, counted, &email, client)?;
            return Err(e);
        }
    };
    match user {
        Some(user) if verdict.is_right() => {
            let renewed = renewed_hash(app, client, verdict, password);
            succeed(app, req, (&email, client), user, counted, renewed)
        }
        user => Err(failed(app, req, user.map(|u| u.id), &counted)),
    }
}

/// Step 3: the account, and how its check is counted.
fn count(
    app: &App,
    email: &Email,
    client: Client,
    device: Option<String>,
) -> ApiResult<(Option<users::User>, Counted)> {
    let mut c = db::conn(&app.pool)?;
    let Some(token) = device else {
        // The budgets first: a refusal costs one statement.
        let claim = attempt::take(app, &mut *c, email, client)?;
        return Ok((
            users::find_by_email(&mut *c, email)?,
            Counted::Budgets(claim),
        ));
    };
    let user = users::find_by_email(&mut *c, email)?;
    if let Some(u) = &user {
        let budget = app.config.limits.limit(Kind::DeviceCookieFailures);
        if devices::take(&mut *c, &token, u.id, budget)? {
            return Ok((user, Counted::Device(token)));
        }
    }
    let claim = attempt::take(app, &mut *c, email, client)?;
    Ok((user, Counted::Budgets(claim)))
}

/// A check that was counted but not made (the hash queue refused it).
fn give_back(app: &App, counted: Counted, email: &Email, client: Client) -> ApiResult<()> {
    let mut c = db::conn(&app.pool)?;
    match counted {
        Counted::Device(token) => devices::give_back(&mut *c, &token)?,
        Counted::Budgets(claim) => attempt::give_back(&mut *c, claim, email, client)?,
    }
    Ok(())
}

/// A right password whose stored hash is of the form as typed (made before passwords were
/// normalised): the normalised form's hash, to store in its place. Best effort: when the hash
/// queue has no place now, the next sign-in tries again.
fn renewed_hash(app: &App, client: Client, verdict: Verdict, typed: &str) -> Option<String> {
    if verdict != Verdict::RightAsTyped {
        return None;
    }
    app.hasher.hash(client, typed).ok()
}

/// Step 5 for a right password: the places back, the device cookie, the session.
fn succeed(
    app: &App,
    req: &Request,
    (email, client): (&Email, Client),
    user: users::User,
    counted: Counted,
    renewed: Option<String>,
) -> ApiResult<Reply> {
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let token = match counted {
        Counted::Device(token) => {
            // Its failures are forgiven, the counted one included.
            devices::succeeded(&mut tx, &token, device::lifetime())?;
            token
        }
        Counted::Budgets(claim) => {
            attempt::give_back(&mut tx, claim, email, client)?;
            let token = device::mint(app, email);
            devices::create(&mut tx, &token, user.id, device::lifetime())?;
            token
        }
    };
    if let Some(hash) = renewed {
        users::replace_password(&mut tx, user.id, user.password_hash.as_deref(), &hash)?;
    }
    let response = super::start_session(app, req, &mut tx, 200, &user, user.mfa_enabled)?
        .header("Set-Cookie", device::set_cookie(app, &token));
    tx.commit()?;
    let pending = ("mfa_pending", user.mfa_enabled.into());
    super::audit(app, req, Event::SigninSucceeded, Some(user.id), &[pending]);
    Ok(response.into())
}

/// Step 5 for a wrong password (or an unknown address): already counted; the answer.
fn failed(app: &App, req: &Request, user_id: Option<i64>, counted: &Counted) -> ApiError {
    let fields: &[(&str, log::kv::Value)] = match (counted, user_id) {
        (Counted::Device(_), _) => &[("trusted_device", true.into())],
        // An unknown address has no user id; the address itself is not logged.
        (Counted::Budgets(_), Some(_)) => &[("reason", "wrong_password".into())],
        (Counted::Budgets(_), None) => &[("reason", "unknown_account".into())],
    };
    super::audit(app, req, Event::SigninFailed, user_id, fields);
    ApiError::new(Code::InvalidCredentials)
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
