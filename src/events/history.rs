//! The changes this instance received lately, in the order it received them, so that a stream
//! that reconnects with `Last-Event-ID` is sent what it missed instead of reloading (issue 35).
//!
//! Why this is enough, with PostgreSQL alone: every instance receives every notification in the
//! same order (commit order, from the one notification queue), and each change's id names it
//! the same way everywhere (`consoled_notify_change` puts it in the notification, migration
//! 0015). So "every change after id X" is the same list on every instance that heard X, and a
//! stream finds its place by looking X up here, whichever instance it was on before. What this
//! instance did not hear (before its listener connected, or while it was away: the history is
//! emptied when it reconnects) is not here, and the stream is answered as before: `ready`, then
//! a reload.
//!
//! Nothing here writes to the database or reads it: the history is kept from what the listener
//! hears anyway, and looked up under its own lock by the opening stream.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::stream::Msg;

/// The first bytes of a stream that resumes: the reconnect delay, then `ready` saying so. The
/// changes it missed follow.
pub const RESUMED: &str = "retry: 3000\nevent: ready\ndata: {\"resumed\":true}\n\n";

/// The longest `Last-Event-ID` looked up; a longer one is no id of ours.
pub const MAX_ID: usize = 64;

/// How much history an instance keeps: at most `changes` changes (0: none, and no stream
/// resumes), none older than `age` (except the newest: a client whose last id is the newest
/// missed nothing, however quiet the cluster was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub changes: usize,
    pub age: Duration,
}

impl Default for Limits {
    /// Sized for a rolling restart (docs/events.md, "Resuming"): clients are away for the retry
    /// (3 s) and the reconnect storm, and 20,000 changes hold 400 s at the benchmark's 50 a
    /// second, 20 s at 1,000; about 6 MiB.
    fn default() -> Limits {
        Limits {
            changes: 20_000,
            age: Duration::from_secs(300),
        }
    }
}

/// Who may see a change, as the hub routed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    pub project: Option<i64>,
    /// The change's organization, or its project's (as the hub knew it when routing).
    pub org: Option<i64>,
    /// Users who see it whatever their organizations: a `user` change's user; for a
    /// `membership` or `organization` change, the users whose organizations it changed (`u:`
    /// before it in its transaction), who see it even if they are no longer members, as a
    /// connected stream would have (the hub's `just_left`).
    pub users: Box<[i64]>,
}

/// What a principal may see now: a token's project, or a user and their active organizations.
#[derive(Debug, Clone, Copy)]
pub enum View<'a> {
    Project(i64),
    User { id: i64, orgs: &'a [i64] },
}

impl View<'_> {
    fn sees(&self, reach: &Reach) -> bool {
        match *self {
            View::Project(p) => reach.project == Some(p),
            View::User { id, orgs } => {
                reach.org.is_some_and(|o| orgs.contains(&o)) || reach.users.contains(&id)
            }
        }
    }
}

/// An event id, `<transaction id>-<16 hex digits>` (migration 0015), as two numbers: no
/// allocation per change, and what is not of that form is no id of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key(u64, u64);

impl Key {
    fn parse(id: &str) -> Option<Key> {
        let (transaction, digest) = id.split_once('-')?;
        if digest.len() != 16 || !transaction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Key(
            transaction.parse().ok()?,
            u64::from_str_radix(digest, 16).ok()?,
        ))
    }
}

struct Entry {
    seq: u64,
    /// `None`: a notification without an id (sent by a database function older than 0015).
    key: Option<Key>,
    at: Instant,
    event: Msg,
    reach: Reach,
}

pub struct History {
    limits: Limits,
    entries: VecDeque<Entry>,
    by_id: HashMap<Key, u64>,
    next: u64,
}

impl History {
    pub fn new(limits: Limits) -> History {
        History {
            limits,
            entries: VecDeque::new(),
            by_id: HashMap::new(),
            next: 0,
        }
    }

    /// Keeps a change the listener heard (its `change` event, id line included).
    pub fn record(&mut self, id: Option<&str>, event: Msg, reach: Reach, now: Instant) {
        let seq = self.next;
        self.next += 1;
        if self.limits.changes == 0 {
            return;
        }
        let key = id.and_then(Key::parse);
        if let Some(key) = key {
            // The same id twice (it cannot happen, but): resuming from the first is the safe
            // reading, a change sent twice rather than one missed.
            self.by_id.entry(key).or_insert(seq);
        }
        if self.entries.len() == self.entries.capacity() {
            // Grown by doubling, but never past the limit: no room that can never be used.
            let len = self.entries.len();
            let room = len
                .max(64)
                .min(self.limits.changes.saturating_sub(len))
                .max(1);
            self.entries.reserve_exact(room);
        }
        self.entries.push_back(Entry {
            seq,
            key,
            at: now,
            event,
            reach,
        });
        self.prune(now);
    }

    /// Forgets everything: the listener was away, so what follows does not continue it.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.by_id.clear();
    }

    /// The changes after `after` that `view` may see, in order; `None` when they are not all
    /// known here (`after` unknown or forgotten) or when there are more than `max` (a stream
    /// that far behind would have been told `resync`: a reload costs less).
    pub fn replay(
        &mut self,
        after: &str,
        view: View<'_>,
        max: usize,
        now: Instant,
    ) -> Option<Vec<Msg>> {
        self.prune(now);
        let seq = *self.by_id.get(&Key::parse(after)?)?;
        let first = self.entries.front()?.seq;
        let mut out = Vec::new();
        for entry in self.entries.range((seq + 1 - first) as usize..) {
            if view.sees(&entry.reach) {
                if out.len() == max {
                    return None;
                }
                out.push(entry.event.clone());
            }
        }
        Some(out)
    }

    /// Changes kept now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn prune(&mut self, now: Instant) {
        while let Some(front) = self.entries.front() {
            let over = self.entries.len() > self.limits.changes;
            // The newest stays, however old: it marks where the present starts.
            let old =
                self.entries.len() > 1 && now.saturating_duration_since(front.at) > self.limits.age;
            if !(over || old) {
                return;
            }
            let gone = self.entries.pop_front().expect("a front entry");
            if let Some(key) = gone.key {
                if self.by_id.get(&key) == Some(&gone.seq) {
                    self.by_id.remove(&key);
                }
            }
        }
    }
}

/// Who each `membership` or `organization` change concerns, from the `u:<user>` notifications
/// before it: every one since the previous change of another transaction. Both channels arrive
/// on one connection in commit order, a transaction's notifications together, and the triggers
/// send `u:` first (migrations 0001 and 0011); a repeated `u:` of one transaction is folded into
/// the first by PostgreSQL, so the users are gathered per transaction (an id's part before the
/// `-`), not per change.
#[derive(Default)]
pub struct Concerns {
    since_change: Vec<i64>,
    transaction: Option<String>,
    users: Vec<i64>,
}

impl Concerns {
    /// A `u:<user>` notification.
    pub fn user(&mut self, user: i64) {
        self.since_change.push(user);
    }

    /// A change with event id `id`: the users it concerns.
    pub fn change(&mut self, id: Option<&str>) -> &[i64] {
        let transaction = id.and_then(|id| id.split_once('-')).map(|(t, _)| t);
        if transaction.is_none() || transaction != self.transaction.as_deref() {
            self.transaction = transaction.map(str::to_string);
            self.users.clear();
        }
        self.users.append(&mut self.since_change);
        &self.users
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
