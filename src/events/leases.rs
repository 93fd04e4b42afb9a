//! Stream leases. A lease row per open stream enforces the stream limit across instances
//! (db::leases), counted while its instance is alive; the keeper (`keeper`) renews this
//! instance's one row in `instances` (never a row per stream), deletes the rows of streams that
//! ended, and ends the streams of sessions and API tokens that expired.
//!
//! Stream threads never touch the database: they hand their work to the keeper through a channel,
//! so a stream costs no pooled connection and only a small stack.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::crypto;
use crate::db::leases::Holder;
use crate::locks::Unpoisoned;

/// What a stream thread hands the lease keeper.
pub(super) enum KeeperJob {
    Release(i64),
    Watch { whose: Watched, deadline: Instant },
}

/// What the keeper watches for its end: a session (which use may prolong, so its end is read
/// again when due) or an API token (whose expiry is fixed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Watched {
    Session(i64),
    Token(i64),
}

/// This instance's live leases, and the keeper's inbox.
pub struct LeaseBook {
    /// Random per process start: names this instance's rows in `stream_leases`.
    pub instance_id: String,
    live: Mutex<HashMap<i64, Holder>>,
    jobs: Sender<KeeperJob>,
    pub(super) inbox: Receiver<KeeperJob>,
}

impl Default for LeaseBook {
    fn default() -> LeaseBook {
        LeaseBook::new()
    }
}

impl LeaseBook {
    pub fn new() -> LeaseBook {
        let (jobs, inbox) = crossbeam_channel::unbounded();
        LeaseBook {
            instance_id: crypto::b64url(&crypto::random_bytes::<9>()),
            live: Mutex::new(HashMap::new()),
            jobs,
            inbox,
        }
    }

    /// Records a lease row taken by `db::leases::open`; the guard releases it on drop.
    pub fn hold(self: &Arc<Self>, id: i64, holder: Holder) -> Lease {
        self.live_set().insert(id, holder);
        Lease {
            id,
            book: self.clone(),
        }
    }

    /// Asks the keeper to end a session's streams once the session has expired.
    pub fn watch_session(&self, session_id: i64, remaining: Duration) {
        self.watch(Watched::Session(session_id), remaining);
    }

    /// Asks the keeper to end an API token's streams when the token expires.
    pub fn watch_token(&self, token_id: i64, remaining: Duration) {
        self.watch(Watched::Token(token_id), remaining);
    }

    fn watch(&self, whose: Watched, remaining: Duration) {
        let deadline = Instant::now() + remaining;
        let _ = self.jobs.send(KeeperJob::Watch { whose, deadline });
    }

    fn live_set(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Holder>> {
        self.live.lock().unpoisoned()
    }

    pub(super) fn live(&self) -> Vec<(i64, Holder)> {
        self.live_set().iter().map(|(id, h)| (*id, *h)).collect()
    }
}

/// One open stream's lease; dropping it frees the slot.
pub struct Lease {
    id: i64,
    book: Arc<LeaseBook>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.book.live_set().remove(&self.id);
        let _ = self.book.jobs.send(KeeperJob::Release(self.id));
    }
}
