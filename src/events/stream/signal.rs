//! How a running stream is told to look up: the signals that travel beside its queue (they must
//! get through when it is full) and the thread to wake. Everything that can end a stream goes
//! through here or is found by the stream itself, so the stream's own loop is the one owner of
//! "end this stream".

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use super::body::Msg;

/// The hub's way to write on a stream's connection while the stream's thread sleeps with
/// nothing to send (`Signals::try_direct` decides when): the thread is then not woken for the
/// event at all, which was most of a delivery's cost (see docs/events.md).
pub trait Direct: Send + Sync {
    /// Frames each of `events` and sends them together without blocking; what the socket does
    /// not take is kept for the outlet (`Outlet::reclaim`).
    fn send(&self, events: &[Msg]) -> Sent;
}

/// How much of an event a direct write sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    All,
    /// Some bytes (progress), the rest kept.
    Part,
    /// Nothing (the socket is full, or gone): all of it kept.
    Nothing,
}

/// Why a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum End {
    /// Its session or token was revoked or expired.
    Revoked = 1,
    /// The server is stopping.
    Shutdown = 2,
    /// The client closed the connection (FIN), reset it, or a send failed.
    ClientGone = 3,
    /// The client sent another request on the stream's connection.
    Pipelined = 4,
    /// Nothing could be sent for the stall time, or the kernel gave the connection up with our
    /// bytes unacknowledged (a client that stopped reading, or vanished).
    Stalled = 5,
}

impl End {
    fn from_u8(v: u8) -> Option<End> {
        [
            End::Revoked,
            End::Shutdown,
            End::ClientGone,
            End::Pipelined,
            End::Stalled,
        ]
        .into_iter()
        .find(|e| *e as u8 == v)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            End::Revoked => "revoked",
            End::Shutdown => "shutdown",
            End::ClientGone => "client_gone",
            End::Pipelined => "pipelined",
            End::Stalled => "stalled",
        }
    }
}

/// Who may write on a stream's connection now: exactly one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Writer {
    /// The stream's thread (it is awake, or about to be).
    Thread = 0,
    /// The thread sleeps with nothing to send: the hub may take the connection for one event.
    Idle = 1,
    /// The hub is writing one event (a single non-blocking send).
    Hub = 2,
}

/// A `Writer`, changed atomically: the hand-offs thread -> idle -> hub -> idle | thread.
#[derive(Default)]
struct WriterCell(AtomicU8);

impl WriterCell {
    fn from_u8(v: u8) -> Writer {
        match v {
            1 => Writer::Idle,
            2 => Writer::Hub,
            _ => Writer::Thread,
        }
    }

    fn set(&self, w: Writer) {
        self.0.store(w as u8, Ordering::Release);
    }

    /// `from` becomes `to`; else who holds it now.
    fn hand(&self, from: Writer, to: Writer) -> Result<(), Writer> {
        self.0
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
            .map_err(Self::from_u8)
    }
}

/// The signals of one stream. Every setter wakes the stream's thread (once it runs).
#[derive(Default)]
pub struct Signals {
    ended: AtomicU8,
    dropped: AtomicBool,
    poked: AtomicBool,
    thread: OnceLock<Thread>,
    /// The one writer of the connection now.
    writer: WriterCell,
    /// How the hub writes on the connection while the thread is idle (HTTP layer's).
    direct: OnceLock<Arc<dyn Direct>>,
    /// When the hub last wrote a whole event itself, and last got any byte out
    /// (`since_base` nanoseconds; 0: never).
    direct_at: AtomicU64,
    progress_at: AtomicU64,
}

/// What the hub did while the stream's thread slept (`Signals::take_back`).
pub(in crate::events) struct HubWrites {
    /// When it last wrote a whole event (the ping clock starts again).
    pub event: Option<Instant>,
    /// When it last got any byte out (progress, for the stall clock).
    pub progress: Option<Instant>,
}

/// A process-wide origin for `direct_at`.
fn since_base(t: Instant) -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(|| Instant::now() - Duration::from_secs(1));
    t.saturating_duration_since(base).as_nanos() as u64
}

impl Signals {
    /// Ends the stream (the first reason wins).
    pub fn end(&self, why: End) {
        let _ = self
            .ended
            .compare_exchange(0, why as u8, Ordering::SeqCst, Ordering::SeqCst);
        self.wake();
    }

