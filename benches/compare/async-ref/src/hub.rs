//! Per-project fan-out: one `tokio::sync::broadcast` channel per project that has a stream open.
//! A change is formatted once and the same `Bytes` is handed to every receiver; a receiver that
//! falls more than the channel's capacity behind gets `Lagged` and its stream writes `resync`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

/// A change as `consoled_notify_change` sends it; re-serialised compactly in this field order,
/// which gives byte-for-byte the `data:` line consoled writes.
#[derive(Serialize, Deserialize)]
struct Change {
    #[serde(rename = "type")]
    kind: String,
    id: i64,
    op: String,
    #[serde(default)]
    project_id: Option<i64>,
    #[serde(default)]
    org_id: Option<i64>,
}

pub const READY: &str = "retry: 3000\nevent: ready\ndata: {}\n\n";
pub const RESYNC: &str = "event: resync\ndata: {}\n\n";
pub const PING: &str = ": ping\n\n";

pub struct Hub {
    capacity: usize,
    projects: RwLock<HashMap<i64, broadcast::Sender<Bytes>>>,
}

impl Hub {
    pub fn new(capacity: usize) -> Arc<Hub> {
        Arc::new(Hub {
            capacity,
            projects: RwLock::new(HashMap::new()),
        })
    }

    /// A receiver of the project's changes; the channel goes away with its last subscription.
    pub fn subscribe(self: &Arc<Hub>, project: i64) -> Subscription {
        let mut projects = self.projects.write().expect("hub lock");
        let tx = projects
            .entry(project)
            .or_insert_with(|| broadcast::channel(self.capacity).0);
        Subscription {
            rx: Some(tx.subscribe()),
            hub: self.clone(),
            project,
        }
    }

    /// Routes one notification payload; a malformed one is logged and dropped.
    pub fn route(&self, payload: &str) {
        let change: Change = match serde_json::from_str(payload) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("async-ref: ignored a malformed change notification: {e}");
                return;
            }
        };
        // Token streams see the changes of their project; a change without one reaches nobody.
        let Some(project) = change.project_id else {
            return;
        };
        let projects = self.projects.read().expect("hub lock");
        if let Some(tx) = projects.get(&project) {
            let data = serde_json::to_string(&change).expect("a change serialises");
            // No receiver left is not an error: the stream ended in between.
            let _ = tx.send(Bytes::from(format!("event: change\ndata: {data}\n\n")));
        }
    }

    /// After the listener was away, every stream may have missed changes.
    pub fn resync_all(&self) {
        let projects = self.projects.read().expect("hub lock");
        for tx in projects.values() {
            let _ = tx.send(Bytes::from_static(RESYNC.as_bytes()));
        }
    }
}

/// One stream's receiver; dropping it removes the project's channel when nobody else listens.
pub struct Subscription {
    rx: Option<broadcast::Receiver<Bytes>>,
    hub: Arc<Hub>,
    project: i64,
}

impl Subscription {
    pub fn receiver(&mut self) -> &mut broadcast::Receiver<Bytes> {
        self.rx.as_mut().expect("present until drop")
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        drop(self.rx.take());
        let mut projects = self.hub.projects.write().expect("hub lock");
        if projects
            .get(&self.project)
            .is_some_and(|tx| tx.receiver_count() == 0)
        {
            projects.remove(&self.project);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_reaches_its_project_in_consoleds_bytes() {
        let hub = Hub::new(4);
        let mut mine = hub.subscribe(3);
        let mut other = hub.subscribe(4);
        // As PostgreSQL's json_build_object writes it: spaces around the colons.
        hub.route(
            r#"{"type" : "server", "id" : 7, "op" : "update", "project_id" : 3, "org_id" : null}"#,
        );
        let got = mine.receiver().try_recv().expect("delivered");
        assert_eq!(
            &got[..],
            b"event: change\ndata: {\"type\":\"server\",\"id\":7,\"op\":\"update\",\"project_id\":3,\"org_id\":null}\n\n"
        );
        assert!(
            other.receiver().try_recv().is_err(),
            "another project's stream"
        );
    }

    #[test]
    fn the_channel_goes_with_its_last_subscription() {
        let hub = Hub::new(4);
        let a = hub.subscribe(9);
        let b = hub.subscribe(9);
        drop(a);
        assert!(hub.projects.read().unwrap().contains_key(&9));
        drop(b);
        assert!(!hub.projects.read().unwrap().contains_key(&9));
    }
}
