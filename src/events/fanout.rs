//! A batch's deliveries, shared between the listener's thread and helper threads when it goes
//! to many streams: every thread takes the next stream not yet taken until none is left, and
//! the listener returns only when every delivery is done. So the hub's order holds as before
//! (a batch is delivered to every stream before the next change is routed, a revocation or a
//! reload is looked at), and each stream is written by one thread at a time.
//!
//! Why: with other threads wanting the CPUs, the listener's thread alone got one thread's share
//! of them, less than 1,000 streams × 50 changes a second need (measured beside two CPU-bound
//! processes on two cores: on a CPU 0.23 s a second, runnable and waiting 0.87 s, for a fan-out
//! that needs about 0.4 s), and the changes queued behind it for as long as the load lasted
//! (BENCHMARKS.md, "Where a delivery waits under contention"). With the thread-per-stream
//! client it lost the CPU at almost every write, to the client thread the write woke. Helpers
//! make the fan-out several threads (`CONSOLED_STREAM_FANOUT_THREADS`, two per CPU by default),
//! as an async runtime spreads its tasks over a worker per CPU.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::{self, Thread};
use std::time::Duration;

/// A batch goes to fewer streams than this on the listener's thread alone: waking a helper
/// costs about what a few writes cost.
const SHARED_FROM: usize = 32;

/// How one stream gets its events: (delivered, found its queue full).
pub(super) type Deliver<T> = fn(&T) -> (usize, usize);

/// The helpers, made at the first change that needs them (a hub that never fans out wide,
/// every test's, makes none); they end when the hub drops.
pub(super) struct Fanout<T> {
    deliver: Deliver<T>,
    helpers: usize,
    started: OnceLock<Vec<Arc<Helper<T>>>>,
}

/// Where a helper finds its next round, and its thread to wake. A helper sleeps in `park`,
/// not in a channel's receive: crossbeam's receive spins and calls `sched_yield` before it
/// sleeps, and each yield puts the thread's next turn behind every other runnable thread's
/// (the fair scheduler moves its deadline a slice on), which a helper pays when the next
/// change comes.
struct Helper<T> {
    round: Mutex<Option<Arc<Round<T>>>>,
    /// The hub dropped: the helper ends.
    stop: AtomicBool,
    thread: OnceLock<Thread>,
}

impl<T> Helper<T> {
    fn hand(&self, round: Arc<Round<T>>) {
        *self.round.lock().unwrap_or_else(PoisonError::into_inner) = Some(round);
        self.wake();
    }

    fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// A helper's life: each round it is handed, until the hub drops.
    fn run(&self) {
        let _ = self.thread.set(thread::current());
        while !self.stop.load(Ordering::Acquire) {
            let round = self
                .round
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            match round {
                Some(round) => round.work(),
                None => thread::park(),
            }
        }
    }
}

impl<T> Drop for Fanout<T> {
    fn drop(&mut self) {
        for helper in self.started.get().into_iter().flatten() {
            helper.stop.store(true, Ordering::Release);
            helper.wake();
        }
    }
}

/// One batch on its way to `targets`.
struct Round<T> {
    targets: Vec<T>,
    deliver: Deliver<T>,
    /// The next target no thread has taken.
    next: AtomicUsize,
    /// Targets done so far.
    done: AtomicUsize,
    /// What their deliveries said, summed.
    delivered: AtomicUsize,
    dropped: AtomicUsize,
    /// The listener's thread, woken by whoever finishes the last delivery.
    waiter: Thread,
}

impl<T: Send + Sync + 'static> Fanout<T> {
    /// `threads` threads deliver, the caller's and `threads - 1` helpers (at most 1: the
    /// caller delivers everything).
    pub(super) fn new(threads: usize, deliver: Deliver<T>) -> Fanout<T> {
        Fanout {
            deliver,
            helpers: threads.saturating_sub(1),
            started: OnceLock::new(),
        }
    }

    /// Delivers to every one of `targets` and returns when all are done, with their outcomes
    /// summed.
    pub(super) fn run(&self, targets: Vec<T>) -> (usize, usize) {
        if targets.len() < SHARED_FROM {
            return targets.iter().map(self.deliver).fold((0, 0), add);
        }
        let helpers = self.started();
        let round = Arc::new(Round {
            targets,
            deliver: self.deliver,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            delivered: AtomicUsize::new(0),
            dropped: AtomicUsize::new(0),
            waiter: thread::current(),
        });
        for helper in helpers {
            helper.hand(round.clone());
        }
        round.work();
        round.wait();
        (
            round.delivered.load(Ordering::Acquire),
            round.dropped.load(Ordering::Acquire),
        )
    }

    fn started(&self) -> &[Arc<Helper<T>>] {
        self.started.get_or_init(|| {
            (0..self.helpers)
                .filter_map(|i| {
                    let helper = Arc::new(Helper {
                        round: Mutex::new(None),
                        stop: AtomicBool::new(false),
                        thread: OnceLock::new(),
                    });
                    let own = helper.clone();
                    let spawned = thread::Builder::new()
                        .name(format!("events-fanout-{i}"))
                        .spawn(move || own.run());
                    match spawned {
                        Ok(_) => Some(helper),
                        Err(e) => {
                            // Its share goes to the others.
                            log::warn!("no fan-out helper thread: {e}");
                            None
                        }
                    }
                })
                .collect()
        })
    }
}

fn add(a: (usize, usize), b: (usize, usize)) -> (usize, usize) {
    (a.0 + b.0, a.1 + b.1)
}

impl<T> Round<T> {
    /// Takes targets one at a time until none is left.
    fn work(&self) {
        let total = self.targets.len();
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(target) = self.targets.get(i) else {
                return;
            };
            let (delivered, dropped) = (self.deliver)(target);
            self.delivered.fetch_add(delivered, Ordering::Relaxed);
            self.dropped.fetch_add(dropped, Ordering::Relaxed);
            if self.done.fetch_add(1, Ordering::AcqRel) + 1 == total {
                self.waiter.unpark();
            }
        }
    }

    /// Waits until every target is done: another thread's last write (one non-blocking send)
    /// is usually over within microseconds, so a short spin comes first.
    fn wait(&self) {
        let total = self.targets.len();
        let mut spins = 0u32;
        while self.done.load(Ordering::Acquire) < total {
            spins += 1;
            if spins < 200 {
                std::hint::spin_loop();
            } else {
                thread::park_timeout(Duration::from_millis(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// Delivered on odd calls, its queue full on even ones.
    fn count(t: &Arc<AtomicU32>) -> (usize, usize) {
        match t.fetch_add(1, Ordering::SeqCst) % 2 {
            0 => (1, 0),
            _ => (0, 1),
        }
    }

    /// Every target gets the event exactly once, whoever delivers it, and the counts add up,
    /// for fan-outs below and above the helpers' threshold, change after change.
    #[test]
    fn every_target_is_delivered_once_per_change() {
        let fanout = Fanout::new(4, count);
        for n in [0, 1, SHARED_FROM - 1, SHARED_FROM, 1000] {
            let targets: Vec<_> = (0..n).map(|_| Arc::new(AtomicU32::new(0))).collect();
            for change in 1..=5u32 {
                let (delivered, dropped) = fanout.run(targets.clone());
                assert_eq!(delivered + dropped, n);
                // Each target alternates: delivered on odd changes, dropped on even ones.
                let expect = if change % 2 == 1 { n } else { 0 };
                assert_eq!(delivered, expect, "{n} targets, change {change}");
                assert!(targets.iter().all(|t| t.load(Ordering::SeqCst) == change));
            }
        }
    }
}
