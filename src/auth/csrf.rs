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

/// Re-issues the CSRF cookie whenever an answer sets or clears the session cookie (sign-up,
/// login, second factor, provider sign-in, logout, reset, and the refusals that end a session:
/// the fifth wrong code, a logout answered 401): the new token is bound to the new session, or to
/// none when it is cleared. One place, for answers and refusals alike, so no flow that changes
/// the session can forget it.
pub fn follow_session(app: &App, result: ApiResult<Reply>) -> ApiResult<Reply> {
    match result {
        Ok(Reply::Response(mut response)) => {
            let set = response
                .headers
                .iter()
                .filter(|(name, _)| name.eq_ignore_ascii_case("set-cookie"))
                .map(|(_, value)| value.as_str());
            if let Some(cookie) = reissued(app, set) {
                response.headers.push(("Set-Cookie".into(), cookie));
            }
            Ok(Reply::Response(response))
        }
        Err(mut e) => {
            if let Some(cookie) = reissued(app, e.more.set_cookies.iter().map(String::as_str)) {
                e.more.set_cookies.push(cookie);
            }
            Err(e)
        }
        stream => stream,
    }
}

/// The new CSRF cookie when the last of `set_cookies` that names the session cookie sets or
/// clears it.
fn reissued<'a>(
    app: &App,
    set_cookies: impl DoubleEndedIterator<Item = &'a str>,
) -> Option<String> {
    let prefix = format!("{}=", super::SESSION_COOKIE);
    let token = set_cookies
        .rev()
        .find_map(|value| value.strip_prefix(&prefix))
        .map(|rest| rest.split(';').next().unwrap_or(""))?;
    let session = Some(token).filter(|t| super::is_token_shaped(t));
    Some(cookie(app, session))
}
