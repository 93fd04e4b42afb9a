//! The subscriber hub: routes each change to exactly the streams allowed to see it, through
//! indexes by project (token streams), organization and user (session streams), so a change never
//! scans every open stream. Also ends streams by session or token, and tells all streams to resync.
//!
//! Only the listener thread routes; handlers subscribe and stream threads unsubscribe. The lock is
//! never held across I/O: deliveries are `try_send` on bounded channels, after the lock is released,
//! each followed by a wake-up of the stream's thread (an `unpark`: no spinning, no yielding). A
//! change for many streams is delivered by the listener's thread and helpers together
//! (`fanout`), and routing returns when all of it is done.
//!
//! Each change routed is also kept in the `history`, under the same lock as the routing, so that
//! a stream being opened either is routed a change or finds it there (`replay`), never neither.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_channel::Receiver;

use super::delivery::Sub;
use super::fanout::Fanout;
use super::history::{History, Limits};
use super::leases::LeaseBook;
use super::stream::{End, Msg, Signals};
use crate::locks::Unpoisoned;

/// Whose stream it is.
#[derive(Debug, Clone, Copy)]
pub enum Scope {
    Token {
        token_id: i64,
        project_id: i64,
    },
    Session {
        session_id: i64,
        user_id: i64,
        /// The token the stream was opened with (`db::sessions::token_tag`): a session keeps its
        /// id when its token is replaced, and the streams of the old token end then.
        token_tag: u64,
    },
}

/// A user with open session streams on this instance.
#[derive(Default)]
struct UserEntry {
    orgs: HashSet<i64>,
    streams: HashSet<u64>,
    /// False until the organizations were read once.
    loaded: bool,
    /// Bumped by every (re)load, so an older read never overwrites a newer one.
    version: u64,
}

#[derive(Default)]
struct Index {
    subs: HashMap<u64, Arc<Sub>>,
    by_project: HashMap<i64, HashSet<u64>>,
    by_token: HashMap<i64, HashSet<u64>>,
    by_session: HashMap<i64, HashSet<u64>>,
    users: HashMap<i64, UserEntry>,
    /// Organization -> users (with session streams) who belong to it.
    by_org: HashMap<i64, HashSet<i64>>,
    /// Project -> organization, learnt from the database when a change names only the project.
    project_org: HashMap<i64, i64>,
    /// Memberships that just ended, or organizations just suspended: the `membership` or
    /// `organization` change announcing it still reaches the former member (the trigger sends
    /// `u:` first, and the reload already removed the org).
    just_left: HashMap<i64, HashSet<i64>>,
}

impl Index {
    /// Indexes stream `id` by its scope. For a session stream whose user has no other stream
    /// here, the version to pass to `set_orgs` after reading the user's organizations.
    fn insert(&mut self, id: u64, sub: Arc<Sub>) -> Option<u64> {
        let scope = sub.scope;
        self.subs.insert(id, sub);
        match scope {
            Scope::Token {
                token_id,
                project_id,
            } => {
                add(&mut self.by_project, project_id, id);
                add(&mut self.by_token, token_id, id);
                None
            }
            Scope::Session {
                session_id,
                user_id,
                ..
            } => {
                add(&mut self.by_session, session_id, id);
                let user = self.users.entry(user_id).or_default();
                user.streams.insert(id);
                (!user.loaded).then_some(user.version)
            }
        }
    }
}

pub struct Hub {
    index: Mutex<Index>,
    /// Who writes a change to its streams: the listener's thread, with helpers for many.
    fanout: Fanout<(Arc<Sub>, Arc<[Msg]>)>,
    next_id: AtomicU64,
    pub leases: Arc<LeaseBook>,
    /// Recent control notifications, for streams being opened (`journal`).
    pub journal: super::journal::Journal,
    /// Recent changes, for streams that resume (`history`). Locked after `index`, never before.
    history: Mutex<History>,
}

impl Default for Hub {
    fn default() -> Hub {
        Hub::new()
    }
}

/// A stream's end of the hub; unsubscribes on drop.
pub struct Subscription {
    hub: Arc<Hub>,
    id: u64,
    pub rx: Receiver<Msg>,
    pub signals: Arc<Signals>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.unsubscribe(self.id);
    }
}

/// Outcome of routing one change.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Routed {
    pub delivered: usize,
    pub dropped: usize,
}

fn add(map: &mut HashMap<i64, HashSet<u64>>, key: i64, id: u64) {
    map.entry(key).or_default().insert(id);
}

fn remove<T: Eq + std::hash::Hash>(map: &mut HashMap<i64, HashSet<T>>, key: i64, v: &T) {
    if let Some(set) = map.get_mut(&key) {
        set.remove(v);
        if set.is_empty() {
            map.remove(&key);
        }
    }
}

