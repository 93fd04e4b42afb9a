//! Answering a request, the server's one door to the router: the route's screen, which may
//! refuse a request from its head before its body is read (`screen`, on its connection's
//! thread), and a complete request dispatched (a handler's panic becomes a 500) with its response
//! written, or, for an event stream, its response head made ready for the stream to send.
//! Workers answer every request this way (`worker`), and a stream request's own connection
//! thread answers it the same way (`connection`), without a worker.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use super::exit;
use super::state::{CompleteRequest, Outcome, ReadyStream, ServerState};
use crate::app::{App, Reply};
use crate::error::ApiError;
use crate::events::StreamPlan;
use crate::http::{Request, Response};
use crate::logging::access;
use crate::router;

/// The refusal of `request`'s route screen, with the route's name, when it refuses (from the head
/// and memory, no database, no waiting: `router::Screen`).
pub fn screen(app: &App, request: &Request) -> Option<(&'static str, ApiError)> {
    router::screen(app, request)
}

/// Whether `complete` is answered on its connection's own thread, which then becomes its
/// stream's (`router::runs_on_its_connection`), instead of by a worker.
pub fn on_its_connection(complete: &CompleteRequest) -> bool {
    complete
        .request
        .as_ref()
        .is_ok_and(router::runs_on_its_connection)
}

/// Dispatches a complete request and answers it, or makes its stream's head ready; says what
/// became of it.
pub fn answer(state: &ServerState, complete: CompleteRequest) -> Outcome {
    let CompleteRequest {
        parsed,
        request,
        started,
    } = complete;
    let app = &state.app;
    let (route, result, client) = match request {
        Ok(request) => {
            let (route, result) = dispatch(app, &request);
            // A stream's access line names the client the request already resolved (asked
            // only when access lines are written).
            let logged = matches!(result, Ok(Reply::Stream(_))) && access::wanted(200);
            let client = logged
                .then(|| request.client_ip(&app.config.client_source))
                .flatten();
            (route, result, client)
        }
        Err(e) => ("unread", Err(e), None),
    };
    let response = match result {
        Ok(Reply::Stream(plan)) => {
            exit::stream_head(app, &parsed, route, started, client);
            return Outcome::Stream(Box::new(ready_stream(parsed, plan)));
        }
        Ok(Reply::Response(response)) => response,
        Err(e) => {
            exit::log_error(route, &e);
            Response::from_error(&e)
        }
    };
    exit::respond(app, parsed, route, response, started);
    Outcome::Answered
}

/// The router's answer to a complete request; a handler's panic is a 500 (counted), and the
/// worker or connection thread lives on.
fn dispatch(app: &App, request: &Request) -> (&'static str, Result<Reply, ApiError>) {
    match catch_unwind(AssertUnwindSafe(|| router::dispatch(app, request))) {
        Ok((route, reply)) => (route, reply),
        Err(_) => {
            app.metrics.panics.fetch_add(1, Ordering::Relaxed);
            ("panic", Err(ApiError::internal("handler panicked")))
        }
    }
}

/// The event-stream head, for the stream to send with its first event on the raw connection.
/// The body is chunked, so that ending a stream (revocation, expiry, shutdown, a pipelined
/// request) is seen by the client at once.
fn ready_stream(parsed: tiny_http::Request, plan: StreamPlan) -> ReadyStream {
    let http10 = parsed.http_version() == &tiny_http::HTTPVersion(1, 0);
    let writer = parsed.into_writer();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
         X-Accel-Buffering: no\r\n{}\r\n",
        if http10 {
            "Connection: close\r\n"
        } else {
            "Transfer-Encoding: chunked\r\n"
        }
    );
    ReadyStream {
        plan,
        head: head.into_bytes(),
        writer,
        chunked: !http10,
    }
}
