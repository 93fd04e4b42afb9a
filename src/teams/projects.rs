//! Projects: `GET/POST /v1/organizations/{id}/projects`, `GET/PATCH/DELETE /v1/projects/{id}`.
//! Every member lists and reads them; owners and admins create, rename and delete them. Deleting
//! a project deletes its API tokens, whose streams end on every instance at once; the resource
//! services learn of it from the `project delete` change (docs/OPERATIONS.md, "Deleted projects").

use serde_json::{json, Value};

use super::{json, no_content, path_id, signed_in};
use crate::access::{self, Operation};
use crate::app::{App, Reply};
use crate::auth::{self, Event};
use crate::db::{self, orgs};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::{parse_name, Fields};
use crate::http::Request;

/// `GET /v1/organizations/{id}/projects`: `{"projects": [...]}`, oldest first.
pub fn list(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let org_id = path_id(req, 3)?;
    let mut c = db::conn(&app.pool)?;
    access::org(&mut *c, user, org_id, Operation::Read)?;
    let list: Vec<Value> = orgs::projects(&mut *c, org_id)?
        .iter()
        .map(orgs::Project::to_json)
        .collect();
    json(200, &json!({ "projects": list }))
}

/// `POST /v1/organizations/{id}/projects` `{"name"}`: 201, the project.
pub fn create(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let org_id = path_id(req, 3)?;
    let name = parse_name(Fields::parse(&req.body)?.string("name")?)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    access::org(&mut tx, user, org_id, Operation::ManageProjects)?;
    let project = orgs::create_project(&mut tx, org_id, &name)?.ok_or_else(name_taken)?;
    tx.commit()?;
    json(201, &project.to_json())
}

/// `GET /v1/projects/{id}`.
pub fn get(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let id = path_id(req, 3)?;
    let mut c = db::conn(&app.pool)?;
    let (project, _) = access::project(&mut *c, user, id, Operation::Read)?;
    json(200, &project.to_json())
}

/// `PATCH /v1/projects/{id}` `{"name"}`: 200, the project.
pub fn rename(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let id = path_id(req, 3)?;
    let name = parse_name(Fields::parse(&req.body)?.string("name")?)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    access::project(&mut tx, user, id, Operation::ManageProjects)?;
    let project = orgs::rename_project(&mut tx, id, &name)?.ok_or_else(name_taken)?;
    tx.commit()?;
    json(200, &project.to_json())
}

/// `DELETE /v1/projects/{id}`: 204; its API tokens are deleted and their streams end.
pub fn delete(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let id = path_id(req, 3)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let (project, _) = access::project(&mut tx, user, id, Operation::ManageProjects)?;
    let tokens = orgs::delete_project(&mut tx, id)?;
    tx.commit()?;
    let fields = [
        ("org_id", project.org_id.into()),
        ("project_id", id.into()),
        ("tokens_revoked", tokens.into()),
    ];
    auth::audit(app, req, Event::ProjectDeleted, Some(user), &fields);
    no_content()
}

fn name_taken() -> ApiError {
    ApiError::new(Code::NameTaken).message("The organization has a project of this name already.")
}
