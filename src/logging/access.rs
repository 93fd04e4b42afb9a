//! The access line: one `info` record per answered request, target `consoled::access`, written
//! where the response leaves the server.
//!
//! It names the route (the router's label, never the raw path: a path or query string may carry
//! a token), never a header or a body. Refusals (429 and 503) get no line of their own: a flood
//! must cost a counter, not a write, so they are counted in `/metrics`
//! (`consoled_requests_total`) and `flood` writes one summary per interval.

use std::net::IpAddr;
use std::time::Duration;

use log::kv::Value;
use log::Level;

/// The log target of access lines (`RUST_LOG=consoled::access=warn` turns them off).
pub const TARGET: &str = "consoled::access";

/// What the access line says about one request.
#[derive(Clone, Debug)]
pub struct AccessRecord<'a> {
    /// The client as the limits see it (the peer, or the trusted proxy's header).
    pub client: Option<IpAddr>,
    /// `-` when no request head was read (refusals at accept, the guard's answers).
    pub method: &'a str,
    /// The route's name (`router::Route::name`), `unmatched`, `unread` or `panic`.
    pub route: &'static str,
    pub status: u16,
    /// From the request's arrival (head and body read) to the response written or handed on.
    pub duration: Duration,
    /// Bytes of the response body (0 for an event stream, whose body is not counted here).
    pub bytes: usize,
}

/// Whether a status is a refusal, summarised rather than logged line by line.
pub fn is_refusal(status: u16) -> bool {
    status == 429 || status == 503
}

/// Whether a response with `status` gets an access line: not a refusal, and the target on.
pub fn wanted(status: u16) -> bool {
    !is_refusal(status) && log::log_enabled!(target: TARGET, Level::Info)
}

/// Writes the access line for `r`, unless it is a refusal (see the module documentation).
pub fn access(r: &AccessRecord) {
    if !wanted(r.status) {
        return;
    }
    let client = r.client.map(|ip| ip.to_string());
    let client = client.as_deref().unwrap_or("unknown");
    let millis = r.duration.as_secs_f64() * 1000.0;
    let msg = message(r);
    super::emit(
        Level::Info,
        TARGET,
        &msg,
        &[
            ("client", Value::from(client)),
            ("method", Value::from(r.method)),
            ("route", Value::from(r.route)),
            ("status", Value::from(r.status)),
            (
                "duration_ms",
                Value::from((millis * 1000.0).round() / 1000.0),
            ),
            ("bytes", Value::from(r.bytes)),
        ],
    );
}

/// The message: readable on its own (`GET session 200`); the fields carry the rest.
fn message(r: &AccessRecord) -> String {
    format!("{} {} {}", r.method, r.route, r.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_not_lines() {
        assert!(is_refusal(429));
        assert!(is_refusal(503));
        for status in [200, 201, 204, 302, 400, 401, 403, 404, 405, 408, 413, 500] {
            assert!(!is_refusal(status), "{status}");
        }
    }

    #[test]
    fn the_message_names_method_route_and_status_only() {
        let r = AccessRecord {
            client: Some("192.0.2.1".parse().unwrap()),
            method: "POST",
            route: "login",
            status: 401,
            duration: Duration::from_micros(1500),
            bytes: 77,
        };
        assert_eq!(message(&r), "POST login 401");
    }
}
