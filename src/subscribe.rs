//! `GET /v1/events`: authenticates the token or session, admits the stream (instance capacity,
//! the client address's share), takes a lease (the per-principal limit across instances) and
//! subscribes to the hub. The stream itself runs in the server, on its connection's thread.

use std::time::Duration;

use crate::admission::Ticket;
use crate::admission::{Refusal, Slot};
use crate::app::{App, Reply};
use crate::auth;
use crate::db::leases::{self as lease_rows, Holder};
use crate::db::sessions::Session;
use crate::db::tokens::{self, ApiToken};
use crate::db::{self, visibility};
use crate::error::{ApiError, ApiResult, Code};
use crate::events::{Lease, Scope, StreamPlan, Timing};
use crate::http::Request;

/// Who opened a stream.
enum Who {
    Token(ApiToken),
    Session(Session),
}

impl Who {
    fn holder(&self) -> Holder {
        match self {
            Who::Token(t) => Holder::Token(t.id),
            Who::Session(s) => Holder::User(s.user_id),
        }
    }

    fn scope(&self) -> Scope {
        match self {
            Who::Token(t) => Scope::Token {
                token_id: t.id,
                project_id: t.project_id,
            },
            Who::Session(s) => Scope::Session {
                session_id: s.id,
                user_id: s.user_id,
            },
        }
    }
}

/// `GET /v1/events`.
pub fn get(app: &App, req: &Request) -> ApiResult<Reply> {
    let who = authenticate(app, req)?;
    let (slot, share) = admit(app, req)?;
    let mut c = db::conn(&app.pool)?;
    let lease = take_lease(app, &mut c, who.holder())?;
    let (sub, needs_orgs) = app.hub.subscribe(who.scope(), app.config.stream_queue);
    // Checked again after subscribing: a logout or revocation announced between authentication
    // and subscription found no stream to end.
    let still_live = match &who {
        Who::Token(t) => tokens::is_live(&mut *c, t.id)?,
        Who::Session(s) => !visibility::live_sessions(&mut *c, &[s.id])?.is_empty(),
    };
    if !still_live {
        return Err(ApiError::new(Code::Unauthorized));
    }
    if let (Who::Session(s), Some(version)) = (&who, needs_orgs) {
        let orgs = visibility::orgs_of(&mut *c, &[s.user_id])?.remove(&s.user_id);
        app.hub
            .set_orgs(s.user_id, &orgs.unwrap_or_default(), version);
    }
    drop(c);
    if let Who::Session(s) = &who {
        let remaining = Duration::from_secs_f64(s.remaining.max(0.0));
        app.hub.leases.watch_session(s.id, remaining);
    }
    let timing = Timing {
        ping: app.config.ping_interval,
        stall: app.config.stream_stall,
        direct: app.config.stream_direct,
    };
    let plan = StreamPlan::new(sub, lease, (slot, share), timing, app.metrics.clone());
    Ok(Reply::Stream(plan))
}

/// Refuses a stream while this instance holds as many as it can (503), or while the client
/// holds its share of them (429), before any lease is taken. Both are exact: a place is taken,
/// not a count looked at.
fn admit(app: &App, req: &Request) -> Result<(Slot, Ticket), Refusal> {
    let slot = app.stream_slots.take().ok_or(Refusal::StreamsFull)?;
    let client = req.client(&app.config.client_source);
    let share = app.stream_shares.take(client).ok_or(Refusal::StreamShare {
        limit: app.stream_shares.limit(),
    })?;
    Ok((slot, share))
}

/// A bearer API token, else the session cookie (401 `unauthorized` / `mfa_required`).
fn authenticate(app: &App, req: &Request) -> ApiResult<Who> {
    if req.header("authorization").is_none() {
        return auth::require_session(app, req).map(Who::Session);
    }
    let unauthorized =
        || ApiError::new(Code::Unauthorized).message("Unknown or revoked API token.");
    let secret = req
        .bearer()
        .filter(|s| s.starts_with(tokens::PREFIX))
        .ok_or_else(unauthorized)?;
    let mut c = db::conn(&app.pool)?;
    let token = tokens::find(&mut *c, secret)?.ok_or_else(unauthorized)?;
    Ok(Who::Token(token))
}

fn take_lease(app: &App, c: &mut db::Conn, holder: Holder) -> ApiResult<Lease> {
    let book = &app.hub.leases;
    let max = app.config.streams_per_principal;
    let mut tx = c.transaction()?;
    let id = lease_rows::acquire(&mut tx, &book.instance_id, holder, max)?;
    tx.commit()?;
    match id {
        Some(id) => Ok(book.hold(id, holder)),
        None => Err(Refusal::PrincipalStreams { limit: max }.into()),
    }
}
