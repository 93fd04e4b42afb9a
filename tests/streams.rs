//! The stream engine's connection layer: slots freed when clients close or stall, one thread and
//! one descriptor per stream, fair shares per client address, clean refusals at capacity, and
//! nothing written after a stream's last chunk.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::sse::{self, Ev, Sse};
use common::*;

const T: Duration = Duration::from_secs(10);

/// A signed-up user's session cookie and personal project.
fn account(server: &TestServer) -> (String, i64) {
    let mut client = server.client();
    let (_, state) = client.signup();
    let project_id: i64 = project_of(&state);
    let cookie = format!("svc_session={}", client.cookies["svc_session"]);
    (cookie, project_id)
}

fn open(server: &TestServer, cookie: &str) -> Sse {
    let mut s = sse::open(server.addr, &[("Cookie", cookie)]);
    assert_eq!(s.status, 200, "{}", String::from_utf8_lossy(&s.body));
    assert_eq!(s.next(T), Ev::Ready);
    s
}

/// A client socket bound to a loopback address of its own (each is a distinct client address).
fn connect_from(local: &str, server: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{local}:0").parse().unwrap();
    socket.bind(&from.into()).unwrap();
    socket.connect(&server.into()).unwrap();
    socket.into()
}

/// Resets a connection instead of closing it politely.
fn reset(s: TcpStream) {
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
}

