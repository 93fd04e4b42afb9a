//! This instance's places for event streams: a fixed number, taken exactly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::refusal::Refusal;

/// A fixed number of places (this instance's event streams): a `StreamPlace` is one held;
/// dropping it gives it back. Admission is exact, however many streams open at once.
pub struct StreamPlaces {
    limit: usize,
    held: AtomicUsize,
}

/// One stream's place held.
pub struct StreamPlace(Arc<StreamPlaces>);

impl StreamPlaces {
    pub fn new(limit: usize) -> Arc<StreamPlaces> {
        Arc::new(StreamPlaces {
            limit,
            held: AtomicUsize::new(0),
        })
    }

    /// A place, unless all are held.
    pub fn admit(self: &Arc<Self>) -> Result<StreamPlace, Refusal> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .map(|_| StreamPlace(self.clone()))
            .map_err(|_| Refusal::StreamsFull)
    }

    /// Places held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_exact_under_contention() {
        let places = StreamPlaces::new(3);
        let taken: Vec<Result<StreamPlace, Refusal>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16).map(|_| s.spawn(|| places.admit())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(taken.iter().filter(|t| t.is_ok()).count(), 3);
        assert_eq!(places.held(), 3);
        drop(taken);
        assert_eq!(places.held(), 0);
        assert!(places.admit().is_ok());
    }
}
