//! The route screen of sign-in (issue 14): a request from an address already refused is answered
//! on its connection's thread, without a worker, and that thread then runs at the lowest
//! priority (never a trusted proxy's).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use common::*;
use consoled::http::client::Client as ClientAddr;
use consoled::limits::Bucket;

fn client_at(server: &TestServer, ip: &str) -> Client {
    let mut c = server.client();
    c.ip = ip.to_string();
    c
}

/// A flood that is already refused must not need a worker: the refusal of an address over its
/// budget is made on the connection's thread, from memory. Here the only worker is stuck (the
/// owner's sign-in waits on a row lock the test holds), and the refused address is still
/// answered at once. (Before, its request queued behind the stuck worker.)
#[test]
fn an_address_over_its_budget_is_refused_while_every_worker_is_busy() {
    let server = TestServer::with(&[
        ("CONSOLED_WORKERS", "1"),
        ("CONSOLED_LOGIN_FAILURES_PER_CLIENT", "1"),
    ]);
    let mut owner = server.client();
    let (email, _) = owner.signup();
    let mut guesser = client_at(&server, &unique_ip());
    guesser
        .login(&unique_email(), "wrong password")
        .expect_error(401, "invalid_credentials");
    guesser
        .login(&unique_email(), "wrong password")
        .expect_error(429, "rate_limited");

    // Hold the owner's row: a sign-in's new device cookie and session refer to it, so the
    // owner's sign-in waits on the lock, and with it the only worker.
    let mut holder = db();
    let mut tx = holder.transaction().unwrap();
    let holder_pid: i32 = tx.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    tx.execute("SELECT 1 FROM users WHERE email = $1 FOR UPDATE", &[&email])
        .unwrap();
    let stuck = thread::spawn(move || owner.login(&email, PASSWORD).status);
    let mut watcher = db();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                &[&holder_pid],
            )
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sign-in never waited"
        );
        thread::sleep(Duration::from_millis(20));
    }

    let (tx_answer, answer) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let r = guesser.login(&unique_email(), "wrong password");
        let _ = tx_answer.send((r.status, r.code()));
    });
    let got = answer.recv_timeout(Duration::from_secs(3));
    tx.rollback().unwrap();
    assert_eq!(
        stuck.join().unwrap(),
        200,
        "the owner signs in once the lock goes"
    );
    assert_eq!(
        got.expect("answered while the only worker was busy"),
        (429, "rate_limited".to_string())
    );
}

/// The connection threads of this process that run at nice 19.
fn lowered_connection_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            let nice: i64 = stat[stat.rfind(')')? + 2..]
                .split_whitespace()
                .nth(16)?
                .parse()
                .ok()?;
            (comm.trim() == "conn" && nice == 19).then_some(())
        })
        .count()
}

