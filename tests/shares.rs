//! Fair shares and capacity (issue 22): an IPv6 /64 is one client for the connection share, as
//! for every other count (in a network namespace of its own), and the instance's stream capacity
//! is exact under concurrent requests.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::thread;
use std::time::Duration;

use common::sse;
use common::*;

/// Runs `cmd`, failing the test with its output if it fails.
fn run(cmd: &mut Command) {
    let out = cmd.output().expect("the command runs");
    assert!(out.status.success(), "{cmd:?}: {out:?}");
}

/// Relays connections made to a Unix socket at `{dir}/.s.PGSQL.{port}` to the PostgreSQL
/// server of DATABASE_URL: a path in the file system reaches the database from a network
/// namespace of its own. Returns the URL to use there.
fn database_through_unix_socket(dir: &std::path::Path) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let cfg: postgres::Config = base.parse().unwrap();
    let host = match &cfg.get_hosts()[0] {
        postgres::config::Host::Tcp(h) => h.clone(),
        other => panic!("DATABASE_URL's host is not TCP: {other:?}"),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let listener =
        std::os::unix::net::UnixListener::bind(dir.join(format!(".s.PGSQL.{port}"))).unwrap();
    thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let Ok(db) = TcpStream::connect((host.as_str(), port)) else {
                continue;
            };
            let (mut c2, mut d2) = (client.try_clone().unwrap(), db.try_clone().unwrap());
            let (mut c, mut d) = (client, db);
            thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut d2);
                let _ = d2.shutdown(std::net::Shutdown::Write);
            });
            thread::spawn(move || {
                let _ = std::io::copy(&mut d, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    let user = cfg.get_user().unwrap_or("postgres");
    let dbname = cfg.get_dbname().unwrap_or("consoled");
    let path = dir.to_str().unwrap().replace('/', "%2F");
    format!("postgres://{user}@{path}:{port}/{dbname}")
}

/// Set in the copy of this test that runs in its own network namespace.
const IN_NAMESPACE: &str = "CONSOLED_TEST_IN_NETNS";

/// Issue 22: an IPv6 client counts by its /64 for the connection share, as for every other
/// count. In a network namespace of its own (`unshare -n`), 40 addresses of one /64 together get
/// one address's share of connections (the share is 50 of 200), while an address of another /64
/// still gets its own. (Before, each address of the /64 had a share: 160 of 200 held.)
#[test]
fn an_ipv6_slash_64_is_one_client_for_the_connection_share() {
    if std::env::var_os(IN_NAMESPACE).is_none() {
        if !Command::new("unshare")
            .args(["-n", "true"])
            .status()
            .is_ok_and(|s| s.success())
        {
            eprintln!(
                "SKIPPED: `unshare -n` is not permitted here (it needs root or CAP_SYS_ADMIN)"
            );
            return;
        }
        let dir = tempdir::TempDir::new();
        let url = database_through_unix_socket(&dir.0);
        let out = Command::new("unshare")
            .arg("-n")
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "an_ipv6_slash_64_is_one_client_for_the_connection_share",
                "--nocapture",
            ])
            .env(IN_NAMESPACE, "1")
            .env("CONSOLED_TEST_DATABASE_SUFFIX", "_netns")
            .env("DATABASE_URL", url)
            .output()
            .expect("unshare runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "in the namespace: {text}"
        );
        return;
    }
    run(Command::new("ip").args(["link", "set", "lo", "up"]));
    let add = |addr: &str| {
        run(Command::new("ip").args(["-6", "addr", "add", addr, "dev", "lo", "nodad"]));
    };
    add("fd00:1::1/64");
    let same: Vec<String> = (0..40)
        .map(|i| format!("fd00:1::{:x}", 0x100 + i))
        .collect();
    for a in &same {
        add(&format!("{a}/64"));
    }
    add("fd00:2::1/64");
    let mail = tempdir::TempDir::new();
    let config = test_config(
        &mail.0,
        &[
            ("CONSOLED_MAX_CONNECTIONS", "200"),
            ("CONSOLED_CLIENT_SHARE", "0.25"),
        ],
    );
    let listener =
        consoled::server::bind("[fd00:1::1]:0".parse().unwrap(), config.read_timeout).unwrap();
    let service = consoled::serve_on(config, listener).expect("start server");
    let addr = service.addr();
    let connect_from = |local: &str| {
        let s = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None).unwrap();
        let from: SocketAddr = format!("[{local}]:0").parse().unwrap();
        s.bind(&from.into()).unwrap();
        s.connect(&addr.into()).unwrap();
        let mut s: TcpStream = s.into();
        // A head that is still arriving: the connection stays held.
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        s
    };
    // Whether a connection was refused (429) at once, or is held (nothing to read yet).
    let refused = |mut s: &TcpStream| {
        s.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 512];
        match s.read(&mut buf) {
            Ok(n) if n > 0 => {
                let got = String::from_utf8_lossy(&buf[..n]);
                assert!(got.starts_with("HTTP/1.1 429"), "{got}");
                true
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            other => panic!("{other:?}"),
        }
    };
    let from_one: Vec<TcpStream> = same
        .iter()
        .flat_map(|a| (0..4).map(move |_| a.clone()))
        .map(|a| connect_from(&a))
        .collect();
    thread::sleep(Duration::from_millis(300));
    let held = from_one.iter().filter(|s| !refused(s)).count();
    assert_eq!(held, 50, "one /64 holds one share of connections");
    let other: Vec<TcpStream> = (0..10).map(|_| connect_from("fd00:2::1")).collect();
    thread::sleep(Duration::from_millis(300));
    let held_other = other.iter().filter(|s| !refused(s)).count();
    assert_eq!(held_other, 10, "another /64 is another client");
    drop(from_one);
    drop(other);
    service.shutdown(Duration::from_secs(5));
}

/// Issue 22: the instance's stream capacity is a place taken, not a gauge looked at, so stream
/// requests arriving together cannot pass it (before: by up to one per worker).
#[test]
fn the_stream_capacity_is_exact_under_concurrent_requests() {
    let server = TestServer::with(&[
        ("CONSOLED_MAX_STREAMS_PER_INSTANCE", "2"),
        ("CONSOLED_WORKERS", "8"),
    ]);
    let accounts: Vec<(String, String)> = (0..12)
        .map(|_| {
            let mut c = server.client();
            c.signup();
            (format!("svc_session={}", c.cookies["svc_session"]), c.ip)
        })
        .collect();
    let barrier = std::sync::Barrier::new(accounts.len());
    let statuses: Vec<(u16, Option<sse::Sse>)> = thread::scope(|s| {
        let handles: Vec<_> = accounts
            .iter()
            .map(|(cookie, ip)| {
                let barrier = &barrier;
                s.spawn(move || {
                    let stream = TcpStream::connect(server.addr).unwrap();
                    barrier.wait();
                    let headers = [
                        ("Cookie", cookie.as_str()),
                        ("X-Forwarded-For", ip.as_str()),
                    ];
                    let s = sse::open_on(stream, server.addr, &headers);
                    (s.status, (s.status == 200).then_some(s))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let admitted = statuses.iter().filter(|(st, _)| *st == 200).count();
    let refused = statuses.iter().filter(|(st, _)| *st == 503).count();
    assert_eq!(
        (admitted, refused),
        (2, 10),
        "{:?}",
        statuses.iter().map(|(s, _)| s).collect::<Vec<_>>()
    );
}
