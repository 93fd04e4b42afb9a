//! The one way out for every response: a handler's answer, a screen's or the body reader's
//! refusal, an event stream's head, a refusal at accept (503 at capacity, 429 over a client's
//! share) and the guard's 408/431. Each gets the common headers (`router::finish`) and is
//! counted in the metrics here, and only here, with what an access line needs (`Record`).
//!
//! The access line (`logging::access`) is written here too, for every response to a request whose
//! head was read, except refusals (429, 503), which only count: a flood costs no log line.
//!
//! Two writers: through tiny_http for a request it parsed (`respond`, `stream_head`), and
//! straight onto the socket where tiny_http cannot write (`refuse_raw`: a complete
//! `Connection: close` response, written without blocking).

use std::net::{IpAddr, SocketAddr};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use super::{head, wire};
use crate::app::App;
use crate::error::{ApiError, Code};
use crate::http::Response;
use crate::logging::access::{self, AccessRecord};
use crate::metrics::Metrics;
use crate::os::socket::send_now;
use crate::router;

/// Counts a response that left, and writes its access line. Every response of the server passes
/// here once.
fn record(metrics: &Metrics, sent: &AccessRecord) {
    metrics.observe(sent.route, sent.status, sent.duration);
    // No line where no request head was read (refusals at accept, the guard's 408/431): they
    // are counted, and summarised in the log (`logging::flood`).
    if sent.method != "-" && access::wanted(sent.status) {
        access::access(sent);
    }
}

/// The client of a request, when its response gets an access line (the header is read only
/// then, so that a refusal costs nothing more).
fn client_of(app: &App, rq: &tiny_http::Request, status: u16) -> Option<IpAddr> {
    access::wanted(status)
        .then(|| head::client_ip(rq, &app.config.client_source))
        .flatten()
}

/// Logs an error answer at the level it deserves: an internal detail as an error, a detail as a
/// warning, a refusal by a limit never (a flood costs no log line; it is counted), anything else
/// at debug.
pub fn log_error(route: &str, e: &ApiError) {
    match (&e.more.log_detail, e.code) {
        (Some(detail), Code::Internal) => log::error!("{route}: {detail}"),
        // During a database outage every request would say so: `db::health` says it once.
        (Some(detail), Code::Unavailable) if crate::db::health::is_down() => {
            log::debug!("{route}: unavailable: {detail}")
        }
        (Some(detail), _) => log::warn!("{route}: {}: {detail}", e.code.as_str()),
        (None, Code::RateLimited) => {}
        (None, _) => log::debug!("{route}: {}", e.code.as_str()),
    }
}

/// Writes a complete response to a request tiny_http parsed, with the common headers, and
/// counts it.
pub fn respond(
    app: &App,
    rq: tiny_http::Request,
    route: &'static str,
    response: Response,
    started: Instant,
) {
    let path = rq.url().split('?').next().unwrap_or("");
    let response = router::finish(path, response);
    let sent = AccessRecord {
        client: client_of(app, &rq, response.status),
        method: rq.method().as_str(),
        route,
        status: response.status,
        duration: started.elapsed(),
        bytes: response.body.len(),
    };
    record(&app.metrics, &sent);
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

/// Counts an event stream's response, whose head the caller writes on the raw connection;
/// `client` is the address the stream's request resolved (`http::Request::client_ip`).
pub fn stream_head(
    app: &App,
    rq: &tiny_http::Request,
    route: &'static str,
    started: Instant,
    client: Option<IpAddr>,
) {
    let sent = AccessRecord {
        client,
        method: rq.method().as_str(),
        route,
        status: 200,
        duration: started.elapsed(),
        bytes: 0,
    };
    record(&app.metrics, &sent);
}

/// Writes a refusal straight onto a connection's socket (as much as it takes now, never
/// blocking) as a complete `Connection: close` response with the common headers, and counts it.
/// The caller then ends the connection.
pub fn refuse_raw(
    metrics: &Metrics,
    socket: BorrowedFd<'_>,
    peer: Option<SocketAddr>,
    route: &'static str,
    e: &ApiError,
) {
    let response = router::finish("", Response::from_error(e));
    let sent = AccessRecord {
        client: peer.map(|p| p.ip()),
        method: "-",
        route,
        status: response.status,
        duration: Duration::ZERO,
        bytes: response.body.len(),
    };
    record(metrics, &sent);
    let _ = send_now(socket, &wire::close(&response));
}
