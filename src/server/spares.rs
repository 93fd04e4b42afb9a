//! Connection threads made ahead of need, and kept for the next connection once theirs ends (a
//! thread cache, as Apache's worker MPM and MySQL's `thread_cache_size` keep one).
//!
//! Every connection still has a thread of its own; what changes is who makes it and when. Making
//! a thread (`clone`, its stack, its kernel structures) was three quarters of the accept loop's
//! time: when 5,000 clients reconnected at once, the single accept loop made 5,000 threads one
//! after another, the listen queue overflowed, and the clients it dropped waited a second for
//! their SYN to be sent again (BENCHMARKS.md, "Storm"). Now a spawner thread keeps up to `SPARE`
//! threads waiting; the accept loop hands a connection to one that waits (a hand-over, no
//! `clone`), and makes a thread itself only when none waits. A thread whose connection ended goes
//! back to waiting while fewer than `SPARE` wait, unless its connection changed how the kernel
//! schedules it (`sched`): such a thread ends, so that no connection inherits another's priority.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender, TrySendError};

use super::sched;

/// Threads kept waiting for a connection (counted in the capacity's own threads).
const SPARE: usize = crate::capacity::SPARE_THREADS;

/// How often a waiting thread and the spawner look whether the server stops.
const TICK: Duration = Duration::from_secs(1);

/// A connection's work, run on a thread of its own.
pub type Job = Box<dyn FnOnce() + Send>;

/// The waiting threads and the spawner that refills them.
pub struct Spares {
    /// Zero capacity: a hand-over succeeds only to a thread that waits at that moment.
    handoff: Sender<Job>,
    inner: Arc<Inner>,
}

struct Inner {
    waiting: Receiver<Job>,
    /// Threads waiting or about to wait.
    idle: AtomicUsize,
    /// Tells the spawner that a waiting thread took a connection.
    nudge: Sender<()>,
    stopping: Arc<AtomicBool>,
    stack: usize,
}

impl Spares {
    /// Starts the spawner, which makes `SPARE` threads at once; threads of `stack` bytes.
    pub fn start(stopping: Arc<AtomicBool>, stack: usize) -> io::Result<Spares> {
        let (handoff, waiting) = bounded(0);
        let (nudge, nudges) = bounded(1);
        let inner = Arc::new(Inner {
            waiting,
            idle: AtomicUsize::new(0),
            nudge,
            stopping,
            stack,
        });
        let spawner = inner.clone();
        thread::Builder::new()
            .name("conn-spawner".into())
            .spawn(move || spawner.refill(&nudges))?;
        Ok(Spares { handoff, inner })
    }

    /// Runs `job` on a waiting thread, or on a new one when none waits.
    pub fn run(&self, job: Job) -> io::Result<()> {
        match self.handoff.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
                self.inner.spawn(Some(job))
            }
        }
    }
}

impl Inner {
    fn spawn(self: &Arc<Self>, job: Option<Job>) -> io::Result<()> {
        let inner = self.clone();
        thread::Builder::new()
            .name("conn".into())
            .stack_size(self.stack)
            .spawn(move || inner.serve(job))
            .map(drop)
    }

    /// The spawner: keeps `SPARE` threads waiting.
    fn refill(self: &Arc<Self>, nudges: &Receiver<()>) {
        while !self.stopping.load(Ordering::SeqCst) {
            while self.idle.load(Ordering::SeqCst) < SPARE {
                self.idle.fetch_add(1, Ordering::SeqCst);
                if let Err(e) = self.spawn(None) {
                    self.idle.fetch_sub(1, Ordering::SeqCst);
                    log::warn!("cannot make a spare connection thread: {e}");
                    break;
                }
            }
            let _ = nudges.recv_timeout(TICK);
        }
    }

    /// A connection thread's life: its first job if it was made for one, then waiting (counted
    /// in `idle` while it does) for the next.
    fn serve(&self, mut job: Option<Job>) {
        loop {
            if let Some(work) = job.take() {
                work();
                if !sched::is_default() {
                    return;
                }
                if self.idle.fetch_add(1, Ordering::SeqCst) >= SPARE {
                    self.idle.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
            }
            match self.waiting.recv_timeout(TICK) {
                Ok(work) => {
                    self.idle.fetch_sub(1, Ordering::SeqCst);
                    let _ = self.nudge.try_send(());
                    job = Some(work);
                }
                Err(RecvTimeoutError::Timeout) if !self.stopping.load(Ordering::SeqCst) => {}
                Err(_) => {
                    self.idle.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
            }
        }
    }
}