    /// Changes were dropped: the stream sends `resync` next.
    pub fn flag_resync(&self) {
        self.dropped.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// Something happened on the stream's socket (data, close, room to write): look at it.
    pub fn poke(&self) {
        self.poked.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// Wakes the stream's thread, if it has started: a queued change is waiting.
    pub fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Called by the thread that runs the stream, before it first looks at anything.
    pub(in crate::events) fn attach(&self) {
        let _ = self.thread.set(thread::current());
    }

    /// Lets the hub write events itself while the stream's thread sleeps with nothing to send
    /// (set by the HTTP layer before the stream runs; without it every event goes through the
    /// thread).
    pub fn allow_direct(&self, direct: Arc<dyn Direct>) {
        let _ = self.direct.set(direct);
    }

    /// The hub's fast path for a stream whose queue is empty: if its thread is idle, writes the
    /// events on the connection without waking it (several: changes that waited for the hub,
    /// in one write). True when they were taken care of (sent; or partly sent, the rest left to
    /// the thread, which is woken).
    pub(in crate::events) fn try_direct(&self, events: &[Msg]) -> bool {
        let Some(direct) = self.direct.get() else {
            return false;
        };
        if self.writer.hand(Writer::Idle, Writer::Hub).is_err() {
            return false;
        }
        let sent = direct.send(events);
        let now = since_base(Instant::now());
        if sent != Sent::Nothing {
            self.progress_at.store(now, Ordering::Release);
        }
        if sent == Sent::All {
            self.direct_at.store(now, Ordering::Release);
            self.writer.set(Writer::Idle);
        } else {
            // The rest waits with the outlet: the thread sends it before anything else.
            self.writer.set(Writer::Thread);
            self.wake();
        }
        true
    }

    /// Called by the stream's thread about to sleep with nothing queued anywhere: the hub may
    /// write until `take_back`. A no-op when the HTTP layer allowed no direct writes.
    pub(in crate::events) fn idle(&self) {
        if self.direct.get().is_some() {
            self.writer.set(Writer::Idle);
        }
    }

    /// Called by the stream's thread when it wakes: it is the writer again (after a write of the
    /// hub in progress, which is one non-blocking send). Says what the hub wrote meanwhile.
    pub(in crate::events) fn take_back(&self) -> HubWrites {
        let mut spins = 0u32;
        while let Err(Writer::Hub) = self.writer.hand(Writer::Idle, Writer::Thread) {
            // The hub's write is one non-blocking send; should the hub lose its CPU meanwhile,
            // give it back.
            spins += 1;
            if spins < 100 {
                std::hint::spin_loop();
            } else {
                thread::yield_now();
            }
        }
        let now = Instant::now();
        let when = |at: &AtomicU64| match at.load(Ordering::Acquire) {
            0 => None,
            at => now.checked_sub(Duration::from_nanos(since_base(now).saturating_sub(at))),
        };
        HubWrites {
            event: when(&self.direct_at),
            progress: when(&self.progress_at),
        }
    }

    pub fn ended(&self) -> Option<End> {
        End::from_u8(self.ended.load(Ordering::SeqCst))
    }

    pub(in crate::events) fn take_dropped(&self) -> bool {
        self.dropped.swap(false, Ordering::SeqCst)
    }

    pub(in crate::events) fn take_poke(&self) -> bool {
        self.poked.swap(false, Ordering::SeqCst)
    }

    #[cfg(test)]
    pub fn resync_flagged(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_wins() {
        let s = Signals::default();
        assert_eq!(s.ended(), None);
        s.end(End::Revoked);
        s.end(End::Shutdown);
        assert_eq!(s.ended(), Some(End::Revoked));
    }

    #[test]
    fn the_hub_takes_the_connection_only_from_an_idle_thread() {
        let w = WriterCell::default();
        assert_eq!(w.hand(Writer::Idle, Writer::Hub), Err(Writer::Thread));
        w.set(Writer::Idle);
        assert_eq!(w.hand(Writer::Idle, Writer::Hub), Ok(()));
        assert_eq!(w.hand(Writer::Idle, Writer::Thread), Err(Writer::Hub));
        w.set(Writer::Idle);
        assert_eq!(w.hand(Writer::Idle, Writer::Thread), Ok(()));
    }
}
