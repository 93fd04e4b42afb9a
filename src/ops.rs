//! Operator endpoints: `/healthz` (process up), `/readyz` (database reachable, answered within a
//! second: `crate::ready`), `/metrics` (on the operations listener instead when one is set:
//! `crate::ops_listener`, which answers with these same functions).

use crate::app::{App, Reply};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::{Request, Response};
use crate::metrics::Gauges;
use std::sync::atomic::Ordering;

pub fn healthz(_app: &App, _req: &Request) -> ApiResult<Reply> {
    Ok(health().into())
}

pub fn health() -> Response {
    Response::text(200, "text/plain; charset=utf-8", "ok\n")
}

pub fn readyz(app: &App, _req: &Request) -> ApiResult<Reply> {
    Ok(readiness(app)?.into())
}

pub fn readiness(app: &App) -> ApiResult<Response> {
    app.ready
        .check()
        .map_err(|e| ApiError::unavailable(format!("readyz: {e}")))?;
    Ok(Response::text(200, "text/plain; charset=utf-8", "ready\n"))
}

/// `GET /metrics` on the public listener: 404 when `CONSOLED_METRICS_LISTEN` serves it
/// elsewhere (`ops_listener`).
pub fn metrics(app: &App, _req: &Request) -> ApiResult<Reply> {
    if app.config.metrics_listen.is_some() {
        return Err(ApiError::new(Code::NotFound));
    }
    Ok(metrics_text(app).into())
}

/// The Prometheus text of every family (docs/METRICS.md).
pub fn metrics_text(app: &App) -> Response {
    let state = app.pool.state();
    let gauges = Gauges {
        streams_open: app.stream_places.held(),
        hash_queue_depth: app.hasher.queue_depth(),
        hashes_refused: app.hasher.refused(),
        hashes_computed: app.hasher.computed(),
        pool_connections: state.connections,
        pool_idle: state.idle_connections,
        pool_max: app.pool.max_size(),
        max_connections: app.capacity.max_connections,
        max_streams: app.capacity.max_streams,
        checks: [
            app.checked.hits.load(Ordering::Relaxed),
            app.checked.misses.load(Ordering::Relaxed),
        ],
        checked: app.checked.len(),
    };
    let text = app.metrics.render(&gauges);
    Response::text(200, "text/plain; version=0.0.4; charset=utf-8", text)
}

/// The OpenAPI 3.1 document of this service (`docs/openapi.json`).
pub const OPENAPI: &str = include_str!("../docs/openapi.json");

pub fn openapi(_app: &App, _req: &Request) -> ApiResult<Reply> {
    Ok(Response::text(200, "application/json", OPENAPI).into())
}
