//! A user's own sessions (OWASP ASVS 7.5.2): `GET /auth/sessions` lists the live ones,
//! `DELETE /auth/sessions/{id}` ends one and `DELETE /auth/sessions` every one but the current.
//!
//! A session is named by its `public_id`, random and unrelated to its token (`db::sessions`),
//! so the list gives nothing a thief could sign in with. Another user's id answers 404, as an
//! unknown one does. Ending a session also ends its event streams, on every instance (the
//! `sessions` delete trigger). Each ending is a security event in the log.
//!
//! Ending other sessions is what a stolen cookie would do to lock the owner's new sign-ins out
//! (issue 37, item 7): it needs the second factor's proof of presence (the password, or a
//! sign-in younger than `CONSOLED_REAUTH_SECONDS`; ASVS 7.5.2), and the current session gets a
//! new token, so that a copy of its cookie is ended with the others (item 5).

use serde_json::{json, Value};

use crate::app::{App, Reply};
use crate::db::{self, sessions};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::{Request, Response};

use super::Event;

/// `GET /auth/sessions`: `{"sessions": [...]}`, most recently used first.
pub fn list(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    let mut c = db::conn(&app.pool)?;
    let listed = sessions::list_for_user(&mut *c, session.user_id, app.config.session_idle)?;
    let items: Vec<Value> = listed
        .iter()
        .map(|s| {
            json!({
                "id": s.public_id,
                "created_at": s.created_at,
                "last_seen_at": s.last_seen_at,
                "client_address": s.client_address,
                "user_agent": s.user_agent,
                "mfa_pending": s.mfa_pending,
                "current": s.public_id == session.public_id,
            })
        })
        .collect();
    Ok(Response::json(200, &json!({ "sessions": items })).into())
}

/// `DELETE /auth/sessions/{id}`: 204, or 404 `not_found` when the user has no such session.
/// Ending the current session is a logout: the cookie is cleared too. Ending another one needs
/// proof of presence, as the second factor's changes do (`reauth`), and gives this session a
/// new token.
pub fn delete_one(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    let id = req.path.rsplit('/').next().unwrap_or("");
    // Anything that cannot be a public id is not one of the user's sessions.
    if !is_public_id(id) {
        return Err(ApiError::new(Code::NotFound).message("No such session."));
    }
    let current = id == session.public_id;
    if !current {
        super::reauth::require(app, req, &session)?;
    }
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    if !sessions::delete_public(&mut tx, session.user_id, id)? {
        return Err(ApiError::new(Code::NotFound).message("No such session."));
    }
    let cookie = if current {
        super::clear_session_cookie(app)
    } else {
        super::renew_token(app, &mut tx, &session)?
    };
    tx.commit()?;
    let fields = [("current", current.into())];
    super::audit(
        app,
        req,
        Event::SessionRevoked,
        Some(session.user_id),
        &fields,
    );
    Ok(Response::empty(204).header("Set-Cookie", cookie).into())
}

/// `DELETE /auth/sessions`: ends every session of the user but the current one, which gets a
/// new token; 204. Needs proof of presence (`reauth`).
pub fn delete_others(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::require_session(app, req)?;
    super::reauth::require(app, req, &session)?;
    let mut c = db::conn(&app.pool)?;
    let mut tx = c.transaction()?;
    let ended = sessions::delete_for_user(&mut tx, session.user_id, Some(session.id))?;
    let cookie = super::renew_token(app, &mut tx, &session)?;
    tx.commit()?;
    let fields = [("others", true.into()), ("sessions_ended", ended.into())];
    super::audit(
        app,
        req,
        Event::SessionRevoked,
        Some(session.user_id),
        &fields,
    );
    Ok(Response::empty(204).header("Set-Cookie", cookie).into())
}

/// The shape of `sessions.public_id`: 32 lower-case hex digits.
fn is_public_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
