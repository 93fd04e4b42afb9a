//! The HTTP server: a tiny_http listener, a fixed pool of request workers, and one dedicated
//! thread per event stream.
//!
//! We run the accept loop ourselves (tiny_http_fork exposes `accept_connection`), give every
//! connection a thread of our own that parses request heads with tiny_http and queues complete
//! requests, and a fixed pool of workers takes them, turns them into `http::Request`, dispatches
//! and responds. A handler that returns `Reply::Stream` gets the raw connection writer: the worker
//! writes the response head and hands the writer to a new stream thread, then goes back to the
//! queue.
//!
//! Defences against tiny_http's known defects live here (see README "Hardening"):
//! - socket timeouts: SO_RCVTIMEO/SO_SNDTIMEO set on the listener are inherited by every accepted
//!   socket, so every single read or write ends after `read_timeout`;
//! - the connection guard (`guard`): a deadline and a 16 KiB limit for each request head, the
//!   idle keep-alive time-out, and a bound on draining a refused body, enforced by a thread that
//!   shuts the socket down (tiny_http never hands us the socket; `sock` finds it);
//! - one thread per connection spawned by us (no task-pool race), at most `max_connections`;
//!   past that a connection is closed at once and counted;
//! - bodies are read on the connection thread under a deadline and a size limit (64 KiB), so a
//!   worker never waits on a client.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use socket2::{Domain, Socket, Type};

use crate::app::{App, Reply};
use crate::error::{ApiError, Code};
use crate::events::{Ender, StreamPlan};
use crate::http::{Method, Request, Response, MAX_BODY};
use crate::router;

mod guard;
#[allow(unsafe_code)]
mod sock;

use guard::{Conn, Guard, InFlight, Limits, Phase};

/// A refused body is drained (so that the client can read our answer) at most this long.
const DRAIN: Duration = Duration::from_secs(5);

/// Stack of an event-stream thread: it only formats small events and blocks on a channel.
const STREAM_STACK: usize = 128 * 1024;

/// A running server; stops on `shutdown` or drop.
pub struct Server {
    pub addr: SocketAddr,
    workers: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
}

/// State shared by the accept loop, connection threads, workers and stream threads.
struct Shared {
    app: Arc<App>,
    requests: Receiver<Incoming>,
    /// Open client connections (each has one connection thread).
    connections: AtomicUsize,
    /// Open streams by peer address (one connection each), to detect requests pipelined behind
    /// a stream: those end the stream and are answered after it (tiny_http answers requests of
    /// one connection in order, so answering first would block a worker for the stream's life).
    streams: Mutex<HashMap<SocketAddr, StreamEntry>>,
    stream_threads: Mutex<Vec<JoinHandle<()>>>,
}

struct StreamEntry {
    /// `None` while the stream request is still being handled (its plan does not exist yet).
    ender: Option<Ender>,
    held: Vec<Incoming>,
}

/// A request whose head and body have both arrived, ready for a worker.
struct Incoming {
    rq: tiny_http::Request,
    body: Vec<u8>,
    /// Held until the response is written (or the stream has ended).
    done: InFlight,
}

/// Requests that may become a stream: a request pipelined behind one must wait for it even
/// before the stream has started, or it would block its worker on tiny_http's ordered writer.
fn may_stream(rq: &tiny_http::Request) -> bool {
    rq.url().split('?').next() == Some("/v1/events")
}

/// Listening socket with the options its accepted sockets inherit.
/// `read_timeout` must be the `read_timeout` the server will be started with: the listener
/// carries it plus the mark by which the accept loop finds each new socket (see `sock`), set
/// before `listen` so that no connection arrives unmarked.
pub fn bind(addr: SocketAddr, read_timeout: Duration) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    // Inherited by accepted sockets on Linux. Write: a client that stops reading cannot hold a
    // writer longer than this. Read: marked here, set to `read_timeout` once accepted.
    socket.set_write_timeout(Some(Duration::from_secs(10)))?;
    socket.set_read_timeout(Some(read_timeout + sock::MARK))?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

