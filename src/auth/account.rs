//! The signed-in user's own account (issue 32): `PATCH /auth/account` changes the name and the
//! locale, `GET /auth/account/export` answers everything consoled holds about the user (GDPR
//! articles 15 and 20), `DELETE /auth/account` ends the account (article 17). The address is
//! changed through `email_change`. The operator's side is `cli::users`.
//!
//! The account lives under `/auth`, beside the password and the sessions: every answer there is
//! `Cache-Control: no-store`, which an export of personal data needs.

use serde_json::{json, Value};

use crate::account;
use crate::app::{App, Reply};
use crate::db::{self, export, rate, users};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::{parse_name, Email, Fields};
use crate::http::{Request, Response};
use crate::limits;

use super::Event;

/// `PATCH /auth/account {name?, locale?}`: 200 `{"user": User}` as it is now. A change is
/// announced as a `user` change (the users trigger).
pub fn patch(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    let fields = Fields::parse(&req.body)?;
    let name = fields
        .optional_string("name")?
        .map(parse_name)
        .transpose()?;
    let locale = fields
        .optional_string("locale")?
        .map(account::parse_locale)
        .transpose()?;
    let mut c = db::conn(&app.pool)?;
    let user = users::update_profile(&mut *c, session.user_id, name.as_deref(), locale)?
        .ok_or_else(|| ApiError::new(Code::Unauthorized))?;
    let changed = [
        ("name", name.is_some().into()),
        ("locale", locale.is_some().into()),
    ];
    super::audit(app, req, Event::ProfileChanged, Some(user.id), &changed);
    Ok(Response::json(200, &json!({ "user": user.to_json() })).into())
}

/// `GET /auth/account/export`: 200, the export (`db::export`), as a download.
pub fn export(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    let mut c = db::conn(&app.pool)?;
    let gone = || ApiError::new(Code::Unauthorized);
    let user = users::find(&mut *c, session.user_id)?.ok_or_else(gone)?;
    let keys = limits::keys_of_account(&Email::normalise(&user.email), user.id);
    let events = rate::events_of_account(&mut *c, &keys)?;
    let mut body = export::of_user(&mut *c, user.id, &events)?.ok_or_else(gone)?;
    body["exported_at"] = json!(now_utc(&mut *c)?);
    super::audit(app, req, Event::AccountExported, Some(user.id), &[]);
    let file = format!("attachment; filename=\"consoled-account-{}.json\"", user.id);
    Ok(Response::json(200, &body)
        .header("Content-Disposition", file)
        .into())
}

fn now_utc(c: &mut impl db::Sql) -> Result<String, postgres::Error> {
    let row = c.query_one(
        "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
        &[],
    )?;
    Ok(row.get(0))
}

/// `DELETE /auth/account {password?}`: proof that the owner is present (`reauth`), then the
/// account goes (`account::delete`); 204, and the cookie is cleared. 409 `last_owner` while
/// the user alone owns a team organization.
pub fn delete(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    super::reauth::require(app, req, &session)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let user =
        users::find(&mut tx, session.user_id)?.ok_or_else(|| ApiError::new(Code::Unauthorized))?;
    account::delete(&mut tx, &user, &origin(app, req, "owner"))?;
    tx.commit()?;
    super::audit(
        app,
        req,
        Event::AccountDeleted,
        Some(user.id),
        &[("by", "owner".into())],
    );
    Ok(Response::empty(204)
        .header("Set-Cookie", super::clear_session_cookie(app))
        .into())
}

/// Who made a change and from where, as the mail that reports it tells: never a secret.
pub(super) fn origin(app: &App, req: &Request, by: &str) -> Value {
    let seen = super::seen(app, req);
    json!({ "by": by, "client": seen.address, "agent": seen.agent })
}
