//! Hardening (issue 7): slow bodies, the overall stream cap, 2,000 stalled connections, a burst
//! of 200 keep-alive clients, database loss under concurrent signups, and SIGTERM/SIGINT with
//! requests in flight and streams open. (Stalled and oversized heads, huge Content-Length,
//! CR/LF, idle keep-alive and the connection cap are in tests/hostile.rs; a request pipelined
//! behind a stream in tests/events.rs.)

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::sse::{self, Ev, Sse};
use common::*;
use serde_json::json;

const T: Duration = Duration::from_secs(5);

fn timed_get(addr: SocketAddr, path: &str) -> (u16, Duration) {
    let t = Instant::now();
    let r = raw_request(addr, "GET", path, &[], b"");
    (r.status, t.elapsed())
}

#[test]
fn a_slow_body_gets_408_closes_the_connection_and_never_holds_a_worker() {
    let server = TestServer::with(&[
        ("CONSOLED_WORKERS", "1"),
        ("CONSOLED_BODY_TIMEOUT_SECONDS", "1"),
        ("CONSOLED_READ_TIMEOUT_SECONDS", "3"),
    ]);
    // Bodies over 1 KiB are not read by tiny_http with the head: before this defence the only
    // worker read them, so three trickling clients held it.
    let trickle = |done: Arc<AtomicBool>| {
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        s.write_all(b"POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{")
            .unwrap();
        let mut w = s.try_clone().unwrap();
        thread::spawn(move || {
            while !done.load(Ordering::SeqCst) && w.write_all(b" ").is_ok() {
                thread::sleep(Duration::from_millis(200));
            }
            // What follows the answer must never be read as a request of its own.
            let _ = w.write_all(b"\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        });
        s
    };
    let flags: Vec<_> = (0..3).map(|_| Arc::new(AtomicBool::new(false))).collect();
    let started = Instant::now();
    let slow: Vec<_> = flags.iter().map(|f| trickle(f.clone())).collect();
    for _ in 0..5 {
        let (status, took) = timed_get(server.addr, "/healthz");
        assert_eq!(status, 200);
        assert!(took < Duration::from_secs(1), "worker held: {took:?}");
        thread::sleep(Duration::from_millis(100));
    }
    let mut readers = Vec::new();
    for (s, flag) in slow.into_iter().zip(&flags) {
        let mut reader = BufReader::new(s);
        let r = read_response(&mut reader);
        flag.store(true, Ordering::SeqCst);
        assert_eq!(r.status, 408, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.code(), "request_timeout");
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
        readers.push(reader);
    }
    for mut reader in readers {
        let mut rest = Vec::new();
        let _ = reader.read_to_end(&mut rest);
        assert!(
            !String::from_utf8_lossy(&rest).contains("HTTP/1.1"),
            "the connection was reused after the 408: {}",
            String::from_utf8_lossy(&rest)
        );
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_body_at_a_normal_pace_is_accepted() {
    let server = TestServer::with(&[("CONSOLED_BODY_TIMEOUT_SECONDS", "1")]);
    let mut c = server.client();
    let (email, _) = c.signup();
    // 3 KiB of JSON (past tiny_http's 1 KiB read-ahead) in three parts 300 ms apart.
    let body = serde_json::to_vec(&json!({
        "email": email, "password": PASSWORD, "padding": "p".repeat(3000)
    }))
    .unwrap();
    // The login carries no session cookie: a token of a browser without a session.
    let token = server.client().csrf();
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let head = format!(
        "POST /auth/login HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n\
         X-Forwarded-For: {}\r\nX-CSRF-Token: {token}\r\nCookie: svc_csrf={token}\r\nContent-Length: {}\r\n\r\n",
        unique_ip(),
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    for part in body.chunks(body.len() / 3 + 1) {
        s.write_all(part).unwrap();
        thread::sleep(Duration::from_millis(300));
    }
    let r = read_response(&mut BufReader::new(s));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

fn signed_up(server: &TestServer) -> (Client, i64) {
    let mut c = server.client();
    let (_, state) = c.signup();
    let id = state["user"]["id"].as_i64().unwrap();
    (c, id)
}

fn session_cookie(c: &Client) -> String {
    format!("svc_session={}", c.cookies["svc_session"])
}

fn ready(mut s: Sse) -> Sse {
    assert_eq!(s.status, 200, "{}", String::from_utf8_lossy(&s.body));
    assert_eq!(s.next(T), Ev::Ready);
    s
}

#[test]
fn streams_past_the_overall_cap_get_503_and_ordinary_requests_go_on() {
    let server = TestServer::with(&[
        ("CONSOLED_MAX_STREAMS_PER_INSTANCE", "2"),
        ("CONSOLED_PING_SECONDS", "0.2"),
        // Every stream here comes from one address; its share is tested in tests/streams.rs.
        ("CONSOLED_CLIENT_SHARE", "1"),
    ]);
    // Two principals: the per-principal limit (10) is not what refuses here.
    let (a, _) = signed_up(&server);
    let (b, _) = signed_up(&server);
    let first = ready(sse::open(server.addr, &[("Cookie", &session_cookie(&a))]));
    let _second = ready(sse::open(server.addr, &[("Cookie", &session_cookie(&b))]));
    let third = sse::open(server.addr, &[("Cookie", &session_cookie(&b))]);
    assert_eq!(third.status, 503);
    assert!(third.header("retry-after").is_some());
    assert_eq!(third.json()["error"]["code"], "unavailable");
    server.client().get("/healthz").expect(200);
    // Closing a stream frees its place.
    drop(first);
    let deadline = Instant::now() + T;
    loop {
        let s = sse::open(server.addr, &[("Cookie", &session_cookie(&a))]);
        if s.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the slot was not freed");
        thread::sleep(Duration::from_millis(100));
    }
}

/// The soft and hard limits on open files of this process, from /proc/self/limits.
fn nofile_limits() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let nums: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    Some((*nums.first()?, *nums.get(1)?))
}

#[test]
fn ordinary_requests_are_served_while_2000_connections_stall() {
    // The server runs in this process and raises the soft limit to the hard one at start.
    // 2,000 stalled clients cost 2,000 descriptors here plus 4,000 in the server.
    let server = TestServer::start();
    let Some((soft, hard)) = nofile_limits() else {
        eprintln!("SKIPPED: /proc/self/limits unreadable");
        return;
    };
    if soft < 6500 {
        eprintln!("SKIPPED: open-file limit {soft} (hard {hard}) is below 6,500; raise ulimit -n");
        return;
    }
    let mut stalled = Vec::with_capacity(2000);
    for i in 0..2000 {
        let mut s = TcpStream::connect(server.addr).unwrap();
        let _ =
            s.write_all(format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Stall-{i}: ").as_bytes());
        stalled.push(s);
    }
    // Stalling means each of them is accepted and has its thread, waiting for the rest of its
    // head. Until then the spawner is still making the threads of the burst, and a newcomer waits
    // behind them in the order of arrival: that burst is the storm bench's business, not this
    // test's (on a loaded 2-core machine, 500 thread starts outstanding held the first request
    // 1.3 s).
    let deadline = Instant::now() + T;
    let service = server.service.as_ref().unwrap();
    while service.server.connections() < 2000 || service.server.waiting_for_a_thread() > 0 {
        assert!(
            Instant::now() < deadline,
            "not all 2,000 connections were accepted and given a thread"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let (status, took) = timed_get(server.addr, "/healthz");
        assert_eq!(status, 200);
        worst = worst.max(took);
    }
    let mut c = server.client();
    c.signup();
    assert!(worst < Duration::from_secs(1), "slowest /healthz {worst:?}");
    drop(stalled);
}

#[test]
fn a_flood_past_the_connection_cap_is_refused_fast() {
    let server = TestServer::with(&[("CONSOLED_MAX_CONNECTIONS", "300")]);
    let held: Vec<_> = (0..300)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    let deadline = Instant::now() + T;
    while server.service.as_ref().unwrap().server.connections() < 300 {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(20));
    }
    let t = Instant::now();
    for _ in 0..200 {
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        // Refused with a complete answer, written without a thread.
        let out = String::from_utf8_lossy(&out);
        assert!(out.starts_with("HTTP/1.1 503"), "{out}");
        assert!(out.contains("Retry-After: "), "{out}");
    }
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "200 refusals took {:?}",
        t.elapsed()
    );
    drop(held);
    let deadline = Instant::now() + T;
    while server.service.as_ref().unwrap().server.connections() > 0 {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(20));
    }
    server.client().get("/healthz").expect(200);
}

/// A refused connection ends with its answer and a clean close: the request the client sent is
/// read and dropped, so that the close is not a reset, which can destroy the answer before the
/// client reads it (and which a client's read reports as an error instead of the end).
#[test]
fn a_refusal_at_capacity_ends_in_a_clean_close_not_a_reset() {
    let server = TestServer::with(&[("CONSOLED_MAX_CONNECTIONS", "20")]);
    let held: Vec<_> = (0..20)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    let deadline = Instant::now() + T;
    while server.service.as_ref().unwrap().server.connections() < 20 {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(20));
    }
    let mut resets = 0;
    for i in 0..30 {
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        if i % 2 == 1 {
            // Also when the request arrives after the answer was written.
            thread::sleep(Duration::from_millis(20));
        }
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: a client\r\n\r\n")
            .unwrap();
        let mut out = Vec::new();
        match s.read_to_end(&mut out) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => resets += 1,
            Err(e) => panic!("read: {e}"),
        }
        let out = String::from_utf8_lossy(&out);
        assert!(out.starts_with("HTTP/1.1 503"), "{out}");
    }
    assert_eq!(resets, 0, "refusals that ended in a reset");
    drop(held);
}

#[test]
fn two_hundred_keep_alive_clients_at_once_all_answered_within_a_second() {
    let server = TestServer::with(&[("CONSOLED_WORKERS", "32")]);
    let addr = server.addr;
    let gate = Arc::new(std::sync::Barrier::new(200));
    let clients: Vec<_> = (0..200)
        .map(|_| {
            let gate = gate.clone();
            thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(T)).unwrap();
                gate.wait();
                let t = Instant::now();
                s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    .unwrap();
                let mut reader = BufReader::new(s.try_clone().unwrap());
                let r = read_response(&mut reader);
                (r.status, t.elapsed(), s) // keep-alive: held open until all are done
            })
        })
        .collect();
    let results: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let late: Vec<_> = results
        .iter()
        .filter(|(st, took, _)| *st != 200 || *took > Duration::from_secs(1))
        .map(|(st, took, _)| (*st, *took))
        .collect();
    assert!(late.is_empty(), "{} of 200 late: {late:?}", late.len());
}