impl Server {
    pub fn start(app: Arc<App>, listener: TcpListener) -> io::Result<Server> {
        let addr = listener.local_addr()?;
        let mark = sock::listener_mark(&listener, app.config.read_timeout)?;
        let guard = Guard::new(Limits {
            head: app.config.header_timeout,
            keep_alive: app.config.keep_alive,
            drain: DRAIN,
        });
        guard.spawn(app.stopping.clone(), app.metrics.clone())?;
        let (tx, rx) = bounded::<Incoming>(app.config.workers * 4);
        let shared = Arc::new(Shared {
            app: app.clone(),
            requests: rx,
            connections: AtomicUsize::new(0),
            streams: Mutex::new(HashMap::new()),
            stream_threads: Mutex::new(Vec::new()),
        });
        let accept_shared = shared.clone();
        thread::Builder::new()
            .name("accept".into())
            .spawn(move || accept_loop(&listener, mark, &guard, tx, &accept_shared))?;
        let workers = (0..app.config.workers)
            .map(|i| {
                let shared = shared.clone();
                thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .spawn(move || worker_loop(&shared))
            })
            .collect::<io::Result<Vec<_>>>()?;
        log::info!("listening on http://{addr} with {} workers", workers.len());
        Ok(Server {
            addr,
            workers,
            shared,
        })
    }

    /// Open client connections.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Stops taking requests, lets workers finish the request in hand, ends open streams, and
    /// waits (bounded) for all of it.
    pub fn shutdown(mut self, grace: Duration) {
        self.stop(grace);
    }

    fn stop(&mut self, grace: Duration) {
        self.shared.app.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees `stopping` and closes the listener.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        let deadline = Instant::now() + grace;
        // Streams end at once (they need no worker), and again after the workers have drained
        // the queue, in case one of its requests started a stream meanwhile.
        self.end_streams();
        for w in self.workers.drain(..) {
            join_until(w, deadline);
        }
        self.end_streams();
        let threads: Vec<_> = self
            .shared
            .stream_threads
            .lock()
            .unwrap()
            .drain(..)
            .collect();
        for t in threads {
            join_until(t, deadline);
        }
    }
}

impl Server {
    fn end_streams(&self) {
        for entry in self.shared.streams.lock().unwrap().values() {
            if let Some(ender) = &entry.ender {
                ender.end();
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            self.stop(Duration::from_secs(5));
        }
    }
}

/// File descriptors kept for everything but client connections (database, listener, logs).
const RESERVED_FDS: u64 = 256;

/// Raises this process's soft limit on open files to its hard limit (systemd's default soft
/// limit of 1024 would cap us near 400 connections), and returns the connection cap that the
/// resulting limit allows: each connection holds two descriptors (tiny_http's read and write
/// halves). Past the cap a connection is refused at once instead of failing in `accept`.
pub fn connection_cap(configured: usize) -> usize {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            log::warn!("cannot read or raise the open-file limit: {e}");
            return configured;
        }
    };
    let fits = (limit.saturating_sub(RESERVED_FDS) / 2).max(1) as usize;
    if fits < configured {
        log::warn!(
            "open-file limit {limit} allows {fits} connections, not CONSOLED_MAX_CONNECTIONS={configured}; \
             raise it (ulimit -n, systemd LimitNOFILE)"
        );
    }
    fits.min(configured)
}

/// Stack of a connection thread: tiny_http's head parser needs little.
const CONNECTION_STACK: usize = 256 * 1024;

