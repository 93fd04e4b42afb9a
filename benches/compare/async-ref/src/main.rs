//! The async reference for consoled's `GET /v1/events` (benchmarks only, not part of the
//! product): tokio's multi-threaded runtime, axum over hyper, tokio-postgres LISTEN on
//! `consoled_change`, one broadcast channel per project. Each stream is a body stream polled by
//! the task hyper runs for its connection (no task of its own): `retry: 3000` + `ready`, each
//! change, `resync` when it lags, `: ping` after `ASYNC_REF_PING_SECONDS` (20) without a write.
//!
//! Settings: `DATABASE_URL` (consoled's database), `ASYNC_REF_LISTEN` (127.0.0.1:8090),
//! `ASYNC_REF_QUEUE` (256, the same per-stream backlog as consoled's `CONSOLED_STREAM_QUEUE`).

mod auth;
mod hub;
mod listener;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use bytes::Bytes;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::time::{timeout_at, Instant};

use auth::{Auth, Denied};
use hub::{Hub, Subscription, PING, READY, RESYNC};

struct App {
    hub: Arc<Hub>,
    auth: Auth,
    ping: Duration,
}

fn setting(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

#[tokio::main]
async fn main() {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let listen = setting("ASYNC_REF_LISTEN", "127.0.0.1:8090");
    let queue: usize = setting("ASYNC_REF_QUEUE", "256")
        .parse()
        .expect("ASYNC_REF_QUEUE");
    let ping: f64 = setting("ASYNC_REF_PING_SECONDS", "20")
        .parse()
        .expect("ASYNC_REF_PING_SECONDS");
    let app = Arc::new(App {
        hub: Hub::new(queue),
        auth: Auth::new(url.clone()),
        ping: Duration::from_secs_f64(ping),
    });

    // Like consoled: accept nothing before the listener is in place, so no change is missed.
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(listener::run(url, app.hub.clone(), ready_tx));
    if tokio::time::timeout(Duration::from_secs(30), ready_rx)
        .await
        .is_err()
    {
        eprintln!("async-ref: change listener not connected yet; serving anyway");
    }

    let router = Router::new()
        .route("/v1/events", get(events))
        .with_state(app);
    // TCP_NODELAY as consoled sets it: each event is one small write that must leave at once.
    // The accept backlog as consoled's (4096): tokio's `bind` asks for 1024, and a reconnect
    // storm then overflows it, so the comparison would measure SYN retransmits, not the design.
    let addr: std::net::SocketAddr = listen.parse().expect("ASYNC_REF_LISTEN is host:port");
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .expect("socket");
    socket.set_reuseaddr(true).expect("SO_REUSEADDR");
    socket.bind(addr).expect("bind ASYNC_REF_LISTEN");
    let tcp = socket.listen(4096).expect("listen").tap_io(|s| {
        let _ = s.set_nodelay(true);
    });
    eprintln!("async-ref: serving on {listen}");
    axum::serve(tcp, router).await.expect("serve");
}

/// `GET /v1/events`: a bearer API token of consoled's database, then the stream.
async fn events(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let project = match app.auth.project(header).await {
        Ok(p) => p,
        Err(Denied::Unauthorized) => {
            return error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Unknown or revoked API token.",
            )
        }
        Err(Denied::Unavailable) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "The database is not reachable.",
            )
        }
    };
    let sub = app.hub.subscribe(project);
    let body = Body::from_stream(events_of(sub, app.ping));
    let mut res = Response::new(body);
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    res
}

/// What one stream writes, one item (one HTTP chunk) per event. The stream, and with it the
/// subscription, is dropped when hyper finds the connection gone.
fn events_of(
    sub: Subscription,
    ping: Duration,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    struct Stream {
        sub: Subscription,
        last_write: Instant,
        started: bool,
    }
    let state = Stream {
        sub,
        last_write: Instant::now(),
        started: false,
    };
    futures_util::stream::unfold(state, move |mut st| async move {
        if !st.started {
            st.started = true;
            st.last_write = Instant::now();
            return Some((Ok(Bytes::from_static(READY.as_bytes())), st));
        }
        let item = match timeout_at(st.last_write + ping, st.sub.receiver().recv()).await {
            Ok(Ok(event)) => event,
            // Fell behind the channel: what it missed is gone; the client reloads.
            Ok(Err(RecvError::Lagged(_))) => {
                // As consoled does: what is still queued is older than the reload the client is
                // about to do, so it is discarded rather than written after `resync`.
                let rx = st.sub.receiver();
                while !matches!(
                    rx.try_recv(),
                    Err(TryRecvError::Empty | TryRecvError::Closed)
                ) {}
                Bytes::from_static(RESYNC.as_bytes())
            }
            Ok(Err(RecvError::Closed)) => return None,
            Err(_) => Bytes::from_static(PING.as_bytes()),
        };
        st.last_write = Instant::now();
        Some((Ok(item), st))
    })
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = serde_json::json!({ "error": { "code": code, "message": message } });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
