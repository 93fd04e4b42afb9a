//! The credentials this instance has checked, by the SHA-256 of the secret, so that a session or
//! token checked once is checked again without a database statement (issue 31, item 2).
//!
//! An entry is forgotten when the listener carries news of it: `s:` (a session ended) and `r:`
//! (given a new token) by session, `t:` (a token revoked or deleted) by token, `u:` (the user's
//! memberships changed, or the user was disabled or deleted) by user, covering the user's
//! sessions and the tokens the user made; an `organization`, `project` or `user` change forgets
//! what names it. Every instance hears every notification within a second, so a logout is
//! refused everywhere within one. Expiry needs no news: an entry knows its session's absolute and
//! idle ends and its token's expiry, and past either it is not used (the database decides again).
//!
//! Only while the listener is connected is any of it trusted: `distrust` (the connection was
//! lost) forgets everything and sends every check to the database until `trust` (connected and
//! listening again). An answer read from the database is kept only when nothing about its
//! principals was heard while it was read: the hub's journal says so for sessions, tokens and
//! users, the `epoch` for everything else (`Stamp`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{By, Caller};
use crate::events::journal::{Journal, Mark};
use crate::locks::Unpoisoned;

/// The SHA-256 of a presented secret.
pub type SecretHash = [u8; 32];

/// How long an entry is used at most, even without news: bounds what a listener that died
/// without noticing could let through (its connection's keep-alive notices within ~16 s).
const LIFE: Duration = Duration::from_secs(60);
/// Entries kept at most (a few hundred bytes each); past it, checks go to the database.
const MAX_ENTRIES: usize = 100_000;

/// When the database was asked, for `put` to tell whether anything was heard since.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    position: u64,
    epoch: u64,
}

/// How long a new entry may be used.
pub struct Life {
    /// The session's absolute end, or the token's expiry (`None`: never).
    pub ends_in: Option<Duration>,
    /// For a session: its idle timeout, and how long ago it was last marked as used.
    pub idle: Option<(Duration, Duration)>,
}

/// A cached answer: the caller, and whether its use should be noted now (`super::seen`).
pub struct Hit {
    pub caller: Arc<Caller>,
    pub note: bool,
}

