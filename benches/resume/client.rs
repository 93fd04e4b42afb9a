//! One `EventSource`-like client per stream, on a thread of its own: it opens `GET /v1/events`
//! through the proxy from one of 16 loopback addresses, reads the chunked body event by event,
//! keeps the id of the last change (and sends it back as `Last-Event-ID`), and when the body
//! ends or the connection fails it waits the server's `retry` (3 s) and reconnects, as a
//! browser does. A non-200 answer ends a browser's `EventSource` for good; here it is counted
//! and the client starts again as a new `EventSource` would (no `Last-Event-ID`).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

/// The server's `retry`, which an `EventSource` waits before reconnecting.
const RETRY: Duration = Duration::from_millis(3000);
/// How often a reader looks at the stop flag while nothing arrives.
const POLL: Duration = Duration::from_millis(500);

/// How a reconnect was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Resumed,
    Ready,
}

/// One reconnect: when the stream dropped, when `ready` came, and which one.
#[derive(Debug, Clone, Copy)]
pub struct Reconnect {
    pub dropped: Instant,
    pub ready: Instant,
    pub answer: Answer,
}

/// What one client saw.
#[derive(Debug, Default)]
pub struct Record {
    pub first_ready: Option<Instant>,
    /// The `id` field of each change's data (the bench's sequence number), in arrival order.
    pub received: Vec<u64>,
    pub reconnects: Vec<Reconnect>,
    /// Non-200 answers (a browser's `EventSource` would have given up).
    pub failures: u32,
    /// `event: refused` (the client waits and retries, as an `EventSource` does).
    pub refusals: u32,
    pub resyncs: u32,
}

/// What all clients share: the proxy, when to stop, and how many streams are live now.
pub struct Shared {
    pub proxy: SocketAddr,
    pub stop: AtomicBool,
    pub live: AtomicUsize,
}

enum Event {
    Ready(Answer),
    Change { id: String, seq: u64 },
    Resync,
    Refused,
    Other,
}

/// Runs client `i` with API token `token` until `shared.stop`; its record.
pub fn run(i: usize, token: &str, shared: &Shared) -> Record {
    let mut record = Record::default();
    let mut last_id: Option<String> = None;
    let mut dropped: Option<Instant> = None;
    while !shared.stop.load(Ordering::SeqCst) {
        let mut live = false;
        let sent = last_id.clone();
        let outcome = stream(i, token, sent.as_deref(), shared, |event| match event {
            Event::Ready(answer) => {
                let now = Instant::now();
                record.first_ready.get_or_insert(now);
                if let Some(at) = dropped.take() {
                    record.reconnects.push(Reconnect {
                        dropped: at,
                        ready: now,
                        answer,
                    });
                }
                live = true;
                shared.live.fetch_add(1, Ordering::SeqCst);
            }
            Event::Change { id, seq } => {
                record.received.push(seq);
                last_id = Some(id);
            }
            Event::Resync => record.resyncs += 1,
            Event::Refused => record.refusals += 1,
            Event::Other => {}
        });
        if live {
            shared.live.fetch_sub(1, Ordering::SeqCst);
        }
        if record.first_ready.is_some() && dropped.is_none() {
            dropped = Some(Instant::now());
        }
        if let Err(Failure::Status) = outcome {
            record.failures += 1;
            last_id = None;
        }
        sleep_unless_stopped(shared, RETRY);
    }
    record
}

enum Failure {
    /// Not a 200 answer.
    Status,
    /// The connection failed or the body ended.
    Gone,
}

/// One connection: the request, then events until the body ends.
fn stream(
    i: usize,
    token: &str,
    last_id: Option<&str>,
    shared: &Shared,
    mut on: impl FnMut(Event),
) -> Result<(), Failure> {
    let mut s = connect(i, shared.proxy).map_err(|_| Failure::Gone)?;
    let mut req = format!(
        "GET /v1/events HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\
         Authorization: Bearer {token}\r\n"
    );
    if let Some(id) = last_id {
        req.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).map_err(|_| Failure::Gone)?;
    s.set_read_timeout(Some(POLL)).map_err(|_| Failure::Gone)?;
    let mut body = Body::default();
    let status = body.head(&mut s, shared)?;
    if status != 200 {
        return Err(Failure::Status);
    }
    let mut text = String::new();
    while let Some(bytes) = body.next_bytes(&mut s, shared) {
        text.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            on(classify(block.trim_end()));
        }
    }
    Err(Failure::Gone)
}

