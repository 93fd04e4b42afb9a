//! The one way out for every response: a handler's answer, a screen's or the body reader's
//! refusal, an event stream's head, a refusal at accept (503 at capacity, 429 over a client's
//! share) and the guard's 408/431. Each gets the common headers (`router::finish`) and is
//! counted in the metrics here, and only here, with what an access line needs (`Record`).
//!
//! Two writers: through tiny_http for a request it parsed (`respond`, `stream_head`), and
//! straight onto the socket where tiny_http cannot write (`refuse_raw`: a complete
//! `Connection: close` response, written without blocking).

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::{sock, wire};
use crate::error::{ApiError, Code};
use crate::http::Response;
use crate::metrics::Metrics;
use crate::router;

/// One response that left: what the metrics count and what an access line shows. (`peer`,
/// `method` and `bytes` are for the access line, which `record` is the place for.)
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)]
pub struct Record<'a> {
    /// The socket's peer (behind a trusted proxy, the proxy).
    pub peer: Option<SocketAddr>,
    /// `-` when no request head was read (refusals at accept, the guard's answers).
    pub method: &'a str,
    /// The route's name, or the stage that answered (`accept`, `guard`, `unread`).
    pub route: &'static str,
    pub status: u16,
    /// Since the request had arrived (zero for a refusal made before one did).
    pub took: Duration,
    /// Body bytes (for a stream, those of its head's body so far: none).
    pub bytes: usize,
}

/// Counts a response that left. Every response of the server passes here once: the place for
/// an access line.
fn record(metrics: &Metrics, sent: &Record) {
    metrics.observe(sent.route, sent.status, sent.took);
}

/// Logs an error answer at the level it deserves: an internal detail as an error, a detail as a
/// warning, a refusal by a limit never (a flood costs no log line; it is counted), anything else
/// at debug.
pub fn log_error(route: &str, e: &ApiError) {
    match (&e.more.log_detail, e.code) {
        (Some(detail), Code::Internal) => log::error!("{route}: {detail}"),
        (Some(detail), _) => log::warn!("{route}: {}: {detail}", e.code.as_str()),
        (None, Code::RateLimited) => {}
        (None, _) => log::debug!("{route}: {}", e.code.as_str()),
    }
}

/// Writes a complete response to a request tiny_http parsed, with the common headers, and
/// counts it.
pub fn respond(
    metrics: &Metrics,
    rq: tiny_http::Request,
    route: &'static str,
    response: Response,
    started: Instant,
) {
    let path = rq.url().split('?').next().unwrap_or("");
    let response = router::finish(path, response);
    let sent = Record {
        peer: rq.remote_addr().copied(),
        method: rq.method().as_str(),
        route,
        status: response.status,
        took: started.elapsed(),
        bytes: response.body.len(),
    };
    record(metrics, &sent);
    let mut out = tiny_http::Response::from_data(response.body).with_status_code(response.status);
    for (name, value) in &response.headers {
        match tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            Ok(h) => out.add_header(h),
            Err(_) => log::error!("dropped an invalid response header {name}"),
        }
    }
    if let Err(e) = rq.respond(out) {
        log::debug!("response not delivered: {e}");
    }
}

/// Counts an event stream's response, whose head the caller writes on the raw connection.
pub fn stream_head(
    metrics: &Metrics,
    rq: &tiny_http::Request,
    route: &'static str,
    started: Instant,
) {
    let sent = Record {
        peer: rq.remote_addr().copied(),
        method: rq.method().as_str(),
        route,
        status: 200,
        took: started.elapsed(),
        bytes: 0,
    };
    record(metrics, &sent);
}

/// Writes a refusal straight onto a connection's socket (as much as it takes now, never
/// blocking) as a complete `Connection: close` response with the common headers, and counts it.
/// The caller then ends the connection.
pub fn refuse_raw(
    metrics: &Metrics,
    fd: RawFd,
    peer: Option<SocketAddr>,
    route: &'static str,
    e: &ApiError,
) {
    let response = router::finish("", Response::from_error(e));
    let sent = Record {
        peer,
        method: "-",
        route,
        status: response.status,
        took: Duration::ZERO,
        bytes: response.body.len(),
    };
    record(metrics, &sent);
    let _ = sock::send_now(fd, &wire::close(&response));
}
