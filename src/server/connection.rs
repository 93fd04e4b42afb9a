//! One client connection, from its hand-over by the accept loop to its end, owned by one value
//! (`Connection`) on the connection's own thread: its socket, tiny_http's reading of it, its
//! entry in the guard and the places it holds. Each request goes through the same steps:
//!
//! 1. `read_head`: the next head, seen whole and screened ahead of the parser (`ahead`), under
//!    the guard's deadline, then parsed by tiny_http;
//! 2. `refuse_early`: what the head alone refuses (too large, its framing), then
//!    the route's screen, before the body is asked for (`100 Continue`) or read;
//! 3. `read_body`: the body, under its deadline and size limit (`body`);
//! 4. `answer`: by a worker, which this thread waits for, so that a worker never waits on a
//!    client; or, for a stream request, here, and the connection becomes the stream's
//!    (`become_stream`: tiny_http's read half goes, one descriptor is left);
//! 5. the end (`run`): a stream runs from the bottom of the thread's job, and what the connection
//!    held (`Held`) is given back when it drops. Once the server stops, a connection ends after
//!    the request in hand: one that arrives as it stops is answered, not refused.

use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::ahead::{ReadAhead, Screened};
use super::answer::{self, answer};
use super::guard::{self, Entry, Phase};
use super::state::{CompleteRequest, ForWorkers, Handoff, Outcome, ReadyStream, ServerState};
use super::{body, exit, head};
use crate::admission::{ConnectionPlace, SharePlace};
use crate::error::{ApiError, Code};
use crate::events::{StreamPlan, StreamSocket};
use crate::http::{Request, Response};
use crate::os::thread::{Job, ThreadRole};
use crate::os::ClientSocket;

/// What an admitted connection holds until it ends; given back, in this order, when it drops.
struct Held {
    /// Its entry in the guard (deadlines and limits of its heads).
    guard: Arc<Entry>,
    /// Its client's share of the connections (none from a trusted proxy).
    _share: Option<SharePlace>,
    /// Its place in this process's capacity (a thread, and its descriptors).
    place: ConnectionPlace,
}

/// A client connection and everything it holds. `P` is tiny_http's connection (its type is
/// private to tiny_http): the requests it parses, each of which answers itself.
pub struct Connection<P> {
    parser: P,
    socket: ClientSocket,
    /// The socket's peer, as its accept gave it.
    peer: Option<SocketAddr>,
    ahead: ReadAhead,
    held: Held,
    state: Arc<ServerState>,
    /// The next head is the connection's first.
    first: bool,
    /// This thread took `ThreadRole::RefusingFlood`.
    lowered: bool,
}

/// A head tiny_http parsed, and whether the bytes taken for it prove it too large.
struct ParsedHead {
    parsed: tiny_http::Request,
    too_large: bool,
}

/// Where a connection goes after a step.
enum Next {
    /// To its next request (this one was answered).
    Request,
    /// To its end.
    End,
    /// To its stream.
    Stream(Box<ReadyStream>),
}

