//! `GET /auth/check` as the console's other services ask it (`tests/check.rs`,
//! `tests/check_memory.rs`): by session cookie or bearer token, with the original request's
//! headers only.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{raw_request, Client, Response};

pub fn cookie(c: &Client) -> String {
    format!("svc_session={}", c.cookies["svc_session"])
}

/// `GET /auth/check` with `headers` only (as a proxy sends the original request's).
pub fn check(addr: std::net::SocketAddr, headers: &[(&str, &str)]) -> Response {
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    raw_request(addr, "GET", "/auth/check", &headers, b"")
}

pub fn by_session(addr: std::net::SocketAddr, c: &Client) -> Response {
    check(addr, &[("Cookie", &cookie(c))])
}

pub fn by_token(addr: std::net::SocketAddr, secret: &str) -> Response {
    check(addr, &[("Authorization", &format!("Bearer {secret}"))])
}

/// Polls until `f` holds (at most `within`); how long it took.
pub fn until(within: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

pub fn make_token(c: &mut Client, project: i64, scope: &str) -> (i64, String) {
    let r = c.post(
        &format!("/v1/projects/{project}/tokens"),
        &json!({"name": "check", "scope": scope}),
    );
    r.expect(201);
    (
        r.json()["id"].as_i64().unwrap(),
        r.json()["token"].as_str().unwrap().to_string(),
    )
}

pub fn metric(c: &mut Client, line: &str) -> u64 {
    let text = String::from_utf8(c.get("/metrics").body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
