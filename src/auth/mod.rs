//! Accounts and sessions under /auth: one file per flow. This module holds what they share:
//! authentication of a request (called first by every protected handler), the session cookie,
//! and the Auth state body.

pub mod account;
mod attempt;
pub mod csrf;
pub mod device;
pub mod email;
pub mod email_change;
mod factor;
pub mod login;
pub mod mfa;
pub mod oauth;
pub mod own_sessions;
pub mod password;
pub mod passwords;
pub mod reauth;
pub mod signup;
pub mod signup_policy;

use crate::db::Sql;
use serde_json::{json, Value};

use crate::app::App;
use crate::db::sessions::{self, Session};
use crate::db::{self, devices, identities, orgs, outbox, recovery_codes, totp, users};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::cookies::SetCookie;
use crate::http::{Request, Response};

pub const SESSION_COOKIE: &str = "svc_session";

pub use crate::logging::security::Event;

/// Logs a security event of `req`'s client on `user_id`'s account (`logging::security`), with
/// the event's own `fields` (never a secret). Every handler that signs in, fails a check, or
/// changes a credential, the second factor or a session calls it.
pub fn audit(
    app: &App,
    req: &Request,
    event: Event,
    user_id: Option<i64>,
    fields: &[(&str, log::kv::Value)],
) {
    let client = req.client_ip(&app.config.client_source);
    crate::logging::security::event(event, client, user_id, fields);
}

/// The screen of the routes that hash a password (sign-up, password reset): refused from
/// memory, before a worker, when the client would get no place in the fair hash admission.
pub fn hash_screen(app: &App, req: &Request) -> ApiResult<()> {
    app.hasher
        .would_admit(req.client(&app.config.client_source))
}

/// The session of a request that must be fully authenticated: 401 `unauthorized` without one,
/// 401 `mfa_required` while it still needs its second factor.
pub fn require_session(app: &App, req: &Request) -> ApiResult<Session> {
    let session = any_session(app, req)?;
    if session.mfa_pending {
        return Err(ApiError::new(Code::MfaRequired));
    }
    Ok(session)
}

/// The session of a request, pending or full; marks a full session as used.
pub fn any_session(app: &App, req: &Request) -> ApiResult<Session> {
    let token = session_token(req).ok_or_else(|| ApiError::new(Code::Unauthorized))?;
    let mut c = db::conn(&app.pool)?;
    let session = sessions::find_valid(&mut *c, &token, app.config.session_idle)?
        .ok_or_else(|| ApiError::new(Code::Unauthorized))?;
    // Writing on every request would make every read a write; a fraction of the idle timeout is
    // precise enough.
    let granularity = (app.config.session_idle.as_secs_f64() / 20.0).min(60.0);
    if !session.mfa_pending && session.since_seen > granularity {
        sessions::touch(&mut *c, session.id, &seen(app, req))?;
    }
    Ok(session)
}

/// Where a request comes from, as the owner's list of sessions shows it: the client's full
/// address (not the /64 that limits count by) and a short description of its user agent.
pub fn seen(app: &App, req: &Request) -> sessions::UsedFrom {
    let ip = req.client_ip(&app.config.client_source);
    sessions::UsedFrom {
        address: ip.map(|ip| ip.to_canonical().to_string()),
        agent: crate::http::user_agent::describe(req.header("user-agent")),
    }
}

/// Whether the session of `token` no longer exists (ended, expired, never was). A database error
/// answers false: the caller then refuses, as it would without the question.
pub fn session_ended(app: &App, token: &str) -> bool {
    let Ok(mut c) = db::conn(&app.pool) else {
        return false;
    };
    matches!(
        sessions::find_valid(&mut *c, token, app.config.session_idle),
        Ok(None)
    )
}

/// The cookie's token if it has the shape of one of ours (saves a query for garbage).
pub fn session_token(req: &Request) -> Option<String> {
    req.cookie(SESSION_COOKIE).filter(|t| is_token_shaped(t))
}

