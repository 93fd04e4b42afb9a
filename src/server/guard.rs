//! The connection guard: deadlines and a size limit for request heads, an idle keep-alive
//! time-out, and a bound on draining a refused body. tiny_http reads heads itself, byte by byte
//! and without limits, on our connection thread; only another thread can stop it. One guard
//! thread per server looks at every connection each tick and, when a limit is passed, answers
//! (if nothing else is being written on the connection) and shuts the socket down, which ends
//! tiny_http's blocked read at once.
//!
//! A connection's socket is only touched while its connection thread has it armed, that is
//! while the thread is inside tiny_http's head parser or a drain and holds the connection (the
//! `ClientSocket` rule).

use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread;
use std::time::{Duration, Instant};

use super::exit;
use crate::error::{ApiError, Code};
use crate::locks::Unpoisoned;
use crate::metrics::Metrics;
use crate::os::ClientSocket;

/// Largest request head (request line and all header lines) we take.
pub const MAX_HEAD: usize = 16 * 1024;
/// tiny_http reads up to this far past the end of a head (its buffer), so a consumed count
/// over `MAX_HEAD + READ_AHEAD` proves a head over `MAX_HEAD`.
const READ_AHEAD: u64 = 1024;
const TICK: Duration = Duration::from_millis(100);
/// How long a stopping server waits for the requests on their way: a new connection's (a load
/// balancer writes it right after its connect) and the rest of a head begun. A client slower
/// than that gets 408 (or, having sent nothing, the close) instead of holding the exit.
const LAST_HEADS: Duration = Duration::from_secs(2);
/// A cut connection whose thread is still reading (its client keeps sending) is aborted after
/// this: time for our answer to leave.
const ABORT_GRACE: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// A request head must be complete this long after the connection started waiting for it.
    pub head: Duration,
    /// A kept-alive connection with nothing in flight closes after this long without a byte.
    pub keep_alive: Duration,
    /// A refused body is drained (so that the client reads our answer) at most this long.
    pub drain: Duration,
}

/// What the connection thread is waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A request head. `first`: the connection's first.
    Head { first: bool },
    /// tiny_http discarding the rest of a body after we answered.
    Drain,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Wait,
    /// Close without a word: idle keep-alive, or a silent new connection.
    Close,
    /// Answer (nothing else is being written) and close.
    Answer(Code),
    /// A response is being written: stop reading and let tiny_http end the connection after it.
    StopReading,
}

/// What the guard knows about an armed connection at one tick.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub phase: Phase,
    /// How long the connection has been waiting for the client: since it was armed or since
    /// its last response was done, whichever is later (for a drain: since it was armed).
    pub waited: Duration,
    /// Requests of this connection not yet fully answered (an open stream counts).
    pub in_flight: usize,
    /// Bytes taken off the socket since it was armed, if looked at this tick.
    pub consumed: Option<u64>,
    /// Bytes of the client wait unread in the kernel (a head being looked at ahead of the
    /// parser, `ahead`), if looked at this tick.
    pub queued: bool,
    /// How long ago the server began to stop, if it has.
    pub stopped: Option<Duration>,
}

/// Whether `consumed` bytes taken off the socket while waiting for one head prove that head
/// larger than `MAX_HEAD`.
fn too_large(consumed: u64) -> bool {
    consumed > MAX_HEAD as u64 + READ_AHEAD
}

/// The guard's rules, apart from the clock and the socket.
pub fn decide(s: Seen, deadlines: &Deadlines) -> Action {
    let first = match s.phase {
        Phase::Drain if s.waited >= deadlines.drain => return Action::StopReading,
        Phase::Drain => return Action::Wait,
        Phase::Head { first } => first,
    };
    let answer = |code| {
        if s.in_flight == 0 {
            Action::Answer(code)
        } else {
            Action::StopReading
        }
    };
    if too_large(s.consumed.unwrap_or(0)) {
        return answer(Code::HeaderTooLarge);
    }
    let started = s.consumed.is_some_and(|n| n > 0) || s.queued;
    // A stopping server waits `LAST_HEADS` at most for the heads on their way.
    let last_heads_over = s.stopped.is_some_and(|t| t >= LAST_HEADS);
    if !started {
        let over = match (first, s.stopped) {
            // A resting connection closes at once when the server stops.
            (false, Some(_)) => true,
            (false, None) => s.waited >= deadlines.keep_alive,
            (true, _) => s.waited >= deadlines.head || last_heads_over,
        };
        // In flight: the client is waiting for us (a slow response, an open stream).
        return if s.in_flight == 0 && over {
            Action::Close
        } else {
            Action::Wait
        };
    }
    if s.waited >= deadlines.head || last_heads_over {
        return answer(Code::RequestTimeout);
    }
    Action::Wait
}

