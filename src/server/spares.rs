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

use std::collections::VecDeque;
use std::ffi::CStr;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread as std_thread;
use std::time::Duration;

use crate::locks::Unpoisoned;
use crate::os::thread::{self, Job};

/// Threads the spawner keeps waiting for a connection.
const SPARE: usize = crate::capacity::SPARE_THREADS;
/// Threads that may wait at most (a thread whose connection ended waits while fewer wait).
const MAX_IDLE: usize = crate::capacity::MAX_IDLE_THREADS;

/// Room for queued jobs kept once the queue is empty again (a storm queues thousands).
const QUEUE_KEPT: usize = 64;

/// How long a waiting thread and the spawner sleep before they look again whether the accept
/// loop has ended. Only a fallback: its end wakes them (`wake_all`), so that a quiet server's
/// waiting threads sleep (they woke once a second each).
const TICK: Duration = Duration::from_secs(60);

/// The queue of connections waiting for a thread, and the spawner's bell.
///
/// A mutex and two condition variables, not a channel: a channel's receive spins and calls
/// `sched_yield` before it sleeps, and its senders and receivers spin on one another's half-done
/// steps. During a storm thousands of runnable threads share two CPUs, so each yield was a
/// context switch and a preempted sender kept every receiver yielding (BENCHMARKS.md, fifth
/// sitting). Here a thread with nothing to take sleeps at once, and one is woken per job.
pub struct Spares {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Spare threads sleep on it for work.
    work: Condvar,
    /// The spawner sleeps on it.
    bell: Condvar,
    /// The accept loop, the only source of work, has ended (it still queues the connections it
    /// took while the server stopped).
    accept_ended: Arc<AtomicBool>,
    stack: usize,
}

struct State {
    jobs: VecDeque<Job>,
    /// Threads waiting for work, or made and about to wait.
    idle: usize,
    /// Threads asleep on `work`, and of them those already woken (one per job queued): so that
    /// a job wakes a sleeper only if none is already on its way.
    asleep: usize,
    woken: usize,
    /// The spawner is asleep on `bell` (waking it is a system call, so only then).
    spawner_asleep: bool,
}

impl State {
    /// The spawner has threads to make: fewer wait than the jobs queued and `SPARE` more.
    fn short(&self) -> bool {
        self.idle < self.jobs.len() + SPARE
    }
}

