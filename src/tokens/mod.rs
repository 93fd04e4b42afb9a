//! API tokens that members make for a project (issue 31): `POST`, `GET
//! /v1/projects/{id}/tokens` and `DELETE /v1/projects/{id}/tokens/{token_id}`.
//!
//! Each needs a full session (and, as every request that changes state under /v1, CSRF); who
//! may do it is `access`'s answer for the project (another organization's project is 404, a
//! viewer 403 `forbidden`). Making one also needs a recent sign-in or the password
//! (`auth::reauth`, as for second-factor changes), since a token outlives the session that made
//! it. The secret is in the 201 answer only (`secret` gives its form); revoking ends its streams
//! on every instance within a second (the table's trigger), and every instance refuses it at
//! once.

pub mod secret;

use serde_json::{json, Value};

use crate::access::{self, Operation};
use crate::app::{App, Reply};
use crate::auth::{self, Event};
use crate::db::{self, tokens, tokens::TokenScope};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::{parse_name, Fields};
use crate::http::{Request, Response};

/// `POST /v1/projects/{id}/tokens` `{name, scope, expires_in?, password?}`: 201 the token with
/// its secret.
pub fn create(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = auth::require_session(app, req)?;
    let project_id = path_id(req, 3)?;
    {
        let mut c = db::conn(&app.pool)?;
        access::project(
            &mut *c,
            session.user_id,
            project_id,
            Operation::ManageTokens,
        )?;
    }
    let fields = Fields::parse(&req.body)?;
    let name = parse_name(fields.string("name")?)?;
    let scope = TokenScope::parse(fields.string("scope")?)
        .ok_or_else(|| ApiError::invalid("scope", "read or read_write"))?;
    let max = app.config.token_max_lifetime.as_secs();
    let expires_in = fields
        .optional_integer("expires_in", 1..=max)?
        .unwrap_or(max);
    auth::reauth::require(app, req, &session)?;
    let issue = tokens::Issue {
        project_id,
        name: &name,
        scope,
        expires_in: Some(expires_in as f64),
        created_by: Some(session.user_id),
    };
    let (id, body) = issue_within_limit(app, &issue)?;
    audit(
        app,
        req,
        Event::ApiTokenCreated,
        session.user_id,
        id,
        project_id,
    );
    Ok(Response::json(201, &body).into())
}

/// Makes the token in one transaction, refused while the project has as many live tokens as it
/// may; its id, and the body that shows it (with its secret, this once).
fn issue_within_limit(app: &App, issue: &tokens::Issue) -> ApiResult<(i64, Value)> {
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let limit = app.config.tokens_per_project;
    if tokens::count_live_locked(&mut tx, issue.project_id)? >= limit as i64 {
        return Err(ApiError::new(Code::TooManyTokens)
            .message(format!(
                "The project has {limit} live API tokens, as many as it may \
                 (CONSOLED_TOKENS_PER_PROJECT); revoke one first."
            ))
            .with_details(json!({ "limit": limit })));
    }
    let (id, secret) = tokens::issue(&mut tx, issue)?;
    let listed = tokens::list(&mut tx, issue.project_id, Some(id))?;
    tx.commit()?;
    let mut body = listed
        .first()
        .map(to_json)
        .ok_or_else(|| ApiError::internal("a token just made is not listed"))?;
    body["token"] = Value::from(secret);
    Ok((id, body))
}

/// `GET /v1/projects/{id}/tokens`: 200 `{"tokens": [...]}`, the project's unrevoked tokens
/// (expired ones too, until revoked), oldest first; never a secret.
pub fn list(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = auth::require_session(app, req)?;
    let project_id = path_id(req, 3)?;
    let mut c = db::conn(&app.pool)?;
    access::project(&mut *c, session.user_id, project_id, Operation::ReadTokens)?;
    let listed = tokens::list(&mut *c, project_id, None)?;
    let items: Vec<Value> = listed.iter().map(to_json).collect();
    Ok(Response::json(200, &json!({ "tokens": items })).into())
}

/// `DELETE /v1/projects/{id}/tokens/{token_id}`: 204; 404 when the project has no unrevoked
/// token of that id.
pub fn revoke(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = auth::require_session(app, req)?;
    let project_id = path_id(req, 3)?;
    let token_id = path_id(req, 5)?;
    let mut c = db::conn(&app.pool)?;
    access::project(
        &mut *c,
        session.user_id,
        project_id,
        Operation::ManageTokens,
    )?;
    if !tokens::revoke(&mut *c, token_id, Some(project_id))? {
        return Err(ApiError::new(Code::NotFound).message("No such API token."));
    }
    // This instance refuses it at once; every other one when the listener brings the news.
    app.checked.forget_token(token_id);
    audit(
        app,
        req,
        Event::ApiTokenRevoked,
        session.user_id,
        token_id,
        project_id,
    );
    Ok(Response::empty(204).into())
}

/// The id in path segment `at` (`/v1/projects/{id}/...` is segment 3); anything that is not a
/// positive id names nothing, as an unknown id does (404).
fn path_id(req: &Request, at: usize) -> ApiResult<i64> {
    req.path
        .split('/')
        .nth(at)
        .filter(|s| !s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ApiError::new(Code::NotFound))
}

fn to_json(t: &tokens::Listed) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

fn audit(app: &App, req: &Request, event: Event, user_id: i64, token_id: i64, project_id: i64) {
    let fields = [
        ("token_id", token_id.into()),
        ("project_id", project_id.into()),
    ];
    auth::audit(app, req, event, Some(user_id), &fields);
}
