//! Checks benchmark (issue 31, item 2): how fast `GET /auth/check` answers a session or an API
//! token checked before, beside `GET /healthz` (the server's floor: no work at all), directly
//! and through Debian's nginx `auth_request` (the shape `contrib/nginx.conf` ships), side by
//! side in one run on one machine. For each: requests per second and p50/p99 latency from
//! `CHECK_CLIENTS` keep-alive clients (default 16) over `CHECK_SECONDS` (default 8) per phase,
//! the phases taken in turn `CHECK_ROUNDS` times (default 2); and the database statements each
//! phase cost, counted twice: by a relay between the server's pool and PostgreSQL (round trips:
//! the keeper's heartbeat and the maintenance thread run in every phase alike), and by the
//! server's own `consoled_checks_total{from="database"}`.
//!
//! Goals: a check's rate at least 0.8 of `/healthz`'s, its p99 within 1.5 times, and no database
//! statement for a repeated check. Run with `make bench BENCH=checks` (release build, private
//! PostgreSQL). Prints a Markdown table.

mod common;
#[path = "checks/conn.rs"]
mod conn;
#[path = "checks/nginx.rs"]
mod nginx;
#[path = "../tests/common/pgcount.rs"]
mod pgcount;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use conn::Conn;

const PASSWORD: &str = "benchmark password 1";

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What a phase asks, and where.
struct Target {
    name: &'static str,
    via: &'static str,
    addr: SocketAddr,
    /// The whole request, sent again and again on each connection.
    request: String,
    /// The `/healthz` target this one is compared with (same path).
    floor: Option<usize>,
}

#[derive(Default, Clone)]
struct Totals {
    requests: u64,
    seconds: f64,
    micros: Vec<u32>,
    round_trips: u64,
    from_database: u64,
    from_memory: u64,
}

fn main() {
    let database_url = std::env::var("DATABASE_URL").expect("DATABASE_URL (make bench sets it)");
    let (seconds, clients, rounds) = (
        setting("CHECK_SECONDS", 8),
        setting("CHECK_CLIENTS", 16) as usize,
        setting("CHECK_ROUNDS", 2),
    );
    let relay = pgcount::CountingProxy::start(db_target(&database_url));
    let pooled = database_url.replacen(
        &db_target(&database_url),
        &format!("127.0.0.1:{}", relay.port),
        1,
    );
    let server = common::Server::start(
        &pooled,
        &[
            ("CONSOLED_DATABASE_DIRECT_URL", database_url.clone()),
            ("CONSOLED_TRUSTED_PROXIES", "127.0.0.1".into()),
            ("CONSOLED_CLIENT_IP_HEADER", "X-Real-IP".into()),
        ],
    );
    let (session, token) = credentials(server.addr, &database_url);
    let nginx = nginx::Nginx::start(server.addr);
    let targets = targets(
        server.addr,
        nginx.as_ref().map(|n| n.addr),
        &session,
        &token,
    );
    for t in &targets {
        // Warm: the first check of each credential reads the database.
        assert_eq!(once(t.addr, &t.request), 200, "{} {}", t.name, t.via);
    }
    let mut totals = vec![Totals::default(); targets.len()];
    for _ in 0..rounds {
        for (t, total) in targets.iter().zip(&mut totals) {
            let trips = relay.round_trips();
            let (db_checks, memory_checks) = checks(server.addr);
            let (n, secs, mut micros) = load(t, clients, Duration::from_secs(seconds));
            total.requests += n;
            total.seconds += secs;
            total.micros.append(&mut micros);
            total.round_trips += relay.round_trips() - trips;
            let (db, memory) = checks(server.addr);
            total.from_database += db - db_checks;
            total.from_memory += memory - memory_checks;
        }
    }
    if nginx.is_none() {
        println!("nginx: SKIPPED (not installed; as root: apt-get install nginx)\n");
    }
    report(&targets, &mut totals, clients);
}

