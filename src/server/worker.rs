//! The request workers: a fixed pool that takes complete requests, turns each into our
//! `http::Request`, dispatches it, and answers, or, for an event stream, writes the response head
//! and hands the stream back to its connection's thread.

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;

use super::conn::{Incoming, Outcome};
use super::{stream, Shared};
use crate::app::{App, Reply};
use crate::error::{ApiError, Code};
use crate::events::StreamPlan;
use crate::http::Response;
use crate::logging::access;
use crate::router;

/// Takes requests until the server stops and the queue is empty: a request that was read
/// before the stop is still answered.
pub fn run(shared: &Shared) {
    loop {
        match shared.requests.recv_timeout(Duration::from_millis(250)) {
            Ok(incoming) => handle(shared, incoming),
            Err(RecvTimeoutError::Timeout) if shared.app.stopping.load(Ordering::SeqCst) => return,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn handle(shared: &Shared, incoming: Incoming) {
    let Incoming {
        rq,
        req,
        started,
        done,
        outcome,
    } = incoming;
    let app = &shared.app;
    let (route, result) = match req {
        Ok(req) => match catch_unwind(AssertUnwindSafe(|| router::dispatch(app, &req))) {
            Ok((route, reply)) => (route, reply),
            Err(_) => {
                app.metrics.panics.fetch_add(1, Ordering::Relaxed);
                ("panic", Err(ApiError::internal("handler panicked")))
            }
        },
        Err(e) => ("unread", Err(e)),
    };
    let response = match result {
        Ok(Reply::Stream(plan)) => {
            record(app, &rq, route, 200, 0, started);
            let _ = outcome.send(start_stream(rq, plan));
            return;
        }
        Ok(Reply::Response(response)) => response,
        Err(e) => {
            log_error(route, &e);
            Response::from_error(&e)
        }
    };
    answer(shared, rq, route, response, started);
    drop(done);
    let _ = outcome.send(Outcome::Answered);
}

/// Writes a complete response and counts it.
pub fn answer(
    shared: &Shared,
    rq: tiny_http::Request,
    route: &'static str,
    response: Response,
    started: Instant,
) {
    let path = rq.url().split('?').next().unwrap_or("").to_string();
    let bytes = response.body.len() as u64;
    record(&shared.app, &rq, route, response.status, bytes, started);
    respond(rq, router::finish(&path, response));
}

/// Counts a response in `/metrics` and writes its access line (`logging::access`): every way a
/// response leaves calls this once. A refusal costs only the count.
pub fn record(
    app: &App,
    rq: &tiny_http::Request,
    route: &'static str,
    status: u16,
    bytes: u64,
    started: Instant,
) {
    let duration = started.elapsed();
    app.metrics.observe(route, status, duration);
    if access::is_refusal(status) || !log::log_enabled!(target: access::TARGET, log::Level::Info) {
        return;
    }
    access::access(&access::AccessRecord {
        client: super::head::client_ip(rq, &app.config.client_source),
        method: rq.method().as_str(),
        route,
        status,
        duration,
        bytes,
    });
}

pub fn log_error(route: &str, e: &ApiError) {
    match (&e.more.log_detail, e.code) {
        (Some(detail), Code::Internal) => log::error!("{route}: {detail}"),
        // During a database outage every request would say so: `db::health` says it once.
        (Some(detail), Code::Unavailable) if crate::db::health::is_down() => {
            log::debug!("{route}: unavailable: {detail}")
        }
        (Some(detail), _) => log::warn!("{route}: {}: {detail}", e.code.as_str()),
        // A rate-limit refusal is counted in /metrics, never logged: a flood costs no log line.
        (None, Code::RateLimited) => {}
        (None, _) => log::debug!("{route}: {}", e.code.as_str()),
    }
}

pub fn respond(rq: tiny_http::Request, response: Response) {
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

/// Writes the event-stream head on the raw connection. The body is chunked, so that ending a
/// stream (revocation, expiry, shutdown, a pipelined request) is seen by the client at once.
fn start_stream(rq: tiny_http::Request, plan: StreamPlan) -> Outcome {
    let http10 = rq.http_version() == &tiny_http::HTTPVersion(1, 0);
    let mut writer = rq.into_writer();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
         X-Accel-Buffering: no\r\n{}\r\n",
        if http10 {
            "Connection: close\r\n"
        } else {
            "Transfer-Encoding: chunked\r\n"
        }
    );
    if writer
        .write_all(head.as_bytes())
        .and_then(|()| writer.flush())
        .is_err()
    {
        return Outcome::Close;
    }
    Outcome::Stream(Box::new(stream::Start {
        plan,
        writer,
        chunked: !http10,
    }))
}
