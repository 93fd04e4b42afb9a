//! The change stream `GET /v1/events`: the handler (authentication, stream limit, subscription),
//! the subscriber hub, the PostgreSQL listener, leases and the per-stream writer thread.
//!
//! Data flows one way: `consoled_notify_change` (in the committing transaction) -> NOTIFY ->
//! listener (one connection per instance) -> hub (indexes) -> each stream's bounded queue ->
//! its thread -> the client. Control notifications (`s:`, `t:`, `u:`) end streams or refresh a
//! user's organizations.

pub mod hub;
pub mod leases;
pub mod listener;
pub mod signal;
mod stream;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::app::{App, Reply};
use crate::auth;
use crate::db::leases::Holder;
use crate::db::sessions::Session;
use crate::db::tokens::{self, ApiToken};
use crate::db::{self, leases as lease_rows, visibility};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::Request;
use crate::metrics::Metrics;

pub use hub::Hub;
use hub::{Scope, Subscription};
use leases::Lease;
pub use signal::{End, Signals};
pub use stream::{Outlet, Timing};

/// The first bytes of every stream: the reconnect delay, then `ready`.
pub const READY: &str = "retry: 3000\nevent: ready\ndata: {}\n\n";
pub const RESYNC: &str = "event: resync\ndata: {}\n\n";
pub const PING: &str = ": ping\n\n";

/// A change notification, as `consoled_notify_change` sends it and as clients receive it.
/// `project_id` and `org_id` are `null` when the resource has none (a `user`, an organization's
/// own project_id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: i64,
    pub op: String,
    #[serde(default)]
    pub project_id: Option<i64>,
    #[serde(default)]
    pub org_id: Option<i64>,
}

impl Change {
    /// The `change` event, formatted once and shared by every stream that gets it.
    pub fn event(&self) -> String {
        let data = serde_json::to_string(self).expect("a Change always serializes");
        format!("event: change\ndata: {data}\n\n")
    }
}

/// An authorised event stream, ready to run on its own thread once the response head is sent.
/// Dropping it (after `run`, or instead of it) unsubscribes and frees the stream slot.
pub struct StreamPlan {
    sub: Subscription,
    _lease: Lease,
    _share: Option<crate::shares::Ticket>,
    timing: Timing,
    metrics: Arc<Metrics>,
}

impl StreamPlan {
    fn new(app: &App, sub: Subscription, lease: Lease, share: crate::shares::Ticket) -> StreamPlan {
        app.metrics.streams_total.fetch_add(1, Ordering::Relaxed);
        app.metrics.streams_open.fetch_add(1, Ordering::Relaxed);
        StreamPlan {
            sub,
            _lease: lease,
            _share: Some(share),
            timing: Timing {
                ping: app.config.ping_interval,
                stall: app.config.stream_stall,
            },
            metrics: app.metrics.clone(),
        }
    }

    /// The stream's signals: how the server ends it (shutdown) or pokes it (socket events).
    pub fn signals(&self) -> Arc<Signals> {
        self.sub.signals.clone()
    }

    /// Runs the stream on the calling thread until something ends it; says why.
    pub fn run(self, out: &mut dyn Outlet) -> End {
        stream::run(&self.sub, self.timing, out)
    }
}

impl Drop for StreamPlan {
    fn drop(&mut self) {
        self.metrics.streams_open.fetch_sub(1, Ordering::Relaxed);
    }
}

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
    let share = admit(app, req)?;
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
    Ok(Reply::Stream(StreamPlan::new(app, sub, lease, share)))
}

/// Refuses a stream while this instance holds as many as it can (503), or while the client's
/// address holds its share of them (429), before any lease is taken. Concurrent requests can
/// pass the overall check by at most one per worker.
fn admit(app: &App, req: &Request) -> ApiResult<crate::shares::Ticket> {
    let open = app.metrics.streams_open.load(Ordering::Relaxed);
    if open >= app.capacity.max_streams as u64 {
        return Err(ApiError::new(Code::Unavailable).message(
            "This server has as many event streams open as it can hold; try again shortly.",
        ));
    }
    let ip = req
        .client_ip(&app.config.trusted_proxies)
        .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
    app.stream_shares.take(ip).ok_or_else(|| {
        ApiError::rate_limited(5).message(format!(
            "One client address may hold at most {} of this server's event streams; close one first.",
            app.stream_shares.limit()
        ))
    })
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
    let max = app.config.max_streams;
    let mut tx = c.transaction()?;
    let id = lease_rows::acquire(&mut tx, &book.instance_id, holder, max)?;
    tx.commit()?;
    match id {
        Some(id) => Ok(book.hold(id, holder)),
        None => Err(ApiError::new(Code::TooManyStreams).message(format!(
            "At most {max} event streams can be open at once for one user or API token; \
             close one first."
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_event_has_the_spec_fields_in_order() {
        let payload =
            r#"{"type" : "server", "id" : 7, "op" : "update", "project_id" : 3, "org_id" : null}"#;
        let change: Change = serde_json::from_str(payload).unwrap();
        assert_eq!(
            change.event(),
            "event: change\ndata: {\"type\":\"server\",\"id\":7,\"op\":\"update\",\"project_id\":3,\"org_id\":null}\n\n"
        );
    }
}