fn accept_loop(
    listener: &TcpListener,
    mark: Duration,
    guard: &Guard,
    queue: Sender<Incoming>,
    shared: &Arc<Shared>,
) {
    let ssl = tiny_http::SslContextWrap::build_ssl_capabilities(None).expect("no TLS configured");
    let max = connection_cap(shared.app.config.max_connections);
    let metrics = &shared.app.metrics;
    let lfd = listener.as_raw_fd();
    let Ok(tl) = listener.try_clone() else {
        log::error!("cannot clone the listening socket");
        return;
    };
    let tl = tiny_http::Listener::from(tl);
    while !shared.app.stopping.load(Ordering::SeqCst) {
        match sock::wait_readable(lfd, Duration::from_secs(1)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                log::warn!("poll on the listener: {e}");
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        }
        // Where tiny_http's accept will most likely put the new socket.
        let hint = sock::lowest_free(lfd).ok();
        let client = match tiny_http::Server::accept_connection(&tl, &ssl) {
            Ok(Some(client)) => client,
            Ok(None) => continue,
            // The listener's read timeout makes accept() time out: a tick, not an error.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning or giving up.
                log::warn!("accept: {e}");
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if shared.connections.load(Ordering::SeqCst) >= max {
            metrics.connections_refused.fetch_add(1, Ordering::Relaxed);
            drop(client);
            continue;
        }
        // Find the socket and give it its real read time-out (which removes the mark); a
        // connection we cannot guard is not served.
        let fd = sock::find_fresh(listener, mark, hint)
            .filter(|&fd| sock::set_read_timeout(fd, shared.app.config.read_timeout).is_ok());
        let Some(fd) = fd else {
            log::warn!("closed an accepted connection whose socket could not be found");
            metrics
                .connections_unguarded
                .fetch_add(1, Ordering::Relaxed);
            drop(client);
            continue;
        };
        let conn = guard.watch(fd);
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let (queue, shared2) = (queue.clone(), shared.clone());
        let spawned = thread::Builder::new()
            .name("conn".into())
            .stack_size(CONNECTION_STACK)
            .spawn(move || {
                serve_connection(client, &conn, &queue, &shared2);
                drop(conn);
                shared2.connections.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            log::error!("cannot start a connection thread: {e}");
            shared.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
    log::debug!("accept loop stopped");
}

fn join_until(handle: JoinHandle<()>, deadline: Instant) {
    while !handle.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    if handle.is_finished() {
        let _ = handle.join();
    }
}

/// Takes requests until the server stops and the queue is empty: a request that was read
/// before the stop is still answered.
fn worker_loop(shared: &Arc<Shared>) {
    loop {
        match shared.requests.recv_timeout(Duration::from_millis(250)) {
            Ok(incoming) => take(shared, incoming),
            Err(RecvTimeoutError::Timeout) if shared.app.stopping.load(Ordering::SeqCst) => return,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Reads the requests of one connection, heads (tiny_http, under the guard) and bodies (ours,
/// under a deadline), and queues complete requests, so that a worker never waits on a client.
/// A head or body that is too large or too slow, or a request arriving during shutdown, is
/// answered here and ends the connection: what the client sends after it is never read as a
/// request.
fn serve_connection(
    mut requests: impl Iterator<Item = Result<tiny_http::Request, impl std::fmt::Debug>>,
    conn: &Arc<Conn>,
    queue: &Sender<Incoming>,
    shared: &Shared,
) {
    let app = &shared.app;
    let mut first = true;
    let mut quiet = false;
    loop {
        conn.arm(Phase::Head { first, quiet });
        let next = requests.next();
        let Some(too_large) = conn.disarm() else {
            return;
        };
        let mut rq = match next {
            None => return,
            Some(Ok(rq)) => rq,
            // tiny_http has answered a malformed head with 400; nothing follows it.
            Some(Err(e)) => {
                log::debug!("malformed request head: {e:?}");
                return;
            }
        };
        first = false;
        quiet = may_stream(&rq);
        let body = if app.stopping.load(Ordering::SeqCst) {
            Err(ApiError::new(Code::Unavailable).message("The server is shutting down."))
        } else if too_large {
            Err(ApiError::new(Code::HeaderTooLarge)
                .message("The request head is larger than 16 KiB."))
        } else {
            read_body(&mut rq, app.config.body_timeout)
        };
        match body {
            Ok(body) => {
                let done = conn.begin();
                if queue.send(Incoming { rq, body, done }).is_err() {
                    return;
                }
            }
            Err(e) => {
                log_error("unread", &e);
                app.metrics
                    .observe("unread", e.code.status(), Duration::ZERO);
                let path = rq.url().split('?').next().unwrap_or("").to_string();
                // tiny_http drains what is left of a declared body after writing the answer;
                // the guard bounds that. Then the connection closes.
                conn.arm(Phase::Drain);
                respond(rq, router::finish(&path, Response::from_error(&e)));
                conn.disarm();
                return;
            }
        }
    }
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
    let started = Instant::now();
    let too_slow = || ApiError::new(Code::RequestTimeout);
    let mut body = Vec::new();
    let mut buf = [0u8; 8192];
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

/// Handles a request, unless it arrived on a connection whose stream is open: then it is parked
/// and the stream is asked to end, so that it can be answered in order.
fn take(shared: &Arc<Shared>, incoming: Incoming) {
    let rq = &incoming.rq;
    if let Some(peer) = rq.remote_addr().copied() {
        let mut streams = shared.streams.lock().unwrap();
        if let Some(entry) = streams.get_mut(&peer) {
            if let Some(ender) = &entry.ender {
                ender.end();
            }
            entry.held.push(incoming);
            return;
        }
        if may_stream(rq) {
            let entry = StreamEntry {
                ender: None,
                held: Vec::new(),
            };
            streams.insert(peer, entry);
        }
    }
    handle(shared, incoming);
}

fn handle(shared: &Arc<Shared>, incoming: Incoming) {
    let Incoming { rq, body, done } = incoming;
    let started = Instant::now();
    let app = &shared.app;
    let (route, outcome) = match admit(app, &rq)
        .and_then(|()| read_request(&rq, body, &app.config.client_source.header))
    {
        Ok(req) => {
            let result = catch_unwind(AssertUnwindSafe(|| router::dispatch(app, &req)));
            match result {
                Ok((route, reply)) => (route, reply.map(|r| (r, req.path))),
                Err(_) => {
                    app.metrics.panics.fetch_add(1, Ordering::Relaxed);
                    ("panic", Err(ApiError::internal("handler panicked")))
                }
            }
        }
        Err(e) => ("unread", Err(e)),
    };
    let path = rq.url().split('?').next().unwrap_or("").to_string();
    let peer = rq.remote_addr().copied().filter(|_| may_stream(&rq));
    match outcome {
        Ok((Reply::Stream(plan), _)) => {
            app.metrics.observe(route, 200, started.elapsed());
            start_stream(shared, rq, plan, done);
        }
        Ok((Reply::Response(response), _)) => {
            app.metrics
                .observe(route, response.status, started.elapsed());
            respond(rq, router::finish(&path, response));
            answer_held(shared, peer);
        }
        Err(e) => {
            log_error(route, &e);
            app.metrics
                .observe(route, e.code.status(), started.elapsed());
            respond(rq, router::finish(&path, Response::from_error(&e)));
            answer_held(shared, peer);
        }
    }
}

/// Answers, in order, the requests held behind a stream request (that did not become a stream,
/// or whose stream ended).
fn answer_held(shared: &Arc<Shared>, peer: Option<SocketAddr>) {
    let held = peer
        .and_then(|p| shared.streams.lock().unwrap().remove(&p))
        .map(|e| e.held)
        .unwrap_or_default();
    for incoming in held {
        handle(shared, incoming);
    }
}

fn log_error(route: &str, e: &ApiError) {
    match (&e.more.log_detail, e.code) {
        (Some(detail), Code::Internal) => log::error!("{route}: {detail}"),
        (Some(detail), _) => log::warn!("{route}: {}: {detail}", e.code.as_str()),
        // A rate-limit refusal is counted in /metrics, never logged: a flood costs no log line.
        (None, Code::RateLimited) => {}
        (None, _) => log::debug!("{route}: {}", e.code.as_str()),
    }
}

/// Longest request target or header value we accept (431 past it).
const MAX_HEADER_VALUE: usize = 8 * 1024;

const HEADERS: [&str; 11] = [
    "host",
    "cookie",
    "authorization",
    "content-type",
    "origin",
    "sec-fetch-site",
    "x-csrf-token",
    "x-forwarded-for",
    "accept",
    "user-agent",
    "last-event-id",
];

/// Refuses a stream request while this instance has as many streams open as it allows overall
/// (each holds two threads). Checked before the lease is taken, so concurrent stream requests
/// can pass it by at most one per worker.
fn admit(app: &App, rq: &tiny_http::Request) -> Result<(), ApiError> {
    let open = app.metrics.streams_open.load(Ordering::Relaxed);
    if may_stream(rq) && open >= app.config.max_open_streams as u64 {
        return Err(ApiError::new(Code::Unavailable).message(
            "This server has as many event streams open as it allows; try again shortly.",
        ));
    }
    Ok(())
}

/// Converts a tiny_http request and its body into ours.
fn read_request(
    rq: &tiny_http::Request,
    body: Vec<u8>,
    client_header: &str,
) -> Result<Request, ApiError> {
    if rq.url().len() > MAX_HEADER_VALUE {
        return Err(ApiError::new(Code::HeaderTooLarge).message("The request target is too long."));
    }
    let mut req = Request::new(Method::parse(rq.method().as_str()), rq.url());
    req.peer = rq.remote_addr().copied();
    // tiny_http_fork looks headers up by name only; these are all we ever read, plus the one
    // the client address may come from.
    let client_header = Some(client_header).filter(|h| !HEADERS.contains(h));
    req.headers = every_line(rq.headers(), HEADERS.iter().copied().chain(client_header));
    if req.headers.iter().any(|(_, v)| v.len() > MAX_HEADER_VALUE) {
        return Err(ApiError::new(Code::HeaderTooLarge));
    }
    req.body = body;
    Ok(req)
}

/// Every line of each named header, in order. tiny_http's `get` shows only a name's first line;
/// in a copy, each line read is renamed, so that `get` finds the next. (A client's own
/// `X-Forwarded-For` line comes before the one HAProxy appends: reading only the first would let
/// the client choose its address.)
fn every_line<'a>(
    headers: &tiny_http::Headers,
    names: impl Iterator<Item = &'a str>,
) -> Vec<(String, String)> {
    let read: tiny_http::HeaderField = "x-consoled-read".parse().expect("a header name");
    let mut copy: Option<tiny_http::Headers> = None;
    let mut out = Vec::new();
    for name in names {
        if headers.get(name).is_none() {
            continue;
        }
        let copy = copy.get_or_insert_with(|| headers.clone());
        while let Some(h) = copy.get_header_mut(name) {
            out.push((name.to_string(), h.value.as_ref().as_str().to_string()));
            h.field = read.clone();
        }
    }
    out
}

fn respond(rq: tiny_http::Request, response: Response) {
    let mut out = tiny_http::Response::from_data(response.body).with_status_code(response.status);
    for (name, value) in &response.headers {
        match tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            Ok(h) => out.add_header(h),
            Err(_) => log::error!("dropped an invalid response header {name}"),
        }
    }
    if let Err(e) = rq.respond(out) {
        log::debug!("response not delivered: {e}");
    }
}

/// Writes the event-stream head on the raw connection and runs the stream on its own thread.
/// The body is chunked, so that ending a stream (revocation, expiry, shutdown, a pipelined
/// request) is seen by the client at once, whatever the connection does next.
fn start_stream(shared: &Arc<Shared>, rq: tiny_http::Request, plan: StreamPlan, done: InFlight) {
    let peer = rq.remote_addr().copied();
    let http10 = rq.http_version() == &tiny_http::HTTPVersion(1, 0);
    let mut writer = rq.into_writer();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
         X-Accel-Buffering: no\r\n{}\r\n",
        if http10 {
            "Connection: close\r\n"
        } else {
            "Transfer-Encoding: chunked\r\n"
        }
    );
    if writer
        .write_all(head.as_bytes())
        .and_then(|()| writer.flush())
        .is_err()
    {
        answer_held(shared, peer);
        return;
    }
    if let Some(peer) = peer {
        let mut streams = shared.streams.lock().unwrap();
        let entry = streams.entry(peer).or_insert(StreamEntry {
            ender: None,
            held: Vec::new(),
        });
        entry.ender = Some(plan.ender());
        if !entry.held.is_empty() {
            plan.ender().end();
        }
    }
    let shared2 = shared.clone();
    let spawned = thread::Builder::new()
        .name("stream".into())
        .stack_size(STREAM_STACK)
        .spawn(move || {
            let mut body = Framing {
                inner: writer,
                chunked: !http10,
            };
            plan.run(&mut body);
            body.finish();
            drop(body);
            drop(done);
            // Requests pipelined behind the stream are answered now, in order.
            answer_held(&shared2, peer);
        });
    match spawned {
        Ok(t) => {
            let mut threads = shared.stream_threads.lock().unwrap();
            threads.retain(|t| !t.is_finished());
            threads.push(t);
        }
        Err(e) => {
            log::error!("cannot start a stream thread: {e}");
            answer_held(shared, peer);
        }
    }
}

/// Frames each write as one HTTP chunk (or passes it through on a close-delimited body).
struct Framing {
    inner: Box<dyn Write + Send>,
    chunked: bool,
}

impl Write for Framing {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.chunked {
            write!(self.inner, "{:x}\r\n", buf.len())?;
            self.inner.write_all(buf)?;
            self.inner.write_all(b"\r\n")?;
        } else {
            self.inner.write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl Framing {
    fn finish(&mut self) {
        if self.chunked {
            let _ = self.inner.write_all(b"0\r\n\r\n");
        }
        let _ = self.inner.flush();
    }
}
