//! The change stream's core: the subscriber hub, the PostgreSQL listener, leases and the body of
//! each stream. Its threads take narrow handles (`Upkeep`), never the application: the HTTP
//! handler that opens a stream is `crate::subscribe`, and the server runs the stream.
//!
//! Data flows one way: `consoled_notify_change` (in the committing transaction) -> NOTIFY ->
//! listener (one connection per instance) -> hub (indexes) -> each stream's bounded queue ->
//! its thread -> the client. Control notifications (`s:`, `t:`, `u:`) end streams or refresh a
//! user's organizations.

mod change;
mod delivery;
mod fanout;
mod handles;
pub mod history;
pub mod hub;
pub mod journal;
pub mod keeper;
pub mod leases;
pub mod listener;
pub mod openings;
pub mod stream;
#[cfg(test)]
mod stream_tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::admission::{PrincipalPlace, SharePlace, StreamPlace};
use crate::metrics::Metrics;

pub use change::Change;
pub use handles::Upkeep;
pub use hub::{Hub, Scope, Subscription};
pub use leases::Lease;
pub use openings::{OpeningSettings, Openings};
pub use stream::{
    Direct, End, Msg, Outlet, Sent, Signals, StreamSocket, Timing, Watcher, PING, READY, RESYNC,
};

/// An authorised event stream, ready to run on its own thread once the response head is sent.
/// Dropping it (after `run`, or instead of it) unsubscribes and frees the stream's place (the
/// one count of open streams: `consoled_streams_open` reads it).
pub struct StreamPlan {
    sub: Subscription,
    _lease: Lease,
    /// The instance's stream place, the client's share and the principal's place here, held
    /// while the stream lives.
    _admitted: (StreamPlace, SharePlace, PrincipalPlace),
    timing: Timing,
    /// The first events: `READY`, or `history::RESUMED` and the changes missed.
    opening: Vec<Msg>,
}

impl StreamPlan {
    /// A stream for `sub` that starts with `opening`, holding its lease, its places and its
    /// client's share until it drops.
    pub fn new(
        sub: Subscription,
        lease: Lease,
        admitted: (StreamPlace, SharePlace, PrincipalPlace),
        timing: Timing,
        opening: Vec<Msg>,
        metrics: Arc<Metrics>,
    ) -> StreamPlan {
        metrics.streams_total.fetch_add(1, Ordering::Relaxed);
        StreamPlan {
            sub,
            _lease: lease,
            _admitted: admitted,
            timing,
            opening,
        }
    }

    /// Runs the stream on `socket` on the calling thread until something ends it; says why.
    /// The plan drops after the end was written: only then are its places free and its lease
    /// released, so a server stopping waits for every stream's last chunk.
    pub fn run(
        self,
        socket: StreamSocket,
        watcher: &Watcher,
        stopping: &AtomicBool,
        metrics: &Metrics,
    ) -> End {
        let body = stream::Body {
            rx: &self.sub.rx,
            signals: &self.sub.signals,
            timing: self.timing,
            opening: &self.opening,
        };
        stream::run(body, socket, watcher, stopping, metrics)
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

    #[test]
    fn a_change_with_an_event_id_has_an_id_line_and_the_same_data() {
        let payload = r#"{"type":"server","id":7,"op":"update","project_id":3,"org_id":null,"event_id":"7781-00ff3a9c2b1d4e5f"}"#;
        let change: Change = serde_json::from_str(payload).unwrap();
        assert_eq!(change.id(), Some("7781-00ff3a9c2b1d4e5f"));
        assert_eq!(
            change.event(),
            "event: change\nid: 7781-00ff3a9c2b1d4e5f\ndata: {\"type\":\"server\",\"id\":7,\"op\":\"update\",\"project_id\":3,\"org_id\":null}\n\n"
        );
        // What could break the event's framing is no id.
        for bad in ["1-2\nevent: x", "", "1 2", &"9".repeat(65)] {
            let change = Change {
                event_id: Some(bad.to_string()),
                ..change.clone()
            };
            assert_eq!(change.id(), None, "{bad:?}");
            assert!(change.event().starts_with("event: change\ndata: "));
        }
    }
}
