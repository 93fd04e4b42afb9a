//! The flood's generator: every connection on one thread, driven by `poll(2)`, the way an
//! attacker's tool (wrk and the like) drives its sockets. One thread that wakes once for all the
//! answers that arrived costs this machine far less than a thread per connection woken per
//! answer, and the flood's CPU is not the server's: on a real attack it is somebody else's
//! machine. Each connection sends its next request when it has the answer to the last and its
//! share of the target rate has come due (no pause for a 429: the flood ignores Retry-After).

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::CSRF;

/// Answers counted by class: 401, 429, anything else.
pub type Counts = Arc<[AtomicU64; 3]>;

struct Line {
    stream: TcpStream,
    /// When the next request may go (its share of the rate).
    due: Instant,
    /// Bytes of the current request not yet written (empty: waiting for the answer or `due`).
    out: Vec<u8>,
    written: usize,
    /// The answer read so far; `waiting` while a request is out.
    answer: Vec<u8>,
    waiting: bool,
    sent: u64,
}

/// Sends the flood from `from` until `stop`, counting each answer in `counts`.
pub fn run(
    addr: SocketAddr,
    from: IpAddr,
    connections: usize,
    interval: Option<Duration>,
    stop: &AtomicBool,
    counts: &Counts,
) {
    let tag = std::process::id();
    let start = Instant::now();
    let mut lines: Vec<Line> = (0..connections)
        .map(|i| {
            let stream = super::super::Conn::open_from(addr, Some(from)).into_stream();
            stream.set_nonblocking(true).expect("non-blocking");
            // Spread the connections' first requests over one interval.
            let offset = interval.map_or(Duration::ZERO, |d| d * i as u32 / connections as u32);
            Line {
                stream,
                due: start + offset,
                out: Vec::new(),
                written: 0,
                answer: Vec::with_capacity(1024),
                waiting: false,
                sent: 0,
            }
        })
        .collect();
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(connections);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        for (i, line) in lines.iter_mut().enumerate() {
            if !line.waiting && line.due <= now {
                line.sent += 1;
                let body = format!(
                    r#"{{"email":"flood-{i}-{}-{tag}@example.com","password":"wrong guess"}}"#,
                    line.sent
                );
                line.out =
                    super::super::post_request("/auth/login", &CSRF, None, &body).into_bytes();
                line.written = 0;
                line.waiting = true;
                line.answer.clear();
                if let Some(interval) = interval {
                    // Behind schedule by more than a second: do not burst to catch up.
                    line.due = (line.due + interval).max(now - Duration::from_secs(1));
                }
            }
            if line.written < line.out.len() {
                match line.stream.write(&line.out[line.written..]) {
                    Ok(n) => line.written += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => panic!("flood write: {e}"),
                }
            }
        }
        fds.clear();
        fds.extend(lines.iter().map(|l| libc::pollfd {
            fd: l.stream.as_raw_fd(),
            events: if l.written < l.out.len() {
                libc::POLLIN | libc::POLLOUT
            } else {
                libc::POLLIN
            },
            revents: 0,
        }));
        let next_due = lines
            .iter()
            .filter(|l| !l.waiting)
            .map(|l| l.due)
            .min()
            .map(|d| d.saturating_duration_since(Instant::now()));
        // Wake for the next due request, and at least every 50 ms to see `stop`.
        let wait = next_due.unwrap_or(Duration::from_millis(50));
        let wait_ms = wait.as_micros().div_ceil(1000).min(50) as libc::c_int;
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait_ms) };
        if ready <= 0 {
            continue;
        }
        for (line, fd) in lines.iter_mut().zip(&fds) {
            if fd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                read_answers(line, counts);
            }
        }
    }
}

/// Reads what arrived on `line` and counts its answer once it is whole.
fn read_answers(line: &mut Line, counts: &Counts) {
    let mut buf = [0u8; 4096];
    loop {
        match line.stream.read(&mut buf) {
            Ok(0) => panic!("the server closed a flood connection"),
            Ok(n) => line.answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("flood read: {e}"),
        }
    }
    if let Some(status) = whole_answer(&line.answer) {
        let slot = match status {
            401 => 0,
            429 => 1,
            _ => 2,
        };
        counts[slot].fetch_add(1, Ordering::Relaxed);
        line.waiting = false;
        line.answer.clear();
    }
}

/// The status of a complete answer (head and `Content-Length` body), or `None` while incomplete.
fn whole_answer(bytes: &[u8]) -> Option<u16> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&bytes[..end]).expect("an ASCII head");
    let status = head.split_whitespace().nth(1)?.parse().expect("a status");
    let length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.trim().parse().expect("a length"));
    (bytes.len() >= end + length).then_some(status)
}
