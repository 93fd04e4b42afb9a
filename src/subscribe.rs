//! `GET /v1/events`: admits the stream (instance capacity, the client address's share, and the
//! per-principal limit on this instance when the credential is known here), then authenticates
//! the token or session and takes a lease (the per-principal limit across instances) in one
//! statement, and subscribes to the hub. The stream itself runs in the server,
//! on its connection's thread.
//!
//! Opening a stream costs at most two round trips to PostgreSQL: the pool's check of the
//! connection and `consoled_open_streams`, both shared with the streams opening at the same
//! moment (`events::openings`): a reconnect storm after a crash opens thousands at once (issue 24;
//! docs/events.md). More happen only when a control notification about the stream's principal
//! arrived meanwhile (`events::journal`).
//!
//! A request with `Last-Event-ID` resumes when this instance can tell every change after that
//! one (`events::history`): `ready` says `{"resumed":true}` and the changes the principal may see
//! now follow, from memory, with no statement more (issue 35). Otherwise it is answered as any
//! other: `ready`, and the client reloads.
//!
//! A refusal of an `EventSource` is answered so that it retries on its own (`http::refusal`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::admission::{Refusal, Slot, Ticket};
use crate::app::{App, Reply};
use crate::auth;
use crate::crypto::token_hash;
use crate::db::leases::{Credential, Holder, Opened};
use crate::db::{self, sessions, tokens, visibility};
use crate::error::{ApiError, ApiResult, Code};
use crate::events::history::{self, View};
use crate::events::journal::Mark;
use crate::events::{Msg, Scope, StreamPlan, Timing, READY};
use crate::http::{refusal, Request, Response};
use crate::tokens::secret::{self, Shape};

/// `GET /v1/events`.
pub fn get(app: &App, req: &Request) -> ApiResult<Reply> {
    match open(app, req) {
        Err(e) => match refused_stream(&e, req) {
            Some(response) => {
                app.metrics
                    .streams_refused_as_events
                    .fetch_add(1, Ordering::Relaxed);
                Ok(Reply::Response(response))
            }
            None => Err(e),
        },
        ok => ok,
    }
}

/// The refusals an `EventSource` must survive (capacity, share, per-principal limit) as an
/// `event: refused` stream, when the request accepts one.
fn refused_stream(e: &ApiError, req: &Request) -> Option<Response> {
    if !matches!(
        e.code,
        Code::TooManyStreams | Code::RateLimited | Code::Unavailable
    ) || e.more.log_detail.is_some()
    {
        // A database outage (a 503 with a detail for the log) is not a refusal of this stream.
        return None;
    }
    refusal::as_event_stream(
        e.code.status(),
        e.code.as_str(),
        &e.more.message,
        e.retry_after,
        req.header("accept"),
    )
}

fn open(app: &App, req: &Request) -> ApiResult<Reply> {
    let credential = credential(req)?;
    let resume = last_event_id(req);
    let bearer = matches!(credential, Credential::Token(_));
    let (slot, share) = admit(app, req)?;
    // One past the limit on this instance is refused here, without the database.
    app.stream_principals.check(credential.hash())?;
    let hash = credential.hash().to_vec();
    let book = &app.hub.leases;
    let max = app.config.streams_per_principal;
    let since = app.hub.journal.position();
    let opened = app.openings.open(credential)?;
    let (lease, holder, scope, orgs, remaining) = match opened {
        Opened::Token {
            lease,
            token_id,
            project_id,
            remaining,
        } => {
            let scope = Scope::Token {
                token_id,
                project_id,
            };
            (lease, Holder::Token(token_id), scope, None, remaining)
        }
        Opened::Session {
            lease,
            session_id,
            user_id,
            remaining,
            orgs,
        } => {
            let scope = Scope::Session {
                session_id,
                user_id,
                token_tag: sessions::token_tag(&hash),
            };
            (
                lease,
                Holder::User(user_id),
                scope,
                Some(orgs),
                Some(remaining),
            )
        }
        Opened::Inactive {
            lease,
            token_id,
            status,
        } => {
            // The lease taken for it goes at once.
            drop(book.hold(lease, Holder::Token(token_id)));
            return Err(inactive_organization(&status));
        }
        Opened::Unauthorized if bearer => return Err(unknown_token()),
        Opened::Unauthorized => return Err(ApiError::new(Code::Unauthorized)),
        Opened::MfaRequired => return Err(ApiError::new(Code::MfaRequired)),
        Opened::Full => return Err(Refusal::PrincipalStreams { limit: max }.into()),
    };
    let lease = book.hold(lease, holder);
    let principal = app.stream_principals.take(holder, &hash)?;
    let (sub, needs_orgs) = app.hub.subscribe(scope, app.config.stream_queue);
    let mut orgs = orgs;
    // A logout, revocation or membership change handled between the statement and the
    // subscription found no stream to end or reload: read again (rare).
    let touched = app.hub.journal.any_since(since, &marks(scope));
    if touched {
        let mut c = db::conn(&app.pool)?;
        let still_live = match scope {
            Scope::Token { token_id, .. } => tokens::is_live(&mut *c, token_id)?,
            // By the token too: a replaced token keeps the session's id.
            Scope::Session {
                session_id,
                token_tag,
                ..
            } => {
                visibility::live_sessions(&mut *c, &[session_id])?.get(&session_id)
                    == Some(&token_tag)
            }
        };
        if !still_live {
            // A token revoked meanwhile, or of an organization suspended meanwhile.
            return Err(if bearer {
                unknown_token()
            } else {
                ApiError::new(Code::Unauthorized)
            });
        }
        if let (Scope::Session { user_id, .. }, Some(_)) = (scope, needs_orgs) {
            orgs = visibility::orgs_of(&mut *c, &[user_id])?.remove(&user_id);
        }
    }
    let orgs = orgs.unwrap_or_default();
    if let (Scope::Session { user_id, .. }, Some(version)) = (scope, needs_orgs) {
        app.hub.set_orgs(user_id, &orgs, version);
    }
    // Its principal as the statement saw it is the principal now, unless something about it
    // happened since (then it reloads, as before).
    let missed = resume
        .filter(|_| !touched)
        .and_then(|after| {
            app.hub
                .replay(after, view(scope, &orgs), app.config.stream_queue)
        })
        .filter(|_| !app.hub.journal.any_since(since, &marks(scope)));
    let opening = opening(app, resume.is_some(), missed);
    // A session's or token's streams end when it expires (`events::keeper`).
    if let Some(remaining) = remaining {
        let remaining = Duration::from_secs_f64(remaining.max(0.0));
        match scope {
            Scope::Session { session_id, .. } => {
                app.hub.leases.watch_session(session_id, remaining)
            }
            Scope::Token { token_id, .. } => app.hub.leases.watch_token(token_id, remaining),
        }
    }
    let timing = Timing {
        ping: app.config.ping_interval,
        stall: app.config.stream_stall,
        direct: app.config.stream_direct,
    };
    let plan = StreamPlan::new(
        sub,
        lease,
        (slot, share, principal),
        timing,
        opening,
        app.metrics.clone(),
    );
    Ok(Reply::Stream(plan))
}