/// A signed-up user's session token, and an API token of the user's project.
fn credentials(addr: SocketAddr, database_url: &str) -> (String, String) {
    let csrf = consoled::http::csrf::issue(&common::CSRF_KEY, None);
    let email = format!("checks-{}@example.com", std::process::id());
    let body = format!(r#"{{"email":"{email}","password":"{PASSWORD}","name":"Bench"}}"#);
    let (status, head) = post(addr, "/auth/signup", &csrf, None, &body);
    assert_eq!(status, 201, "signup");
    let session = head
        .lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: svc_session="))
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_string();
    let mut db = postgres::Client::connect(database_url, postgres::NoTls).expect("database");
    let project: i64 = db
        .query_one(
            "SELECT p.id FROM projects p JOIN memberships m ON m.org_id = p.org_id
               JOIN users u ON u.id = m.user_id WHERE u.email = $1",
            &[&email],
        )
        .unwrap()
        .get(0);
    let csrf = consoled::http::csrf::issue(&common::CSRF_KEY, Some(&session));
    let body = r#"{"name": "bench", "scope": "read"}"#;
    let path = format!("/v1/projects/{project}/tokens");
    let (status, head) = post(addr, &path, &csrf, Some(&session), body);
    assert_eq!(status, 201, "token");
    let token = head
        .split("\"token\":\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .expect("a token")
        .to_string();
    (session, token)
}

fn targets(
    direct: SocketAddr,
    nginx: Option<SocketAddr>,
    session: &str,
    token: &str,
) -> Vec<Target> {
    let get =
        |path: &str, header: &str| format!("GET {path} HTTP/1.1\r\nHost: bench\r\n{header}\r\n");
    let cookie = format!("Cookie: svc_session={session}\r\n");
    let bearer = format!("Authorization: Bearer {token}\r\n");
    let mut out = vec![
        Target {
            name: "GET /healthz",
            via: "direct",
            addr: direct,
            request: get("/healthz", ""),
            floor: None,
        },
        Target {
            name: "check, session",
            via: "direct",
            addr: direct,
            request: get("/auth/check", &cookie),
            floor: Some(0),
        },
        Target {
            name: "check, API token",
            via: "direct",
            addr: direct,
            request: get("/auth/check", &bearer),
            floor: Some(0),
        },
    ];
    if let Some(addr) = nginx {
        out.push(Target {
            name: "GET /healthz",
            via: "nginx",
            addr,
            request: get("/healthz", ""),
            floor: None,
        });
        out.push(Target {
            name: "check, session",
            via: "nginx auth_request",
            addr,
            request: get("/guarded", &cookie),
            floor: Some(3),
        });
    }
    out
}

/// `clients` keep-alive connections asking `t` until `time` is over: requests, seconds, and
/// each request's latency in microseconds.
fn load(t: &Target, clients: usize, time: Duration) -> (u64, f64, Vec<u32>) {
    let stop = Arc::new(AtomicBool::new(false));
    let want = 200;
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (stop, addr, request) = (stop.clone(), t.addr, t.request.clone());
            thread::spawn(move || {
                let mut conn = Conn::open(addr);
                let mut micros = Vec::with_capacity(1 << 16);
                while !stop.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    let status = conn.ask(&request).unwrap_or_else(|| {
                        // Closed by the server between two requests: a new connection (its
                        // time counts in this request's latency).
                        conn = Conn::open(addr);
                        conn.ask(&request).expect("an answer on a new connection")
                    });
                    assert_eq!(status, want);
                    micros.push(at.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
                micros
            })
        })
        .collect();
    thread::sleep(time);
    stop.store(true, Ordering::Relaxed);
    let micros: Vec<u32> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    (micros.len() as u64, started.elapsed().as_secs_f64(), micros)
}

fn report(targets: &[Target], totals: &mut [Totals], clients: usize) {
    println!(
        "{clients} keep-alive clients; rate and p99 compared with `GET /healthz` on the same path.\n"
    );
    println!("| request | path | requests/s | p50 ms | p99 ms | rate ÷ healthz | p99 ÷ healthz | pool round trips per 1,000 | checks from memory | from the database |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut figures = Vec::new();
    for total in totals.iter_mut() {
        total.micros.sort_unstable();
        let pct = |p: f64| {
            let i = ((total.micros.len() as f64 - 1.0) * p).round() as usize;
            f64::from(total.micros.get(i).copied().unwrap_or(0)) / 1000.0
        };
        figures.push((total.requests as f64 / total.seconds, pct(0.5), pct(0.99)));
    }
    for ((t, total), (rate, p50, p99)) in targets.iter().zip(totals.iter()).zip(&figures) {
        let (ratio, p99_ratio) = match t.floor {
            Some(f) => (
                format!("{:.2}", rate / figures[f].0),
                format!("{:.2}", p99 / figures[f].2),
            ),
            None => ("".into(), "".into()),
        };
        let per_thousand = total.round_trips as f64 * 1000.0 / total.requests.max(1) as f64;
        let (memory, db) = match t.floor {
            Some(_) => (
                total.from_memory.to_string(),
                total.from_database.to_string(),
            ),
            None => (String::new(), String::new()),
        };
        println!(
            "| {} | {} | {rate:.0} | {p50:.2} | {p99:.2} | {ratio} | {p99_ratio} | {per_thousand:.3} | {memory} | {db} |",
            t.name, t.via
        );
    }
}

/// The server's checks so far that read the database, and those answered from memory.
fn checks(addr: SocketAddr) -> (u64, u64) {
    let mut conn = Conn::open(addr);
    let text = conn.text("GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n");
    let count = |from: &str| {
        let line = format!("consoled_checks_total{{from=\"{from}\"}}");
        text.lines()
            .find_map(|l| l.strip_prefix(&line))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (count("database"), count("memory"))
}

fn once(addr: SocketAddr, request: &str) -> u16 {
    Conn::open(addr).ask(request).expect("an answer")
}

fn post(
    addr: SocketAddr,
    path: &str,
    csrf: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, String) {
    let session = session
        .map(|s| format!("; svc_session={s}"))
        .unwrap_or_default();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n\
         X-CSRF-Token: {csrf}\r\nCookie: svc_csrf={csrf}{session}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut conn = Conn::open(addr);
    conn.writer.write_all(request.as_bytes()).unwrap();
    let (status, head, body) = conn.read();
    (status, format!("{head}{}", String::from_utf8_lossy(&body)))
}

/// host:port of a PostgreSQL URL.
fn db_target(url: &str) -> String {
    let after = url.split("://").nth(1).expect("a URL");
    let authority = after.split(['/', '?']).next().unwrap();
    let hostport = authority.rsplit('@').next().unwrap();
    if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:5432")
    }
}
