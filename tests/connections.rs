//! Exact connections (issue 22): under a saturated CPU, with accepts running late and refused
//! connections lingering at capacity, the server acts only on each connection's own socket. Every
//! slow head is cut with its 408, every admitted stream gets `ready`, and no connection receives
//! a byte that is not its own answer.
//!
//! The real binary runs as the issue's reproduction ran it: pinned to one CPU together with two
//! busy processes (`taskset`), and with each `accept` of the C library starting 2 ms late (a
//! preloaded library that only sleeps, built here with `rustc`). Before issue 22 the server
//! inferred each connection's socket after tiny_http's accept, and this delay let other threads'
//! descriptors move under the inference. Since issue 22 the program defines `accept4` itself
//! (src/server/accepted.rs), so the preloaded one cannot take its place and the delay does not
//! apply; the saturated CPU still makes every step late.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::binary::Spawned;
use common::sse::{self, Ev};
use common::*;

/// Connections the server may hold.
const CAP: usize = 24;
/// Refused connections kept open at capacity per cycle (each lingers on the server).
const REFUSED: usize = 48;
/// Head deadline of the server, in seconds.
const HEAD_SECONDS: u64 = 2;
const CYCLES: usize = 5;

/// Busy processes pinned to one CPU, beside the server; killed on drop.
struct Saturated(Vec<Child>);

impl Saturated {
    fn pin(server_pid: u32, cpu: &str) -> Saturated {
        // `-a` walks the process's threads; one that ends meanwhile fails the call: again.
        let pinned = (0..20).any(|_| {
            Command::new("taskset")
                .args(["-a", "-p", "-c", cpu, &server_pid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("taskset (util-linux) runs")
                .success()
        });
        assert!(pinned, "taskset could not pin the server");
        Saturated(
            (0..2)
                .map(|_| {
                    Command::new("taskset")
                        .args(["-c", cpu, "sh", "-c", "while :; do :; done"])
                        .spawn()
                        .expect("a busy process")
                })
                .collect(),
        )
    }
}

impl Drop for Saturated {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A library that makes the C library's `accept4` start 2 ms late, built with `rustc`.
fn late_accept_library(dir: &std::path::Path) -> std::path::PathBuf {
    let src = dir.join("late_accept.rs");
    let lib = dir.join("liblate_accept.so");
    std::fs::write(
        &src,
        r#"
use std::ffi::{c_int, c_long, c_void};
extern "C" {
    fn syscall(n: c_long, ...) -> c_long;
    fn usleep(us: u32) -> c_int;
}
#[cfg(target_arch = "x86_64")]
const SYS_ACCEPT4: c_long = 288;
#[cfg(target_arch = "aarch64")]
const SYS_ACCEPT4: c_long = 242;
/// # Safety
/// As the C library's accept4.
#[no_mangle]
pub unsafe extern "C" fn accept4(fd: c_int, a: *mut c_void, l: *mut c_void, f: c_int) -> c_int {
    usleep(2000);
    syscall(SYS_ACCEPT4, fd, a, l, f) as c_int
}
"#,
    )
    .unwrap();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let built = Command::new(rustc)
        .args(["--edition", "2021", "--crate-type", "cdylib", "-O", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("rustc runs");
    assert!(built.success(), "the late-accept library did not build");
    lib
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// A head that never ends: must get 408 (or a 503 if it arrived at capacity).
    SlowHead,
    /// A complete request at capacity, kept open: one answer (503, or 200 if there was room).
    Refused,
    /// One `GET /healthz` on a kept-alive connection: its answer, then only a close.
    Idle,
}

struct Client {
    kind: Kind,
    stream: TcpStream,
    opened: Instant,
}

fn open(addr: SocketAddr, kind: Kind) -> Client {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let sent: &[u8] = match kind {
        Kind::SlowHead => b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ",
        Kind::Refused | Kind::Idle => b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    };
    stream.write_all(sent).unwrap();
    Client {
        kind,
        stream,
        opened: Instant::now(),
    }
}

/// Everything the server sent until it closed (a reset after its answer counts as a close);
/// `None` if it did not close by `deadline`.
fn until_closed(s: &mut TcpStream, deadline: Instant) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // Past the deadline, what has arrived is still read.
        let left = deadline.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(20))))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return (out, false)
            }
            Err(_) => return (out, true),
        }
    }
}

/// The status of the one complete response in `bytes`, and what follows it.
fn one_response(bytes: &[u8]) -> Option<(u16, usize)> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&bytes[..end]).ok()?;
    let status = head.get(9..12)?.parse().ok()?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    Some((status, bytes.len().checked_sub(end + len)?))
}

#[derive(Default, Debug)]
struct Tally {
    slow_heads_cut: usize,
    slow_heads_refused: usize,
    streams_ready: usize,
    streams_refused: usize,
    answered: usize,
    problems: Vec<String>,
}

impl Tally {
    /// Checks what one client got: exactly its own answer, then a close.
    fn check(&mut self, mut c: Client, deadline: Instant) {
        let (bytes, closed) = until_closed(&mut c.stream, deadline);
        let text = String::from_utf8_lossy(&bytes).to_string();
        let Some((status, extra)) = one_response(&bytes) else {
            self.problems.push(format!(
                "{:?} opened {:?} ago: no complete answer (closed: {closed}): {text:?}",
                c.kind,
                c.opened.elapsed()
            ));
            return;
        };
        if extra > 0 || !closed {
            self.problems.push(format!(
                "{:?}: {extra} bytes after its answer, closed: {closed}: {text:?}",
                c.kind
            ));
            return;
        }
        match (c.kind, status) {
            (Kind::SlowHead, 408) => self.slow_heads_cut += 1,
            (Kind::SlowHead, 503) => self.slow_heads_refused += 1,
            (Kind::Refused | Kind::Idle, 200 | 503) => self.answered += 1,
            (kind, status) => self
                .problems
                .push(format!("{kind:?}: status {status}: {text:?}")),
        }
    }
}

