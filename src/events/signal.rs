//! How a running stream is told to look up: the signals that travel beside its queue (they must
//! get through when it is full) and the thread to wake. Everything that can end a stream goes
//! through here or is found by the stream itself, so the stream's own loop is the one owner of
//! "end this stream".

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::thread::{self, Thread};

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
    /// Nothing could be sent for the stall time (a client that stopped reading, or vanished).
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

/// The signals of one stream. Every setter wakes the stream's thread (once it runs).
#[derive(Default)]
pub struct Signals {
    ended: AtomicU8,
    dropped: AtomicBool,
    poked: AtomicBool,
    thread: OnceLock<Thread>,
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
    pub(super) fn attach(&self) {
        let _ = self.thread.set(thread::current());
    }

    pub fn ended(&self) -> Option<End> {
        End::from_u8(self.ended.load(Ordering::SeqCst))
    }

    pub(super) fn take_dropped(&self) -> bool {
        self.dropped.swap(false, Ordering::SeqCst)
    }

    pub(super) fn take_poke(&self) -> bool {
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
}
