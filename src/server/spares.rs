//! Connection threads: made by a spawner thread, ahead of need, and kept for the next connection
//! once theirs ends (a thread cache, as Apache's worker MPM and MySQL's `thread_cache_size` keep
//! one).
//!
//! Every connection still has a thread of its own; what changes is who makes it and when. Making
//! a thread (`clone`, its stack, its kernel structures) was three quarters of the accept loop's
//! time. When 5,000 clients reconnected at once, the accept loop made 5,000 threads one after
//! another, fell behind, the kernel's listen queue overflowed, and each client it dropped waited
//! a second for its SYN to be sent again (BENCHMARKS.md, "Storm"). Now the accept loop only
//! queues a connection's work (`run`): a waiting thread takes it, and the spawner makes threads
//! while more work waits than threads wait, and keeps `SPARE` more waiting. So the accept loop
//! drains the listen queue at the rate it can accept, and connections wait for their thread in
//! our queue (each holds its place in the capacity) instead of in the kernel's.
//!
//! A thread whose connection ended goes back to waiting while fewer than `MAX_IDLE` wait, unless
//! its connection gave it a role (`os::thread::ThreadRole`: how the kernel schedules it): such a thread
//! ends, so that no connection inherits another's priority.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread as std_thread;
use std::time::Duration;

use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};

use crate::os::thread::{self, Job};

/// Threads the spawner keeps waiting for a connection.
const SPARE: usize = crate::capacity::SPARE_THREADS;
/// Threads that may wait at most (a thread whose connection ended waits while fewer wait).
const MAX_IDLE: usize = crate::capacity::MAX_IDLE_THREADS;

/// How often a waiting thread and the spawner look whether the accept loop has ended.
const TICK: Duration = Duration::from_secs(1);

/// The queue of connections waiting for a thread, and the spawner's bell.
pub struct Spares {
    jobs: Sender<Job>,
    inner: Arc<Inner>,
}

struct Inner {
    waiting: Receiver<Job>,
    /// Threads waiting for work, or made and about to wait.
    idle: AtomicUsize,
    /// Rings the spawner: work waits, or a waiting thread took some.
    bell: Sender<()>,
    /// The accept loop, the only source of work, has ended (it still queues the connections it
    /// took while the server stopped).
    accept_ended: Arc<AtomicBool>,
    stack: usize,
}

impl Spares {
    /// Starts the spawner, which makes `SPARE` threads at once; threads of `stack` bytes.
    pub fn start(accept_ended: Arc<AtomicBool>, stack: usize) -> io::Result<Spares> {
        let (jobs, waiting) = unbounded();
        let (bell, rings) = bounded(1);
        let inner = Arc::new(Inner {
            waiting,
            idle: AtomicUsize::new(0),
            bell,
            accept_ended,
            stack,
        });
        let spawner = inner.clone();
        std_thread::Builder::new()
            .name("conn-spawner".into())
            .spawn(move || spawner.spawn_while_needed(&rings))?;
        Ok(Spares { jobs, inner })
    }

    /// Jobs queued that no thread has taken yet.
    pub fn queued(&self) -> usize {
        self.inner.waiting.len()
    }

    /// Queues `job` for a thread of its own: a waiting one, else one the spawner makes.
    pub fn run(&self, job: Job) {
        // Never fails: `inner` holds the receiving side.
        let _ = self.jobs.send(job);
        if self.inner.idle.load(Ordering::SeqCst) <= self.inner.waiting.len() {
            self.inner.ring();
        }
    }
}

impl Inner {
    fn ring(&self) {
        let _ = self.bell.try_send(());
    }

    /// The spawner: makes a thread for each job no waiting thread will take, and keeps `SPARE`
    /// more waiting, until the accept loop has ended and every job it queued has its thread
    /// (connections taken while the server stopped are served).
    fn spawn_while_needed(self: &Arc<Self>, rings: &Receiver<()>) {
        loop {
            while self.idle.load(Ordering::SeqCst) < self.waiting.len() + SPARE {
                self.idle.fetch_add(1, Ordering::SeqCst);
                let inner = self.clone();
                // Without std's signal stack (`os::thread::spawn`): a storm starts thousands at
                // once.
                let made = thread::spawn(self.stack, Box::new(move || inner.serve()));
                if let Err(e) = made {
                    self.idle.fetch_sub(1, Ordering::SeqCst);
                    log::error!("cannot start a connection thread: {e}");
                    // Connections keep waiting (each within its head deadline, which the guard
                    // enforces); try again shortly instead of spinning.
                    std_thread::sleep(Duration::from_millis(50));
                    break;
                }
            }
            if self.accept_ended.load(Ordering::SeqCst) && self.waiting.is_empty() {
                return;
            }
            let _ = rings.recv_timeout(TICK);
        }
    }

    /// A connection thread's life: waiting (counted in `idle`), then a connection, and back to
    /// waiting while fewer than `MAX_IDLE` wait.
    fn serve(&self) {
        thread::name(c"conn-spare");
        loop {
            match self.waiting.recv_timeout(TICK) {
                Ok(work) => {
                    self.idle.fetch_sub(1, Ordering::SeqCst);
                    self.ring();
                    thread::name(c"conn");
                    work();
                    if !thread::unchanged() {
                        return;
                    }
                    thread::name(c"conn-spare");
                    if self.idle.fetch_add(1, Ordering::SeqCst) >= MAX_IDLE {
                        self.idle.fetch_sub(1, Ordering::SeqCst);
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) if !self.accept_ended.load(Ordering::SeqCst) => {}
                Err(_) => {
                    self.idle.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::thread::ThreadRole;
    use std::collections::HashSet;
    use std::thread::ThreadId;

    /// The calling thread's nice value, from `/proc/thread-self/stat` (field 19).
    fn nice() -> i64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        after_name
            .split_whitespace()
            .nth(16)
            .unwrap()
            .parse()
            .unwrap()
    }

    fn on_a_thread<T: Send + 'static>(
        spares: &Spares,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let (tx, rx) = crate::oneshot::pair();
        spares.run(Box::new(move || tx.send(f())));
        rx.recv().expect("the job ran")
    }

    /// Threads are reused connection after connection, except one whose connection lowered its
    /// priority: no later connection runs at that priority.
    #[test]
    fn threads_are_reused_but_never_one_whose_scheduling_changed() {
        let ended = Arc::new(AtomicBool::new(false));
        let spares = Spares::start(ended.clone(), 128 * 1024).unwrap();
        // Every thread starts at the process's nice value (not 0 under `nice -n 5 cargo test`).
        let base = nice();
        let lowered: ThreadId = on_a_thread(&spares, || {
            ThreadRole::RefusingFlood.adopt().unwrap();
            std_thread::current().id()
        });
        let mut seen = HashSet::new();
        for _ in 0..300 {
            let (id, nice) = on_a_thread(&spares, || (std_thread::current().id(), nice()));
            assert_ne!(id, lowered, "the lowered thread took another connection");
            assert_eq!(nice, base, "a connection inherited a lowered priority");
            seen.insert(id);
        }
        assert!(
            seen.len() <= MAX_IDLE,
            "{} threads for 300 connections one after another",
            seen.len()
        );
        ended.store(true, Ordering::SeqCst);
    }
}