pub fn is_token_shaped(t: &str) -> bool {
    t.len() == 43
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

pub fn session_cookie(app: &App, token: &str, max_age: u64) -> String {
    SetCookie {
        name: SESSION_COOKIE,
        value: token,
        http_only: true,
        same_site: "Lax",
        secure: app.config.cookie_secure,
        path: "/",
        max_age: Some(max_age),
    }
    .render()
}

pub fn clear_session_cookie(app: &App) -> String {
    session_cookie(app, "", 0)
}

/// Gives `session` a new token inside `c` (the old one stops working, and the event streams
/// opened with it end: `sessions::rotate_token`); the `Set-Cookie` value that carries it. Every
/// action that ends the user's other sessions calls it: a stolen copy of this session's cookie
/// is one of the others (issue 37, item 5).
pub fn renew_token(app: &App, c: &mut impl Sql, session: &Session) -> ApiResult<String> {
    let (token, max_age) =
        sessions::rotate_token(c, session.id)?.ok_or_else(|| ApiError::new(Code::Unauthorized))?;
    Ok(session_cookie(app, &token, max_age))
}

/// The Auth state (docs/API.md, "Bodies").
pub fn auth_state(c: &mut impl Sql, user_id: i64, mfa_required: bool) -> ApiResult<Value> {
    let user = session_user(c, user_id)?;
    auth_state_of(c, &user, mfa_required)
}

/// The user of a session this request read. Deleting a user deletes its sessions, so the user
/// is missing only when the account was deleted (`DELETE /auth/account`, `consoled user
/// delete`) while the request ran: 401, gone as the session is, wherever a handler reads a
/// session's user.
pub fn session_user(c: &mut impl Sql, user_id: i64) -> ApiResult<users::User> {
    users::find(c, user_id)?.ok_or_else(|| ApiError::new(Code::Unauthorized))
}

/// Auth state of a user already read in this request.
fn auth_state_of(c: &mut impl Sql, user: &users::User, mfa_required: bool) -> ApiResult<Value> {
    let organizations: Vec<Value> = orgs::for_user(c, user.id)?
        .iter()
        .map(|o| o.to_json())
        .collect();
    Ok(json!({
        "user": user.to_json(),
        "organizations": organizations,
        "mfa_required": mfa_required,
    }))
}

/// Starts a session for a user inside `c` (a transaction the caller commits) and builds the
/// response: Auth state with the new cookie. A user with a second factor gets a pending session.
pub fn start_session(
    app: &App,
    req: &Request,
    c: &mut impl Sql,
    status: u16,
    user: &users::User,
    pending: bool,
) -> ApiResult<Response> {
    let cookie = create_session_cookie(app, req, c, user.id, pending)?;
    let body = auth_state_of(c, user, pending)?;
    Ok(Response::json(status, &body).header("Set-Cookie", cookie))
}

/// Creates a session (full, or pending its second factor) inside `c` and returns the
/// `Set-Cookie` value that carries it; for responses other than Auth state (the OAuth redirect).
///
/// Every sign-in (password, second factor, provider) ends here, so this is where a disabled
/// account is refused: 403 `account_disabled`, only after the credential was proven, so that
/// the answer tells nothing to whoever lacks it.
pub fn create_session_cookie(
    app: &App,
    req: &Request,
    c: &mut impl Sql,
    user_id: i64,
    pending: bool,
) -> ApiResult<String> {
    let lifetime = if pending {
        app.config.mfa_pending
    } else {
        app.config.session_max
    };
    let Some((token, _)) = sessions::create(c, user_id, pending, lifetime, &seen(app, req))? else {
        let route = [("route", req.path.as_str().into())];
        audit(app, req, Event::SigninRefused, Some(user_id), &route);
        return Err(ApiError::new(Code::AccountDisabled));
    };
    Ok(session_cookie(app, &token, lifetime.as_secs()))
}

/// The owner has just proven the address (a mailed verification or reset link, or a provider
/// that has verified it): marks it verified. If it was unproven until now, every external
/// identity linked meanwhile (except `keep`, the one proving it now) may be a stranger's claim
/// on the address, so each is removed and, if any was, every session of the user ends (and
/// with them their event streams). Returns the number of links removed.
pub fn prove_address(
    c: &mut impl Sql,
    user_id: i64,
    keep: Option<(&str, &str)>,
) -> Result<u64, postgres::Error> {
    if !users::mark_verified(c, user_id)? {
        return Ok(0);
    }
    remove_unproven_links(c, user_id, keep)
}

fn remove_unproven_links(
    c: &mut impl Sql,
    user_id: i64,
    keep: Option<(&str, &str)>,
) -> Result<u64, postgres::Error> {
    let removed = identities::delete_for_user(c, user_id, keep)?;
    if removed > 0 {
        db::sessions::delete_for_user(c, user_id, None)?;
        log::info!("address proven user_id={user_id}: removed {removed} unproven link(s)");
    }
    Ok(removed)
}

/// The address's owner takes the account over: a reset link, or a provider that has verified
/// the address signing in to an account whose address was never proven. Proves the address
/// (`prove_address`), and removes what may be a stranger's who signed up with it (issue 37,
/// item 1): a second factor enabled before the address was proven (even if a verification link
/// proved it since: the owner may have clicked the one the stranger's sign-up sent), with its
/// recovery codes, and then every device cookie of the account. The owner is mailed when a
/// factor goes. The caller ends the sessions and sets or removes the password. Returns whether
/// a factor was removed.
pub fn take_over_address(
    c: &mut impl Sql,
    user_id: i64,
    keep: Option<(&str, &str)>,
) -> Result<bool, postgres::Error> {
    let first = users::mark_verified(c, user_id)?;
    if first {
        remove_unproven_links(c, user_id, keep)?;
    }
    let factor = totp::remove_unproven(c, user_id)?;
    if factor {
        recovery_codes::delete_for_user(c, user_id)?;
        if let Some(user) = users::find(c, user_id)? {
            outbox::enqueue(c, "mfa_removed", user_id, &user.email)?;
        }
    }
    if first || factor {
        let devices = devices::delete_for_user(c, user_id)?;
        log::info!(
            "address taken over user_id={user_id}: second factor removed={factor}, \
             {devices} device cookie(s) removed"
        );
    }
    Ok(factor)
}