#[test]
fn signups_across_a_database_outage_are_all_or_nothing() {
    let proxy = DbProxy::start();
    let url = proxy.url();
    let server = TestServer::with(&[
        ("DATABASE_URL", &url),
        ("CONSOLED_DB_TIMEOUT_SECONDS", "2"),
        ("CONSOLED_HASH_THREADS", "2"),
    ]);
    let addr = server.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let results = Arc::new(Mutex::new(Vec::<(String, u16, Duration, Instant)>::new()));
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let (stop, results) = (stop.clone(), results.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let mut c = Client::new(addr);
                    let email = unique_email();
                    let body = json!({"email": email, "password": PASSWORD, "name": "Outage"});
                    let t = Instant::now();
                    // The CSRF cookie is minted without the database.
                    let status = c.post("/auth/signup", &body).status;
                    results
                        .lock()
                        .unwrap()
                        .push((email, status, t.elapsed(), Instant::now()));
                    thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    let probe = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut health = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                health.push(timed_get(addr, "/healthz"));
                thread::sleep(Duration::from_millis(100));
            }
            health
        })
    };
    thread::sleep(Duration::from_millis(1500));
    proxy.cut();
    let cut_at = Instant::now();
    let mut readyz_503 = false;
    while cut_at.elapsed() < Duration::from_secs(4) {
        let (status, took) = timed_get(addr, "/readyz");
        assert!(took < T, "/readyz took {took:?}");
        readyz_503 |= status == 503;
        thread::sleep(Duration::from_millis(200));
    }
    proxy.restore();
    let restored_at = Instant::now();
    let recovered_at = loop {
        let (status, _) = timed_get(addr, "/readyz");
        if status == 200 {
            break Instant::now();
        }
        assert!(restored_at.elapsed() < T, "/readyz not back within 5 s");
        thread::sleep(Duration::from_millis(100));
    };
    thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join().unwrap();
    }
    let health = probe.join().unwrap();
    assert!(readyz_503, "/readyz never said 503 during the outage");
    assert!(
        health
            .iter()
            .all(|(s, took)| *s == 200 && *took < Duration::from_secs(1)),
        "/healthz during the outage: {health:?}"
    );
    let results = results.lock().unwrap();
    let count = |st: u16| results.iter().filter(|r| r.1 == st).count();
    eprintln!(
        "signups: {} total, {} 201, {} 503, recovered {:?} after restore",
        results.len(),
        count(201),
        count(503),
        recovered_at - restored_at
    );
    for (email, status, took, _) in results.iter() {
        assert!(
            [201, 409, 429, 503].contains(status),
            "{email}: status {status}"
        );
        assert!(*took < T, "{email}: answered after {took:?}");
    }
    assert!(count(503) > 0, "no signup met the outage");
    assert!(
        results
            .iter()
            .any(|(_, s, _, at)| *s == 201 && *at > recovered_at),
        "no signup succeeded after recovery"
    );
    let mut db = db();
    for (email, status, _, _) in results.iter() {
        let row = db
            .query_one(
                "SELECT count(DISTINCT u.id), count(DISTINCT m.id), count(DISTINCT o.id) FILTER (WHERE o.kind = 'personal'), count(DISTINCT p.id)
                 FROM users u
                 LEFT JOIN memberships m ON m.user_id = u.id
                 LEFT JOIN organizations o ON o.id = m.org_id
                 LEFT JOIN projects p ON p.org_id = o.id
                 WHERE u.email = $1",
                &[email],
            )
            .unwrap();
        let counts: [i64; 4] = [row.get(0), row.get(1), row.get(2), row.get(3)];
        if *status == 201 {
            assert_eq!(
                counts,
                [1, 1, 1, 1],
                "{email}: user, membership, org, project"
            );
        } else {
            // A 503 whose commit did happen leaves a whole account; never a part of one.
            assert!(
                counts == [0, 0, 0, 0] || counts == [1, 1, 1, 1],
                "{email} ({status}): half-created {counts:?}"
            );
        }
    }
    // No organisation without a member anywhere (an org is only ever created with its owner).
    let orphans: i64 = db
        .query_one(
            "SELECT count(*) FROM organizations o WHERE o.kind = 'personal'
             AND NOT EXISTS (SELECT 1 FROM memberships m WHERE m.org_id = o.id)
             AND o.created_at > now() - interval '1 hour'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(orphans, 0, "personal organisations without a member");
}

