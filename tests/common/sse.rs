//! An incremental Server-Sent-Events reader over a raw TCP connection: reads the chunked body
//! chunk by chunk with deadlines, so a test sees each event when it arrives (or that none came).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One SSE block, or what happened instead.
#[derive(Debug, Clone, PartialEq)]
pub enum Ev {
    Ready,
    /// `ready` with `{"resumed":true}`: the changes missed follow.
    Resumed,
    Change(Value),
    Resync,
    Ping,
    /// The server ended the body (terminating chunk) or closed the connection.
    End,
    Timeout,
    Other(String),
}

pub struct Sse {
    pub stream: TcpStream,
    pub status: u16,
    /// The response head as received, and the body bytes when not an event stream.
    pub head: String,
    pub body: Vec<u8>,
    /// Every byte received so far (head included).
    pub raw: Vec<u8>,
    pos: usize,
    text: String,
    ended: bool,
    /// The id of the last change received (what an EventSource sends back as `Last-Event-ID`).
    pub last_id: Option<String>,
}

/// Opens `GET /v1/events` with extra headers and reads the response head (and, for an error,
/// its body).
pub fn open(addr: SocketAddr, headers: &[(&str, &str)]) -> Sse {
    let stream = TcpStream::connect(addr).expect("connect");
    open_on(stream, addr, headers)
}

pub fn open_on(mut stream: TcpStream, addr: SocketAddr, headers: &[(&str, &str)]) -> Sse {
    let mut req = format!("GET /v1/events HTTP/1.1\r\nHost: {addr}\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).unwrap();
    read_on(stream)
}

/// Reads a response to a request already sent on `stream`.
pub fn read_on(stream: TcpStream) -> Sse {
    let mut sse = Sse {
        stream,
        status: 0,
        head: String::new(),
        body: Vec::new(),
        raw: Vec::new(),
        pos: 0,
        text: String::new(),
        ended: false,
        last_id: None,
    };
    sse.read_head(Duration::from_secs(10));
    sse
}

impl Sse {
    fn fill(&mut self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        self.stream.set_read_timeout(Some(left)).unwrap();
        let mut buf = [0u8; 16384];
        match self.stream.read(&mut buf) {
            Ok(0) => {
                self.ended = true;
                false
            }
            Ok(n) => {
                self.raw.extend_from_slice(&buf[..n]);
                true
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                false
            }
            Err(_) => {
                self.ended = true;
                false
            }
        }
    }

    fn read_head(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(i) = find(&self.raw, b"\r\n\r\n") {
                self.head = String::from_utf8_lossy(&self.raw[..i + 4]).to_string();
                self.pos = i + 4;
                break;
            }
            assert!(self.fill(deadline), "no response head");
        }
        self.status = self.head[9..12].parse().unwrap();
        // An error, or a complete answer such as an `event: refused` (a stream is chunked).
        if self.status != 200 || self.header("content-length").is_some() {
            let len: usize = self
                .header("content-length")
                .map(|v| v.parse().unwrap())
                .unwrap_or(0);
            while self.raw.len() < self.pos + len {
                assert!(self.fill(deadline), "short error body");
            }
            self.body = self.raw[self.pos..self.pos + len].to_vec();
        }
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON error body")
    }

    /// The next complete chunk's payload; `Err(true)` at the end, `Err(false)` on timeout.
    fn chunk(&mut self, deadline: Instant) -> Result<Vec<u8>, bool> {
        loop {
            if let Some(c) = self.parse_chunk() {
                return c;
            }
            if self.ended {
                return Err(true);
            }
            if !self.fill(deadline) && !self.ended {
                return Err(false);
            }
        }
    }

    fn parse_chunk(&mut self) -> Option<Result<Vec<u8>, bool>> {
        let rest = &self.raw[self.pos..];
        let line_end = find(rest, b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16)
            .expect("chunk size");
        if rest.len() < line_end + 2 + size + 2 {
            return None;
        }
        let data = rest[line_end + 2..line_end + 2 + size].to_vec();
        assert_eq!(&rest[line_end + 2 + size..line_end + 4 + size], b"\r\n");
        self.pos += line_end + 4 + size;
        if size == 0 {
            self.ended = true;
            return Some(Err(true));
        }
        Some(Ok(data))
    }

    /// The next event (pings included) within `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Ev {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.text.find("\n\n") {
                let block: String = self.text.drain(..i + 2).collect();
                let (ev, id) = classify(block.trim_end());
                if id.is_some() {
                    self.last_id = id;
                }
                return ev;
            }
            match self.chunk(deadline) {
                Ok(data) => self.text.push_str(std::str::from_utf8(&data).unwrap()),
                Err(true) => return Ev::End,
                Err(false) => return Ev::Timeout,
            }
        }
    }

    /// The next event that is not a ping.
    pub fn next_event(&mut self, timeout: Duration) -> Ev {
        let deadline = Instant::now() + timeout;
        loop {
            match self.next(deadline.saturating_duration_since(Instant::now())) {
                Ev::Ping => continue,
                other => return other,
            }
        }
    }

    /// The next change, failing on anything else.
    #[track_caller]
    pub fn change(&mut self, timeout: Duration) -> Value {
        match self.next_event(timeout) {
            Ev::Change(v) => v,
            other => panic!("expected a change, got {other:?}"),
        }
    }

    /// What follows the stream on the connection (a pipelined response), until it closes.
    pub fn rest(&mut self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        while self.fill(deadline) {}
        String::from_utf8_lossy(&self.raw[self.pos..]).to_string()
    }

    /// Reads until the stream ends; the time it took, or `None` if it did not end in time.
    pub fn wait_end(&mut self, within: Duration) -> Option<Duration> {
        let start = Instant::now();
        let deadline = start + within;
        loop {
            match self.next(deadline.saturating_duration_since(Instant::now())) {
                Ev::End => return Some(start.elapsed()),
                Ev::Timeout => return None,
                _ => continue,
            }
        }
    }
}

/// The event of one block, and the change's id. A change is `event: change`, its `id:` line
/// (every change the database announces has one), then `data:`.
fn classify(block: &str) -> (Ev, Option<String>) {
    let ev = match block {
        "retry: 3000\nevent: ready\ndata: {}" => Ev::Ready,
        "retry: 3000\nevent: ready\ndata: {\"resumed\":true}" => Ev::Resumed,
        "event: resync\ndata: {}" => Ev::Resync,
        ": ping" => Ev::Ping,
        _ => return change(block),
    };
    (ev, None)
}

fn change(block: &str) -> (Ev, Option<String>) {
    let parsed = block.strip_prefix("event: change\nid: ").and_then(|rest| {
        let (id, data) = rest.split_once("\ndata: ")?;
        let valid = !id.is_empty() && !id.contains('\n') && !data.contains('\n');
        valid.then(|| (id.to_string(), data))
    });
    match parsed {
        Some((id, data)) => {
            let value = serde_json::from_str(data).expect("change data is JSON");
            (Ev::Change(value), Some(id))
        }
        None => (Ev::Other(block.to_string()), None),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
