//! This instance's places for event streams: a fixed number, taken exactly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A fixed number of places (this instance's event streams): a `Slot` is one held; dropping it
/// gives it back. Taking is exact, however many workers admit streams at once.
pub struct Slots {
    limit: usize,
    held: AtomicUsize,
}

/// One place held.
pub struct Slot(Arc<Slots>);

impl Slots {
    pub fn new(limit: usize) -> Arc<Slots> {
        Arc::new(Slots {
            limit,
            held: AtomicUsize::new(0),
        })
    }

    /// A place, unless all are held.
    pub fn take(self: &Arc<Self>) -> Option<Slot> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self.clone()))
    }

    /// Places held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_exact_under_contention() {
        let slots = Slots::new(3);
        let taken: Vec<Option<Slot>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16).map(|_| s.spawn(|| slots.take())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(taken.iter().filter(|t| t.is_some()).count(), 3);
        assert_eq!(slots.held(), 3);
        drop(taken);
        assert_eq!(slots.held(), 0);
        assert!(slots.take().is_some());
    }
}
