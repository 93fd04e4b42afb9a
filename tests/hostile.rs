//! Hostile and broken clients against the foundation's defences (tiny_http's known defects):
//! none may crash, hang or starve the server.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

fn connect(server: &TestServer) -> TcpStream {
    let s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads until the server closes the connection; returns what arrived and how long it took.
fn read_until_closed(mut s: TcpStream) -> (Vec<u8>, Duration) {
    let t = Instant::now();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    (out, t.elapsed())
}

#[test]
fn a_huge_content_length_is_refused_without_harm() {
    let server = TestServer::start();
    let mut s = connect(&server);
    s.write_all(
        b"POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000000000\r\n\r\n{",
    )
    .unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let (status, _) = read_head(&mut reader);
    assert_eq!(status, 413);
    drop(s);
    drop(reader);
    // The process is alive and serving (an abort would have killed this test binary).
    server.client().get("/healthz").expect(200);
}

#[test]
fn a_body_that_never_arrives_does_not_hold_a_worker() {
    let server = TestServer::with(&[
        ("CONSOLED_WORKERS", "1"),
        ("CONSOLED_READ_TIMEOUT_SECONDS", "1"),
    ]);
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let mut s = connect(&server);
        s.write_all(b"POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000000000\r\n\r\n")
            .unwrap();
        stalled.push(s);
    }
    let t = Instant::now();
    server.client().get("/healthz").expect(200);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "the only worker was held: {:?}",
        t.elapsed()
    );
}

#[test]
fn a_stalled_head_is_cut_off_while_others_are_served() {
    let server = TestServer::with(&[("CONSOLED_READ_TIMEOUT_SECONDS", "1")]);
    let mut s = connect(&server);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .unwrap();
    let mut c = server.client();
    for _ in 0..5 {
        c.get("/healthz").expect(200);
    }
    let (_, took) = read_until_closed(s);
    assert!(
        took < Duration::from_secs(4),
        "stalled head held for {took:?}"
    );
}

#[test]
fn idle_keep_alive_connections_are_closed() {
    let server = TestServer::with(&[("CONSOLED_READ_TIMEOUT_SECONDS", "1")]);
    let mut s = connect(&server);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let r = read_response(&mut reader);
    assert_eq!(r.status, 200);
    let t = Instant::now();
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "idle connection kept {:?}",
        t.elapsed()
    );
}

#[test]
fn oversized_heads_are_refused_or_survived() {
    let server = TestServer::start();
    let mut c = server.client();
    // A header we read, over 8 KiB: 431.
    let big = "a".repeat(100 * 1024);
    let r = c.send(
        "GET",
        "/auth/session",
        &[("Authorization", &format!("Bearer {big}"))],
        b"",
    );
    r.expect_error(431, "header_too_large");
    let r = c.get(&format!("/healthz?{big}"));
    assert!(
        r.status == 431 || r.status == 414 || r.status == 400,
        "{}",
        r.status
    );
    // A megabyte of header lines we never read: answered, and the server lives on.
    let mut s = connect(&server);
    let mut head = String::from("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for i in 0..1000 {
        head.push_str(&format!("X-Junk-{i}: {}\r\n", "j".repeat(1000)));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let (out, _) = read_until_closed(s);
    assert!(
        out.starts_with(b"HTTP/1.1 "),
        "some answer: {:?}",
        String::from_utf8_lossy(&out[..out.len().min(80)])
    );
    c.get("/healthz").expect(200);
}

#[test]
fn cr_or_lf_inside_a_header_is_refused() {
    let server = TestServer::start();
    for smuggled in [
        &b"GET /auth/session HTTP/1.1\r\nHost: x\r\nCookie: a=b\rSet-Cookie: evil=1\r\n\r\n"[..],
        b"GET /auth/session HTTP/1.1\r\nHost: x\r\nX-A: a\nInjected: b\r\n\r\n",
        b"GET /auth/session HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
    ] {
        let mut s = connect(&server);
        s.write_all(smuggled).unwrap();
        let (out, _) = read_until_closed(s);
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.is_empty() || text.starts_with("HTTP/1.1 400"),
            "{text}"
        );
        assert!(!text.to_ascii_lowercase().contains("evil"), "{text}");
    }
    server.client().get("/healthz").expect(200);
}

#[test]
fn a_burst_of_keep_alive_clients_is_served_at_once() {
    let server = TestServer::with(&[("CONSOLED_WORKERS", "8")]);
    let addr = server.addr;
    let start = Instant::now();
    let clients: Vec<_> = (0..50)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    .unwrap();
                let mut reader = BufReader::new(s.try_clone().unwrap());
                let r = read_response(&mut reader);
                let took = start.elapsed();
                (r.status, took, s) // keep the connection open until all are done
            })
        })
        .collect();
    let results: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let slow: Vec<_> = results
        .iter()
        .filter(|(st, took, _)| *st != 200 || *took > Duration::from_secs(1))
        .map(|(st, t, _)| (*st, *t))
        .collect();
    assert!(
        slow.is_empty(),
        "{} of 50 not answered within 1 s: {slow:?}",
        slow.len()
    );
}

#[test]
fn the_connection_cap_refuses_quickly_and_recovers() {
    let server = TestServer::with(&[
        ("CONSOLED_MAX_CONNECTIONS", "4"),
        ("CONSOLED_READ_TIMEOUT_SECONDS", "2"),
    ]);
    let held: Vec<TcpStream> = (0..4).map(|_| connect(&server)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = connect(&server);
    let _ = extra.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let (out, took) = read_until_closed(extra);
    assert!(
        out.is_empty() && took < Duration::from_secs(1),
        "refused at once: {took:?}"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    server.client().get("/healthz").expect(200);
}
