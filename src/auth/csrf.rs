//! `GET /auth/csrf`: sets the `svc_csrf` cookie when it is missing (docs/API.md, "Authentication and CSRF").

use crate::app::{App, Reply};
use crate::crypto::new_token;
use crate::error::ApiResult;
use crate::http::cookies::SetCookie;
use crate::http::csrf::COOKIE;
use crate::http::{Request, Response};

pub fn get(app: &App, req: &Request) -> ApiResult<Reply> {
    let present = req
        .cookie(COOKIE)
        .is_some_and(|c| super::is_token_shaped(&c));
    let mut response = Response::empty(204);
    if !present {
        let cookie = SetCookie {
            name: COOKIE,
            value: &new_token(),
            http_only: false, // the page reads it to send it back in X-CSRF-Token
            same_site: "Strict",
            secure: app.config.cookie_secure,
            path: "/",
            max_age: None,
        };
        response = response.header("Set-Cookie", cookie.render());
    }
    Ok(response.into())
}
