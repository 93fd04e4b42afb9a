//! The CSRF rule (docs/API.md, "Authentication and CSRF"): every POST under /auth carries `X-CSRF-Token` equal to the
//! `svc_csrf` cookie, and comes from our own origin.

use super::Request;
use crate::crypto::constant_time_eq;
use crate::error::{ApiError, Code};

pub const COOKIE: &str = "svc_csrf";
pub const HEADER: &str = "x-csrf-token";

/// `origins` are the lower-case origins of the configured base and console URLs.
pub fn check(req: &Request, origins: &[String]) -> Result<(), ApiError> {
    let refuse = |why: &str| {
        ApiError::new(Code::CsrfInvalid).message(format!(
            "{why}; call GET /auth/csrf and send the svc_csrf cookie's value in X-CSRF-Token"
        ))
    };
    if req
        .header("sec-fetch-site")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("cross-site"))
    {
        return Err(refuse("cross-site request"));
    }
    if let Some(origin) = req.header("origin") {
        let origin = origin.trim().to_ascii_lowercase();
        if !origins.contains(&origin) {
            return Err(foreign_origin(&origin, origins));
        }
    }
    let cookie = req.cookie(COOKIE).filter(|c| !c.is_empty());
    let header = req.header(HEADER).map(str::trim).filter(|h| !h.is_empty());
    match (cookie, header) {
        (Some(c), Some(h)) if constant_time_eq(c.as_bytes(), h.as_bytes()) => Ok(()),
        (None, _) => Err(refuse("no svc_csrf cookie")),
        (_, None) => Err(refuse("no X-CSRF-Token header")),
        _ => Err(refuse("X-CSRF-Token does not match the svc_csrf cookie")),
    }
}

/// The refusal of a foreign `Origin` names what it saw, what it allows and the setting that
/// decides: the usual cause is a service reached on another address than `CONSOLED_BASE_URL`
/// (a changed port, say), not an attack.
fn foreign_origin(origin: &str, origins: &[String]) -> ApiError {
    // The origin is the client's own header: shown back, but bounded.
    let seen: String = origin.chars().take(200).collect();
    let mut allowed: Vec<&str> = origins.iter().map(String::as_str).collect();
    allowed.dedup();
    ApiError::new(Code::CsrfInvalid).message(format!(
        "request from origin {seen}, but only {} may POST here: the origins of \
         CONSOLED_BASE_URL and CONSOLED_CONSOLE_URL. If the service is reached at {seen}, set \
         CONSOLED_BASE_URL (and CONSOLED_CONSOLE_URL for a separate front end) to it",
        allowed.join(" and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Method;

    fn post(headers: &[(&str, &str)]) -> Request {
        let mut r = Request::new(Method::Post, "/auth/login");
        r.headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        r
    }

    const ORIGINS: [&str; 1] = ["http://127.0.0.1:8080"];

    fn origins() -> Vec<String> {
        ORIGINS.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn matching_token_passes() {
        let r = post(&[("cookie", "svc_csrf=tok"), ("x-csrf-token", "tok")]);
        assert!(check(&r, &origins()).is_ok());
        let r = post(&[
            ("cookie", "svc_csrf=tok"),
            ("x-csrf-token", "tok"),
            ("origin", "http://127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert!(check(&r, &origins()).is_ok());
    }

    #[test]
    fn a_foreign_origin_is_named_with_the_allowed_ones_and_the_setting() {
        let r = post(&[
            ("cookie", "svc_csrf=tok"),
            ("x-csrf-token", "tok"),
            ("origin", "http://127.0.0.1:8081"),
        ]);
        let message = check(&r, &origins()).unwrap_err().more.message;
        assert!(message.contains("http://127.0.0.1:8081"), "{message}");
        assert!(message.contains("http://127.0.0.1:8080"), "{message}");
        assert!(message.contains("CONSOLED_BASE_URL"), "{message}");
    }

    #[test]
    fn refusals() {
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("cookie", "svc_csrf=tok")],
            &[("x-csrf-token", "tok")],
            &[("cookie", "svc_csrf=tok"), ("x-csrf-token", "tok2")],
            &[("cookie", "svc_csrf="), ("x-csrf-token", "")],
            &[
                ("cookie", "svc_csrf=tok"),
                ("x-csrf-token", "tok"),
                ("origin", "https://evil.example"),
            ],
            &[
                ("cookie", "svc_csrf=tok"),
                ("x-csrf-token", "tok"),
                ("sec-fetch-site", "cross-site"),
            ],
        ];
        for headers in cases {
            let err = check(&post(headers), &origins()).unwrap_err();
            assert_eq!(err.code, Code::CsrfInvalid, "{headers:?}");
        }
    }
}
