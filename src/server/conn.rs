//! A client connection's thread: reads request heads (tiny_http, under the guard) and bodies
//! (ours, under a deadline), hands each complete request to the worker pool and waits for its
//! outcome, so that a worker never waits on a client. A stream request it handles itself
//! (`worker::handle`), and then runs the stream (`events::StreamPlan::run`): one thread per
//! stream.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::ahead::{ReadAhead, Screened};
use super::guard::{Conn, Phase};
use super::shared::{Complete, Incoming, Outcome, Shared, Start};
use super::{exit, head, sched, worker};
use crate::admission::{Place, Refusal};
use crate::error::{ApiError, Code};
use crate::events::StreamSocket;
use crate::http::{Response, MAX_BODY};
use crate::router;
use crate::sock;

/// Serves one connection until it closes or becomes a stream; `fd` is the descriptor its accept
/// returned (the write half, open as long as tiny_http's connection or a response writer of it
/// lives). A stream is returned (tiny_http's read half and its descriptor already given up, which
/// `place` is told), for `stream` to run once this function's large frame is off the stack.
#[inline(never)]
pub fn serve(
    mut requests: impl Iterator<Item = Result<tiny_http::Request, impl std::fmt::Debug>>,
    fd: RawFd,
    conn: &Arc<Conn>,
    queue: &Sender<Incoming>,
    shared: &Shared,
    place: &mut Place,
) -> Option<Box<Start>> {
    let app = &shared.app;
    let mut first = true;
    let mut lowered = false;
    let mut ahead = ReadAhead::new(app.config.read_timeout);
    loop {
        conn.arm(Phase::Head { first });
        // The parser reads only a head we saw whole and screened.
        match ahead.screen(fd) {
            Screened::Clear => {}
            Screened::Refuse(e) => {
                // `None`: the guard answered (and shut the socket) meanwhile.
                if conn.disarm(false).is_some() {
                    refuse_before_parser(fd, &e, conn, shared);
                }
                return None;
            }
            Screened::End => {
                conn.disarm(false);
                return None;
            }
        }
        let next = requests.next();
        let too_large = conn.disarm(ahead.saw_head())?;
        let mut rq = match next {
            None => return None,
            Some(Ok(rq)) if first && !same_client(&rq, fd) => {
                // Never seen (the accept told us `fd`): a connection that is not the socket we
                // watch is closed unanswered and counted, never served on a socket not its own.
                log::error!("a connection's socket does not match its request; closing it");
                app.metrics
                    .connections_mismatched
                    .fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Some(Ok(rq)) => {
                ahead.parsed(&rq);
                rq
            }
            // tiny_http has answered a malformed head with 400; nothing follows it.
            Some(Err(e)) => {
                log::debug!("malformed request head: {e:?}");
                return None;
            }
        };
        first = false;
        let lines = head::lines(&rq, &app.config.client_source.header);
        let refused = if app.stopping.load(Ordering::SeqCst) {
            Some(ApiError::from(Refusal::ShuttingDown))
        } else if too_large {
            Some(super::guard::head_refusal(Code::HeaderTooLarge))
        } else {
            // No trustworthy end of this request: answered, then the connection closes.
            framing(&rq, &lines).err()
        };
        if let Some(e) = refused {
            refuse_unread(rq, &e, conn, shared);
            return None;
        }
        let mut req = head::read_request(&rq, lines, Vec::new());
        // A route's screen may refuse the request here, from the head and memory, without a
        // worker: a flood that is already refused costs its connection's thread and nothing
        // else. It looks before the body is asked for (`100 Continue`) or read.
        if let Some((route, e)) = req.as_ref().ok().and_then(|req| router::screen(app, req)) {
            let started = Instant::now();
            let done = conn.begin();
            if !lowered && !from_proxy(&rq, app) {
                lowered = sched::lowest_priority().is_ok();
            }
            exit::log_error(route, &e);
            if expects_continue(&rq) {
                // The client waits for our word before it sends the body: it gets the refusal
                // instead of `100 Continue`, and the connection ends (a body sent anyway is never
                // read as a request). Our read side goes first, so that tiny_http does not wait
                // for that body to discard it.
                sock::shutdown(fd, std::net::Shutdown::Read);
                exit::respond(app, rq, route, Response::from_error(&e), started);
                return None;
            }
            // The client sends its body anyway: read (bounded as always) so that the connection
            // can carry the next request.
            if let Err(body_error) = read_body(&mut rq, app.config.body_timeout) {
                drop(done);
                refuse_unread(rq, &body_error, conn, shared);
                return None;
            }
            exit::respond(app, rq, route, Response::from_error(&e), started);
            drop(done);
            continue;
        }
        let body = match read_body(&mut rq, app.config.body_timeout) {
            Ok(body) => body,
            Err(e) => {
                refuse_unread(rq, &e, conn, shared);
                return None;
            }
        };
        if let Ok(req) = req.as_mut() {
            req.body = body;
        }
        let request = Complete {
            rq,
            req,
            started: Instant::now(),
            done: conn.begin(),
        };
        // A stream request is handled here, on the thread that becomes the stream's: no
        // hand-over to a worker and back (measured: a 5,000-stream storm 17 % sooner).
        let outcome = if request
            .req
            .as_ref()
            .is_ok_and(router::runs_on_its_connection)
        {
            Some(worker::handle(shared, request))
        } else {
            let (outcome, answered) = crate::oneshot::pair();
            if queue.send(Incoming { request, outcome }).is_err() {
                return None;
            }
            answered.recv()
        };
        match outcome {
            Some(Outcome::Answered) => continue,
            Some(Outcome::Stream(mut start)) => {
                start.pipelined = ahead.read_past_end(fd);
                // The read half goes (its descriptor closes); the stream writes on `fd`, the
                // write half, which the stream's writer keeps open.
                drop(requests);
                drop(ahead);
                place.streaming();
                return Some(start);
            }
            None => return None,
        }
    }
}

/// Runs a stream on its connection's thread, to its end. Called with a shallow stack (not from
/// `serve`): the thread holds, for the stream's whole life, every stack page it touches.
#[inline(never)]
pub fn stream(start: Box<Start>, fd: RawFd, shared: &Shared) {
    let Start {
        plan,
        head,
        writer,
        chunked,
        pipelined,
    } = *start;
    // What a stream thread changes about itself waits until the stream has settled
    // (`sched::settle_stream`), past a reconnect storm: done at once, the 5,000 `madvise` calls
    // of a storm were 6 % of its time.
    let mut socket = StreamSocket::new(fd, head, writer, chunked, sched::settle_stream);
    socket.pipelined = pipelined;
    let app = &shared.app;
    plan.run(socket, &shared.watcher, &app.stopping, &app.metrics);
}

/// Whether `fd` is the socket `rq` came on: its peer is the request's.
fn same_client(rq: &tiny_http::Request, fd: RawFd) -> bool {
    rq.remote_addr()
        .is_some_and(|a| sock::peer_addr(fd).is_ok_and(|p| p == *a))
}

/// Whether the client waits for `100 Continue` before it sends the body (tiny_http_fork lets
/// only `Expect: 100-continue` through; it answers any other expectation 417 itself).
fn expects_continue(rq: &tiny_http::Request) -> bool {
    rq.headers().get("Expect").is_some() && rq.body_length() != Some(0)
}

/// Whether the connection comes from a trusted proxy (which carries many clients).
fn from_proxy(rq: &tiny_http::Request, app: &crate::app::App) -> bool {
    rq.remote_addr()
        .is_some_and(|a| app.config.client_source.is_proxy(a.ip()))
}

/// Answers a request whose body we did not read; the connection closes after it.
fn refuse_unread(rq: tiny_http::Request, e: &ApiError, conn: &Arc<Conn>, shared: &Shared) {
    exit::log_error("unread", e);
    // tiny_http drains what is left of a declared body after writing the answer; the guard
    // bounds that. Then the connection closes.
    conn.arm(Phase::Drain);
    let response = Response::from_error(e);
    exit::respond(&shared.app, rq, "unread", response, Instant::now());
    conn.disarm(false);
}

/// Answers a head refused before tiny_http read it, on the raw socket, then ends the
/// connection: our side closes first, and what the client sent is read and dropped (bounded by
/// the guard's drain time and `DRAIN_BYTES`) so that the client reads the answer before the end.
fn refuse_before_parser(fd: RawFd, e: &ApiError, conn: &Arc<Conn>, shared: &Shared) {
    const DRAIN_BYTES: usize = 64 * 1024;
    exit::log_error("unread", e);
    exit::refuse_raw(
        &shared.app.metrics,
        fd,
        sock::peer_addr(fd).ok(),
        "unread",
        e,
    );
    sock::shutdown(fd, std::net::Shutdown::Write);
    conn.arm(Phase::Drain);
    let mut buf = vec![0u8; 4096];
    let mut dropped = 0;
    while dropped < DRAIN_BYTES {
        match sock::recv(fd, &mut buf, false) {
            Ok(0) | Err(_) => break,
            Ok(n) => dropped += n,
        }
    }
    conn.disarm(false);
}

/// RFC 9112 framing of the head (src/http/framing.rs).
fn framing(rq: &tiny_http::Request, lines: &[(String, String)]) -> Result<(), ApiError> {
    let version = rq.http_version();
    let head = crate::http::framing::Head::of((version.0, version.1), lines);
    crate::http::framing::check(&head)
}

/// After `timeout`, a body must keep arriving at this rate (Apache's `MinRate=500`).
const BODY_MIN_RATE: usize = 500;

/// Reads a request body of at most `MAX_BODY` bytes. It must arrive within `timeout` plus one
/// second per `BODY_MIN_RATE` bytes received; every read is also bounded by the socket's read
/// timeout. Bodies up to 1 KiB were already read by tiny_http with the head.
fn read_body(rq: &mut tiny_http::Request, timeout: Duration) -> Result<Vec<u8>, ApiError> {
    if rq.body_length().is_some_and(|n| n > MAX_BODY) {
        return Err(ApiError::new(Code::PayloadTooLarge));
    }
    if rq.body_length() == Some(0) {
        return Ok(Vec::new());
    }
    let started = Instant::now();
    let too_slow = || ApiError::new(Code::RequestTimeout);
    let mut body = Vec::new();
    // On the heap: a connection thread's stack stays small for the stream it may become. Sized
    // to the declared body: an 8 KiB buffer per small login body was a tenth of a refusal's CPU
    // in malloc and free.
    let mut buf = vec![0u8; rq.body_length().map_or(8192, |n| n.clamp(1, 8192))];
    let reader = rq.as_reader();
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return Ok(body),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(too_slow())
            }
            Err(_) => return Err(ApiError::invalid("body", "could not be read")),
        };
        if body.len() + n > MAX_BODY {
            return Err(ApiError::new(Code::PayloadTooLarge));
        }
        body.extend_from_slice(&buf[..n]);
        let allowed = timeout + Duration::from_secs((body.len() / BODY_MIN_RATE) as u64);
        if started.elapsed() > allowed {
            return Err(too_slow());
        }
    }
}