/// The real binary on a free port, with the given extra environment. A port another test's
/// server took first (both found it free) is given up for another (`listens_on`).
fn spawn_binary(extra: &[(&str, &str)]) -> (Child, SocketAddr) {
    for _ in 0..5 {
        if let Some(spawned) = try_spawn_binary(extra) {
            return spawned;
        }
    }
    panic!("the binary never got a port of its own");
}

fn try_spawn_binary(extra: &[(&str, &str)]) -> Option<(Child, SocketAddr)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mail = tempdir::TempDir::new();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_consoled"));
    cmd.env("DATABASE_URL", database_url())
        .env("CONSOLED_LISTEN", format!("127.0.0.1:{port}"))
        .env("CONSOLED_MAIL_DIR", &mail.0)
        .env("CONSOLED_MAIL_SENDER", "false")
        .env("CONSOLED_COOKIE_SECURE", "false")
        .env("CONSOLED_TRUSTED_PROXIES", "127.0.0.1")
        .env("RUST_LOG", "warn");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let start = Instant::now();
    while !listens_on(child.id(), port) || TcpStream::connect(addr).is_err() {
        if child.try_wait().unwrap().is_some() {
            // It could not bind the port (another server holds it): try another.
            return None;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "server did not start"
        );
        thread::sleep(Duration::from_millis(50));
    }
    std::mem::forget(mail); // the directory outlives this function; it is tiny
    Some((child, addr))
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    None
}

