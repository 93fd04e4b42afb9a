//! The client side, whatever its shape: opening a stream (blocking, read up to its `ready`),
//! the commit stamps, and what the readers saw (`Tally`). Two shapes read the streams once
//! open (`Readers`): a few epoll pollers (`pollers`, the light client: 20,000 streams cost
//! 20,000 descriptors and not 20,000 threads) and one blocking thread per stream (`blocking`,
//! the client of a browser farm or of one thread per subscriber, whose threads want the CPUs
//! the server wants). A reader stamps each read as it returns and credits every change in it
//! with `now - commit stamp`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Client source addresses, in turn: each stays far below any per-address share of the server,
/// and each has its own ephemeral ports.
pub const SOURCES: u8 = 16;

/// Commit stamps by change sequence number, in nanoseconds since `clock`.
pub struct Stamps {
    pub clock: Instant,
    at: Vec<AtomicU64>,
}

impl Stamps {
    pub fn new(n: usize) -> Stamps {
        Stamps {
            clock: Instant::now(),
            at: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn stamp(&self, seq: usize) {
        self.at[seq].store(self.now(), Ordering::SeqCst);
    }

    pub fn now(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }
}

/// Shards of the deliveries' list: 5,000 reader threads appending to one list would wait for
/// each other's lock (futex sleeps and wake-ups of the client's own, on the CPUs being measured).
const SHARDS: usize = 64;

/// What the readers saw, shared with the coordinator.
pub struct Tally {
    /// (change sequence number, latency in microseconds) for each delivery, in shards.
    deliveries: Vec<Mutex<Vec<(u32, u32)>>>,
    pub resyncs: AtomicU64,
    /// Streams the server ended or that failed while being read.
    pub lost: AtomicU64,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            deliveries: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
            resyncs: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }
}

impl Tally {
    /// Moves `got` into the shard of reader `reader`.
    pub fn add(&self, reader: usize, got: &mut Vec<(u32, u32)>) {
        if !got.is_empty() {
            let mut shard = self.deliveries[reader % SHARDS].lock().expect("tally");
            shard.append(got);
        }
    }

    /// Deliveries counted so far.
    pub fn len(&self) -> usize {
        self.deliveries
            .iter()
            .map(|s| s.lock().expect("tally").len())
            .sum()
    }

