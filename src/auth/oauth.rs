//! Sign-in through external identity providers (DECISIONS §6).

use serde_json::json;

use crate::app::{App, Reply};
use crate::error::ApiResult;
use crate::http::{Request, Response};

/// `GET /auth/providers`: the configured providers, sorted.
pub fn providers(app: &App, _req: &Request) -> ApiResult<Reply> {
    let mut names = Vec::new();
    if app.config.github.is_some() {
        names.push("github");
    }
    if app.config.google.is_some() {
        names.push("google");
    }
    Ok(Response::json(200, &json!({ "providers": names })).into())
}
