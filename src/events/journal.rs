//! The listener's recent control notifications (a session ended, a token revoked, a user's
//! memberships changed, the listener reconnected), numbered. Opening a stream reads its
//! principal in one statement *before* it subscribes to the hub; a notification handled between
//! that statement and the subscription found no stream to end or reload. The opener notes the
//! journal's position before the statement and asks afterwards whether anything about its
//! principal happened since: only then does it read again (a race, rare), so a stream opens in
//! one statement and stays correct.

use crate::locks::Unpoisoned;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Notifications kept; an opener whose position has been forgotten reads again.
const KEEP: usize = 4096;

/// What a control notification was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Session(i64),
    Token(i64),
    User(i64),
    /// The listener (re)connected: anything may have been missed.
    Reset,
}

/// The notifications kept, and where their positions stand.
#[derive(Default)]
struct Recorded {
    next: u64,
    /// One past the highest position no longer kept.
    forgotten: u64,
    entries: VecDeque<(u64, Mark)>,
}

#[derive(Default)]
pub struct Journal {
    inner: Mutex<Recorded>,
}

impl Journal {
    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.inner.lock().unpoisoned()
    }

    /// The position of the next notification.
    pub fn position(&self) -> u64 {
        self.lock().next
    }

    /// Records a notification; call before acting on it.
    pub fn record(&self, mark: Mark) {
        let mut j = self.lock();
        let at = j.next;
        j.entries.push_back((at, mark));
        j.next += 1;
        if j.entries.len() > KEEP {
            if let Some((seq, _)) = j.entries.pop_front() {
                j.forgotten = seq + 1;
            }
        }
    }

    /// Whether a notification about any of `marks` (or a reset) was recorded at `since` or
    /// later, or may have been and is forgotten.
    pub fn any_since(&self, since: u64, marks: &[Mark]) -> bool {
        let j = self.lock();
        if since < j.forgotten {
            return true;
        }
        j.entries
            .iter()
            .rev()
            .take_while(|(seq, _)| *seq >= since)
            .any(|(_, m)| *m == Mark::Reset || marks.contains(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_notifications_since_the_position_about_the_principal_count() {
        let j = Journal::default();
        j.record(Mark::Session(1));
        let at = j.position();
        assert!(!j.any_since(at, &[Mark::Session(1)]));
        j.record(Mark::Token(7));
        assert!(!j.any_since(at, &[Mark::Session(1), Mark::User(3)]));
        j.record(Mark::User(3));
        assert!(j.any_since(at, &[Mark::Session(1), Mark::User(3)]));
        let at = j.position();
        j.record(Mark::Reset);
        assert!(j.any_since(at, &[Mark::Token(9)]));
    }

    #[test]
    fn a_forgotten_position_counts_as_touched() {
        let j = Journal::default();
        let at = j.position();
        for i in 0..(KEEP as i64 + 1) {
            j.record(Mark::Token(i + 100));
        }
        assert!(j.any_since(at, &[Mark::Token(1)]));
        assert!(!j.any_since(j.position(), &[Mark::Token(1)]));
    }
}
