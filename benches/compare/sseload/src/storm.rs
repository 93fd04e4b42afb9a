//! The storm rung: N streams opened at once on a fresh instance, as after a crash when every
//! client of the dead instance reconnects to a survivor; the time until every one has `ready`.
//! A few threads connect and send every request as fast as they can, then wait with `epoll(7)`
//! for each stream's `ready`, so what is measured is the server's rate of opening streams, not
//! the client's. Ten streams per API token, as the clients of a crashed instance would be (at
//! most ten per user or token): one token for all would measure the per-token limit's lock, not
//! the opening.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::client::{connect_from, find, SOURCES};

const THREADS: usize = 8;
/// A stream without `ready` this long after the storm began counts as failed.
const LIMIT: Duration = Duration::from_secs(60);

#[derive(Serialize, Deserialize, Clone, Default)]
pub struct Storm {
    pub streams: usize,
    pub ready: usize,
    /// Refused (any status or `event: refused`), closed or timed out.
    pub failed: usize,
    /// From the first connect to the last `ready`.
    pub seconds: f64,
    /// `ready` per second over the whole storm.
    pub rate: f64,
    /// The server's CPU (user + system) from the first connect to the last `ready`, in
    /// microseconds per stream ready: what an opening costs the server itself, which the
    /// machine's other work moves far less than the storm's seconds. Its closes, after the
    /// measurement, are not in it.
    #[serde(default)]
    pub server_cpu_us: f64,
    /// Milliseconds from the storm's start to each stream's `ready`.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The first failure, for the report.
    pub first_failure: String,
}

struct Pending {
    s: TcpStream,
    got: Vec<u8>,
}

/// Streams per token.
pub const PER_TOKEN: usize = 10;

/// Opens `n` streams at once against `addr` (the server process `pid`), `PER_TOKEN` with each of
/// `secrets`, and keeps them open until every one is ready (or failed); then closes them all.
pub fn run(addr: SocketAddr, pid: u32, secrets: &[String], n: usize) -> Storm {
    let request = |i: usize| {
        format!(
            "GET /v1/events HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\
             Authorization: Bearer {}\r\n\r\n",
            secrets[(i / PER_TOKEN) % secrets.len()]
        )
    };
    let claimed = AtomicUsize::new(0);
    let cpu_before = crate::procfs::cpu_seconds(pid);
    let start = Instant::now();
    // Every stream stays open until the last is ready: a client thread done early would
    // otherwise close its streams while the others still wait, and the server would spend the
    // storm's time ending them (a stream's thread exits; a task is dropped). Clients that
    // reconnect after a crash keep their streams.
    let results: Vec<(Vec<f64>, Vec<String>, Vec<TcpStream>)> = thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    let mut pending = Vec::new();
                    let mut failures = Vec::new();
                    loop {
                        let i = claimed.fetch_add(1, Ordering::SeqCst);
                        if i >= n {
                            break;
                        }
                        let source = Ipv4Addr::new(127, 0, 0, 2 + (i % SOURCES as usize) as u8);
                        match connect_from(addr, source).and_then(|mut s| {
                            s.write_all(request(i).as_bytes())
                                .map_err(|e| format!("send: {e}"))?;
                            Ok(s)
                        }) {
                            Ok(s) => pending.push(Pending { s, got: Vec::new() }),
                            Err(e) => failures.push(e),
                        }
                    }
                    let (ready, open) = wait_ready(pending, start, &mut failures);
                    (ready, failures, open)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("storm thread"))
            .collect()
    });
    // Every stream is still open: the server has spent nothing on ending them yet.
    let server_cpu = crate::procfs::cpu_seconds(pid) - cpu_before;
    let mut ms: Vec<f64> = results
        .iter()
        .flat_map(|(r, _, _)| r.iter().copied())
        .collect();
    ms.sort_by(f64::total_cmp);
    let failures: Vec<&String> = results.iter().flat_map(|(_, f, _)| f.iter()).collect();
    let seconds = ms.last().copied().unwrap_or(0.0) / 1000.0;
    let pct = |q: f64| {
        ms.get(((ms.len() as f64 * q) as usize).min(ms.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    Storm {
        streams: n,
        ready: ms.len(),
        failed: failures.len(),
        seconds,
        rate: ms.len() as f64 / seconds.max(1e-9),
        server_cpu_us: server_cpu * 1e6 / ms.len().max(1) as f64,
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        first_failure: failures.first().map(|s| s.to_string()).unwrap_or_default(),
    }
    // `results` drops here: every stream closes, after the measurement.
}

/// Reads every pending stream until its `ready`; the milliseconds (since `start`) of each, and
/// the streams, still open (the caller closes them once every thread's are ready). One
/// `epoll` set per thread: each wake-up costs the streams that have something to read, not all
/// those still waiting (a `poll` over every pending stream made the client's own cost grow with
/// how spread out the server's answers were).
fn wait_ready(
    pending: Vec<Pending>,
    start: Instant,
    failures: &mut Vec<String>,
) -> (Vec<f64>, Vec<TcpStream>) {
    let mut ready_ms = Vec::new();
    // SAFETY: no pointers; a new descriptor or -1.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(
        ep >= 0,
        "epoll_create1: {}",
        std::io::Error::last_os_error()
    );
    for (i, p) in pending.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: i as u64,
        };
        // SAFETY: `ev` is a valid epoll_event for the call's duration.
        let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, p.s.as_raw_fd(), &mut ev) };
        assert_eq!(rc, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
    }
    let mut left = pending.len();
    let mut pending: Vec<Option<Pending>> = pending.into_iter().map(Some).collect();
    let mut done: Vec<TcpStream> = Vec::new();
    let mut buf = [0u8; 4096];
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    while left > 0 && start.elapsed() < LIMIT {
        // SAFETY: `events` is a valid, writable array of its length.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 200) };
        for ev in events.iter().take(n.max(0) as usize) {
            let i = ev.u64 as usize;
            let Some(p) = pending[i].as_mut() else {
                continue;
            };
            let finished = match p.s.read(&mut buf) {
                Ok(0) | Err(_) => {
                    failures.push(format!("closed before ready: {}", head(&p.got)));
                    true
                }
                Ok(k) => {
                    p.got.extend_from_slice(&buf[..k]);
                    if find(&p.got, b"event: ready\n").is_some() {
                        ready_ms.push(start.elapsed().as_secs_f64() * 1000.0);
                        true
                    } else if find(&p.got, b"event: refused\n").is_some()
                        || (p.got.len() >= 12 && !p.got.starts_with(b"HTTP/1.1 200"))
                    {
                        failures.push(format!("refused: {}", head(&p.got)));
                        true
                    } else {
                        false
                    }
                }
            };
            if finished {
                let p = pending[i].take().expect("pending");
                // SAFETY: removes a descriptor this set holds; no pointer is read.
                unsafe {
                    libc::epoll_ctl(
                        ep,
                        libc::EPOLL_CTL_DEL,
                        p.s.as_raw_fd(),
                        std::ptr::null_mut(),
                    )
                };
                done.push(p.s);
                left -= 1;
            }
        }
    }
    for p in pending.iter().flatten() {
        failures.push(format!("no ready within {LIMIT:?}: {}", head(&p.got)));
    }
    // SAFETY: closes the set this function created.
    unsafe { libc::close(ep) };
    drop(pending);
    (ready_ms, done)
}

fn head(got: &[u8]) -> String {
    String::from_utf8_lossy(got)
        .chars()
        .take(160)
        .collect::<String>()
        .replace("\r\n", " ")
}