/// One client connection as the guard sees it: its entry in the guard.
pub struct Entry {
    socket: ClientSocket,
    /// The socket's peer, for the account of what the guard answers.
    peer: Option<SocketAddr>,
    state: Mutex<State>,
    in_flight: AtomicUsize,
}

struct State {
    armed: Option<Armed>,
    /// The guard ended this connection while it was armed.
    cut: bool,
    /// When to abort a cut connection whose thread is still inside tiny_http (a client that
    /// keeps sending keeps tiny_http reading after a shutdown).
    abort_at: Option<Instant>,
    last_done: Instant,
}

struct Armed {
    phase: Phase,
    since: Instant,
    /// Bytes taken off the socket when armed.
    base: u64,
}

impl Entry {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unpoisoned()
    }

    /// Arms the guard before tiny_http waits for a head or drains a body.
    pub fn arm(&self, phase: Phase) {
        // Before a connection's first head nothing has been taken off the socket.
        let base = match phase {
            Phase::Head { first: true } => 0,
            _ => self.socket.consumed().unwrap_or(0),
        };
        let mut st = self.state();
        st.armed = Some(Armed {
            phase,
            since: Instant::now(),
            base,
        });
    }

    /// Disarms. `None` if the guard ended the connection meanwhile (what tiny_http returned
    /// must then be dropped: its answer could not be delivered), else whether the bytes taken
    /// off the socket while armed prove a head over `MAX_HEAD`. `seen_small`: the head was seen
    /// whole, shorter than that, before tiny_http read it (`ahead`), so nothing is counted.
    pub fn disarm(&self, seen_small: bool) -> Option<bool> {
        let mut st = self.state();
        st.abort_at = None;
        let armed = st.armed.take()?;
        if st.cut {
            return None;
        }
        if seen_small {
            return Some(false);
        }
        let consumed = self.socket.consumed().unwrap_or(0);
        Some(too_large(consumed.saturating_sub(armed.base)))
    }

    /// Counts a request whose response is being produced, until the returned token drops.
    pub fn begin(self: &Arc<Entry>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }
}

