//! Logs an operator can use (issue 23, item 2), from the real binary: JSON lines with fields,
//! the security events with client address and user id, one access line per answered request,
//! a flood that costs a summary rather than a line per refusal, and a database outage that
//! costs two lines (start with its cause, end).

mod common;

use std::time::{Duration, Instant};

use common::binary::Spawned;
use common::*;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_consoled");

fn json_lines(server: &Spawned) -> Vec<Value> {
    server
        .log()
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"))
        })
        .collect()
}

/// The JSON lines with every `(field, value)` of `want`, waiting up to 5 s for one.
#[track_caller]
fn find(server: &Spawned, want: &[(&str, Value)]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = json_lines(server)
            .into_iter()
            .find(|v| want.iter().all(|(k, w)| &v[*k] == w));
        if let Some(v) = found {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "no line with {want:?} in {:#?}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn json_lines_carry_the_security_events_and_the_access_lines_as_fields() {
    let server = Spawned::start(
        BIN,
        &[
            ("CONSOLED_LOG_FORMAT", "json"),
            ("CONSOLED_TRUSTED_PROXIES", "127.0.0.1"),
        ],
    );
    let mut c = Client::new(server.addr);
    let (email, state) = c.signup();
    let user_id = state["user"]["id"].as_i64().unwrap();
    let ip = c.ip.clone();
    c.login(&email, "not the password at all")
        .expect_error(401, "invalid_credentials");
    let mut stranger = Client::new(server.addr);
    stranger
        .login(&unique_email(), PASSWORD)
        .expect_error(401, "invalid_credentials");
    c.login(&email, PASSWORD).expect(200);
    c.post_empty("/auth/logout").expect(204);
    c.get("/auth/session?token=secret-in-a-query")
        .expect_error(401, "unauthorized");
    // A stream's access line names its client too (through the trusted proxy's header).
    c.login(&email, PASSWORD).expect(200);
    let cookie = format!("svc_session={}", c.cookies["svc_session"]);
    let stream = common::sse::open(
        server.addr,
        &[
            ("Cookie", cookie.as_str()),
            ("X-Forwarded-For", ip.as_str()),
        ],
    );
    assert_eq!(stream.status, 200);

    let ev = |name: &str| ("event", json!(name));
    let failed = find(&server, &[ev("signin_failed"), ("user_id", json!(user_id))]);
    assert_eq!(failed["level"], "WARN");
    assert_eq!(failed["target"], "consoled::security");
    assert_eq!(failed["client"], json!(ip));
    assert_eq!(failed["reason"], "wrong_password");
    assert!(failed["ts"].as_str().unwrap().ends_with('Z'));
    // An unknown account: the client, no user id, and not the address tried.
    let unknown = find(
        &server,
        &[ev("signin_failed"), ("client", json!(stranger.ip))],
    );
    assert_eq!(unknown["reason"], "unknown_account");
    assert!(unknown.get("user_id").is_none());
    for event in ["signup", "signin_succeeded", "logout"] {
        let v = find(&server, &[ev(event), ("user_id", json!(user_id))]);
        assert_eq!(v["client"], json!(ip), "{v}");
        assert_eq!(v["level"], "INFO", "{v}");
    }

    // The access line: time, client, method, route name, status, duration, bytes.
    let access = find(
        &server,
        &[
            ("target", json!("consoled::access")),
            ("route", json!("login")),
            ("status", json!(401)),
        ],
    );
    assert_eq!(access["client"], json!(ip));
    assert_eq!(access["method"], "POST");
    assert!(access["duration_ms"].as_f64().unwrap() > 0.0);
    assert!(access["bytes"].as_u64().unwrap() > 0);
    let session = find(
        &server,
        &[
            ("target", json!("consoled::access")),
            ("route", json!("session")),
        ],
    );
    assert_eq!(session["status"], 401);
    let events = find(
        &server,
        &[
            ("target", json!("consoled::access")),
            ("route", json!("events")),
            ("status", json!(200)),
        ],
    );
    assert_eq!(events["client"], json!(ip), "{events}");
    assert_eq!(events["method"], "GET");
    // Never a path or a query string.
    let log = server.log().join("\n");
    assert!(!log.contains("secret-in-a-query"), "{log}");
    assert!(!log.contains("/auth/session"), "{log}");
    // Every line parsed as one object with the four fixed fields.
    for v in json_lines(&server) {
        for field in ["ts", "level", "target", "msg"] {
            assert!(v[field].is_string(), "{field} in {v}");
        }
    }
}

#[test]
fn a_flood_of_refused_sign_ins_is_counted_and_summarised_not_logged_line_by_line() {
    let server = Spawned::start(
        BIN,
        &[
            ("CONSOLED_TRUSTED_PROXIES", "127.0.0.1"),
            ("CONSOLED_LOGIN_FAILURES_PER_CLIENT", "2"),
            ("CONSOLED_LOG_SUMMARY_SECONDS", "1"),
        ],
    );
    let mut c = Client::new(server.addr);
    let email = unique_email();
    for _ in 0..2 {
        c.login(&email, "wrong password 1").expect(401);
    }
    let started = Instant::now();
    let flood = 300;
    for _ in 0..flood {
        c.login(&email, "wrong password 2").expect(429);
    }
    let line = server.wait_log(&["consoled::flood", "login_429"], Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(1500));
    let took = started.elapsed();
    let log = server.log();
    // The two failures that reached the password check are events; no refusal is a line.
    let failures = log.iter().filter(|l| l.contains("sign-in failed")).count();
    assert_eq!(failures, 2, "{log:#?}");
    let refusals = log
        .iter()
        .filter(|l| l.contains("consoled::access") && l.contains("login 429"))
        .count();
    assert_eq!(refusals, 0, "{log:#?}");
    // At most one summary a second; together they count every refusal.
    let summaries: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("consoled::flood"))
        .collect();
    assert!(
        !summaries.is_empty() && summaries.len() as u64 <= took.as_secs() + 1,
        "{summaries:#?}"
    );
    let counted: u64 = summaries
        .iter()
        .filter_map(|l| l.split(" login_429=").nth(1))
        .map(|n| n.split(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted, flood, "{summaries:#?}");
    assert!(line.contains(" WARN "), "{line}");
    assert!(log.len() < 40, "{} lines for a flood: {log:#?}", log.len());
}

#[test]
fn a_database_outage_is_one_line_when_it_starts_and_one_when_it_ends() {
    let proxy = DbProxy::start();
    let url = proxy.url();
    let server = Spawned::start(
        BIN,
        &[("DATABASE_URL", &url), ("CONSOLED_LOG_FORMAT", "json")],
    );
    let mut c = Client::new(server.addr);
    c.signup();
    let before = server.log().len();
    proxy.cut();
    // Traffic and probes during the outage: every request fails over to 503.
    let cut_at = Instant::now();
    while cut_at.elapsed() < Duration::from_secs(6) {
        let t = Instant::now();
        let status = c.get("/readyz").status;
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "/readyz took {:?}",
            t.elapsed()
        );
        assert!(status == 503 || cut_at.elapsed() < Duration::from_millis(600));
        let _ = c.get("/auth/session");
        std::thread::sleep(Duration::from_millis(100));
    }
    proxy.restore();
    let up = find(&server, &[("event", json!("database_up"))]);
    assert!(up["down_seconds"].as_f64().unwrap() >= 5.0, "{up}");
    assert!(up["failed_attempts"].as_u64().unwrap() > 1, "{up}");
    assert!(!up["last_cause"].as_str().unwrap().is_empty(), "{up}");
    let during: Vec<Value> = json_lines(&server)[before..]
        .iter()
        .filter(|v| v["target"] != "consoled::access")
        .cloned()
        .collect();
    let down: Vec<&Value> = during
        .iter()
        .filter(|v| v["event"] == "database_down")
        .collect();
    assert_eq!(down.len(), 1, "{during:#?}");
    assert_eq!(down[0]["level"], "WARN");
    // The cause is PostgreSQL's or the socket's own words, not just "db error".
    let cause = down[0]["cause"].as_str().unwrap();
    assert!(
        cause.len() > "db error".len() && cause != "error connecting to server",
        "{cause}"
    );
    let noise: Vec<&Value> = during
        .iter()
        .filter(|v| v["level"] == "WARN" || v["level"] == "ERROR")
        .filter(|v| v["event"] != "database_down")
        .collect();
    assert!(
        noise.is_empty(),
        "other warnings during the outage: {noise:#?}"
    );
    assert_eq!(
        during
            .iter()
            .filter(|v| v["event"] == "database_up")
            .count(),
        1
    );
}