    /// Every delivery so far, taken out.
    pub fn take(&self) -> Vec<(u32, u32)> {
        let mut all = Vec::new();
        for s in &self.deliveries {
            all.append(&mut s.lock().expect("tally"));
        }
        all
    }
}

/// A client shape: who reads the open streams.
pub trait Readers: Sync {
    /// Takes an open stream (its head and `ready` read) to read from now on.
    fn add(&self, s: TcpStream);
    /// Streams being read now.
    fn open(&self) -> usize;
    fn tally(&self) -> &Tally;
}

/// Takes the complete events out of `pending` (each ends in a blank line; the chunk-size lines
/// between them are harmless to this scan) and credits each change with its latency.
pub fn scan(
    pending: &mut Vec<u8>,
    now: u64,
    stamps: &Stamps,
    tally: &Tally,
    got: &mut Vec<(u32, u32)>,
) {
    let mut start = 0;
    while let Some(i) = find(&pending[start..], b"\n\n") {
        let block = &pending[start..start + i];
        if find(block, b"event: resync").is_some() {
            tally.resyncs.fetch_add(1, Ordering::Relaxed);
        } else if let Some(seq) = change_id(block) {
            if let Some(at) = stamps.at.get(seq) {
                let sent = at.load(Ordering::SeqCst);
                let us = now.saturating_sub(sent) / 1000;
                got.push((seq as u32, us.min(u32::MAX as u64) as u32));
            }
        }
        start += i + 2;
    }
    pending.drain(..start);
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn change_id(block: &[u8]) -> Option<usize> {
    let at = find(block, b"\"id\":")? + 5;
    let digits: Vec<u8> = block[at..]
        .iter()
        .copied()
        .take_while(u8::is_ascii_digit)
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

/// Opens one stream from the `i`-th source address and reads up to its `ready`. The error is
/// the reason the server gave (status line) or what failed.
pub fn open(addr: SocketAddr, i: usize, authorization: &str) -> Result<TcpStream, String> {
    let mut s = connect_from(
        addr,
        Ipv4Addr::new(127, 0, 0, 2 + (i % SOURCES as usize) as u8),
    )?;
    let req = format!(
        "GET /v1/events HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\
         Authorization: {authorization}\r\n\r\n"
    );
    s.write_all(req.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while find(&got, b"event: ready\n").is_none() {
        let n = match s.read(&mut buf) {
            Ok(0) => return Err(refusal(&got, "closed before ready")),
            Ok(n) => n,
            Err(e) => return Err(refusal(&got, &format!("no ready within 10 s ({e})"))),
        };
        got.extend_from_slice(&buf[..n]);
        // A refusal an EventSource survives: 200, then `event: refused` and the end.
        if let Some(at) = find(&got, b"event: refused\n") {
            let data = String::from_utf8_lossy(&got[at..]).to_string();
            return Err(format!("refused (event): {}", data.trim()));
        }
        if got.len() >= 12 && !got.starts_with(b"HTTP/1.1 200") {
            // Read the rest of a short refusal, for its status line and body.
            let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = s.read(&mut buf).map(|n| got.extend_from_slice(&buf[..n]));
            return Err(refusal(&got, "refused"));
        }
    }
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    Ok(s)
}

fn refusal(got: &[u8], what: &str) -> String {
    let text = String::from_utf8_lossy(got);
    let status = text.lines().next().unwrap_or("").trim();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").trim();
    if status.is_empty() {
        what.to_string()
    } else {
        format!(
            "{what}: {status} {}",
            body.chars().take(120).collect::<String>()
        )
    }
}

/// A blocking connection from `source` (any free port: the kernel picks it per destination,
/// IP_BIND_ADDRESS_NO_PORT), with a 5 s connect time-out.
pub fn connect_from(addr: SocketAddr, source: Ipv4Addr) -> Result<TcpStream, String> {
    // SAFETY: a new socket, owned by the TcpStream right away.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a fresh socket nobody else owns.
    let s = unsafe { TcpStream::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(source).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: valid option value and address for this socket.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of_val(&one) as libc::socklen_t,
        );
        libc::bind(
            fd,
            &sin as *const _ as *const libc::sockaddr,
            std::mem::size_of_val(&sin) as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(format!(
            "bind {source}: {}",
            std::io::Error::last_os_error()
        ));
    }
    let SocketAddr::V4(v4) = addr else {
        return Err("IPv4 only".into());
    };
    let dst = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*v4.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    s.set_write_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    // A blocking connect to loopback completes or fails at once unless the backlog is full,
    // when SO_SNDTIMEO (above) bounds it.
    // SAFETY: valid destination address for this socket.
    let rc = unsafe {
        libc::connect(
            fd,
            &dst as *const _ as *const libc::sockaddr,
            std::mem::size_of_val(&dst) as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(format!("connect: {}", std::io::Error::last_os_error()));
    }
    s.set_write_timeout(None).map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_reads_and_chunk_lines_are_credited_once() {
        let stamps = Stamps::new(10);
        stamps.stamp(7);
        let tally = Tally::default();
        let mut got = Vec::new();
        let mut pending = b"57\r\nevent: change\ndata: {\"type\":\"server\",\"id\":7,".to_vec();
        scan(&mut pending, stamps.now(), &stamps, &tally, &mut got);
        assert!(got.is_empty(), "half an event is not an event");
        pending.extend_from_slice(
            b"\"op\":\"update\",\"project_id\":3,\"org_id\":null}\n\n\r\n19\r\nevent: resync\ndata: {}\n\n\r\n9\r\n: ping\n\n\r\n",
        );
        scan(&mut pending, stamps.now(), &stamps, &tally, &mut got);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 7);
        assert_eq!(tally.resyncs.load(Ordering::SeqCst), 1);
        assert_eq!(pending, b"\r\n", "only the chunk's trailing CRLF is left");
    }
}
