//! A value kept in `N` parts, each behind its own lock, so that threads working on different
//! keys seldom wait for each other: thousands of streams starting and ending at once each lock
//! one part (the stream watcher's map, the per-principal stream counts). A part poisoned by a
//! panic is used as it is: each holds plain counts and handles, whole after every statement.

use crate::locks::Unpoisoned;
use std::sync::{Mutex, MutexGuard};

pub struct Sharded<T, const N: usize>([Mutex<T>; N]);

impl<T: Default, const N: usize> Default for Sharded<T, N> {
    fn default() -> Self {
        Sharded(std::array::from_fn(|_| Mutex::default()))
    }
}

impl<T, const N: usize> Sharded<T, N> {
    /// The part that holds `key`.
    pub fn part(&self, key: u64) -> MutexGuard<'_, T> {
        lock(&self.0[(key % N as u64) as usize])
    }

    /// Every part, one after another (each locked while it is looked at).
    pub fn parts(&self) -> impl Iterator<Item = MutexGuard<'_, T>> {
        self.0.iter().map(lock)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unpoisoned()
}