/// Signals the binary while logins wait on the (single) hashing thread and two streams are
/// open: every login completes, both streams end with the terminating chunk, the instance's
/// stream leases are deleted, and the process exits 0 within 10 s.
fn stop_with_work_in_flight(signal: &str) {
    let (mut child, addr) = spawn_binary(&[
        ("CONSOLED_HASH_THREADS", "1"),
        ("CONSOLED_HASH_QUEUE", "32"),
    ]);
    let mut c = Client::new(addr);
    let (email, state) = c.signup();
    let user_id = state["user"]["id"].as_i64().unwrap();
    let cookie = session_cookie(&c);
    let mut streams: Vec<Sse> = (0..2)
        .map(|_| ready(sse::open(addr, &[("Cookie", &cookie)])))
        .collect();
    let leases = |db: &mut postgres::Client| -> i64 {
        db.query_one(
            "SELECT count(*) FROM stream_leases WHERE user_id = $1",
            &[&user_id],
        )
        .unwrap()
        .get(0)
    };
    let mut db = db();
    assert_eq!(leases(&mut db), 2);
    // Twelve logins queue on one hashing thread (tens of ms each): sent before the signal, and
    // the signal waits until the server holds them (its hash queue is not empty), so that they
    // are truly in flight rather than racing the closing listener.
    // A token from a browser without a session: the logins carry no session cookie.
    let csrf = Client::new(addr).csrf();
    let body = json!({"email": email, "password": PASSWORD}).to_string();
    let logins: Vec<TcpStream> = (0..12)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let head = format!(
                "POST /auth/login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
                 X-Forwarded-For: {}\r\nContent-Type: application/json\r\n\
                 X-CSRF-Token: {csrf}\r\nCookie: svc_csrf={csrf}\r\nContent-Length: {}\r\n\r\n{body}",
                unique_ip(),
                body.len()
            );
            s.write_all(head.as_bytes()).unwrap();
            s
        })
        .collect();
    let queued = Instant::now();
    loop {
        let metrics = String::from_utf8(Client::new(addr).get("/metrics").body).unwrap();
        let depth: usize = metrics
            .lines()
            .find_map(|l| l.strip_prefix("consoled_hash_queue_depth "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if depth >= 3 {
            break;
        }
        assert!(
            queued.elapsed() < Duration::from_secs(5),
            "logins never reached the hash queue"
        );
        thread::sleep(Duration::from_millis(5));
    }
    let signalled = Instant::now();
    Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    for s in logins {
        let r = read_response(&mut BufReader::new(s));
        assert_eq!(r.status, 200, "an in-flight login was not completed");
    }
    for s in &mut streams {
        // Pings, and the user's own signup change when the listener delivers it late, may come
        // first; then the stream must end.
        let mut ev = s.next(Duration::from_secs(9));
        while ev == Ev::Ping || matches!(ev, Ev::Change(_)) {
            ev = s.next(Duration::from_secs(9));
        }
        assert_eq!(ev, Ev::End, "after {:?}", signalled.elapsed());
        let raw = String::from_utf8_lossy(&s.raw);
        assert!(raw.ends_with("0\r\n\r\n"), "no terminating chunk: {raw:?}");
    }
    let status = wait_exit(&mut child, Duration::from_secs(10)).expect("still running after 10 s");
    assert!(status.success(), "{status}");
    assert!(signalled.elapsed() < Duration::from_secs(10));
    assert_eq!(leases(&mut db), 0, "stream leases left behind");
}

#[test]
fn sigterm_finishes_in_flight_work_ends_streams_and_exits_0() {
    stop_with_work_in_flight("-TERM");
}

#[test]
fn sigint_finishes_in_flight_work_ends_streams_and_exits_0() {
    stop_with_work_in_flight("-INT");
}

/// A request that was being sent when SIGTERM came is answered, not refused 503: its connection
/// was taken before the listener closed, so a load balancer has sent it to this instance and,
/// once it has an answer, never sends it elsewhere (a sign-in through HAProxy was refused so in
/// a rolling restart, tests/cluster.rs). A new connection's first request and a kept-alive
/// connection's next one alike; each connection then ends, and the process exits 0.
#[test]
fn a_request_being_sent_when_sigterm_comes_is_answered_not_refused() {
    let (mut child, addr) = spawn_binary(&[]);
    let (email, _) = Client::new(addr).signup();
    let csrf = Client::new(addr).csrf();
    let login = || {
        let body = json!({"email": email, "password": PASSWORD}).to_string();
        format!(
            "POST /auth/login HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {}\r\n\
             Content-Type: application/json\r\nX-CSRF-Token: {csrf}\r\n\
             Cookie: svc_csrf={csrf}\r\nContent-Length: {}\r\n\r\n{body}",
            unique_ip(),
            body.len()
        )
    };
    let connect = || {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        BufReader::new(s)
    };
    let mut first = connect();
    let mut kept = connect();
    kept.get_mut()
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut kept).status, 200);
    // Both requests begun: their first bytes are with the server before the signal.
    let (heads, rests): (Vec<String>, Vec<String>) = (0..2)
        .map(|_| {
            let whole = login();
            let (head, rest) = whole.split_at(30);
            (head.to_string(), rest.to_string())
        })
        .unzip();
    for (s, head) in [&mut first, &mut kept].into_iter().zip(&heads) {
        s.get_mut().write_all(head.as_bytes()).unwrap();
    }
    thread::sleep(Duration::from_millis(300));
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    // The listener closes once the server is stopping: only then is the rest sent.
    let signalled = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
        assert!(signalled.elapsed() < T, "the listener is still open");
        thread::sleep(Duration::from_millis(10));
    }
    for (s, rest) in [&mut first, &mut kept].into_iter().zip(&rests) {
        s.get_mut().write_all(rest.as_bytes()).unwrap();
    }
    for (name, s) in [("first", &mut first), ("kept-alive", &mut kept)] {
        let r = read_response(s);
        assert_eq!(
            r.status,
            200,
            "the {name} request: {}",
            String::from_utf8_lossy(&r.body)
        );
        let mut more = Vec::new();
        assert_eq!(
            s.read_to_end(&mut more).unwrap(),
            0,
            "the {name} connection ended"
        );
    }
    let status = wait_exit(&mut child, Duration::from_secs(10)).expect("still running after 10 s");
    assert!(status.success(), "{status}");
}