/// Opens streams until one is accepted; how long that took.
fn time_until_open(server: &TestServer, cookie: &str) -> Duration {
    let t = Instant::now();
    loop {
        let s = sse::open(server.addr, &[("Cookie", cookie)]);
        if s.status == 200 {
            return t.elapsed();
        }
        assert_eq!(s.status, 429, "{}", String::from_utf8_lossy(&s.body));
        assert!(t.elapsed() < T, "the slot never came back");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_closed_stream_frees_its_slot_within_a_second_without_a_write() {
    // A long ping interval: no write can reveal the close.
    let server = TestServer::with(&[("CONSOLED_PING_SECONDS", "600")]);
    let (cookie, _) = account(&server);
    let mut open: Vec<Sse> = (0..10).map(|_| open(&server, &cookie)).collect();
    // Client FIN.
    drop(open.pop());
    let waited = time_until_open(&server, &cookie);
    assert!(waited < Duration::from_secs(1), "FIN: {waited:?}");
    // Client reset.
    reset(open.pop().unwrap().stream);
    let waited = time_until_open(&server, &cookie);
    assert!(waited < Duration::from_secs(1), "RST: {waited:?}");
    // All ten closed, ten new ones a moment later: none refused.
    open.clear();
    std::thread::sleep(Duration::from_millis(300));
    let s = sse::open(server.addr, &[("Cookie", &cookie)]);
    drop(s);
}

#[test]
fn ten_streams_closed_and_reopened_a_second_later_are_all_accepted() {
    let server = TestServer::with(&[("CONSOLED_PING_SECONDS", "600")]);
    let (cookie, _) = account(&server);
    let first: Vec<Sse> = (0..10).map(|_| open(&server, &cookie)).collect();
    drop(first);
    std::thread::sleep(Duration::from_secs(1));
    let statuses: Vec<u16> = (0..10)
        .map(|_| sse::open(server.addr, &[("Cookie", &cookie)]).status)
        .collect();
    assert_eq!(statuses, [200; 10]);
}

/// A client that stops reading while `burst` changes are sent to it is ended after the stall
/// time, and counted as `stalled`.
fn stalled_client_is_ended(burst: i64) {
    let server = TestServer::with(&[
        ("CONSOLED_STREAM_STALL_SECONDS", "1"),
        ("CONSOLED_MAX_STREAMS_PER_PRINCIPAL", "1"),
    ]);
    let (cookie, project) = account(&server);
    // A tiny receive buffer: the client's window closes after a few events.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut stalled = sse::open_on(socket.into(), server.addr, &[("Cookie", &cookie)]);
    assert_eq!(stalled.next(T), Ev::Ready);
    // The client reads none of them.
    db().execute(
        "SELECT consoled_notify_change('server', g, 'update', $1, NULL)
           FROM generate_series(1, $2::bigint) g",
        &[&project, &burst],
    )
    .unwrap();
    let waited = time_until_open(&server, &cookie);
    assert!(waited < Duration::from_secs(8), "{waited:?}");
    let metrics = server.client().get("/metrics");
    let text = String::from_utf8_lossy(&metrics.body).to_string();
    assert!(
        text.contains("consoled_streams_ended_total{reason=\"stalled\"} 1"),
        "{text}"
    );
}

/// More than the kernel's buffers of the connection hold (about 2,700 events here): bytes wait
/// in the stream's own outlet, and its stall clock ends it. (Not many more: every server running
/// meanwhile hears the burst, and the tests beside this one measure a slot's return within a
/// second.)
#[test]
fn a_client_that_stops_reading_is_ended_after_the_stall_time() {
    stalled_client_is_ended(6000);
}

/// Everything fits in the kernel's buffers: nothing waits in the stream's outlet, and the
/// kernel's time-out of the connection ends it, a second after the stall time; still `stalled`,
/// not `client_gone` (it was `client_gone` before: the client never closed anything).
#[test]
fn a_client_that_stops_reading_with_everything_in_the_kernels_buffers_is_ended_as_stalled() {
    stalled_client_is_ended(500);
}

/// Guards a defect the structure removed (streams were kept in a map by peer address, and a
/// request from a reused address and port was held behind the dead stream). It does not fail on
/// the old code here: that code also ended the dead stream at once, so on loopback the held
/// request was still answered in time.
#[test]
fn a_reused_client_port_is_not_held_behind_a_dead_stream() {
    let server = TestServer::with(&[("CONSOLED_PING_SECONDS", "600")]);
    let (cookie, _) = account(&server);
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_reuse_address(true).unwrap();
    socket
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    let local = socket.local_addr().unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut s = sse::open_on(socket.into(), server.addr, &[("Cookie", &cookie)]);
    assert_eq!(s.next(T), Ev::Ready);
    reset(s.stream);
    // The same client address and port again, at once.
    let again = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    again.set_reuse_address(true).unwrap();
    again.bind(&local).unwrap();
    again.connect(&server.addr.into()).unwrap();
    let mut again: TcpStream = again.into();
    again
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let t = Instant::now();
    again
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = again.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out:?}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

#[test]
fn a_stream_revoked_after_the_read_timeout_gets_nothing_after_its_last_chunk() {
    let server = TestServer::with(&[("CONSOLED_READ_TIMEOUT_SECONDS", "0.5")]);
    let mut client = server.client();
    client.signup();
    let cookie = format!("svc_session={}", client.cookies["svc_session"]);
    let mut s = open(&server, &cookie);
    std::thread::sleep(Duration::from_millis(1500));
    client.post_empty("/auth/logout").expect(204);
    assert!(s.wait_end(T).is_some());
    let rest = s.rest(Duration::from_secs(2));
    assert_eq!(rest, "", "bytes after the last chunk: {rest:?}");
}

#[test]
fn one_address_holds_at_most_its_share_of_connections() {
    let server = TestServer::with(&[
        ("CONSOLED_MAX_CONNECTIONS", "40"),
        ("CONSOLED_CLIENT_SHARE", "0.25"),
    ]);
    let held: Vec<TcpStream> = (0..10)
        .map(|_| connect_from("127.0.0.2", server.addr))
        .collect();
    let deadline = Instant::now() + T;
    while server.service.as_ref().unwrap().server.connections() < 10 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut extra = connect_from("127.0.0.2", server.addr);
    extra.set_read_timeout(Some(T)).unwrap();
    // A client that sends its request, as clients do: the refusal still ends in a clean close
    // (its request is read and dropped), not a reset.
    extra
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    extra.read_to_string(&mut out).expect("a clean close");
    assert!(out.starts_with("HTTP/1.1 429"), "{out:?}");
    assert!(out.contains("Retry-After: "), "{out:?}");
    assert!(out.contains("\"rate_limited\""), "{out:?}");
    // Another address is served.
    let mut other = connect_from("127.0.0.3", server.addr);
    other.set_read_timeout(Some(T)).unwrap();
    other
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = other.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out:?}");
    drop(held);
}

#[test]
fn one_address_holds_at_most_its_share_of_streams() {
    let server = TestServer::with(&[
        ("CONSOLED_MAX_STREAMS_PER_INSTANCE", "8"),
        ("CONSOLED_CLIENT_SHARE", "0.25"),
    ]);
    let (cookie, _) = account(&server);
    let (cookie2, _) = account(&server);
    // Through the trusted proxy (127.0.0.1), each stream names its client.
    let from = |ip: &str, cookie: &str| {
        sse::open(server.addr, &[("Cookie", cookie), ("X-Forwarded-For", ip)])
    };
    let _a1 = from("10.9.9.9", &cookie);
    let _a2 = from("10.9.9.9", &cookie2);
    let third = from("10.9.9.9", &cookie);
    assert_eq!(third.status, 429);
    assert_eq!(third.json()["error"]["code"], "rate_limited");
    assert!(third.header("retry-after").is_some());
    assert_eq!(from("10.9.9.8", &cookie).status, 200);
}

#[test]
fn past_capacity_a_connection_gets_a_json_503_with_retry_after() {
    let server = TestServer::with(&[("CONSOLED_MAX_CONNECTIONS", "5")]);
    let held: Vec<TcpStream> = (0..5)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    let deadline = Instant::now() + T;
    while server.service.as_ref().unwrap().server.connections() < 5 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 503"), "{out:?}");
    assert!(out.contains("Retry-After: 5"), "{out:?}");
    assert!(out.contains("\"unavailable\""), "{out:?}");
    drop(held);
    let deadline = Instant::now() + T;
    while server.service.as_ref().unwrap().server.connections() > 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    server.client().get("/healthz").expect(200);
}

mod leases {
    use super::*;
    use consoled::db::leases;

    fn user(server: &TestServer) -> i64 {
        let (_, state) = server.client().signup();
        state["user"]["id"].as_i64().unwrap()
    }

    fn take(c: &mut postgres::Client, instance: &str, user: i64) -> i64 {
        c.query_one(
            "INSERT INTO stream_leases (instance_id, user_id) VALUES ($1, $2) RETURNING id",
            &[&instance, &user],
        )
        .unwrap()
        .get(0)
    }

    /// Leases of `user` that count: their instance is alive.
    fn counted(c: &mut postgres::Client, user: i64) -> i64 {
        c.query_one(
            "SELECT count(*) FROM stream_leases l JOIN instances i ON i.id = l.instance_id
              WHERE l.user_id = $1 AND i.alive_until > now()",
            &[&user],
        )
        .unwrap()
        .get(0)
    }

    fn lapse(c: &mut postgres::Client, instance: &str, ago_secs: f64) {
        c.execute(
            "UPDATE instances SET alive_until = now() - make_interval(secs => $2) WHERE id = $1",
            &[&instance, &ago_secs],
        )
        .unwrap();
    }

    #[test]
    fn a_lease_counts_only_while_its_instance_is_alive() {
        let server = TestServer::start();
        let user = user(&server);
        let mut c = db();
        let instance = unique();
        assert!(!leases::heartbeat(&mut c, &instance).unwrap(), "new");
        take(&mut c, &instance, user);
        take(&mut c, &instance, user);
        assert_eq!(counted(&mut c, user), 2);
        assert!(leases::heartbeat(&mut c, &instance).unwrap(), "alive");
        lapse(&mut c, &instance, 1.0);
        assert_eq!(
            counted(&mut c, user),
            0,
            "a lapsed instance's streams count"
        );
        // Not forgotten yet: a slow instance that comes back counts again at once.
        leases::forget_dead(&mut c).unwrap();
        assert!(!leases::heartbeat(&mut c, &instance).unwrap(), "had lapsed");
        assert_eq!(counted(&mut c, user), 2);
    }

    #[test]
    fn a_lease_deleted_while_its_instance_was_cut_off_is_recreated() {
        let server = TestServer::start();
        let user = user(&server);
        let holder = leases::Holder::User(user);
        let mut c = db();
        let instance = unique();
        leases::heartbeat(&mut c, &instance).unwrap();
        let id = take(&mut c, &instance, user);
        let other = take(&mut c, &instance, user);
        // Cut off long enough for another instance to forget it, with its leases: this test, or
        // the keeper of a test server on this database if it comes first (it runs the same
        // statement every few seconds).
        lapse(&mut c, &instance, leases::FORGET_AFTER.as_secs_f64() + 1.0);
        leases::forget_dead(&mut c).unwrap();
        let left: i64 = c
            .query_one(
                "SELECT count(*) FROM stream_leases WHERE instance_id = $1",
                &[&instance],
            )
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "the forgotten instance's leases are gone");
        assert_eq!(counted(&mut c, user), 0);
        // Back: the heartbeat says it had lapsed, and the keeper restores its live leases (the
        // other stream ended meanwhile).
        assert!(!leases::heartbeat(&mut c, &instance).unwrap());
        leases::restore(&mut c, &instance, &[(id, holder)]).unwrap();
        assert_eq!(
            counted(&mut c, user),
            1,
            "the live stream's lease is counted again"
        );
        let ids: Vec<i64> = c
            .query("SELECT id FROM stream_leases WHERE user_id = $1", &[&user])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(ids, vec![id], "{other} stays gone");
    }
}

