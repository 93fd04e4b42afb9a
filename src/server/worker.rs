//! The request workers: a fixed pool that takes complete requests, turns each into our
//! `http::Request`, dispatches it, and answers. A stream request is handled the same way
//! (`handle`) on its connection's own thread instead (`router::runs_on_its_connection`), which
//! then runs the stream (its response head goes out with the first event).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;

use super::exit;
use super::shared::{Complete, Incoming, Outcome, Shared, Start};
use crate::app::Reply;
use crate::error::ApiError;
use crate::events::StreamPlan;
use crate::http::Response;
use crate::router;

/// Takes requests until the server stops and the queue is empty: a request that was read
/// before the stop is still answered.
pub fn run(shared: &Shared) {
    loop {
        match shared.requests.recv_timeout(Duration::from_millis(250)) {
            Ok(Incoming { request, outcome }) => outcome.send(handle(shared, request)),
            Err(RecvTimeoutError::Timeout) if shared.app.stopping.load(Ordering::SeqCst) => return,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Dispatches a complete request and answers it, or writes its stream's head; says what became
/// of it.
pub(super) fn handle(shared: &Shared, request: Complete) -> Outcome {
    let Complete {
        rq,
        req,
        started,
        done,
    } = request;
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
            exit::stream_head(app, &rq, route, started);
            return start_stream(rq, plan);
        }
        Ok(Reply::Response(response)) => response,
        Err(e) => {
            exit::log_error(route, &e);
            Response::from_error(&e)
        }
    };
    exit::respond(app, rq, route, response, started);
    drop(done);
    Outcome::Answered
}

/// The event-stream head, for the stream to send with its first event on the raw connection.
/// The body is chunked, so that ending a stream (revocation, expiry, shutdown, a pipelined
/// request) is seen by the client at once.
fn start_stream(rq: tiny_http::Request, plan: StreamPlan) -> Outcome {
    let http10 = rq.http_version() == &tiny_http::HTTPVersion(1, 0);
    let writer = rq.into_writer();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
         X-Accel-Buffering: no\r\n{}\r\n",
        if http10 {
            "Connection: close\r\n"
        } else {
            "Transfer-Encoding: chunked\r\n"
        }
    );
    Outcome::Stream(Box::new(Start {
        plan,
        head: head.into_bytes(),
        writer,
        chunked: !http10,
        pipelined: false,
    }))
}