struct CachedCaller {
    caller: Arc<Caller>,
    until: Instant,
    /// Sessions: the idle timeout, and when the session was last marked as used (or will be, by
    /// the batch that holds its use).
    idle: Option<(Duration, Instant)>,
    noted: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Principal {
    Session(i64),
    Token(i64),
    User(i64),
}

#[derive(Default)]
struct Remembered {
    trusted: bool,
    epoch: u64,
    entries: HashMap<SecretHash, CachedCaller>,
    by: HashMap<Principal, HashSet<SecretHash>>,
}

#[derive(Default)]
pub struct Checked {
    inner: Mutex<Remembered>,
    /// How often a use is written (`super::seen`); sessions: min(idle / 20, 60 s), as ever.
    note_every: Duration,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

fn principals(caller: &Caller) -> Vec<Principal> {
    let mut out = vec![match caller.by {
        By::Session { id, .. } => Principal::Session(id),
        By::Token { id, .. } => Principal::Token(id),
    }];
    out.extend(caller.user.as_ref().map(|u| Principal::User(u.id)));
    out
}

impl Checked {
    pub fn new(note_every: Duration) -> Checked {
        Checked {
            note_every,
            ..Checked::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, Remembered> {
        self.inner.lock().unpoisoned()
    }

    /// The caller of `key`, while it may be used; marks the use.
    pub fn get(&self, key: &SecretHash, now: Instant) -> Option<Hit> {
        let mut inner = self.lock();
        if !inner.trusted {
            return None;
        }
        let entry = inner.entries.get_mut(key)?;
        let idle_over = entry.idle.is_some_and(|(idle, seen)| now >= seen + idle);
        if now >= entry.until || idle_over {
            return None;
        }
        let note = now >= entry.noted + self.note_every;
        if note {
            entry.noted = now;
            if let Some((_, seen)) = &mut entry.idle {
                *seen = now;
            }
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(Hit {
            caller: entry.caller.clone(),
            note,
        })
    }

    /// Call before reading a credential from the database; pass to `put`.
    pub fn stamp(&self, journal: &Journal) -> Stamp {
        let epoch = self.lock().epoch;
        Stamp {
            position: journal.position(),
            epoch,
        }
    }

    /// Keeps an answer read from the database, unless anything about it was heard since `stamp`
    /// (or the listener is not connected).
    pub fn put(
        &self,
        key: SecretHash,
        caller: Arc<Caller>,
        life: Life,
        stamp: Stamp,
        journal: &Journal,
    ) {
        let now = Instant::now();
        let until = now + life.ends_in.map_or(LIFE, |d| d.min(LIFE));
        let idle = life.idle.map(|(idle, since)| (idle, now - since.min(idle)));
        let who = principals(&caller);
        let marks: Vec<Mark> = who.iter().map(|p| p.mark()).collect();
        let mut inner = self.lock();
        // Under the lock: a notification recorded after this look forgets the entry after it
        // is in (the listener records, then takes this lock to forget).
        if !inner.trusted || inner.epoch != stamp.epoch || journal.any_since(stamp.position, &marks)
        {
            return;
        }
        if inner.entries.len() >= MAX_ENTRIES {
            inner.sweep(now);
            if inner.entries.len() >= MAX_ENTRIES {
                return;
            }
        }
        let entry = CachedCaller {
            caller,
            until,
            idle,
            noted: now,
        };
        inner.remove(&key);
        inner.entries.insert(key, entry);
        for p in who {
            inner.by.entry(p).or_default().insert(key);
        }
    }

    pub fn forget_session(&self, id: i64) {
        self.lock().forget(Principal::Session(id));
    }

    pub fn forget_token(&self, id: i64) {
        self.lock().forget(Principal::Token(id));
    }

    pub fn forget_user(&self, id: i64) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.forget(Principal::User(id));
    }

    /// A change announcement (`consoled_change`): forgets what the changed user (its address),
    /// organization (its status) or project (its organization) is part of. An insert is part of
    /// nothing remembered yet.
    pub fn heard_change(&self, kind: &str, id: i64, op: &str) {
        match (kind, op) {
            (_, "insert") => {}
            ("user", _) => self.forget_user(id),
            ("organization", _) => self.forget_org(id),
            ("project", _) => self.forget_project(id),
            _ => {}
        }
    }

    /// An organization changed (its status, say): forgets the sessions that list it.
    pub fn forget_org(&self, org_id: i64) {
        self.forget_where(
            |by| matches!(by, By::Session { orgs, .. } if orgs.iter().any(|(o, _)| *o == org_id)),
        );
    }

    /// A project changed (moved to another organization, deleted): forgets its tokens.
    pub fn forget_project(&self, project_id: i64) {
        self.forget_where(|by| matches!(by, By::Token { project_id: p, .. } if *p == project_id));
    }

    fn forget_where(&self, pick: impl Fn(&By) -> bool) {
        let mut inner = self.lock();
        inner.epoch += 1;
        let keys: Vec<SecretHash> = inner
            .entries
            .iter()
            .filter(|(_, e)| pick(&e.caller.by))
            .map(|(k, _)| *k)
            .collect();
        keys.iter().for_each(|k| inner.remove(k));
    }

    /// The listener is connected and listening: answers may be kept from now on.
    pub fn trust(&self) {
        let mut inner = self.lock();
        inner.clear();
        inner.trusted = true;
    }

    /// The listener lost its connection: news may be missed, so nothing is kept or used.
    pub fn distrust(&self) {
        let mut inner = self.lock();
        inner.clear();
        inner.trusted = false;
    }

    /// How often a use is handed to `super::seen`.
    pub fn note_every(&self) -> Duration {
        self.note_every
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Principal {
    fn mark(self) -> Mark {
        match self {
            Principal::Session(id) => Mark::Session(id),
            Principal::Token(id) => Mark::Token(id),
            Principal::User(id) => Mark::User(id),
        }
    }
}

impl Remembered {
    fn forget(&mut self, p: Principal) {
        for key in self.by.remove(&p).unwrap_or_default() {
            self.remove(&key);
        }
    }

    fn remove(&mut self, key: &SecretHash) {
        let Some(entry) = self.entries.remove(key) else {
            return;
        };
        for p in principals(&entry.caller) {
            if let Some(keys) = self.by.get_mut(&p) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by.remove(&p);
                }
            }
        }
    }

    fn clear(&mut self) {
        self.epoch += 1;
        self.entries.clear();
        self.by.clear();
    }

    /// Drops entries past their end.
    fn sweep(&mut self, now: Instant) {
        let gone: Vec<SecretHash> = self
            .entries
            .iter()
            .filter(|(_, e)| now >= e.until || e.idle.is_some_and(|(i, s)| now >= s + i))
            .map(|(k, _)| *k)
            .collect();
        gone.iter().for_each(|k| self.remove(k));
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
