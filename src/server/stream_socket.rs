//! An event stream on its connection's thread: the socket outlet the stream writes to, and the
//! watcher that wakes a stream when its client's socket stirs.
//!
//! Life of a stream (docs/events.md has the picture): the connection thread read the request
//! and a worker authorised it and wrote the response head; the connection thread then drops
//! tiny_http's read half (its descriptor closes: one descriptor per stream), registers the socket
//! with the watcher and runs the stream until something ends it. A FIN, a reset or a pipelined
//! request wakes the watcher's epoll, which pokes the stream; the stream looks at the socket
//! (`sock::peer`, which consumes nothing) and ends itself. The slot is free the moment the
//! stream's plan drops.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::sched;
use crate::events::{Direct, End, Outlet, Sent, Signals, StreamPlan};
use crate::metrics::Metrics;
use crate::sock::{self, Epoll, Peer};

/// Send buffer of a stream socket: enough for bursts of events, small enough that a client that
/// stops reading fills it soon (and is then ended after the stall time) and that 10,000 stalled
/// streams cannot take gigabytes of kernel memory.
const SEND_BUFFER: usize = 64 * 1024;

/// How much longer than the stall time the kernel waits for acknowledgements (see `run`).
const USER_TIMEOUT_MARGIN: Duration = Duration::from_secs(1);

/// A stream whose response head has been written, ready to run on its connection's thread.
pub struct Start {
    pub plan: StreamPlan,
    /// tiny_http's writer: kept (it keeps the descriptor open) and dropped at the end, which
    /// shuts the socket down. Everything after the head is sent on the descriptor directly.
    pub writer: Box<dyn Write + Send>,
    /// HTTP/1.1: each event is one chunk. HTTP/1.0: the body ends with the connection.
    pub chunked: bool,
}

/// Runs a stream on the calling thread (the connection's) until it ends.
pub fn run(start: Start, fd: RawFd, watcher: &Watcher, stopping: &AtomicBool, metrics: &Metrics) {
    let Start {
        plan,
        writer,
        chunked,
    } = start;
    let _ = sock::set_nodelay(fd);
    let _ = sock::set_send_buffer(fd, SEND_BUFFER);
    // A client that vanished acknowledges nothing: the kernel gives up a second after the stall
    // time, which wakes the watcher, and the stream ends as `client_gone`. (A second after: a
    // client that merely stopped reading still acknowledges probes of its closed window, and is
    // ended by the stream's own stall clock first, as `stalled`; with both at the stall time,
    // which came first depended on the load.)
    let _ = sock::set_user_timeout(fd, plan.stall() + USER_TIMEOUT_MARGIN);
    // Woken by the hub, a stream thread waits for the hub to finish its fan-out instead of
    // preempting it: the woken threads then run back to back, without an interrupt each
    // (measured: p99 and CPU per delivery both lower at 1,000 streams x 50 changes/s).
    let _ = sched::batch_scheduling();
    let signals = plan.signals();
    let key = watcher.add(fd, signals.clone());
    if stopping.load(Ordering::SeqCst) {
        signals.end(End::Shutdown);
    }
    let direct = Arc::new(SocketDirect {
        fd,
        chunked,
        rest: Mutex::new(Vec::new()),
    });
    if plan.direct() {
        signals.allow_direct(direct.clone());
    }
    let mut out = SocketOutlet {
        fd,
        chunked,
        buf: Vec::with_capacity(256),
        at: 0,
        direct,
    };
    let why = plan.run(&mut out);
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

/// One epoll instance for every stream socket, and the thread that waits on it.
pub struct Watcher {
    epoll: Epoll,
    streams: Mutex<HashMap<u64, Arc<Signals>>>,
    next: AtomicU64,
}

impl Watcher {
    pub fn start(stopping: Arc<AtomicBool>) -> std::io::Result<Arc<Watcher>> {
        let watcher = Arc::new(Watcher {
            epoll: Epoll::new()?,
            streams: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        });
        let w = watcher.clone();
        thread::Builder::new()
            .name("stream-watch".into())
            .spawn(move || w.watch(&stopping))?;
        Ok(watcher)
    }

    fn watch(&self, stopping: &AtomicBool) {
        let mut keys = Vec::new();
        while !stopping.load(Ordering::SeqCst) || self.open() > 0 {
            keys.clear();
            if let Err(e) = self.epoll.wait(&mut keys, Duration::from_millis(500)) {
                log::error!("stream watcher: {e}");
                thread::sleep(Duration::from_millis(100));
                continue;
            }
            let streams = self.lock();
            for key in &keys {
                // A key removed meanwhile is gone from the map: its event is dropped.
                if let Some(signals) = streams.get(key) {
                    signals.poke();
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Signals>>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watches a stream's socket. `None` if epoll refused it (the stream then notices a closed
    /// client only when a send fails).
    fn add(&self, fd: RawFd, signals: Arc<Signals>) -> Option<u64> {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(key, signals);
        match self.epoll.add(fd, key) {
            Ok(()) => Some(key),
            Err(e) => {
                log::warn!("cannot watch a stream socket: {e}");
                self.lock().remove(&key);
                None
            }
        }
    }

    /// Stops watching; must be called before the descriptor closes.
    fn remove(&self, fd: RawFd, key: u64) {
        self.epoll.remove(fd);
        self.lock().remove(&key);
    }

    /// Ends every stream (shutdown).
    pub fn end_all(&self, why: End) {
        for signals in self.lock().values() {
            signals.end(why);
        }
    }

    /// Streams running now.
    pub fn open(&self) -> usize {
        self.lock().len()
    }
}
