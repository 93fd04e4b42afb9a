//! `GET /auth/csrf`, and the CSRF cookie that follows every change of the session cookie
//! (docs/API.md, "Authentication and CSRF").

use crate::app::{App, Reply};
use crate::error::ApiResult;
use crate::http::cookies::SetCookie;
use crate::http::csrf::{self, COOKIE};
use crate::http::{Request, Response};

/// Sets `svc_csrf` unless the request carries one that is valid for its session: a browser whose
/// token went stale (another session, a changed key) gets a fresh one by asking again.
pub fn get(app: &App, req: &Request) -> ApiResult<Reply> {
    let session = super::session_token(req);
    let present = req
        .cookie(COOKIE)
        .is_some_and(|c| csrf::valid(&app.csrf_key, &c, session.as_deref()));
    let mut response = Response::empty(204);
    if !present {
        response = response.header("Set-Cookie", cookie(app, session.as_deref()));
    }
    Ok(response.into())
}

/// A `Set-Cookie` value with a new token bound to `session`.
fn cookie(app: &App, session: Option<&str>) -> String {
    SetCookie {
        name: COOKIE,
        value: &csrf::issue(&app.csrf_key, session),
        http_only: false, // the page reads it to send it back in X-CSRF-Token
        same_site: "Strict",
        secure: app.config.cookie_secure,
        path: "/",
        max_age: None,
    }
    .render()
}

/// Re-issues the CSRF cookie whenever a response sets or clears the session cookie (sign-up,
/// login, second factor, provider sign-in, logout, reset...): the new token is bound to the new
/// session, or to none when it is cleared. One place, so no flow that changes the session can
/// forget it.
pub fn follow_session(app: &App, reply: Reply) -> Reply {
    let Reply::Response(mut response) = reply else {
        return reply;
    };
    let prefix = format!("{}=", super::SESSION_COOKIE);
    let set = response
        .headers
        .iter()
        .rev()
        .filter(|(name, _)| name.eq_ignore_ascii_case("set-cookie"))
        .find_map(|(_, value)| value.strip_prefix(&prefix))
        .map(|rest| rest.split(';').next().unwrap_or("").to_string());
    if let Some(token) = set {
        let session = Some(token.as_str()).filter(|t| super::is_token_shaped(t));
        response
            .headers
            .push(("Set-Cookie".into(), cookie(app, session)));
    }
    Reply::Response(response)
}