impl Spares {
    /// Starts the spawner, which makes `SPARE` threads at once; threads of `stack` bytes.
    pub fn start(accept_ended: Arc<AtomicBool>, stack: usize) -> io::Result<Spares> {
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                idle: 0,
                asleep: 0,
                woken: 0,
                spawner_asleep: false,
            }),
            work: Condvar::new(),
            bell: Condvar::new(),
            accept_ended,
            stack,
        });
        let spawner = inner.clone();
        std_thread::Builder::new()
            .name("conn-spawner".into())
            .spawn(move || spawner.spawn_while_needed())?;
        Ok(Spares { inner })
    }

    /// Jobs queued that no thread has taken yet.
    pub fn queued(&self) -> usize {
        self.inner.lock().jobs.len()
    }

    /// Wakes every waiting thread and the spawner, to see that the accept loop has ended (its
    /// flag is set first).
    pub fn wake_all(&self) {
        // Taken and let go, so that a thread that read the flag before it was set is asleep
        // already, and woken.
        drop(self.inner.lock());
        self.inner.work.notify_all();
        self.inner.bell.notify_all();
    }

    /// Queues `job` for a thread of its own: a waiting one, else one the spawner makes.
    pub fn run(&self, job: Job) {
        let (wake_spare, wake_spawner) = {
            let mut s = self.inner.lock();
            s.jobs.push_back(job);
            let wake_spare = s.asleep > s.woken;
            if wake_spare {
                s.woken += 1;
            }
            (wake_spare, s.spawner_asleep && s.short())
        };
        // After the lock is free, so that the woken thread does not sleep again on it.
        if wake_spare {
            self.inner.work.notify_one();
        }
        if wake_spawner {
            self.inner.bell.notify_one();
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unpoisoned()
    }

    fn ended(&self) -> bool {
        self.accept_ended.load(Ordering::SeqCst)
    }

    /// The spawner: makes a thread for each job no waiting thread will take, and keeps `SPARE`
    /// more waiting, until the accept loop has ended and every job it queued has its thread
    /// (connections taken while the server stopped are served).
    fn spawn_while_needed(self: &Arc<Self>) {
        let mut s = self.lock();
        loop {
            while s.short() {
                s.idle += 1;
                drop(s);
                let inner = self.clone();
                // Without std's signal stack (`os::thread::spawn`): a storm starts thousands at
                // once.
                let made = thread::spawn(self.stack, Box::new(move || inner.serve()));
                s = self.lock();
                if let Err(e) = made {
                    s.idle -= 1;
                    log::error!("cannot start a connection thread: {e}");
                    // Connections keep waiting (each within its head deadline, which the guard
                    // enforces); try again shortly instead of spinning.
                    drop(s);
                    std_thread::sleep(Duration::from_millis(50));
                    s = self.lock();
                    break;
                }
            }
            if self.ended() && s.jobs.is_empty() {
                return;
            }
            if !s.short() {
                s.spawner_asleep = true;
                s = self.bell.wait_timeout(s, TICK).unpoisoned().0;
                s.spawner_asleep = false;
            }
        }
    }

    /// The next job for a thread counted in `idle`, once one is queued; `None` when the accept
    /// loop has ended and none is left (the thread is no longer counted then). A thread about to
    /// sleep is named `conn-spare` first (`name`: its name now).
    fn take(&self, name: &mut Name) -> Option<Job> {
        let mut s = self.lock();
        loop {
            if let Some(job) = s.jobs.pop_front() {
                s.idle -= 1;
                if s.jobs.is_empty() && s.jobs.capacity() > QUEUE_KEPT {
                    // A storm's queue is not kept for the rest of the process's life.
                    s.jobs.shrink_to(QUEUE_KEPT);
                }
                // Fewer wait than `SPARE` beyond the jobs queued: the spawner makes another.
                let wake_spawner = s.spawner_asleep && s.short();
                drop(s);
                if wake_spawner {
                    self.bell.notify_one();
                }
                return Some(job);
            }
            if self.ended() {
                s.idle -= 1;
                return None;
            }
            if name.0 != SPARE_NAME {
                drop(s);
                name.set(SPARE_NAME);
                s = self.lock();
                continue;
            }
            s.asleep += 1;
            s = self.work.wait_timeout(s, TICK).unpoisoned().0;
            s.asleep -= 1;
            s.woken = s.woken.saturating_sub(1);
        }
    }

    /// A connection thread's life: waiting (counted in `idle`), then a connection, and back to
    /// waiting while fewer than `MAX_IDLE` wait.
    fn serve(&self) {
        // Made by the spawner, a thread starts with its name.
        let mut name = Name(c"conn-spawner");
        while let Some(work) = self.take(&mut name) {
            name.set(SERVING_NAME);
            work();
            if !thread::unchanged() {
                return;
            }
            let mut s = self.lock();
            if s.idle >= MAX_IDLE {
                return;
            }
            s.idle += 1;
        }
    }
}

/// What `ps -L` shows of a connection thread: `conn-spare` while it waits, `conn` while it
/// serves.
const SPARE_NAME: &CStr = c"conn-spare";
const SERVING_NAME: &CStr = c"conn";

/// A connection thread's name, changed only when it differs (each change is a system call): a
/// new thread that finds a job at once (a storm) is named once, and one that takes the next job
/// without waiting keeps its name.
struct Name(&'static CStr);

impl Name {
    fn set(&mut self, name: &'static CStr) {
        if self.0 != name {
            thread::name(name);
            self.0 = name;
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
        spares.wake_all();
    }

    /// Once the accept loop has ended, the spawner and every thread, waiting or done with its
    /// connection, end (each lets go of what they share).
    #[test]
    fn every_thread_ends_once_the_accept_loop_has_ended() {
        let ended = Arc::new(AtomicBool::new(false));
        let spares = Spares::start(ended.clone(), 128 * 1024).unwrap();
        let jobs: Vec<_> = (0..100)
            .map(|_| {
                let (tx, rx) = crate::oneshot::pair();
                spares.run(Box::new(move || tx.send(())));
                rx
            })
            .collect();
        for rx in jobs {
            rx.recv().expect("the job ran");
        }
        ended.store(true, Ordering::SeqCst);
        spares.wake_all();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while Arc::strong_count(&spares.inner) > 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "{} threads left",
                Arc::strong_count(&spares.inner) - 1
            );
            std_thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(spares.inner.lock().idle, 0);
    }
}