fn connect(i: usize, proxy: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    let source = Ipv4Addr::new(127, 0, 0, 2 + (i % 16) as u8);
    socket.bind(&SocketAddrV4::new(source, 0).into())?;
    socket.connect_timeout(&proxy.into(), Duration::from_secs(5))?;
    Ok(socket.into())
}

fn classify(block: &str) -> Event {
    let field = |name: &str| {
        block
            .lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim_start().to_string()))
    };
    match field("event:").as_deref() {
        Some("ready") if field("data:").as_deref() == Some("{\"resumed\":true}") => {
            Event::Ready(Answer::Resumed)
        }
        Some("ready") => Event::Ready(Answer::Ready),
        Some("resync") => Event::Resync,
        Some("refused") => Event::Refused,
        Some("change") => {
            let data: serde_json::Value =
                serde_json::from_str(&field("data:").unwrap_or_default()).unwrap_or_default();
            match data["id"].as_u64() {
                Some(seq) => Event::Change {
                    id: field("id:").unwrap_or_default(),
                    seq,
                },
                None => Event::Other,
            }
        }
        _ => Event::Other,
    }
}

/// A response body read incrementally: chunked (a stream) or delimited by its length (a
/// refusal) or by the connection's end.
#[derive(Default)]
struct Body {
    raw: Vec<u8>,
    chunked: bool,
    /// Bytes left by `Content-Length` (not chunked).
    left: Option<usize>,
    ended: bool,
}

impl Body {
    /// Reads more; false at the end (or once stopping).
    fn fill(&mut self, s: &mut TcpStream, shared: &Shared) -> bool {
        let mut buf = [0u8; 8192];
        loop {
            if shared.stop.load(Ordering::SeqCst) {
                return false;
            }
            match s.read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => {
                    self.raw.extend_from_slice(&buf[..n]);
                    return true;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return false,
            }
        }
    }

    fn head(&mut self, s: &mut TcpStream, shared: &Shared) -> Result<u16, Failure> {
        let end = loop {
            if let Some(i) = find(&self.raw, b"\r\n\r\n") {
                break i + 4;
            }
            if !self.fill(s, shared) {
                return Err(Failure::Gone);
            }
        };
        let head = String::from_utf8_lossy(&self.raw[..end]).to_ascii_lowercase();
        self.raw.drain(..end);
        self.chunked = head.contains("transfer-encoding: chunked");
        self.left = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok());
        head.get(9..12)
            .and_then(|c| c.parse().ok())
            .ok_or(Failure::Gone)
    }

    /// The next piece of the body's payload; `None` at its end.
    fn next_bytes(&mut self, s: &mut TcpStream, shared: &Shared) -> Option<Vec<u8>> {
        loop {
            if self.ended {
                return None;
            }
            if let Some(piece) = self.take() {
                return Some(piece);
            }
            if !self.fill(s, shared) {
                return None;
            }
        }
    }

    fn take(&mut self) -> Option<Vec<u8>> {
        if !self.chunked {
            let n = self.raw.len().min(self.left.unwrap_or(usize::MAX));
            if let Some(left) = self.left.as_mut() {
                *left -= n;
                self.ended = *left == 0;
            }
            return (n > 0).then(|| self.raw.drain(..n).collect());
        }
        let line = find(&self.raw, b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&self.raw[..line]).ok()?.trim(), 16).ok()?;
        if self.raw.len() < line + 2 + size + 2 {
            return None;
        }
        let piece = self.raw[line + 2..line + 2 + size].to_vec();
        self.raw.drain(..line + 4 + size);
        self.ended = size == 0;
        Some(piece)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

pub fn sleep_unless_stopped(shared: &Shared, total: Duration) {
    let end = Instant::now() + total;
    while !shared.stop.load(Ordering::SeqCst) && Instant::now() < end {
        thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
    }
}

/// Starts `tokens.len()` clients; their records once `shared.stop` is set.
pub fn start(tokens: Vec<String>, shared: Arc<Shared>) -> Vec<thread::JoinHandle<Record>> {
    tokens
        .into_iter()
        .enumerate()
        .map(|(i, token)| {
            let shared = shared.clone();
            thread::Builder::new()
                .name(format!("client-{i}"))
                .stack_size(128 * 1024)
                .spawn(move || run(i, &token, &shared))
                .expect("a client thread")
        })
        .collect()
}
