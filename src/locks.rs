//! The crate's one convention for a lock poisoned by a panic: what it guards is used as it is
//! (`.unpoisoned()` on what `lock`, `read`, `write` or a condition variable's `wait` returns),
//! never unwrapped.
//!
//! Why: a panic in a request is answered 500 and its thread goes on (`server::answer`).
//! Unwrapping a poisoned lock would turn that one panic into a panic of every later request or
//! thread that takes the lock: every sign-in refused by a poisoned hash queue, every stream of
//! the hub ended. What our locks guard are counts,
//! maps, queues and handles, each changed in a few lines that no input makes panic; were one to
//! stop half-way, what it left (a count off by one, an entry kept too long) harms less.
//! Tests may unwrap: there a panic is the failure it should be.

use std::sync::{LockResult, PoisonError};

/// The guard (or a condition variable's result) whether or not a panic poisoned the lock.
pub trait Unpoisoned<T> {
    fn unpoisoned(self) -> T;
}

impl<T> Unpoisoned<T> for LockResult<T> {
    fn unpoisoned(self) -> T {
        self.unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_lock_poisoned_by_a_panic_is_used_as_it_was_left() {
        let counts = Mutex::new(vec![1]);
        let _ = std::panic::catch_unwind(|| {
            let mut held = counts.lock().unwrap();
            held.push(2);
            panic!("while holding the lock");
        });
        assert!(counts.is_poisoned());
        assert_eq!(*counts.lock().unpoisoned(), [1, 2]);
    }
}