/// Strictly parses a chunked body: each chunk is `hex\r\n`, that many bytes, `\r\n`, and holds
/// whole events. Returns the events, or what broke the framing.
fn chunks(mut body: &[u8]) -> Result<Vec<String>, String> {
    let mut events = Vec::new();
    while !body.is_empty() {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk size line without CRLF")?;
        let size_text = std::str::from_utf8(&body[..line_end]).map_err(|e| e.to_string())?;
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("not a chunk size: {size_text:?}"))?;
        let data = &body[line_end + 2..];
        if data.len() < size + 2 {
            break; // the last chunk is still on its way
        }
        if &data[size..size + 2] != b"\r\n" {
            return Err(format!("chunk of {size} bytes not followed by CRLF"));
        }
        let text = String::from_utf8(data[..size].to_vec()).map_err(|e| e.to_string())?;
        if size == 0 {
            break;
        }
        if !text.ends_with("\n\n")
            || !(text.starts_with("event: ")
                || text.starts_with("retry: ")
                || text.starts_with(": ping"))
        {
            return Err(format!("a chunk that is not whole events: {text:?}"));
        }
        events.push(text);
        body = &data[size + 2..];
    }
    Ok(events)
}

#[test]
fn a_client_that_pauses_reading_gets_intact_framing_afterwards() {
    // The write time-out of client sockets is 10 s: a pause longer than that used to fail a
    // write half-way, and the buffered bytes were sent again after it. (Guards the structure —
    // no buffered writer after the head —: on this kernel the old code's failed write ended the
    // stream instead, so this does not fail on it.)
    let server = TestServer::start();
    let (cookie, project) = account(&server);
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut s: TcpStream = socket.into();
    let req = format!("GET /v1/events HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // Subscribed first (`ready`): changes made before it are not the stream's (on a loaded
    // machine they once all came before it, and the stream had only `ready` to send).
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !String::from_utf8_lossy(&got).contains("event: ready\n") {
        let n = s.read(&mut buf).expect("the stream's head and ready");
        assert!(n > 0, "the stream ended before ready");
        got.extend_from_slice(&buf[..n]);
    }
    db().execute(
        "SELECT consoled_notify_change('server', g, 'update', $1, NULL)
           FROM generate_series(1, 3000) g",
        &[&project],
    )
    .unwrap();
    std::thread::sleep(Duration::from_secs(12));
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_string();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let events = chunks(&got[head.len() + 4..]).unwrap_or_else(|e| panic!("{e}: {body:.300}"));
    assert!(events.len() > 10, "{} events", events.len());
}
