//! Operator endpoints: `/healthz` (process up), `/readyz` (database reachable, answered within a
//! second: `crate::ready`), `/metrics`.

use crate::app::{App, Reply};
use crate::error::{ApiError, ApiResult};
use crate::http::{Request, Response};
use crate::metrics::Gauges;

pub fn healthz(_app: &App, _req: &Request) -> ApiResult<Reply> {
    Ok(Response::text(200, "text/plain; charset=utf-8", "ok\n").into())
}

pub fn readyz(app: &App, _req: &Request) -> ApiResult<Reply> {
    app.ready
        .check()
        .map_err(|e| ApiError::unavailable(format!("readyz: {e}")))?;
    Ok(Response::text(200, "text/plain; charset=utf-8", "ready\n").into())
}

pub fn metrics(app: &App, _req: &Request) -> ApiResult<Reply> {
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
    };
    let text = app.metrics.render(&gauges);
    Ok(Response::text(200, "text/plain; version=0.0.4; charset=utf-8", text).into())
}

/// The OpenAPI 3.1 document of this service (`docs/openapi.json`).
pub const OPENAPI: &str = include_str!("../docs/openapi.json");

pub fn openapi(_app: &App, _req: &Request) -> ApiResult<Reply> {
    Ok(Response::text(200, "application/json", OPENAPI).into())
}