/// Threads writing a batch of changes by default: two per CPU.
fn default_fanout() -> usize {
    2 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Hub {
    /// A hub with the default history, whose changes are written by two threads per CPU.
    pub fn new() -> Hub {
        Hub::with(Limits::default(), default_fanout())
    }

    /// A hub that keeps at most `limits` of history, whose changes are written to their streams
    /// by `threads` threads together (the listener's and helpers: `fanout`).
    pub fn with(limits: Limits, threads: usize) -> Hub {
        Hub {
            index: Mutex::new(Index::default()),
            fanout: Fanout::new(threads, |(sub, events)| sub.deliver(events)),
            next_id: AtomicU64::new(1),
            leases: Arc::new(LeaseBook::new()),
            journal: Default::default(),
            history: Mutex::new(History::new(limits)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        // A panic elsewhere must not take every stream down with it.
        self.index.lock().unpoisoned()
    }

    /// Registers a stream with a queue of `capacity` changes. For a session stream whose user has
    /// no other stream here, also returns the version to pass to `set_orgs` after reading the
    /// user's organizations.
    pub fn subscribe(
        self: &Arc<Self>,
        scope: Scope,
        capacity: usize,
    ) -> (Subscription, Option<u64>) {
        // Unbounded in crossbeam's terms, bounded by `deliver`: a bounded channel allocates all of
        // its slots up front (6 KiB for 256), this one a block of 31 at a time while changes wait.
        let (tx, rx) = crossbeam_channel::unbounded();
        let signals = Arc::new(Signals::default());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let sub = Arc::new(Sub {
            scope,
            capacity,
            tx,
            rx: rx.clone(),
            signals: signals.clone(),
        });
        let needs_orgs = self.lock().insert(id, sub);
        let subscription = Subscription {
            hub: self.clone(),
            id,
            rx,
            signals,
        };
        (subscription, needs_orgs)
    }

    fn unsubscribe(&self, id: u64) {
        let mut ix = self.lock();
        let Some(sub) = ix.subs.remove(&id) else {
            return;
        };
        match sub.scope {
            Scope::Token {
                token_id,
                project_id,
            } => {
                remove(&mut ix.by_project, project_id, &id);
                remove(&mut ix.by_token, token_id, &id);
            }
            Scope::Session {
                session_id,
                user_id,
                ..
            } => {
                remove(&mut ix.by_session, session_id, &id);
                let gone = ix.users.get_mut(&user_id).is_some_and(|u| {
                    u.streams.remove(&id);
                    u.streams.is_empty()
                });
                if gone {
                    let user = ix.users.remove(&user_id).unwrap_or_default();
                    for org in user.orgs {
                        remove(&mut ix.by_org, org, &user_id);
                    }
                }
            }
        }
    }

    /// Starts a reload of a user's organizations (their membership changed). Returns the version
    /// to pass to `set_orgs`, or `None` when the user has no stream here.
    pub fn begin_reload(&self, user_id: i64) -> Option<u64> {
        let mut ix = self.lock();
        let user = ix.users.get_mut(&user_id)?;
        user.version += 1;
        Some(user.version)
    }

    /// `begin_reload` for every user with a stream here (after the listener reconnected).
    pub fn begin_reload_all(&self) -> Vec<(i64, u64)> {
        let mut ix = self.lock();
        ix.users
            .iter_mut()
            .map(|(id, user)| {
                user.version += 1;
                (*id, user.version)
            })
            .collect()
    }

    /// Ids of the sessions and tokens with streams here.
    pub fn principals(&self) -> (Vec<i64>, Vec<i64>) {
        let ix = self.lock();
        (
            ix.by_session.keys().copied().collect(),
            ix.by_token.keys().copied().collect(),
        )
    }

    /// Sets a user's organizations unless a newer read was set since `version` was handed out.
    pub fn set_orgs(&self, user_id: i64, orgs: &[i64], version: u64) {
        let mut ix = self.lock();
        let Some(user) = ix.users.get_mut(&user_id) else {
            return;
        };
        if user.version != version {
            return;
        }
        user.version += 1;
        let was_loaded = std::mem::replace(&mut user.loaded, true);
        let new: HashSet<i64> = orgs.iter().copied().collect();
        let old = std::mem::replace(&mut user.orgs, new.clone());
        for org in old.difference(&new) {
            remove(&mut ix.by_org, *org, &user_id);
            if was_loaded {
                ix.just_left.entry(*org).or_default().insert(user_id);
            }
        }
        for org in new.difference(&old) {
            ix.by_org.entry(*org).or_default().insert(user_id);
            remove(&mut ix.just_left, *org, &user_id);
        }
    }

    /// Ends the streams of a session (logout, reset, expiry).
    pub fn end_session(&self, session_id: i64) -> usize {
        self.end_where(|ix| ix.by_session.get(&session_id), |_| true)
    }

    /// Ends the streams of a session opened with a token whose tag `ended` picks: the token was
    /// replaced (password change, second factor, other sessions ended) and the session goes on.
    pub fn end_session_tokens(&self, session_id: i64, ended: impl Fn(u64) -> bool) -> usize {
        self.end_where(
            |ix| ix.by_session.get(&session_id),
            |scope| matches!(scope, Scope::Session { token_tag, .. } if ended(*token_tag)),
        )
    }

    /// Ends the streams of an API token (revoked or deleted).
    pub fn end_token(&self, token_id: i64) -> usize {
        self.end_where(|ix| ix.by_token.get(&token_id), |_| true)
    }

    fn end_where(
        &self,
        pick: impl Fn(&Index) -> Option<&HashSet<u64>>,
        and: impl Fn(&Scope) -> bool,
    ) -> usize {
        let ix = self.lock();
        let subs: Vec<Arc<Sub>> = pick(&ix)
            .into_iter()
            .flatten()
            .filter_map(|id| ix.subs.get(id).cloned())
            .filter(|sub| and(&sub.scope))
            .collect();
        drop(ix);
        subs.iter().for_each(|s| s.signals.end(End::Revoked));
        subs.len()
    }

    pub fn has_session(&self, session_id: i64) -> bool {
        self.lock().by_session.contains_key(&session_id)
    }

    /// Tells every stream to send `resync` (changes may have been missed).
    pub fn resync_all(&self) -> usize {
        let subs: Vec<Arc<Sub>> = self.lock().subs.values().cloned().collect();
        subs.iter().for_each(|s| s.signals.flag_resync());
        subs.len()
    }
}

#[path = "hub_route.rs"]
mod route;
#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