/// Three sign-ins on one kept-alive connection from `from` (wrong passwords; budget 1): 401,
/// then 429 from the database look, then 429 from the screen. `forwarded`: sent as the client
/// address (for a server that trusts the sender as a proxy).
fn three_refused_sign_ins(
    addr: std::net::SocketAddr,
    from: &str,
    forwarded: Option<&str>,
) -> TcpConn {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: std::net::SocketAddr = format!("{from}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    socket.connect(&addr.into()).unwrap();
    let stream: std::net::TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let csrf = &common::Client::new(addr).csrf();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let body = format!(r#"{{"email":"{}","password":"wrong"}}"#, unique_email());
        let xff = forwarded
            .map(|ip| format!("X-Forwarded-For: {ip}\r\n"))
            .unwrap_or_default();
        let head = format!(
            "POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             X-CSRF-Token: {csrf}\r\nCookie: svc_csrf={csrf}\r\n{xff}\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        std::io::Write::write_all(&mut writer, head.as_bytes()).unwrap();
        let (status, headers) = read_head(&mut reader);
        let length: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut rest = vec![0; length];
        std::io::Read::read_exact(&mut reader, &mut rest).unwrap();
        statuses.push(status);
    }
    assert_eq!(statuses, [401, 429, 429]);
    TcpConn(writer)
}

/// Held open until the end of a test.
struct TcpConn(#[allow(dead_code)] std::net::TcpStream);

/// A connection whose sign-ins are refused from memory drops to the lowest CPU priority, so that
/// a flood that is already refused gets only the CPU that hashes and other clients leave; a
/// trusted proxy's connection (which carries other clients) never does.
#[test]
fn a_refused_connection_runs_at_the_lowest_priority_unless_it_is_a_proxy() {
    let budget = ("CONSOLED_LOGIN_FAILURES_PER_CLIENT", "1");
    let proxied = TestServer::with(&[budget]);
    let before = lowered_connection_threads();
    let _proxy = three_refused_sign_ins(proxied.addr, "127.0.0.1", Some(&unique_ip()));
    assert_eq!(lowered_connection_threads(), before, "a proxy's connection");

    let direct = TestServer::with(&[budget, ("CONSOLED_TRUSTED_PROXIES", "")]);
    let from = format!("127.0.0.{}", 100 + std::process::id() % 100);
    // This address's failures of an earlier run (the window is 15 minutes) are forgotten.
    let earlier = Bucket::LoginClient(ClientAddr::of(Some(from.parse().unwrap())));
    db().execute(
        "DELETE FROM rate_events WHERE bucket = $1",
        &[&earlier.key()],
    )
    .unwrap();
    let _direct = three_refused_sign_ins(direct.addr, &from, None);
    assert_eq!(lowered_connection_threads(), before + 1);
}

/// Sends a sign-in head with `Expect: 100-continue` (and not its body) as `ip`; what the server
/// answers before it has the body, and whether it then closed the connection.
fn login_expecting_continue(server: &TestServer, ip: &str, csrf: &str) -> (String, TcpStream) {
    let body = format!(
        r#"{{"email":"{}","password":"wrong password"}}"#,
        unique_email()
    );
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "POST /auth/login HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: {ip}\r\n\
         Content-Type: application/json\r\nCookie: svc_csrf={csrf}\r\nX-CSRF-Token: {csrf}\r\n\
         Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    // The first response head, byte by byte: nothing after it is taken off the socket.
    let mut first = Vec::new();
    let mut b = [0u8; 1];
    while !first.ends_with(b"\r\n\r\n") && s.read(&mut b).unwrap() == 1 {
        first.push(b[0]);
    }
    let first = String::from_utf8_lossy(&first).to_string();
    if first.starts_with("HTTP/1.1 100") {
        s.write_all(body.as_bytes()).unwrap();
    }
    (first, s)
}

/// Issue 22, item 3: the server asks for a body (`100 Continue`) only once the route's screen has
/// admitted the request. An address over its failure budget gets its 429 at once, never a
/// `100 Continue` for a body it would refuse, and the connection closes (the body it did not
/// ask for is never read as a request). An admitted sign-in still gets `100 Continue`.
#[test]
fn no_100_continue_before_the_screen_admits_the_request() {
    let server = TestServer::with(&[("CONSOLED_LOGIN_FAILURES_PER_CLIENT", "1")]);
    let ip = unique_ip();
    let mut guesser = client_at(&server, &ip);
    let csrf = guesser.csrf();
    let (first, mut s) = login_expecting_continue(&server, &ip, &csrf);
    assert!(first.starts_with("HTTP/1.1 100 Continue"), "{first:?}");
    let r = read_response(&mut std::io::BufReader::new(&mut s));
    r.expect_error(401, "invalid_credentials");
    guesser
        .login(&unique_email(), "wrong password")
        .expect_error(429, "rate_limited");

    let (first, mut s) = login_expecting_continue(&server, &ip, &csrf);
    assert!(
        first.starts_with("HTTP/1.1 429"),
        "a body was asked for before the refusal: {first:?}"
    );
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)
        .expect("the connection closes after the refusal");
    let all = first
        .into_bytes()
        .into_iter()
        .chain(rest)
        .collect::<Vec<_>>();
    let r = read_response(&mut std::io::BufReader::new(&all[..]));
    r.expect_error(429, "rate_limited");
    assert!(r.header("retry-after").is_some());
}