#[test]
fn under_a_saturated_cpu_every_connection_is_answered_on_its_own_socket() {
    let dir = tempdir::TempDir::new();
    let late = late_accept_library(&dir.0);
    let late = late.to_str().unwrap();
    let server = Spawned::start(
        env!("CARGO_BIN_EXE_consoled"),
        &[
            ("LD_PRELOAD", late),
            ("CONSOLED_MAX_CONNECTIONS", &CAP.to_string()),
            ("CONSOLED_CLIENT_SHARE", "1"),
            ("CONSOLED_HEADER_TIMEOUT_SECONDS", &HEAD_SECONDS.to_string()),
            ("CONSOLED_KEEPALIVE_SECONDS", "1"),
            ("CONSOLED_PING_SECONDS", "600"),
        ],
    );
    let addr = server.addr;
    // A few accounts, so that no principal reaches its stream limit.
    let cookies: Vec<String> = (0..3)
        .map(|_| {
            let mut c = common::Client::new(addr);
            c.signup();
            format!("svc_session={}", c.cookies["svc_session"])
        })
        .collect();
    let busy = Saturated::pin(server.pid(), "0");
    let mut tally = Tally::default();
    let started = Instant::now();
    for cycle in 0..CYCLES {
        // The last cycle's connections are closed; their threads end moments later.
        thread::sleep(Duration::from_millis(300));
        // The server holds its capacity in slow heads; more connections are refused and kept
        // open, each lingering on the server.
        let mut holders: Vec<Client> = (0..CAP).map(|_| open(addr, Kind::SlowHead)).collect();
        thread::sleep(Duration::from_millis(150));
        let mut clients: Vec<Client> = (0..REFUSED).map(|_| open(addr, Kind::Refused)).collect();
        thread::sleep(Duration::from_millis(50));
        // Half the holders go, 2 ms apart, while new clients come: slow heads, idle keep-alive
        // clients and streams.
        let mut streams = Vec::new();
        for i in 0..CAP / 2 {
            let mut gone = holders.swap_remove(0);
            gone.stream.set_nonblocking(true).unwrap();
            let mut b = [0u8; 64];
            match gone.stream.read(&mut b) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                other => tally.problems.push(format!(
                    "a waiting slow head got {other:?}: {:?}",
                    String::from_utf8_lossy(&b)
                )),
            }
            drop(gone);
            thread::sleep(Duration::from_millis(2));
            match i % 3 {
                0 => clients.push(open(addr, Kind::SlowHead)),
                1 => clients.push(open(addr, Kind::Idle)),
                _ => {
                    let mut s = TcpStream::connect(addr).unwrap();
                    let cookie = &cookies[(cycle + i) % cookies.len()];
                    let req =
                        format!("GET /v1/events HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n");
                    s.write_all(req.as_bytes()).unwrap();
                    streams.push(s);
                }
            }
        }
        clients.extend(holders);
        for s in streams {
            let mut s = sse::read_on(s);
            match s.status {
                200 => {
                    let ev = s.next(Duration::from_secs(10));
                    if ev == Ev::Ready {
                        tally.streams_ready += 1;
                    } else {
                        tally
                            .problems
                            .push(format!("a stream got {ev:?}, not ready"));
                    }
                    // Nothing else is due (the ping interval is long): any byte is foreign.
                    match s.next(Duration::from_millis(300)) {
                        Ev::Timeout => {}
                        ev => tally
                            .problems
                            .push(format!("a stream got {ev:?} after ready")),
                    }
                }
                503 => tally.streams_refused += 1,
                other => tally.problems.push(format!(
                    "a stream got {other}: {}",
                    String::from_utf8_lossy(&s.raw)
                )),
            }
        }
        // Slow heads are cut at the head deadline; under this load, allow it a few seconds.
        let deadline = Instant::now() + Duration::from_secs(HEAD_SECONDS + 6);
        for c in clients {
            tally.check(c, deadline);
        }
    }
    let took = started.elapsed();
    drop(busy);
    eprintln!("{tally:?} in {took:?}");
    assert!(
        tally.problems.is_empty(),
        "{:#?}\nthe server's warnings: {:#?}",
        tally.problems,
        server
            .log()
            .into_iter()
            .filter(|l| !l.contains(" INFO "))
            .collect::<Vec<_>>()
    );
    assert!(
        tally.slow_heads_cut >= CYCLES * CAP / 2,
        "the holders that stayed were not all cut: {tally:?}"
    );
    assert!(tally.streams_ready > 0, "no stream was admitted: {tally:?}");
    let metrics = raw_request(addr, "GET", "/metrics", &[], b"");
    let text = String::from_utf8_lossy(&metrics.body);
    for line in [
        "consoled_connections_unguarded_total 0",
        "consoled_connections_mismatched_total 0",
    ] {
        assert!(text.contains(line), "{line}: {text}");
    }
}
