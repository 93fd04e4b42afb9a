//! Who is calling: the session cookie or the API token a request carries, checked, and what the
//! console's other services are told about it (`GET /auth/check`, `check`). The one place that
//! turns either credential into a `Caller`.
//!
//! A credential checked once is remembered (`cache`), so that checking it again costs no
//! database statement; what may have changed about it arrives through the listener, which
//! forgets it on every instance within a second. Each use is noted in batches (`seen`).

mod cache;
pub mod check;
pub mod seen;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use cache::Checked;
pub use seen::LastSeen;

use crate::access::Role;
use crate::app::App;
use crate::auth;
use crate::crypto::sha256;
use crate::db::{self, callers, tokens};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::Request;
use crate::tokens::secret::{self, Shape};

/// The caller's user (a token's maker; none for a token the command line made).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerUser {
    pub id: i64,
    pub email: String,
}

/// How the caller signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum By {
    Session {
        /// The row's id (what `s:` names); never shown.
        id: i64,
        /// The id its owner sees (`GET /auth/sessions`).
        public_id: String,
        /// Unix seconds of the sign-in that created it (password, second factor or provider).
        auth_time: i64,
        /// The user's active organizations and role in each, by id.
        orgs: Vec<(i64, Role)>,
    },
    Token {
        id: i64,
        project_id: i64,
        scope: tokens::TokenScope,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user: Option<CallerUser>,
    pub by: By,
}

/// The credential a request presents, in the form that is worth looking up.
enum Presented<'a> {
    Token(&'a str),
    Session(String),
}

/// An `Authorization` header must carry a bearer token of ours; without one, the session
/// cookie. Anything else is 401 before any lookup.
fn presented(req: &Request) -> ApiResult<Presented<'_>> {
    if req.header("authorization").is_some() {
        return req
            .bearer()
            .filter(|s| secret::shape(s) != Shape::Malformed)
            .map(Presented::Token)
            .ok_or_else(unknown_token);
    }
    auth::session_token(req)
        .map(Presented::Session)
        .ok_or_else(|| ApiError::new(Code::Unauthorized))
}

fn unknown_token() -> ApiError {
    ApiError::new(Code::Unauthorized).message("Unknown, revoked or expired API token.")
}

/// The caller of a request: from memory when this instance checked the credential before and
/// heard nothing since, else from the database (and then remembered). 401 `unauthorized` for no,
/// an unknown, expired or revoked credential; 401 `mfa_required` for a pending session.
pub fn identify(app: &App, req: &Request) -> ApiResult<Arc<Caller>> {
    let presented = presented(req)?;
    let key = sha256(match &presented {
        Presented::Token(s) => s.as_bytes(),
        Presented::Session(s) => s.as_bytes(),
    });
    if let Some(hit) = app.checked.get(&key, Instant::now()) {
        if hit.note {
            note(app, req, &hit.caller);
        }
        return Ok(hit.caller);
    }
    app.checked.misses.fetch_add(1, Ordering::Relaxed);
    let stamp = app.checked.stamp(&app.hub.journal);
    let (caller, life, stale) = match presented {
        Presented::Token(secret) => from_token(app, secret)?,
        Presented::Session(token) => from_session(app, &token)?,
    };
    let caller = Arc::new(caller);
    if stale {
        note(app, req, &caller);
    }
    app.checked
        .put(key, caller.clone(), life, stamp, &app.hub.journal);
    Ok(caller)
}

/// A token's caller, how long it may be remembered, and whether its use is to be noted.
fn from_token(app: &App, secret: &str) -> ApiResult<(Caller, cache::Life, bool)> {
    let found = {
        let mut c = db::conn(&app.pool)?;
        tokens::find(&mut *c, secret)?.ok_or_else(unknown_token)?
    };
    let caller = Caller {
        user: found.created_by.map(|m| CallerUser {
            id: m.id,
            email: m.email,
        }),
        by: By::Token {
            id: found.id,
            project_id: found.project_id,
            scope: found.scope,
        },
    };
    let life = cache::Life {
        ends_in: found
            .expires_in
            .map(|s| Duration::from_secs_f64(s.max(0.0))),
        idle: None,
    };
    Ok((caller, life, true))
}

fn from_session(app: &App, token: &str) -> ApiResult<(Caller, cache::Life, bool)> {
    let idle = app.config.session_idle;
    let found = {
        let mut c = db::conn(&app.pool)?;
        callers::session(&mut *c, token, idle)?.ok_or_else(|| ApiError::new(Code::Unauthorized))?
    };
    if found.mfa_pending {
        return Err(ApiError::new(Code::MfaRequired));
    }
    let since_seen = Duration::from_secs_f64(found.since_seen.max(0.0));
    let caller = Caller {
        user: Some(CallerUser {
            id: found.user_id,
            email: found.email,
        }),
        by: By::Session {
            id: found.id,
            public_id: found.public_id,
            auth_time: found.auth_time,
            orgs: found.orgs,
        },
    };
    let life = cache::Life {
        ends_in: Some(Duration::from_secs_f64(found.ends_in.max(0.0))),
        idle: Some((idle, since_seen)),
    };
    Ok((caller, life, since_seen >= app.checked.note_every()))
}

/// Hands a use to the batch that writes last-seen times.
fn note(app: &App, req: &Request, caller: &Caller) {
    match caller.by {
        By::Session { id, .. } => app.seen.session(id, auth::seen(app, req)),
        By::Token { id, .. } => app.seen.token(id),
    }
}
