//! Changing the account's address (issue 32): `POST /auth/account/email {email}` asks for it and
//! `POST /auth/account/email/confirm {token}` makes it, from the link mailed to the new address.
//!
//! Asking needs proof that the owner is present (`reauth`). The request queues the mail without
//! looking the address up, so the answer, its timing and what the asker can read afterwards (the
//! export) are the same whether or not the new address belongs to another account: the sender
//! mails a link, or, to an address with an account, a note to its owner that nothing changed. Until the link is followed the
//! account keeps its address; following it changes the address (verified, as the link proves
//! it), voids the other change links, and tells the old address when and from where. The links
//! mailed to the old address (verification, reset) stop working, as they name it.

use serde_json::json;

use crate::admission::Budgets;
use crate::app::{App, Reply};
use crate::db::mail_tokens::{self, Purpose};
use crate::db::{self, outbox, users};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::{Email, Fields};
use crate::http::{Request, Response};
use crate::limits::Bucket;

use super::Event;

/// `POST /auth/account/email {email, password?}`: 202, a mail to the new address is queued.
pub fn request(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    let fields = Fields::parse(&req.body)?;
    let email = Email::parse(fields.string("email")?)?;
    super::reauth::require(app, req, &session)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let user =
        users::find(&mut tx, session.user_id)?.ok_or_else(|| ApiError::new(Code::Unauthorized))?;
    if email.as_str() == user.email {
        return Err(ApiError::invalid(
            "email",
            "not the account's current address",
        ));
    }
    Budgets::new(&app.config.limits).take(&mut tx, &Bucket::EmailChanges(user.id))?;
    // The address is not looked up here: the sender decides what the mail says (`mail::sender`).
    outbox::enqueue(&mut tx, "email_change", user.id, email.as_str())?;
    tx.commit()?;
    // Neither address is logged: the new one was typed by the client.
    super::audit(app, req, Event::EmailChangeRequested, Some(user.id), &[]);
    Ok(Response::empty(202).into())
}

/// `POST /auth/account/email/confirm {token}`: 204, the account has the new address.
pub fn confirm(app: &App, req: &Request) -> ApiResult<Reply> {
    let fields = Fields::parse(&req.body)?;
    let token = super::email::token_field(&fields)?;
    let invalid = || ApiError::new(Code::InvalidToken);
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let live = mail_tokens::consume(&mut tx, token, Purpose::EmailChange)?.ok_or_else(invalid)?;
    let user = users::find(&mut tx, live.user_id)?.ok_or_else(invalid)?;
    if user.disabled_at.is_some() {
        return Err(ApiError::new(Code::AccountDisabled));
    }
    // Taken since it was asked for (the link stays usable: nothing is committed).
    if !users::change_email(&mut tx, user.id, &live.email)? {
        return Err(ApiError::new(Code::EmailTaken));
    }
    mail_tokens::void_unused(&mut tx, user.id, Purpose::EmailChange)?;
    let mut details = super::account::origin(app, req, "owner");
    details["new_email"] = json!(live.email);
    // To the address alone: the notice must reach it whatever becomes of the account.
    outbox::enqueue_with_details(&mut tx, "email_changed", None, &user.email, &details)?;
    tx.commit()?;
    super::audit(app, req, Event::EmailChanged, Some(user.id), &[]);
    Ok(Response::empty(204).into())
}
