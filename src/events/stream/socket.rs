//! A stream's socket, from its response head (sent with the first event) to its end: the socket
//! options, its registration with the watcher, the body run on it through its outlet
//! (`outlet`), and the end (the last chunk, or a reset for a client that stopped reading, then
//! the socket's shutdown). Who may write on it at any moment is the `Writer` hand-off in
//! `signal`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;

use super::body::{self, Msg, Timing};
use super::outlet::SocketOutlet;
use super::signal::{Direct, End, Signals};
use super::watcher::Watcher;
use crate::metrics::Metrics;
use crate::os::ClientSocket;

/// Send buffer of a stream socket: enough for bursts of events, small enough that a client that
/// stops reading fills it soon (and is then ended after the stall time) and that 10,000 stalled
/// streams cannot take gigabytes of kernel memory.
const SEND_BUFFER: usize = 64 * 1024;

/// How much longer than the stall time the kernel waits for acknowledgements (see `prepare`).
const USER_TIMEOUT_MARGIN: Duration = Duration::from_secs(1);

/// The connection a stream runs on, its response head ready to send.
pub struct StreamSocket {
    /// The connection's socket (tiny_http's write half): the head and everything after it are
    /// sent on it directly. Valid while `writer` lives (`ClientSocket`).
    pub socket: ClientSocket,
    /// The response head, not sent yet: it goes in the same write as the first event.
    pub head: Vec<u8>,
    /// tiny_http's writer: kept (it keeps the socket open) and dropped at the end, which shuts
    /// the socket down.
    pub writer: Box<dyn Write + Send>,
    /// HTTP/1.1: each event is one chunk. HTTP/1.0: the body ends with the connection.
    pub chunked: bool,
    /// A request came with the stream's (the parser took it, and it is gone with the read
    /// half): the stream ends at once, as for a request sent later.
    pub pipelined: bool,
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
    stream: StreamSocket,
    watcher: &Watcher,
    stopping: &AtomicBool,
    metrics: &Metrics,
) -> End {
    let StreamSocket {
        socket,
        head,
        writer,
        chunked,
        pipelined,
    } = stream;
    prepare(socket, body.timing);
    let key = watcher.add(socket, body.signals.clone());
    let mut out = SocketOutlet::new(socket, chunked, head);
    let direct = body.timing.direct.then(|| out.direct() as Arc<dyn Direct>);
    let ended = if stopping.load(Ordering::SeqCst) {
        Some(End::Shutdown)
    } else {
        pipelined.then_some(End::Pipelined)
    };
    body::prepare(body.signals, direct, ended);
    let why = body::run(body.rx, body.signals, body.timing, body.opening, &mut out);
    if let Some(key) = key {
        watcher.remove(socket, key);
    }
    out.end(why);
    metrics.streams_ended[why as usize - 1].fetch_add(1, Ordering::Relaxed);
    log::debug!("event stream ended: {}", why.as_str());
    drop(writer);
    why
}

/// A stream socket's options (TCP_NODELAY came with every connection from its listener).
fn prepare(socket: ClientSocket, timing: Timing) {
    let _ = socket.set_send_buffer(SEND_BUFFER);
    // A client that stops reading or vanishes leaves our bytes unacknowledged: the kernel gives
    // the connection up a second after the stall time, which wakes the watcher, and the stream
    // ends as `stalled` (the socket says timed out, `Peer::TimedOut`). Usually the stream's own
    // stall clock ends it first, when its bytes wait in the outlet; when all of them fit in the
    // kernel's buffers, only the kernel can tell. A close or reset by the client is
    // `client_gone`.
    let _ = socket.set_user_timeout(timing.stall + USER_TIMEOUT_MARGIN);
}
