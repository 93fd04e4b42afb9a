//! The outlet a stream's body writes to (`SocketOutlet`): events framed (a chunk each, or bare
//! for HTTP/1.0) and sent on the stream's socket without blocking, what the socket does not take
//! kept for later; and the hub's direct writes on the same socket while the stream's thread
//! sleeps with nothing to send (`SocketDirect`), whose unsent rest the outlet takes back.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use super::body::{Msg, Outlet};
use super::signal::{Direct, End, Sent};
use crate::locks::Unpoisoned;
use crate::os::thread::ThreadRole;
use crate::os::{ClientSocket, Peer};

/// The stream's socket, written without blocking. What the socket does not take stays here
/// (never re-sent, never lost) until the watcher says there is room.
pub(super) struct SocketOutlet {
    socket: ClientSocket,
    chunked: bool,
    buf: Vec<u8>,
    /// Bytes of `buf` already sent.
    at: usize,
    /// The hub's writer on the same socket, and what it left unsent.
    direct: Arc<SocketDirect>,
}

/// Frames one event of the body: a chunk (HTTP/1.1) or the bare event (HTTP/1.0).
fn frame(buf: &mut Vec<u8>, chunked: bool, text: &str) {
    if chunked {
        let _ = write!(buf, "{:x}\r\n", text.len());
        buf.extend_from_slice(text.as_bytes());
        buf.extend_from_slice(b"\r\n");
    } else {
        buf.extend_from_slice(text.as_bytes());
    }
}

/// The hub's direct writes on a stream's socket (`events::Direct`), made only while the
/// stream's thread sleeps with nothing to send; what the socket does not take waits in `rest`
/// for the thread, which sends it first.
pub(super) struct SocketDirect {
    socket: ClientSocket,
    chunked: bool,
    rest: Mutex<Vec<u8>>,
}

impl SocketDirect {
    fn rest(&self) -> MutexGuard<'_, Vec<u8>> {
        self.rest.lock().unpoisoned()
    }
}

impl Direct for SocketDirect {
    fn send(&self, events: &[Msg]) -> Sent {
        let len: usize = events.iter().map(|e| e.len() + 16).sum();
        let mut framed = Vec::with_capacity(len);
        for text in events {
            frame(&mut framed, self.chunked, text);
        }
        // An error (the client is gone) sends nothing; the thread's own send then finds out.
        let sent = self.socket.send_some(&framed).unwrap_or(0);
        if sent == framed.len() {
            return Sent::All;
        }
        self.rest().extend_from_slice(&framed[sent..]);
        if sent > 0 {
            Sent::Part
        } else {
            Sent::Nothing
        }
    }
}

impl Outlet for SocketOutlet {
    fn queue(&mut self, text: &str) {
        frame(&mut self.buf, self.chunked, text);
    }

    fn reclaim(&mut self) {
        let mut rest = self.direct.rest();
        // Nothing of the thread's can be queued here yet: it went idle with an empty outlet.
        self.buf.splice(self.at..self.at, rest.drain(..));
    }

    fn backlog(&self) -> usize {
        self.buf.len() - self.at
    }

    fn settle(&mut self) {
        // Past a reconnect storm: done at once, the 5,000 `madvise` calls of a storm were 6 %
        // of its time.
        let _ = ThreadRole::SettledStream.adopt();
    }

    fn send(&mut self) -> std::io::Result<usize> {
        let mut sent = 0;
        while self.at < self.buf.len() {
            let n = self.socket.send_some(&self.buf[self.at..])?;
            if n == 0 {
                break;
            }
            self.at += n;
            sent += n;
        }
        if self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        }
        Ok(sent)
    }

    fn look(&self) -> Option<End> {
        match self.socket.peer() {
            Peer::Quiet => None,
            Peer::Sent => Some(End::Pipelined),
            Peer::Gone => Some(End::ClientGone),
            Peer::TimedOut => Some(End::Stalled),
        }
    }
}

impl SocketOutlet {
    /// The head waits in the outlet for the first event (`ready`): one write, and one wake-up of
    /// the client, instead of two.
    pub(super) fn new(socket: ClientSocket, chunked: bool, head: Vec<u8>) -> SocketOutlet {
        let mut buf = head;
        buf.reserve(256);
        let direct = Arc::new(SocketDirect {
            socket,
            chunked,
            rest: Mutex::new(Vec::new()),
        });
        SocketOutlet {
            socket,
            chunked,
            buf,
            at: 0,
            direct,
        }
    }

    /// The hub's writer on this outlet's socket.
    pub(super) fn direct(&self) -> Arc<SocketDirect> {
        self.direct.clone()
    }

    /// How the stream ends on the wire, for `why`.
    pub(super) fn end(&mut self, why: End) {
        match why {
            End::ClientGone => {}
            // Nothing can reach a client that stopped reading: reset, so the kernel lets go too.
            End::Stalled => {
                let _ = self.socket.abort();
            }
            _ => self.finish(),
        }
    }

    /// Ends the body (the last chunk) with what the socket takes now; never waits.
    fn finish(&mut self) {
        if self.chunked {
            self.buf.extend_from_slice(b"0\r\n\r\n");
        }
        let _ = self.send();
    }
}
