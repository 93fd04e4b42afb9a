//! The HTTP server: a tiny_http listener, a fixed pool of request workers, and one dedicated
//! thread per event stream.
//!
//! tiny_http reads request heads on its own connection threads and queues complete requests;
//! our workers take them, turn them into `http::Request`, dispatch, and respond. A handler that
//! returns `Reply::Stream` gets the raw connection writer: the worker writes the response head
//! and hands the writer to a new stream thread, then goes back to the queue.
//!
//! Defences against tiny_http 0.12's known defects live here (see README "Hardening").

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

use crate::app::{App, Reply};
use crate::error::{ApiError, Code};
use crate::events::{Ender, StreamPlan};
use crate::http::{Method, Request, Response, MAX_BODY};
use crate::router;

/// Stack of an event-stream thread: it only formats small events and blocks on a channel.
const STREAM_STACK: usize = 128 * 1024;

/// A running server; stops on `shutdown` or drop.
pub struct Server {
    pub addr: SocketAddr,
    http: Arc<tiny_http::Server>,
    workers: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
}

/// State shared by workers and stream threads.
struct Shared {
    app: Arc<App>,
    /// Open streams by peer address (one connection each), to detect requests pipelined behind
    /// a stream: those end the stream and are answered after it (tiny_http answers requests of
    /// one connection in order, so answering first would block a worker for the stream's life).
    streams: Mutex<HashMap<SocketAddr, StreamEntry>>,
    stream_threads: Mutex<Vec<JoinHandle<()>>>,
}

struct StreamEntry {
    /// `None` while the stream request is still being handled (its plan does not exist yet).
    ender: Option<Ender>,
    held: Vec<tiny_http::Request>,
}

/// Requests that may become a stream: a request pipelined behind one must wait for it even
/// before the stream has started, or it would block its worker on tiny_http's ordered writer.
fn may_stream(rq: &tiny_http::Request) -> bool {
    rq.url().split('?').next() == Some("/v1/events")
}

pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    // Inherited by accepted sockets on Linux: a client that stops reading cannot hold a writer
    // (a worker or a stream thread) longer than this.
    socket.set_write_timeout(Some(Duration::from_secs(10)))?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

impl Server {
    pub fn start(app: Arc<App>, listener: TcpListener) -> io::Result<Server> {
        let addr = listener.local_addr()?;
        let http = tiny_http::Server::from_listener(listener, None)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let http = Arc::new(http);
        let shared = Arc::new(Shared {
            app: app.clone(),
            streams: Mutex::new(HashMap::new()),
            stream_threads: Mutex::new(Vec::new()),
        });
        let workers = (0..app.config.workers)
            .map(|i| {
                let (http, shared) = (http.clone(), shared.clone());
                thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .spawn(move || worker_loop(&http, &shared))
            })
            .collect::<io::Result<Vec<_>>>()?;
        log::info!("listening on http://{addr} with {} workers", workers.len());
        Ok(Server {
            addr,
            http,
            workers,
            shared,
        })
    }

    /// Stops taking requests, lets workers finish the request in hand, ends open streams, and
    /// waits (bounded) for all of it.
    pub fn shutdown(mut self, grace: Duration) {
        self.stop(grace);
    }

    fn stop(&mut self, grace: Duration) {
        self.shared.app.stopping.store(true, Ordering::SeqCst);
        for _ in 0..self.workers.len() {
            self.http.unblock();
        }
        let deadline = Instant::now() + grace;
        for w in self.workers.drain(..) {
            join_until(w, deadline);
        }
        for entry in self.shared.streams.lock().unwrap().values() {
            if let Some(ender) = &entry.ender {
                ender.end();
            }
        }
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

impl Drop for Server {
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            self.stop(Duration::from_secs(5));
        }
    }
}

fn join_until(handle: JoinHandle<()>, deadline: Instant) {
    while !handle.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    if handle.is_finished() {
        let _ = handle.join();
    }
}

fn worker_loop(http: &tiny_http::Server, shared: &Arc<Shared>) {
    while !shared.app.stopping.load(Ordering::SeqCst) {
        match http.recv_timeout(Duration::from_millis(250)) {
            Ok(Some(rq)) => {
                if !hold_if_pipelined(shared, rq) {
                    continue;
                }
            }
            Ok(None) => continue,
            Err(e) => {
                log::error!("server stopped accepting: {e}");
                return;
            }
        }
    }
}

/// Parks a request that arrived on a connection whose stream is open, and ends that stream.
/// Returns true when the request was parked.
fn hold_if_pipelined(shared: &Arc<Shared>, rq: tiny_http::Request) -> bool {
    let peer = rq.remote_addr().copied();
    let rq = match peer {
        Some(peer) => {
            let mut streams = shared.streams.lock().unwrap();
            match streams.get_mut(&peer) {
                Some(entry) => {
                    if let Some(ender) = &entry.ender {
                        ender.end();
                    }
                    entry.held.push(rq);
                    return true;
                }
                None => {
                    if may_stream(&rq) {
                        let entry = StreamEntry {
                            ender: None,
                            held: Vec::new(),
                        };
                        streams.insert(peer, entry);
                    }
                    rq
                }
            }
        }
        None => rq,
    };
    handle(shared, rq);
    true
}

fn handle(shared: &Arc<Shared>, mut rq: tiny_http::Request) {
    let started = Instant::now();
    let app = &shared.app;
    let (route, outcome) = match read_request(&mut rq) {
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
            start_stream(shared, rq, plan);
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
    for rq in held {
        handle(shared, rq);
    }
}

fn log_error(route: &str, e: &ApiError) {
    match (&e.more.log_detail, e.code) {
        (Some(detail), Code::Internal) => log::error!("{route}: {detail}"),
        (Some(detail), _) => log::warn!("{route}: {}: {detail}", e.code.as_str()),
        (None, _) => log::debug!("{route}: {}", e.code.as_str()),
    }
}

/// Converts a tiny_http request into ours, reading at most `MAX_BODY` bytes of body.
fn read_request(rq: &mut tiny_http::Request) -> Result<Request, ApiError> {
    let mut req = Request::new(Method::parse(rq.method().as_str()), rq.url());
    req.peer = rq.remote_addr().copied();
    req.headers = rq
        .headers()
        .iter()
        .map(|h| {
            (
                h.field.as_str().as_str().to_ascii_lowercase(),
                h.value.as_str().to_string(),
            )
        })
        .collect();
    if rq.body_length().is_some_and(|n| n > MAX_BODY) {
        return Err(ApiError::new(Code::PayloadTooLarge));
    }
    let mut body = Vec::new();
    rq.as_reader()
        .take(MAX_BODY as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|_| ApiError::invalid("body", "could not be read"))?;
    if body.len() > MAX_BODY {
        return Err(ApiError::new(Code::PayloadTooLarge));
    }
    req.body = body;
    Ok(req)
}

fn respond(rq: tiny_http::Request, response: Response) {
    let mut out = tiny_http::Response::from_data(response.body).with_status_code(response.status);
    for (name, value) in &response.headers {
        match tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            Ok(h) => out.add_header(h),
            Err(()) => log::error!("dropped an invalid response header {name}"),
        }
    }
    if let Err(e) = rq.respond(out) {
        log::debug!("response not delivered: {e}");
    }
}

/// Writes the event-stream head on the raw connection and runs the stream on its own thread.
/// The body is chunked, so that ending a stream (revocation, expiry, shutdown, a pipelined
/// request) is seen by the client at once, whatever the connection does next.
fn start_stream(shared: &Arc<Shared>, rq: tiny_http::Request, plan: StreamPlan) {
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