impl<P, E> Connection<P>
where
    P: Iterator<Item = Result<tiny_http::Request, E>> + Send + 'static,
    E: std::fmt::Debug,
{
    /// A connection tiny_http accepted (`parser`) on `socket`, from `peer`, admitted to its
    /// `place` and its client's `share`; from now on under the guard.
    pub fn new(
        parser: P,
        socket: ClientSocket,
        peer: Option<SocketAddr>,
        (place, share): (ConnectionPlace, Option<SharePlace>),
        state: Arc<ServerState>,
    ) -> Connection<P> {
        let held = Held {
            guard: state.guard.watch(socket, peer),
            _share: share,
            place,
        };
        Connection {
            parser,
            socket,
            peer,
            ahead: ReadAhead::new(state.app.config.read_timeout),
            held,
            state,
            first: true,
            lowered: false,
        }
    }

    /// The connection's life, as a connection thread's job (`spares`).
    pub fn into_job(self) -> Job {
        Box::new(move || self.run())
    }

    /// Serves the connection until it ends or becomes a stream, then runs the stream from this
    /// shallow frame (the thread holds, for the stream's whole life, every stack page it
    /// touches), then gives back what it held.
    fn run(self) {
        let state = Arc::clone(&self.state);
        let (held, stream) = self.serve();
        if let Some((plan, socket)) = stream {
            run_stream(&state, plan, socket);
        }
        drop(held);
    }

    /// Its requests, one after another, until it ends or becomes a stream (tiny_http's
    /// connection, and with it the read half, gone). Never inlined, so that its frame is off
    /// the stack before a stream runs.
    #[inline(never)]
    fn serve(mut self) -> (Held, Option<(StreamPlan, StreamSocket)>) {
        let stream = loop {
            let (Ok(next) | Err(next)) = self.request();
            match next {
                // A stopping server answers the request a client has sent (it cannot know to
                // send it elsewhere), then ends the connection instead of waiting for another.
                Next::Request if self.state.app.stopping.load(Ordering::SeqCst) => break None,
                Next::Request => continue,
                Next::Stream(ready) => break Some(self.become_stream(*ready)),
                Next::End => break None,
            }
        };
        (self.held, stream)
    }

    /// One request, through the steps; `Err` where a step answers it early.
    fn request(&mut self) -> Result<Next, Next> {
        let head = self.read_head().ok_or(Next::End)?;
        let (parsed, request) = self.refuse_early(head)?;
        let complete = self.read_body(parsed, request)?;
        Ok(self.answer(complete))
    }

    fn guard(&self) -> &Entry {
        &self.held.guard
    }

    /// Step 1: the next head, or `None` where the connection ends (answered, or closed).
    fn read_head(&mut self) -> Option<ParsedHead> {
        self.guard().arm(Phase::Head { first: self.first });
        // The parser reads only a head we saw whole and screened.
        match self.ahead.screen(self.socket) {
            Screened::Clear => {}
            Screened::Refuse(e) => {
                // `None`: the guard answered (and shut the socket) meanwhile.
                if self.guard().disarm(false).is_some() {
                    self.refuse_before_parser(&e);
                }
                return None;
            }
            Screened::End => {
                self.guard().disarm(false);
                return None;
            }
        }
        let next = self.parser.next();
        // `None`: the guard ended the connection meanwhile; what tiny_http returned is dropped.
        let too_large = self.guard().disarm(self.ahead.saw_head())?;
        let parsed = self.parsed(next?)?;
        Some(ParsedHead { parsed, too_large })
    }

    /// What the parser returned: a request of this connection's client, or the end.
    fn parsed(&mut self, next: Result<tiny_http::Request, E>) -> Option<tiny_http::Request> {
        let parsed = match next {
            Ok(parsed) => parsed,
            // tiny_http has answered a malformed head with 400; nothing follows it.
            Err(e) => {
                log::debug!("malformed request head: {e:?}");
                return None;
            }
        };
        if std::mem::take(&mut self.first) && !self.same_client(&parsed) {
            // Never seen (the accept told us the socket): a connection that is not the socket
            // we watch is closed unanswered and counted, never served on a socket not its own.
            log::error!("a connection's socket does not match its request; closing it");
            let metrics = &self.state.app.metrics;
            metrics
                .connections_mismatched
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.ahead.parsed(&parsed);
        Some(parsed)
    }

    /// Whether the socket is the one `parsed` came on: its peer (the address its accept gave,
    /// which is the socket's `getpeername`) is the request's.
    fn same_client(&self, parsed: &tiny_http::Request) -> bool {
        parsed.remote_addr().is_some_and(|a| self.peer == Some(*a))
    }

    /// Step 2: what the head alone refuses, then the route's screen. Either answers the
    /// request here (`Err`); else the request as the application reads it (or why it cannot).
    fn refuse_early(
        &mut self,
        head: ParsedHead,
    ) -> Result<(tiny_http::Request, RequestRead), Next> {
        let ParsedHead { parsed, too_large } = head;
        let app = &self.state.app;
        let lines = head::lines(&parsed, &app.config.client_source.header);
        let refused = if too_large {
            Some(guard::head_refusal(Code::HeaderTooLarge))
        } else {
            // No trustworthy end of this request: answered, then the connection closes.
            framing(&parsed, &lines).err()
        };
        if let Some(e) = refused {
            self.refuse_unread(parsed, &e);
            return Err(Next::End);
        }
        let request = head::read_request(&parsed, lines, Vec::new());
        match request.as_ref().ok().and_then(|r| answer::screen(app, r)) {
            Some((route, e)) => Err(self.screened(parsed, route, &e)),
            None => Ok((parsed, request)),
        }
    }

    /// Answers a request its route's screen refused, from the head and memory, without a
    /// worker: a flood that is already refused costs its connection's thread and nothing else.
    fn screened(
        &mut self,
        mut parsed: tiny_http::Request,
        route: &'static str,
        e: &ApiError,
    ) -> Next {
        let started = Instant::now();
        let answering = self.held.guard.begin();
        self.lower_unless_proxy(&parsed);
        exit::log_error(route, e);
        let app = Arc::clone(&self.state.app);
        if expects_continue(&parsed) {
            // The client waits for our word before it sends the body: it gets the refusal
            // instead of `100 Continue`, and the connection ends (a body sent anyway is never
            // read as a request). Our read side goes first, so that tiny_http does not wait
            // for that body to discard it.
            self.socket.shutdown(Shutdown::Read);
            exit::respond(&app, parsed, route, Response::from_error(e), started);
            return Next::End;
        }
        // The client sends its body anyway: read (bounded as always) so that the connection
        // can carry the next request.
        if let Err(unread) = body::read(&mut parsed, app.config.body_timeout) {
            drop(answering);
            self.refuse_unread(parsed, &unread);
            return Next::End;
        }
        exit::respond(&app, parsed, route, Response::from_error(e), started);
        drop(answering);
        Next::Request
    }

    /// A refused flood's thread runs at the lowest priority from then on, unless its
    /// connection comes from a trusted proxy (which carries many clients).
    fn lower_unless_proxy(&mut self, parsed: &tiny_http::Request) {
        let source = &self.state.app.config.client_source;
        let from_proxy = parsed
            .remote_addr()
            .is_some_and(|a| source.is_proxy(a.ip()));
        if !self.lowered && !from_proxy {
            self.lowered = ThreadRole::RefusingFlood.adopt().is_ok();
        }
    }

    /// Step 3: the body, read here; a body that cannot be read is answered, and the connection
    /// ends.
    fn read_body(
        &mut self,
        mut parsed: tiny_http::Request,
        mut request: RequestRead,
    ) -> Result<CompleteRequest, Next> {
        match body::read(&mut parsed, self.state.app.config.body_timeout) {
            Ok(body) => {
                if let Ok(request) = request.as_mut() {
                    request.body = body;
                }
                let started = Instant::now();
                Ok(CompleteRequest {
                    parsed,
                    request,
                    started,
                })
            }
            Err(e) => {
                self.refuse_unread(parsed, &e);
                Err(Next::End)
            }
        }
    }

    /// Step 4: the answer. A stream request is answered here, on the thread that becomes the
    /// stream's: no hand-over to a worker and back (measured: a 5,000-stream storm 17 % sooner).
    fn answer(&mut self, complete: CompleteRequest) -> Next {
        let answering = self.held.guard.begin();
        let outcome = if answer::on_its_connection(&complete) {
            Some(answer(&self.state, complete))
        } else {
            self.by_a_worker(complete)
        };
        drop(answering);
        match outcome {
            Some(Outcome::Answered) => Next::Request,
            Some(Outcome::Stream(ready)) => Next::Stream(ready),
            None => Next::End,
        }
    }

    /// Hands the request to a worker and waits for what became of it.
    fn by_a_worker(&self, request: CompleteRequest) -> Option<Outcome> {
        let (outcome, answered) = crate::oneshot::pair();
        let handoff = Handoff { request, outcome };
        self.state
            .to_workers
            .send(ForWorkers::Request(handoff))
            .ok()?;
        answered.recv()
    }

    /// The connection becomes its stream's. Its socket, the head to send and tiny_http's
    /// writer (which keeps the socket open) go to the stream; the read half goes with the
    /// connection's parser when `serve` returns, and the place holds one descriptor from then.
    fn become_stream(&mut self, ready: ReadyStream) -> (StreamPlan, StreamSocket) {
        let ReadyStream {
            plan,
            head,
            writer,
            chunked,
        } = ready;
        self.held.place.streaming();
        let socket = StreamSocket {
            socket: self.socket,
            head,
            writer,
            chunked,
            // Bytes of another request came with the stream's (tiny_http took them with it).
            pipelined: self.ahead.read_past_end(self.socket),
        };
        (plan, socket)
    }

    /// Answers a request whose body we did not read; the connection closes after it.
    fn refuse_unread(&self, parsed: tiny_http::Request, e: &ApiError) {
        exit::log_error("unread", e);
        // tiny_http drains what is left of a declared body after writing the answer; the guard
        // bounds that. Then the connection closes.
        self.guard().arm(Phase::Drain);
        let response = Response::from_error(e);
        exit::respond(&self.state.app, parsed, "unread", response, Instant::now());
        self.guard().disarm(false);
    }

    /// Answers a head refused before tiny_http read it, on the raw socket, then ends the
    /// connection: our side closes first, and what the client sent is read and dropped (bounded
    /// by the guard's drain time and `DRAIN_BYTES`) so that the client reads the answer first.
    fn refuse_before_parser(&self, e: &ApiError) {
        const DRAIN_BYTES: usize = 64 * 1024;
        exit::log_error("unread", e);
        let metrics = &self.state.app.metrics;
        exit::refuse_raw(metrics, self.socket.as_fd(), self.peer, "unread", e);
        self.socket.shutdown(Shutdown::Write);
        self.guard().arm(Phase::Drain);
        let mut buf = vec![0u8; 4096];
        let mut dropped = 0;
        while dropped < DRAIN_BYTES {
            match self.socket.recv(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => dropped += n,
            }
        }
        self.guard().disarm(false);
    }
}

/// A request as the application reads it, or why it cannot be read.
type RequestRead = Result<Request, ApiError>;

/// Runs a stream on its connection's thread, to its end; the plan drops after the last chunk.
#[inline(never)]
fn run_stream(state: &ServerState, plan: StreamPlan, socket: StreamSocket) {
    let app = &state.app;
    plan.run(socket, &state.watcher, &app.stopping, &app.metrics);
}

/// Whether the client waits for `100 Continue` before it sends the body (tiny_http_fork lets
/// only `Expect: 100-continue` through; it answers any other expectation 417 itself).
fn expects_continue(parsed: &tiny_http::Request) -> bool {
    parsed.headers().get("Expect").is_some() && parsed.body_length() != Some(0)
}

/// RFC 9112 framing of the head (src/http/framing.rs).
fn framing(parsed: &tiny_http::Request, lines: &[(String, String)]) -> Result<(), ApiError> {
    let version = parsed.http_version();
    let head = crate::http::framing::Head::of((version.0, version.1), lines);
    crate::http::framing::well_framed(&head)
}
