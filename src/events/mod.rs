//! The change stream's core: the subscriber hub, the PostgreSQL listener, leases and the body of
//! each stream. It takes narrow handles (`Core`), never the application: the HTTP handler that
//! opens a stream is `crate::subscribe`, and the server runs the stream.
//!
//! Data flows one way: `consoled_notify_change` (in the committing transaction) -> NOTIFY ->
//! listener (one connection per instance) -> hub (indexes) -> each stream's bounded queue ->
//! its thread -> the client. Control notifications (`s:`, `t:`, `u:`) end streams or refresh a
//! user's organizations.

pub mod hub;
pub mod journal;
pub mod leases;
pub mod listener;
pub mod signal;
mod stream;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use std::sync::atomic::AtomicBool;

use crate::db;
use crate::http::client::Client;
use crate::metrics::Metrics;
use crate::shares::Ticket;

pub use hub::{Hub, Scope, Subscription};
pub use leases::Lease;
pub use signal::{End, Signals};
pub use stream::{Direct, Outlet, Sent, Timing};

/// The handles the listener and the lease keeper need, and no more.
#[derive(Clone)]
pub struct Core {
    pub hub: Arc<Hub>,
    pub pool: db::Pool,
    pub metrics: Arc<Metrics>,
    pub stopping: Arc<AtomicBool>,
    /// Settings of the listener's own connection (never a pooled one).
    pub listen_db: postgres::Config,
    pub session_idle: Duration,
}

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
    _share: Ticket<Client>,
    timing: Timing,
    metrics: Arc<Metrics>,
}

impl StreamPlan {
    /// A stream for `sub`, holding its lease and its client's share until it drops.
    pub fn new(
        sub: Subscription,
        lease: Lease,
        share: Ticket<Client>,
        timing: Timing,
        metrics: Arc<Metrics>,
    ) -> StreamPlan {
        metrics.streams_total.fetch_add(1, Ordering::Relaxed);
        metrics.streams_open.fetch_add(1, Ordering::Relaxed);
        StreamPlan {
            sub,
            _lease: lease,
            _share: share,
            timing,
            metrics,
        }
    }

    /// The stream's signals: how the server ends it (shutdown) or pokes it (socket events).
    pub fn signals(&self) -> Arc<Signals> {
        self.sub.signals.clone()
    }

    /// How long the stream may be unable to send before it ends.
    pub fn stall(&self) -> Duration {
        self.timing.stall
    }

    /// Whether the hub may write events itself while the stream's thread sleeps
    /// (`CONSOLED_STREAM_DIRECT`).
    pub fn direct(&self) -> bool {
        self.timing.direct
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