/// `Last-Event-ID`, when it can be one of ours (`history::MAX_ID`); anything else is answered
/// as a request without it.
fn last_event_id(req: &Request) -> Option<&str> {
    req.header("last-event-id")
        .map(str::trim)
        .filter(|id| !id.is_empty() && id.len() <= history::MAX_ID)
}

/// What the stream's principal may see now.
fn view(scope: Scope, orgs: &[i64]) -> View<'_> {
    match scope {
        Scope::Token { project_id, .. } => View::Project(project_id),
        Scope::Session { user_id, .. } => View::User { id: user_id, orgs },
    }
}

/// The stream's first events: `ready` resumed and the changes it missed, or `ready` alone.
fn opening(app: &App, asked: bool, missed: Option<Vec<Msg>>) -> Vec<Msg> {
    let counter = match (asked, &missed) {
        (false, _) => None,
        (true, Some(_)) => Some(&app.metrics.streams_resumed),
        (true, None) => Some(&app.metrics.streams_not_resumed),
    };
    if let Some(counter) = counter {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    match missed {
        Some(missed) => std::iter::once(history::RESUMED.into())
            .chain(missed)
            .collect(),
        None => vec![READY.into()],
    }
}

fn marks(scope: Scope) -> [Mark; 2] {
    match scope {
        Scope::Token { token_id, .. } => [Mark::Token(token_id), Mark::Token(token_id)],
        Scope::Session {
            session_id,
            user_id,
            ..
        } => [Mark::Session(session_id), Mark::User(user_id)],
    }
}

/// Refuses a stream while this instance holds as many as it can (503), or while the client
/// holds its share of them (429), before the database is asked. Both are exact: a place is
/// taken, not a count looked at.
fn admit(app: &App, req: &Request) -> Result<(Slot, Ticket), Refusal> {
    let slot = app.stream_slots.take().ok_or(Refusal::StreamsFull)?;
    let client = req.client(&app.config.client_source);
    let share = app.stream_shares.take(client).ok_or(Refusal::StreamShare {
        limit: app.stream_shares.limit(),
    })?;
    Ok((slot, share))
}

fn unknown_token() -> ApiError {
    ApiError::new(Code::Unauthorized).message("Unknown or revoked API token.")
}

/// A token of a suspended or closed organization: refused while the organization is so
/// (docs/API.md, "Organizations and projects"), with the reason.
fn inactive_organization(status: &str) -> ApiError {
    match crate::access::Status::parse(status) {
        Some(status) => crate::access::Refusal::Status(status).into_error(),
        None => unknown_token(),
    }
}

/// A bearer API token, else the session cookie, by the hash the database keeps; what cannot be
/// one of ours (a token of neither form, or whose checksum fails) is refused without a query
/// (401 `unauthorized`).
fn credential(req: &Request) -> ApiResult<Credential> {
    if req.header("authorization").is_none() {
        let token = auth::session_token(req).ok_or_else(|| ApiError::new(Code::Unauthorized))?;
        return Ok(Credential::Session(token_hash(&token)));
    }
    let secret = req
        .bearer()
        .filter(|s| secret::shape(s) != Shape::Malformed)
        .ok_or_else(unknown_token)?;
    Ok(Credential::Token(token_hash(secret)))
}
