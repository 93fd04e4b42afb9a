//! What operations see (issue 37, item 4): after a password-reset request, no counter of
//! `/metrics` and no log line tells an address with an account from one without; and
//! `CONSOLED_METRICS_LISTEN` moves `/metrics` off the public listener onto an operations address.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::binary::Spawned;
use common::smtp::SmtpSink;
use common::*;
use serde_json::json;

/// Every counter sample (`family{labels} value`) of a scrape, except the latency histogram and
/// the process's CPU time, which move with timing alone.
fn counters(text: &str) -> BTreeMap<String, f64> {
    let kinds: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            let family = series.split('{').next().unwrap();
            kinds.get(family) == Some(&"counter")
                && family != "process_cpu_seconds_total"
                && !family.starts_with("consoled_request_duration")
        })
        .map(|(series, v)| (series.to_string(), v.parse().unwrap()))
        .collect()
}

fn scrape(addr: std::net::SocketAddr) -> BTreeMap<String, f64> {
    let r = raw_request(addr, "GET", "/metrics", &[], b"");
    counters(&String::from_utf8(r.body).unwrap())
}

/// How each counter moved from `a` to `b`.
fn moved(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    b.iter()
        .map(|(k, v)| (k.clone(), v - a.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d != 0.0)
        .collect()
}

/// A log line with its time, numbers and addresses taken out (each run of digits is one `#`):
/// what it tells, not when.
fn shape(line: &str) -> String {
    let line = line.split_once(']').map_or(line, |(_, rest)| rest);
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        // A number is one `#` whatever its digits, `3` or `3.25` (a duration) alike.
        let decimal_point =
            c == '.' && out.ends_with('#') && chars.peek().is_some_and(char::is_ascii_digit);
        if !(c.is_ascii_digit() || decimal_point) {
            out.push(c);
        } else if !out.ends_with('#') {
            out.push('#');
        }
    }
    out
}

fn outbox_empty() -> bool {
    let n: i64 = db()
        .query_one("SELECT count(*) FROM outbox", &[])
        .unwrap()
        .get(0);
    n == 0
}

fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what} within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The two tests with a mail sender run one at a time: each sender takes any due row of this
/// binary's database.
static SENDERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The reset request of `email` in the outbox was tried once and waits for its retry.
fn tried_once(email: &str) -> bool {
    let n: i64 = db()
        .query_one(
            "SELECT count(*) FROM outbox WHERE recipient = $1 AND attempts = 1",
            &[&email],
        )
        .unwrap()
        .get(0);
    n == 1
}

/// A forgot request for `email`, then the sender's work on it (until `done`): what the counters
/// and the log said meanwhile.
fn forgot_until(
    server: &Spawned,
    email: &str,
    done: impl Fn() -> bool,
) -> (BTreeMap<String, f64>, Vec<String>) {
    let before = scrape(server.addr);
    let lines = server.log().len();
    let mut c = Client::new(server.addr);
    c.post("/auth/password/forgot", &json!({ "email": email }))
        .expect(204);
    wait_for("the reset request handled", done);
    // The sender's line follows its commit.
    std::thread::sleep(Duration::from_millis(300));
    // The scrapes' own access lines may fall on either side of the count.
    let log: Vec<String> = server.log()[lines..]
        .iter()
        .filter(|l| !l.contains("route=metrics"))
        .map(|l| shape(l))
        .collect();
    (moved(&before, &scrape(server.addr)), log)
}

#[test]
fn a_reset_request_tells_no_counter_and_no_log_line_whether_the_address_has_an_account() {
    let _one = SENDERS.lock().unwrap_or_else(|e| e.into_inner());
    let sink = SmtpSink::start();
    let bin = env!("CARGO_BIN_EXE_consoled");
    let server = Spawned::start(
        bin,
        &[
            ("CONSOLED_SMTP_URL", &sink.url()),
            ("CONSOLED_MAIL_LOG_LINKS", "false"),
        ],
    );
    let mut owner = Client::new(server.addr);
    let (email, _) = owner.signup();
    sink.wait_for(&email, 1, Duration::from_secs(20));
    wait_for("the verification mail handled", outbox_empty);

    let known = forgot_until(&server, &email, outbox_empty);
    assert_eq!(sink.wait_for(&email, 2, Duration::from_secs(20)).len(), 2);
    let unknown = forgot_until(&server, &unique_email(), outbox_empty);
    assert_eq!(known.0, unknown.0, "counters moved (known, unknown)");
    assert_eq!(known.1, unknown.1, "log lines (known, unknown)");
}

/// While the mail server is away, the request of an address without an account fails and waits
/// for its retry as that of an address with one does (before, it was dropped at once).
#[test]
fn during_a_mail_outage_a_reset_request_fails_alike_for_every_address() {
    let _one = SENDERS.lock().unwrap_or_else(|e| e.into_inner());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let bin = env!("CARGO_BIN_EXE_consoled");
    let server = Spawned::start(
        bin,
        &[
            ("CONSOLED_SMTP_URL", &format!("smtp://127.0.0.1:{port}")),
            ("CONSOLED_MAIL_LOG_LINKS", "false"),
            ("CONSOLED_MAIL_RETRY_SECONDS", "300"),
        ],
    );
    let email = unique_email();
    let mut owner = Client::new(server.addr);
    owner
        .post(
            "/auth/signup",
            &json!({"email": email, "password": PASSWORD, "name": "Owner"}),
        )
        .expect(201);
    wait_for("the verification mail tried", || tried_once(&email));
    std::thread::sleep(Duration::from_millis(300));
    db().execute("DELETE FROM outbox WHERE recipient = $1", &[&email])
        .unwrap();
    let known = forgot_until(&server, &email, || tried_once(&email));
    let stranger = unique_email();
    let unknown = forgot_until(&server, &stranger, || tried_once(&stranger));
    assert_eq!(known.0, unknown.0, "counters moved (known, unknown)");
    assert_eq!(known.1, unknown.1, "log lines (known, unknown)");
    assert!(
        known.0.contains_key("consoled_mail_failures_total"),
        "{known:?}"
    );
    // The rows wait five minutes for their retry: the other sender test wants an empty outbox.
    drop(server);
    db().execute("DELETE FROM outbox", &[]).unwrap();
}

/// With `CONSOLED_METRICS_LISTEN`, `/metrics` is served there (with `/healthz` and `/readyz`)
/// and is 404 on the public listener; nothing else is served there.
#[test]
fn the_operations_listener_serves_metrics_and_the_public_one_no_longer_does() {
    let server = TestServer::with(&[("CONSOLED_METRICS_LISTEN", "127.0.0.1:0")]);
    let ops = server
        .service
        .as_ref()
        .unwrap()
        .ops_addr()
        .expect("an operations listener");
    assert_ne!(ops.port(), server.addr.port());
    let public = server.client().get("/metrics");
    public.expect_error(404, "not_found");
    let r = raw_request(ops, "GET", "/metrics", &[], b"");
    r.expect(200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    assert!(String::from_utf8_lossy(&r.body).contains("consoled_requests_total"));
    for path in ["/healthz", "/readyz"] {
        raw_request(ops, "GET", path, &[], b"").expect(200);
        server.client().get(path).expect(200);
    }
    for (method, path) in [("GET", "/auth/csrf"), ("GET", "/"), ("POST", "/metrics")] {
        let status = raw_request(ops, method, path, &[], b"").status;
        assert!([404, 405].contains(&status), "{method} {path}: {status}");
    }
}
