//! `GET/POST /v1/organizations`, `GET/PATCH /v1/organizations/{id}`: the user's organizations
//! with the user's role, a new team organization (its creator is its owner), one organization,
//! and its new name.

use serde_json::{json, Value};

use super::{json, path_id, signed_in};
use crate::access::{self, Operation};
use crate::admission::Budgets;
use crate::app::{App, Reply};
use crate::auth::{self, Event};
use crate::db::{self, orgs};
use crate::error::{ApiError, ApiResult};
use crate::http::json::{parse_name, Fields};
use crate::http::Request;
use crate::limits::Bucket;

/// `GET /v1/organizations`: `{"organizations": [...]}`, as in the Auth state.
pub fn list(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let mut c = db::conn(&app.pool)?;
    let list: Vec<Value> = orgs::for_user(&mut *c, user)?
        .iter()
        .map(|o| o.to_json())
        .collect();
    json(200, &json!({ "organizations": list }))
}

/// `POST /v1/organizations` `{"name"}`: 201, the new team organization (role `owner`).
pub fn create(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let name = parse_name(Fields::parse(&req.body)?.string("name")?)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    Budgets::new(&app.config.limits).take(&mut tx, &Bucket::OrgsCreated(user))?;
    let org_id = orgs::create_team(&mut tx, &name, user)?;
    let summary = orgs::summary(&mut tx, user, org_id)?
        .ok_or_else(|| ApiError::internal("a new organization without its owner"))?;
    tx.commit()?;
    let fields = [("org_id", org_id.into())];
    auth::audit(app, req, Event::OrganizationCreated, Some(user), &fields);
    json(201, &summary.to_json())
}

/// `GET /v1/organizations/{id}`: the organization as the user sees it.
pub fn get(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let org_id = path_id(req, 3)?;
    let mut c = db::conn(&app.pool)?;
    access::org(&mut *c, user, org_id, Operation::Read)?;
    summary(&mut *c, user, org_id)
}

/// `PATCH /v1/organizations/{id}` `{"name"}`: owners and admins rename it.
pub fn rename(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let org_id = path_id(req, 3)?;
    let name = parse_name(Fields::parse(&req.body)?.string("name")?)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    access::org(&mut tx, user, org_id, Operation::Rename)?;
    orgs::rename(&mut tx, org_id, &name)?;
    let reply = summary(&mut tx, user, org_id)?;
    tx.commit()?;
    Ok(reply)
}

fn summary(c: &mut impl db::Sql, user: i64, org_id: i64) -> ApiResult<Reply> {
    let summary = orgs::summary(c, user, org_id)?
        .ok_or_else(|| ApiError::internal("a member's organization without the member"))?;
    json(200, &summary.to_json())
}
