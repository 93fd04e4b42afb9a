//! `GET /v1/organizations/{id}/members`, `PATCH` and `DELETE
//! /v1/organizations/{id}/members/{user_id}`: who belongs, a new role, a member removed (or,
//! with one's own id, leaving).
//!
//! Owners and admins change roles below owner and remove members who are not owners; only
//! owners make or unmake owners and remove owners (`access::Operation::role_change`); anyone may
//! leave. An organization keeps at least one owner: the last one can neither leave nor be
//! demoted (409 `last_owner`). Changes of one organization's members run one at a time under
//! its row lock, so two owners demoting each other cannot both succeed.

use serde_json::{json, Value};

use super::{json, no_content, path_id, role_field, signed_in};
use crate::access::{self, Membership, Operation, Role};
use crate::app::{App, Reply};
use crate::auth::{self, Event};
use crate::db::members::{self, Member};
use crate::db::{self, orgs, Sql};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::Fields;
use crate::http::Request;

/// `GET /v1/organizations/{id}/members`: `{"members": [...]}`, owners first.
pub fn list(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let org_id = path_id(req, 3)?;
    let mut c = db::conn(&app.pool)?;
    access::org(&mut *c, user, org_id, Operation::Read)?;
    let list: Vec<Value> = members::list(&mut *c, org_id)?
        .iter()
        .map(Member::to_json)
        .collect();
    json(200, &json!({ "members": list }))
}

/// `PATCH /v1/organizations/{id}/members/{user_id}` `{"role"}`: 200, the member.
pub fn change_role(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let (org_id, target) = (path_id(req, 3)?, path_id(req, 5)?);
    let role = role_field(&Fields::parse(&req.body)?, "role")?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let (me, mut member) = lock_and_find(&mut tx, user, org_id, target)?;
    me.may(Operation::role_change(member.role, role))?;
    if member.role == Role::Owner && role != Role::Owner {
        keep_an_owner(&mut tx, org_id)?;
    }
    members::set_role(&mut tx, org_id, target, role)?;
    tx.commit()?;
    // The same role again changes nothing: nothing announced, nothing logged.
    if member.role != role {
        let fields = [
            ("org_id", org_id.into()),
            ("member_id", target.into()),
            ("from", member.role.as_str().into()),
            ("to", role.as_str().into()),
        ];
        auth::audit(app, req, Event::MemberRoleChanged, Some(user), &fields);
    }
    member.role = role;
    json(200, &member.to_json())
}

/// `DELETE /v1/organizations/{id}/members/{user_id}`: 204; the member's streams stop carrying
/// the organization's changes at once. With one's own id: leaving.
pub fn remove(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let (org_id, target) = (path_id(req, 3)?, path_id(req, 5)?);
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let (me, member) = lock_and_find(&mut tx, user, org_id, target)?;
    let leaving = target == user;
    me.may(if leaving {
        Operation::Leave
    } else {
        Operation::removal(member.role)
    })?;
    if member.role == Role::Owner {
        keep_an_owner(&mut tx, org_id)?;
    }
    members::remove(&mut tx, org_id, target)?;
    tx.commit()?;
    let mut fields = vec![
        ("org_id", org_id.into()),
        ("role", member.role.as_str().into()),
    ];
    let event = if leaving {
        Event::MemberLeft
    } else {
        fields.push(("member_id", target.into()));
        Event::MemberRemoved
    };
    auth::audit(app, req, event, Some(user), &fields);
    no_content()
}

/// Takes the organization's lock, then the caller's membership (404 when not a member) and the
/// target member (404 when there is none).
fn lock_and_find(
    tx: &mut impl Sql,
    user: i64,
    org_id: i64,
    target: i64,
) -> ApiResult<(Membership, Member)> {
    orgs::lock(tx, org_id)?;
    let me = access::org(tx, user, org_id, Operation::Read)?;
    let member = members::find(tx, org_id, target)?
        .ok_or_else(|| ApiError::new(Code::NotFound).message("No such member."))?;
    Ok((me, member))
}

/// 409 `last_owner` unless another owner stays.
fn keep_an_owner(tx: &mut impl Sql, org_id: i64) -> ApiResult<()> {
    if members::owners(tx, org_id)? > 1 {
        return Ok(());
    }
    Err(ApiError::new(Code::LastOwner).message(
        "The organization's last owner can neither leave nor stop being owner: make another \
         member owner first.",
    ))
}