/// A request of a connection that has not been fully answered yet.
pub struct InFlight(Arc<Entry>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.state().last_done = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The guard of one server: its connections and its thread.
pub struct Guard {
    deadlines: Deadlines,
    entries: Mutex<Vec<Weak<Entry>>>,
}

impl Guard {
    pub fn new(deadlines: Deadlines) -> Arc<Guard> {
        Arc::new(Guard {
            deadlines,
            entries: Mutex::new(Vec::new()),
        })
    }

    /// Registers a connection tiny_http accepted on `socket`, from `peer`.
    pub fn watch(&self, socket: ClientSocket, peer: Option<SocketAddr>) -> Arc<Entry> {
        let now = Instant::now();
        let entry = Arc::new(Entry {
            socket,
            peer,
            state: Mutex::new(State {
                armed: None,
                cut: false,
                abort_at: None,
                last_done: now,
            }),
            in_flight: AtomicUsize::new(0),
        });
        let mut entries = self.entries.lock().unpoisoned();
        entries.push(Arc::downgrade(&entry));
        entry
    }

    /// Runs the guard until the server stops and its connections are gone.
    pub fn spawn(
        self: &Arc<Guard>,
        stopping: Arc<AtomicBool>,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<thread::JoinHandle<()>> {
        let guard = self.clone();
        thread::Builder::new()
            .name("conn-guard".into())
            .spawn(move || {
                let mut stopped_at = None;
                loop {
                    thread::sleep(TICK);
                    if stopping.load(Ordering::SeqCst) {
                        stopped_at.get_or_insert_with(Instant::now);
                    }
                    let stopped = stopped_at.map(|t: Instant| t.elapsed());
                    let live: Vec<Arc<Entry>> = {
                        let mut entries = guard.entries.lock().unpoisoned();
                        entries.retain(|c| c.strong_count() > 0);
                        entries.iter().filter_map(Weak::upgrade).collect()
                    };
                    if stopped.is_some() && live.is_empty() {
                        return;
                    }
                    for entry in live {
                        guard.look_at(&entry, stopped, &metrics);
                    }
                }
            })
    }

    /// One connection at one tick: aborts it when its grace is up, else decides what its armed
    /// phase calls for (`decide`) and does it.
    fn look_at(&self, entry: &Entry, stopped: Option<Duration>, metrics: &Metrics) {
        let mut st = entry.state();
        if let Some(at) = st.abort_at {
            // Still inside tiny_http after the grace: the socket is still its own.
            if Instant::now() >= at {
                st.abort_at = None;
                let _ = entry.socket.abort();
                metrics.connections_aborted.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        let Some(seen) = entry.seen(&st, stopped) else {
            return;
        };
        let action = decide(seen, &self.deadlines);
        if action == Action::Wait {
            return;
        }
        entry.act(action, &seen, metrics);
        log::debug!(
            "connection guard: {action:?} in {:?} after {:?}",
            seen.phase,
            seen.waited
        );
        st.armed = None;
        st.cut = true;
        // An answer to an endless head goes out at once; a flood must not go on for long.
        let grace = match action {
            Action::Answer(Code::HeaderTooLarge) => TICK / 2,
            _ => ABORT_GRACE,
        };
        st.abort_at = Some(Instant::now() + grace);
    }
}

impl Entry {
    /// What the guard knows of the connection now, if it is armed.
    fn seen(&self, st: &State, stopped: Option<Duration>) -> Option<Seen> {
        let armed = st.armed.as_ref()?;
        let head = armed.phase != Phase::Drain;
        let waited = match armed.phase {
            Phase::Drain => armed.since.elapsed(),
            Phase::Head { .. } => armed.since.max(st.last_done).elapsed(),
        };
        let consumed = head
            .then(|| self.socket.consumed().ok())
            .flatten()
            .map(|n| n.saturating_sub(armed.base));
        Some(Seen {
            phase: armed.phase,
            waited,
            in_flight: self.in_flight.load(Ordering::SeqCst),
            consumed,
            // Only asked when nothing was taken: a head read ahead is queued, not consumed.
            queued: consumed == Some(0) && self.socket.queued().is_ok_and(|n| n > 0),
            stopped,
        })
    }

    /// Does what `decide` said (anything but waiting), and counts it.
    fn act(&self, action: Action, seen: &Seen, metrics: &Metrics) {
        match action {
            Action::Wait => {}
            Action::Close => {
                self.socket.shutdown(Shutdown::Both);
                metrics
                    .connections_idle_closed
                    .fetch_add(1, Ordering::Relaxed);
            }
            Action::Answer(code) => {
                let refusal = head_refusal(code);
                exit::refuse_raw(metrics, self.socket.as_fd(), self.peer, "guard", &refusal);
                self.socket.shutdown(Shutdown::Both);
                count_cut(metrics, code, seen.phase);
            }
            Action::StopReading => {
                self.socket.shutdown(Shutdown::Read);
                let code = if seen.phase == Phase::Drain {
                    Code::PayloadTooLarge
                } else if too_large(seen.consumed.unwrap_or(0)) {
                    Code::HeaderTooLarge
                } else {
                    Code::RequestTimeout
                };
                count_cut(metrics, code, seen.phase);
            }
        }
    }
}

fn count_cut(metrics: &Metrics, code: Code, phase: Phase) {
    let counter = match (phase, code) {
        (Phase::Drain, _) => &metrics.drains_cut,
        (_, Code::HeaderTooLarge) => &metrics.heads_too_large,
        _ => &metrics.heads_timed_out,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The answer to a head refused for its size (431) or its slowness (408), whoever refuses it.
pub(super) fn head_refusal(code: Code) -> ApiError {
    match code {
        Code::HeaderTooLarge => {
            ApiError::new(code).message("The request head is larger than 16 KiB.")
        }
        Code::RequestTimeout => {
            ApiError::new(code).message("The request head did not arrive in time.")
        }
        _ => ApiError::new(code),
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
