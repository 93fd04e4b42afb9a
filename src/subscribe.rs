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

use crate::admission::{Refusal, SharePlace, StreamPlace};
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
    let (place, share) = admit(app, req)?;
    // One past the limit on this instance is refused here, without the database.
    app.stream_principals.admit_known(credential.hash())?;
    let hash = credential.hash().to_vec();
    let since = app.hub.journal.position();
    let opened = Authenticated::of(app.openings.open(credential)?, bearer, &hash, app)?;
    let lease = app.hub.leases.hold(opened.lease, opened.holder);
    let principal = app.stream_principals.admit(opened.holder, &hash)?;
    let (sub, needs_orgs) = app.hub.subscribe(opened.scope, app.config.stream_queue);
    let scope = opened.scope;
    let untouched = opened.follow(app, since, needs_orgs)?;
    let opening = opening(app, resume, scope, untouched.as_deref(), since);
    let timing = Timing {
        ping: app.config.ping_interval,
        stall: app.config.stream_stall,
        direct: app.config.stream_direct,
    };
    let admitted = (place, share, principal);
    let plan = StreamPlan::new(sub, lease, admitted, timing, opening, app.metrics.clone());
    Ok(Reply::Stream(plan))
}

/// `Last-Event-ID`, when it can be one of ours (`history::MAX_ID`); anything else is answered
/// as a request without it.
fn last_event_id(req: &Request) -> Option<&str> {
    req.header("last-event-id")
        .map(str::trim)
        .filter(|id| !id.is_empty() && id.len() <= history::MAX_ID)
}

/// The stream's first events: `ready` resumed and the changes it missed, or `ready` alone.
/// It resumes from `after` when its principal is as its statement saw it (`untouched`: a
/// session's organizations) and the history tells every change since (`Hub::replay`, read once
/// the stream is subscribed and its organizations are set); the journal is asked once more
/// afterwards, since a change about the principal before the read makes that view stale.
fn opening(
    app: &App,
    after: Option<&str>,
    scope: Scope,
    untouched: Option<&[i64]>,
    since: u64,
) -> Vec<Msg> {
    let Some(after) = after else {
        return vec![READY.into()];
    };
    let missed = untouched
        .and_then(|orgs| {
            app.hub
                .replay(after, view(scope, orgs), app.config.stream_queue)
        })
        .filter(|_| !app.hub.journal.any_since(since, &marks(scope)));
    let counter = match missed {
        Some(_) => &app.metrics.streams_resumed,
        None => &app.metrics.streams_not_resumed,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    match missed {
        Some(missed) => std::iter::once(history::RESUMED.into())
            .chain(missed)
            .collect(),
        None => vec![READY.into()],
    }
}

/// What the stream's principal may see now.
fn view(scope: Scope, orgs: &[i64]) -> View<'_> {
    match scope {
        Scope::Token { project_id, .. } => View::Project(project_id),
        Scope::Session { user_id, .. } => View::User { id: user_id, orgs },
    }
}

/// A stream's credential, authenticated and holding a lease (`consoled_open_streams`).
struct Authenticated {
    lease: i64,
    holder: Holder,
    scope: Scope,
    /// A session's user's organizations, as the statement read them.
    orgs: Option<Vec<i64>>,
    /// Seconds until a session ends unless used again, or until a token expires (`None`: never).
    remaining: Option<f64>,
}

impl Authenticated {
    /// What the opening statement said, or its refusal.
    fn of(opened: Opened, bearer: bool, hash: &[u8], app: &App) -> ApiResult<Authenticated> {
        match opened {
            Opened::Token {
                lease,
                token_id,
                project_id,
                remaining,
            } => Ok(Authenticated {
                lease,
                holder: Holder::Token(token_id),
                scope: Scope::Token {
                    token_id,
                    project_id,
                },
                orgs: None,
                remaining,
            }),
            Opened::Session {
                lease,
                session_id,
                user_id,
                remaining,
                orgs,
            } => Ok(Authenticated {
                lease,
                holder: Holder::User(user_id),
                scope: Scope::Session {
                    session_id,
                    user_id,
                    token_tag: sessions::token_tag(hash),
                },
                orgs: Some(orgs),
                remaining: Some(remaining),
            }),
            refused => Err(refusal(refused, bearer, app)),
        }
    }

