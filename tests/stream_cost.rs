//! What one stream costs the server: one thread and one descriptor. A binary of its own: the
//! counts are of this whole process, so no other test may run servers beside it.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(10);

fn cookie(server: &TestServer) -> String {
    let mut client = server.client();
    client.signup();
    format!("svc_session={}", client.cookies["svc_session"])
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// Threads of this process serving a connection (`conn`; a spare thread waiting for one is
/// `conn-spare`).
fn serving() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "conn")
        .count()
}

/// Opens a stream on a raw socket and waits for `ready` (no reader thread on our side).
fn raw_stream(addr: SocketAddr, cookie: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let req = format!("GET /v1/events HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&got).contains("event: ready") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    s
}

#[test]
fn each_stream_holds_one_thread_and_one_descriptor() {
    let server = TestServer::start();
    let cookies: Vec<String> = (0..3).map(|_| cookie(&server)).collect();
    // Settle: connections of the sign-ups are gone.
    std::thread::sleep(Duration::from_millis(300));
    let (threads, fds) = (count("/proc/self/task"), count("/proc/self/fd"));
    let before = serving();
    let streams: Vec<TcpStream> = (0..24)
        .map(|i| raw_stream(server.addr, &cookies[i % 3]))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (threads2, fds2) = (count("/proc/self/task"), count("/proc/self/fd"));
    assert_eq!(serving() - before, 24, "one serving thread per stream");
    // Spare threads (`server::spares`) take connections and are made again: the process grows by
    // at most one thread per stream, never two.
    assert!(
        threads2 - threads <= 24,
        "{} threads for 24 streams",
        threads2 - threads
    );
    // Our 24 client sockets plus one server descriptor per stream.
    assert_eq!(fds2 - fds, 48, "one server descriptor per stream");
    drop(streams);
}
