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
fn idle_keep_alive_connections_are_closed_without_a_word() {
    // The read time-out stays long: it is the keep-alive time-out that closes.
    let server = TestServer::with(&[("CONSOLED_KEEPALIVE_SECONDS", "1")]);
    let mut s = connect(&server);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let r = read_response(&mut reader);
    assert_eq!(r.status, 200);
    let t = Instant::now();
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "idle connection kept {took:?}"
    );
    assert!(
        rest.is_empty(),
        "closed silently, not with {:?}",
        String::from_utf8_lossy(&rest)
    );
}

#[test]
fn keep_alive_never_cuts_a_connection_waiting_for_its_response() {
    // One hash thread and sixty-four logins at once: the last ones wait for many hashes, several
    // guard ticks longer than the keep-alive time-out, on connections that have already served
    // a request. Each login is for another account from another address, so that no
    // failed-sign-in limit refuses the later ones early (all 64 hash).
    let server = TestServer::with(&[
        ("CONSOLED_KEEPALIVE_SECONDS", "0.05"),
        ("CONSOLED_HASH_THREADS", "1"),
        ("CONSOLED_HASH_QUEUE", "128"),
    ]);
    let csrf = server.client().csrf();
    let addr = server.addr;
    let clients: Vec<_> = (0..64)
        .map(|_| {
            let (email, csrf, ip) = (unique_email(), csrf.clone(), unique_ip());
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut reader = BufReader::new(s.try_clone().unwrap());
                s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    .unwrap();
                assert_eq!(read_response(&mut reader).status, 200);
                let body = format!(r#"{{"email":"{email}","password":"wrong password 1"}}"#);
                let rq = format!(
                    "POST /auth/login HTTP/1.1\r\nHost: x\r\nCookie: svc_csrf={csrf}\r\n\
                     X-CSRF-Token: {csrf}\r\nX-Forwarded-For: {ip}\r\n\
                     Content-Type: application/json\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let t = Instant::now();
                s.write_all(rq.as_bytes()).unwrap();
                (read_response(&mut reader).status, t.elapsed())
            })
        })
        .collect();
    let results: Vec<(u16, Duration)> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let slowest = results.iter().map(|r| r.1).max().unwrap();
    assert!(
        slowest > Duration::from_millis(250),
        "the test needs responses slower than the keep-alive time-out: {results:?}"
    );
    assert!(
        results.iter().all(|(st, _)| *st == 401 || *st == 429),
        "every login answered: {results:?}"
    );
}

/// Sends `head` and then one more header line every `every`, until the server stops taking
/// them or `limit` passes; returns how long that went on.
fn drip(mut s: TcpStream, head: &[u8], every: Duration, limit: Duration) -> Duration {
    let t = Instant::now();
    let _ = s.write_all(head);
    let mut i = 0;
    while t.elapsed() < limit {
        std::thread::sleep(every);
        i += 1;
        if s.write_all(format!("X-Drip-{i}: {}\r\n", "d".repeat(20)).as_bytes())
            .is_err()
        {
            break;
        }
    }
    t.elapsed()
}

#[test]
fn a_head_dripping_in_forever_is_cut_at_the_head_deadline() {
    // Every read succeeds well inside the read time-out; only the head deadline can stop it.
    let server = TestServer::with(&[("CONSOLED_HEADER_TIMEOUT_SECONDS", "2")]);
    let s = connect(&server);
    let writer = s.try_clone().unwrap();
    let dripping = std::thread::spawn(move || {
        drip(
            writer,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
            Duration::from_millis(200),
            Duration::from_secs(20),
        )
    });
    let mut c = server.client();
    for _ in 0..5 {
        c.get("/healthz").expect(200);
    }
    let (out, took) = read_until_closed(s);
    let text = String::from_utf8_lossy(&out);
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(4),
        "cut after {took:?}"
    );
    assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    assert!(text.contains(r#""code":"request_timeout""#), "{text}");
    assert!(dripping.join().unwrap() < Duration::from_secs(6));
    c.get("/healthz").expect(200);
    let metrics = String::from_utf8(c.get("/metrics").body).unwrap();
    assert!(
        metrics.contains("consoled_heads_timed_out_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("consoled_connections_unguarded_total 0"),
        "{metrics}"
    );
}

/// Waits until the server has no client connection (no connection thread) left.
fn wait_no_connections(server: &TestServer, limit: Duration) -> Duration {
    let t = Instant::now();
    let server_ = &server.service.as_ref().unwrap().server;
    while server_.connections() > 0 && t.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server_.connections(), 0, "a connection is still held");
    t.elapsed()
}

#[test]
fn a_head_that_never_ends_is_refused_at_once() {
    let server = TestServer::start();
    let s = connect(&server);
    let mut writer = s.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    // Header lines as fast as the server takes them, for up to 30 s.
    let flooding = std::thread::spawn(move || {
        let t = Instant::now();
        let _ = writer.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n");
        let line = format!("X-Junk: {}\r\n", "j".repeat(1000));
        while t.elapsed() < Duration::from_secs(30) && writer.write_all(line.as_bytes()).is_ok() {}
    });
    let mut reader = BufReader::new(s);
    let t = Instant::now();
    let r = read_response(&mut reader);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    r.expect_error(431, "header_too_large");
    // The server has let go of the connection (its thread is gone), whatever the client does.
    wait_no_connections(&server, Duration::from_secs(3));
    drop(reader);
    flooding.join().unwrap();
    server.client().get("/healthz").expect(200);
}

#[test]
fn a_refused_body_is_not_drained_for_ever() {
    let server = TestServer::start();
    let mut s = connect(&server);
    s.write_all(
        b"POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000000000\r\n\r\n",
    )
    .unwrap();
    let mut writer = s.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    // The client goes on sending the body it announced.
    let sending = std::thread::spawn(move || {
        let t = Instant::now();
        let chunk = vec![b'x'; 16 * 1024];
        while t.elapsed() < Duration::from_secs(30) && writer.write_all(&chunk).is_ok() {
            std::thread::sleep(Duration::from_millis(5));
        }
        t.elapsed()
    });
    let mut reader = BufReader::new(s);
    let (status, _) = read_head(&mut reader);
    assert_eq!(status, 413);
    // Drained for at most 5 s (and a grace), then let go while the client still sends.
    let took = wait_no_connections(&server, Duration::from_secs(9));
    assert!(took > Duration::from_secs(3), "drained only {took:?}");
    drop(reader);
    sending.join().unwrap();
    server.client().get("/healthz").expect(200);
}

#[test]
fn oversized_heads_are_refused() {
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
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 431 "), "{text}");
    assert!(text.contains(r#""code":"header_too_large""#), "{text}");
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
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.starts_with("HTTP/1.1 503") && took < Duration::from_secs(1),
        "refused at once with 503: {took:?} {out}"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    server.client().get("/healthz").expect(200);
}
