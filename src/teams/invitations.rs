//! Invitations: `GET/POST /v1/organizations/{id}/invitations`, `DELETE
//! /v1/organizations/{id}/invitations/{invitation_id}`, and `POST /v1/invitations/accept`.
//!
//! Owners and admins invite an address with a role (only owners invite owners), at most
//! `CONSOLED_INVITATIONS_PER_ORG` an hour per organization; the mail goes through the outbox and
//! carries a link valid 7 days, used once. It is accepted by a signed-in user whose verified
//! address is the invited one, or by signing up through it (`auth::signup`).

use serde_json::{json, Value};

use super::{json, no_content, path_id, role_field, signed_in};
use crate::access::{self, Operation, Role};
use crate::admission::Budgets;
use crate::app::{App, Reply};
use crate::auth::{self, Event};
use crate::db::invitations::{self, Invitation};
use crate::db::{self, members, orgs, outbox, users};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::{Email, Fields};
use crate::http::Request;
use crate::limits::Bucket;

/// `GET /v1/organizations/{id}/invitations`: `{"invitations": [...]}`, the open ones.
pub fn list(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let org_id = path_id(req, 3)?;
    let mut c = db::conn(&app.pool)?;
    access::org(&mut *c, user, org_id, Operation::ManageMembers)?;
    let list: Vec<Value> = invitations::list_open(&mut *c, org_id)?
        .iter()
        .map(Invitation::to_json)
        .collect();
    json(200, &json!({ "invitations": list }))
}

/// `POST /v1/organizations/{id}/invitations` `{"email", "role"}`: 201, the invitation; its mail
/// is queued. A newer invitation of the same address replaces the open one.
pub fn create(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let org_id = path_id(req, 3)?;
    let fields = Fields::parse(&req.body)?;
    let email = Email::parse(fields.string("email")?)?;
    let role = role_field(&fields, "role")?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let me = access::org(&mut tx, user, org_id, Operation::ManageMembers)?;
    if role == Role::Owner {
        me.may(Operation::ManageOwners)?;
    }
    if members::has_address(&mut tx, org_id, &email)? {
        return Err(ApiError::new(Code::AlreadyMember));
    }
    Budgets::new(&app.config.limits).take(&mut tx, &Bucket::Invitations(org_id))?;
    let invitation = invitations::create(&mut tx, Some(org_id), &email, role, Some(user))?;
    outbox::enqueue_invitation(&mut tx, invitation.id, email.as_str())?;
    tx.commit()?;
    let fields = [
        ("org_id", org_id.into()),
        ("invitation_id", invitation.id.into()),
        ("role", role.as_str().into()),
    ];
    auth::audit(app, req, Event::MemberInvited, Some(user), &fields);
    json(201, &invitation.to_json())
}

/// `DELETE /v1/organizations/{id}/invitations/{invitation_id}`: 204; its link stops working.
pub fn cancel(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let (org_id, id) = (path_id(req, 3)?, path_id(req, 5)?);
    let mut c = db::conn(&app.pool)?;
    access::org(&mut *c, user, org_id, Operation::ManageMembers)?;
    if !invitations::cancel(&mut *c, org_id, id)? {
        return Err(ApiError::new(Code::NotFound).message("No such open invitation."));
    }
    let fields = [("org_id", org_id.into()), ("invitation_id", id.into())];
    auth::audit(app, req, Event::InvitationCancelled, Some(user), &fields);
    no_content()
}

/// `POST /v1/invitations/accept` `{"token"}`: 200, the organization joined (its summary).
pub fn accept(app: &App, req: &Request) -> ApiResult<Reply> {
    let user = signed_in(app, req)?;
    let token = Fields::parse(&req.body)?.string("token")?.to_string();
    let unusable =
        || ApiError::new(Code::InvalidToken).message("The invitation is unknown, used or expired.");
    if !auth::is_token_shaped(&token) {
        return Err(unusable());
    }
    let mut c = db::conn(&app.pool)?;
    // Any refusal below rolls the use of the link back: it stays usable by the right person.
    let mut tx = c.transaction()?;
    let invitation = invitations::consume(&mut tx, &token, user)?.ok_or_else(unusable)?;
    let org_id = invitation.org_id.ok_or_else(|| {
        ApiError::new(Code::InvalidToken)
            .message("This invitation is to make an account, not to join an organization.")
    })?;
    check_address(&mut tx, user, &invitation)?;
    let (status, personal) = orgs::status_of(&mut tx, org_id)?.ok_or_else(unusable)?;
    access::admits(status, personal).map_err(access::Forbidden::into_error)?;
    if !members::add(&mut tx, org_id, user, invitation.role)? {
        return Err(ApiError::new(Code::AlreadyMember).message("You are a member already."));
    }
    let summary = orgs::summary(&mut tx, user, org_id)?
        .ok_or_else(|| ApiError::internal("a member just added is missing"))?;
    tx.commit()?;
    let fields = [
        ("org_id", org_id.into()),
        ("invitation_id", invitation.id.into()),
        ("role", invitation.role.as_str().into()),
    ];
    auth::audit(app, req, Event::InvitationAccepted, Some(user), &fields);
    json(200, &summary.to_json())
}

/// The invitation is for the signed-in user's own, verified address (403 `forbidden` otherwise,
/// without naming the invited address).
fn check_address(c: &mut impl db::Sql, user: i64, invitation: &Invitation) -> ApiResult<()> {
    let account = users::find(c, user)?.ok_or_else(|| ApiError::new(Code::Unauthorized))?;
    let (reason, message) = if account.email != invitation.email {
        (
            "other_address",
            "This invitation is for another email address: sign in with that address.",
        )
    } else if !account.email_verified {
        (
            "email_unverified",
            "Confirm your email address first (the link in the verification mail).",
        )
    } else {
        return Ok(());
    };
    Err(ApiError::new(Code::Forbidden)
        .message(message)
        .with_details(json!({ "invitation": reason })))
}
