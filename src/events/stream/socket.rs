//! A stream's socket, from its response head (sent with the first event) to its end: the socket
//! options, its registration with the watcher, the outlet the body writes to, the hub's direct
//! writes on it while the thread sleeps (and what they leave unsent), and the end (the last
//! chunk, or a reset for a client that stopped reading, then the socket's shutdown). Who may
//! write on it at any moment is the `Writer` hand-off in `signal`.

use std::io::Write;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Receiver;

use super::body::{self, Msg, Outlet, Timing};
use super::signal::{Direct, End, Sent, Signals};
use super::watcher::Watcher;
use crate::metrics::Metrics;
use crate::sock::{self, Peer};

/// Send buffer of a stream socket: enough for bursts of events, small enough that a client that
/// stops reading fills it soon (and is then ended after the stall time) and that 10,000 stalled
/// streams cannot take gigabytes of kernel memory.
const SEND_BUFFER: usize = 64 * 1024;

/// How much longer than the stall time the kernel waits for acknowledgements (see `run`).
const USER_TIMEOUT_MARGIN: Duration = Duration::from_secs(1);

/// The connection a stream runs on, its response head ready to send.
pub struct StreamSocket {
    /// The connection's socket (tiny_http's write half): the head and everything after it are
    /// sent on it directly.
    fd: RawFd,
    /// The response head, not sent yet: it goes in the same write as the first event.
    head: Vec<u8>,
    /// tiny_http's writer: kept (it keeps the descriptor open) and dropped at the end, which
    /// shuts the socket down.
    writer: Box<dyn Write + Send>,
    /// HTTP/1.1: each event is one chunk. HTTP/1.0: the body ends with the connection.
    chunked: bool,
    /// The thread's housekeeping once the stream has settled (`Outlet::settle`).
    settle: fn(),
}

impl StreamSocket {
    pub fn new(
        fd: RawFd,
        head: Vec<u8>,
        writer: Box<dyn Write + Send>,
        chunked: bool,
        settle: fn(),
    ) -> StreamSocket {
        StreamSocket {
            fd,
            head,
            writer,
            chunked,
            settle,
        }
    }
}

/// What a stream runs: its queue, its signals, its clock and its first events.
pub struct Body<'a> {
    pub rx: &'a Receiver<Msg>,
    pub signals: &'a Arc<Signals>,
    pub timing: Timing,
    pub opening: &'a [Msg],
}

/// Runs a stream on the calling thread (the connection's) until it ends; the socket is shut
/// down when this returns. Says why it ended.
pub fn run(
    body: Body<'_>,
    socket: StreamSocket,
    watcher: &Watcher,
    stopping: &AtomicBool,
    metrics: &Metrics,
) -> End {
    let StreamSocket {
        fd,
        head,
        writer,
        chunked,
        settle,
    } = socket;
    let Body {
        rx,
        signals,
        timing,
        opening,
    } = body;
    // (TCP_NODELAY was set on every connection at its accept.)
    let _ = sock::set_send_buffer(fd, SEND_BUFFER);
    // A client that vanished acknowledges nothing: the kernel gives up a second after the stall
    // time, which wakes the watcher, and the stream ends as `client_gone`. (A second after: a
    // client that merely stopped reading still acknowledges probes of its closed window, and is
    // ended by the stream's own stall clock first, as `stalled`; with both at the stall time,
    // which came first depended on the load.)
    let _ = sock::set_user_timeout(fd, timing.stall + USER_TIMEOUT_MARGIN);
    let key = watcher.add(fd, signals.clone());
    if stopping.load(Ordering::SeqCst) {
        signals.end(End::Shutdown);
    }
    let direct = Arc::new(SocketDirect {
        fd,
        chunked,
        rest: Mutex::new(Vec::new()),
    });
    if timing.direct {
        signals.allow_direct(direct.clone());
    }
    // The head waits in the outlet for the first event (`ready`): one write, and one wake-up of
    // the client, instead of two.
    let mut buf = head;
    buf.reserve(256);
    let mut out = SocketOutlet {
        fd,
        chunked,
        buf,
        at: 0,
        settle,
        direct,
    };
    let why = body::run(rx, signals, timing, opening, &mut out);
    if let Some(key) = key {
        watcher.remove(fd, key);
    }
    match why {
        End::ClientGone => {}
        // Nothing can reach a client that stopped reading: reset, so the kernel lets go too.
        End::Stalled => {
            let _ = sock::abort(fd);
        }
        _ => out.finish(),
    }
    metrics.streams_ended[why as usize - 1].fetch_add(1, Ordering::Relaxed);
    log::debug!("event stream ended: {}", why.as_str());
    drop(writer);
    why
}

/// The stream's socket, written without blocking. What the socket does not take stays here
/// (never re-sent, never lost) until the watcher says there is room.
struct SocketOutlet {
    fd: RawFd,
    chunked: bool,
    buf: Vec<u8>,
    /// Bytes of `buf` already sent.
    at: usize,
    /// The hub's writer on the same socket, and what it left unsent.
    direct: Arc<SocketDirect>,
    settle: fn(),
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
struct SocketDirect {
    fd: RawFd,
    chunked: bool,
    rest: Mutex<Vec<u8>>,
}

impl Direct for SocketDirect {
    fn send(&self, text: &str) -> Sent {
        let mut framed = Vec::with_capacity(text.len() + 16);
        frame(&mut framed, self.chunked, text);
        // An error (the client is gone) sends nothing; the thread's own send then finds out.
        let sent = sock::send_some(self.fd, &framed).unwrap_or(0);
        if sent == framed.len() {
            return Sent::All;
        }
        self.rest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(&framed[sent..]);
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
        let mut rest = self.direct.rest.lock().unwrap_or_else(|e| e.into_inner());
        // Nothing of the thread's can be queued here yet: it went idle with an empty outlet.
        self.buf.splice(self.at..self.at, rest.drain(..));
    }

    fn backlog(&self) -> usize {
        self.buf.len() - self.at
    }

    fn settle(&mut self) {
        (self.settle)();
    }

    fn send(&mut self) -> std::io::Result<usize> {
        let mut sent = 0;
        while self.at < self.buf.len() {
            let n = sock::send_some(self.fd, &self.buf[self.at..])?;
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
        match sock::peer(self.fd) {
            Peer::Quiet => None,
            Peer::Sent => Some(End::Pipelined),
            Peer::Gone => Some(End::ClientGone),
        }
    }
}

impl SocketOutlet {
    /// Ends the body (the last chunk) with what the socket takes now; never waits.
    fn finish(&mut self) {
        if self.chunked {
            self.buf.extend_from_slice(b"0\r\n\r\n");
        }
        let _ = self.send();
    }
}
