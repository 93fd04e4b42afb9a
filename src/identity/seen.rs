//! Last-seen times of sessions and API tokens checked from memory, written in batches: a check
//! notes a use (at most once per `Checked::note_every` for each credential, as `auth::any_session`
//! marks a session), and the maintenance thread writes every noted use at once, each second, in
//! one statement for sessions and one for tokens. So checks stay free of database statements,
//! and an idle timeout still sees each session's use (another instance reads it from the row).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::db::{sessions, tokens, Sql};
use crate::locks::Unpoisoned;

/// How often the maintenance thread writes the batch.
pub const EVERY: Duration = Duration::from_secs(1);

/// The uses noted since the last write, by session and by token.
#[derive(Default)]
pub struct LastSeen {
    pending: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    sessions: HashMap<i64, sessions::UsedFrom>,
    tokens: HashSet<i64>,
}

impl LastSeen {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unpoisoned()
    }

    /// Notes a use of session `id`, from where `seen` says.
    pub fn session(&self, id: i64, seen: sessions::UsedFrom) {
        self.lock().sessions.insert(id, seen);
    }

    pub fn token(&self, id: i64) {
        self.lock().tokens.insert(id);
    }

    pub fn is_empty(&self) -> bool {
        let pending = self.lock();
        pending.sessions.is_empty() && pending.tokens.is_empty()
    }

    /// Writes every use noted since the last call. What could not be written is kept for the
    /// next (unless a newer use of the same credential was noted meanwhile).
    pub fn flush(&self, c: &mut impl Sql) -> Result<usize, postgres::Error> {
        let batch = std::mem::take(&mut *self.lock());
        let n = batch.sessions.len() + batch.tokens.len();
        if n == 0 {
            return Ok(0);
        }
        let sessions: Vec<(i64, sessions::UsedFrom)> = batch.sessions.into_iter().collect();
        let tokens: Vec<i64> = batch.tokens.into_iter().collect();
        let written =
            sessions::touch_many(c, &sessions).and_then(|_| tokens::mark_used(c, &tokens));
        if let Err(e) = written {
            let mut pending = self.lock();
            for (id, seen) in sessions {
                pending.sessions.entry(id).or_insert(seen);
            }
            pending.tokens.extend(tokens);
            return Err(e);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_use_noted_twice_is_written_once_with_the_latest_place() {
        let seen = LastSeen::default();
        let at = |a: &str| sessions::UsedFrom {
            address: Some(a.into()),
            agent: "curl".into(),
        };
        seen.session(1, at("10.0.0.1"));
        seen.session(1, at("10.0.0.2"));
        seen.token(7);
        seen.token(7);
        let pending = seen.lock();
        assert_eq!(pending.sessions.len(), 1);
        assert_eq!(pending.sessions[&1].address.as_deref(), Some("10.0.0.2"));
        assert_eq!(pending.tokens.len(), 1);
    }
}