    /// Once subscribed: what changed since the statement (read again, rarely), the session's
    /// organizations for the hub, and its end for the lease keeper to watch. Says what the
    /// principal may see when nothing about it happened since the statement (a session's
    /// organizations; a token: none), for a stream that resumes; `None` when something did.
    fn follow(self, app: &App, since: u64, needs_orgs: Option<u64>) -> ApiResult<Option<Vec<i64>>> {
        let mut orgs = self.orgs;
        // A logout, revocation or membership change handled between the statement and the
        // subscription found no stream to end or reload: read again (rare).
        let touched = app.hub.journal.any_since(since, &marks(self.scope));
        if touched {
            if let Some(now) = read_again(app, self.scope, needs_orgs.is_some())? {
                orgs = now;
            }
        }
        let orgs = orgs.unwrap_or_default();
        if let (Scope::Session { user_id, .. }, Some(version)) = (self.scope, needs_orgs) {
            app.hub.set_orgs(user_id, &orgs, version);
        }
        // A session's or token's streams end when it expires (`events::keeper`).
        if let Some(remaining) = self.remaining {
            let remaining = Duration::from_secs_f64(remaining.max(0.0));
            match self.scope {
                Scope::Session { session_id, .. } => {
                    app.hub.leases.watch_session(session_id, remaining)
                }
                Scope::Token { token_id, .. } => app.hub.leases.watch_token(token_id, remaining),
            }
        }
        Ok((!touched).then_some(orgs))
    }
}

/// Whether the stream's session or token is still live (401 if not) and, when the hub needs
/// them (`orgs`), its user's organizations now (`Some`; within it, `None` for none).
fn read_again(app: &App, scope: Scope, orgs: bool) -> ApiResult<Option<Option<Vec<i64>>>> {
    let mut c = db::conn(&app.pool)?;
    let still_live = match scope {
        Scope::Token { token_id, .. } => tokens::is_live(&mut *c, token_id)?,
        // By the token too: a replaced token keeps the session's id.
        Scope::Session {
            session_id,
            token_tag,
            ..
        } => {
            visibility::live_sessions(&mut *c, &[session_id])?.get(&session_id) == Some(&token_tag)
        }
    };
    if !still_live {
        // A token revoked meanwhile, or of an organization suspended meanwhile.
        return Err(match scope {
            Scope::Token { .. } => unknown_token(),
            Scope::Session { .. } => ApiError::new(Code::Unauthorized),
        });
    }
    match scope {
        Scope::Session { user_id, .. } if orgs => Ok(Some(
            visibility::orgs_of(&mut *c, &[user_id])?.remove(&user_id),
        )),
        _ => Ok(None),
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
fn admit(app: &App, req: &Request) -> Result<(StreamPlace, SharePlace), Refusal> {
    let place = app.stream_places.admit()?;
    let client = req.client(&app.config.client_source);
    let share = app
        .stream_shares
        .admit(client)
        .ok_or_else(|| Refusal::StreamShare {
            limit: app.stream_shares.limit(),
        })?;
    Ok((place, share))
}

/// Why the opening statement opened no stream.
fn refusal(refused: Opened, bearer: bool, app: &App) -> ApiError {
    match refused {
        Opened::Inactive {
            lease,
            token_id,
            status,
        } => {
            // The lease taken for it goes at once.
            drop(app.hub.leases.hold(lease, Holder::Token(token_id)));
            inactive_organization(&status)
        }
        Opened::Unauthorized if bearer => unknown_token(),
        Opened::Unauthorized => ApiError::new(Code::Unauthorized),
        Opened::MfaRequired => ApiError::new(Code::MfaRequired),
        Opened::Full => Refusal::PrincipalStreams {
            limit: app.config.streams_per_principal,
        }
        .into(),
        // `Authenticated::of` takes these itself.
        Opened::Token { .. } | Opened::Session { .. } => {
            ApiError::internal("an opened stream taken for a refusal")
        }
    }
}

fn unknown_token() -> ApiError {
    ApiError::new(Code::Unauthorized).message("Unknown or revoked API token.")
}

/// A token of a suspended or closed organization: refused while the organization is so
/// (docs/API.md, "Organizations and projects"), with the reason.
fn inactive_organization(status: &str) -> ApiError {
    match crate::access::Status::parse(status) {
        Some(status) => crate::access::Forbidden::Status(status).into_error(),
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
