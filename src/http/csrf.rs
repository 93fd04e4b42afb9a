//! The CSRF rule (docs/API.md, "Authentication and CSRF"): every POST under /auth carries
//! `X-CSRF-Token` equal to the `svc_csrf` cookie, the token is one we signed for the session the
//! request carries (OWASP's signed double-submit cookie), and the request comes from our own
//! origin.
//!
//! A token is `random ‖ "." ‖ HMAC(key, random, session)`, where the session is the request's
//! `svc_session` token, or nothing before sign-in. So a cookie and header planted from another
//! browser (a sibling subdomain can set cookies for the parent domain) carry that browser's
//! binding, not this session's, and are refused. The HMAC is over the session token itself, not
//! its stored hash, so even the database and the key together cannot mint a token for a session.

use super::Request;
use crate::crypto::hmac_sha256;
use crate::crypto::{b64url, b64url_decode, constant_time_eq, random_bytes};
use crate::error::{ApiError, Code};

pub const COOKIE: &str = "svc_csrf";
pub const HEADER: &str = "x-csrf-token";

const LABEL: &[u8] = b"consoled csrf token v1";

/// A new token bound to `session` (the `svc_session` token; `None` before sign-in).
pub fn issue(key: &[u8; 32], session: Option<&str>) -> String {
    let random = random_bytes::<16>();
    format!(
        "{}.{}",
        b64url(&random),
        b64url(&mac(key, &random, session))
    )
}

/// Whether `token` is one of ours, bound to `session`.
pub fn valid(key: &[u8; 32], token: &str, session: Option<&str>) -> bool {
    let Some((random, tag)) = token.split_once('.') else {
        return false;
    };
    match (b64url_decode(random), b64url_decode(tag)) {
        (Some(random), Some(tag)) if random.len() == 16 => {
            constant_time_eq(&mac(key, &random, session), &tag)
        }
        _ => false,
    }
}

/// The session's part is length-prefixed and marked, so no (random, session) pair can be read
/// as another.
fn mac(key: &[u8; 32], random: &[u8], session: Option<&str>) -> [u8; 32] {
    let (kind, session): (&[u8], &[u8]) = match session {
        Some(s) => (b"s", s.as_bytes()),
        None => (b"p", b""),
    };
    let len = (session.len() as u32).to_be_bytes();
    hmac_sha256(key, &[LABEL, kind, &len, session, random])
}

/// `origins` are the lower-case origins of the configured base and console URLs; `session` is
/// the request's `svc_session` token, if it carries one of the right shape. `ended` tells
/// whether that session no longer exists; it is asked only when the token is a pre-session one:
/// a client that keeps a cleared session cookie (curl's jar keeps it after logout) holds the
/// pre-session token the logout issued, and is signed out, so the token passes.
pub fn check(
    req: &Request,
    origins: &[String],
    key: &[u8; 32],
    session: Option<&str>,
    ended: impl FnOnce() -> bool,
) -> Result<(), ApiError> {
    let refuse = |why: &str| {
        ApiError::new(Code::CsrfInvalid).message(format!(
            "{why}; call GET /auth/csrf and send the svc_csrf cookie's value in X-CSRF-Token"
        ))
    };
    let fetch_site = req
        .header("sec-fetch-site")
        .map(|v| v.trim().to_ascii_lowercase());
    if fetch_site.as_deref() == Some("cross-site") {
        return Err(refuse("cross-site request"));
    }
    let origin = req.header("origin").map(|o| o.trim().to_ascii_lowercase());
    if let Some(origin) = &origin {
        if !origins.contains(origin) {
            return Err(foreign_origin(origin, origins));
        }
    }
    // Another site under the same registrable domain (a sibling subdomain) is not us: it passes
    // only when it names an allowed origin, such as a console front end on its own subdomain.
    if fetch_site.as_deref() == Some("same-site") && origin.is_none() {
        return Err(refuse("same-site request without an Origin header"));
    }
    let cookie = req.cookie(COOKIE).filter(|c| !c.is_empty());
    let header = req.header(HEADER).map(str::trim).filter(|h| !h.is_empty());
    match (cookie, header) {
        (Some(c), Some(h)) if constant_time_eq(c.as_bytes(), h.as_bytes()) => {
            let bound =
                valid(key, h, session) || (session.is_some() && valid(key, h, None) && ended());
            if bound {
                Ok(())
            } else {
                Err(refuse("the svc_csrf token was not issued for this session"))
            }
        }
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

    const KEY: [u8; 32] = [7; 32];
    const SESSION: &str = "ssssssssssssssssssssssssssssssssssssssssss1";

    fn post(headers: &[(&str, &str)]) -> Request {
        let mut r = Request::new(Method::Post, "/auth/login");
        r.headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        r
    }

    const ORIGINS: [&str; 2] = ["http://127.0.0.1:8080", "http://console.example.com"];

    fn origins() -> Vec<String> {
        ORIGINS.iter().map(|s| s.to_string()).collect()
    }

    fn check_with(headers: &[(&str, &str)], session: Option<&str>) -> Result<(), ApiError> {
        check(&post(headers), &origins(), &KEY, session, || false)
    }

    #[test]
    fn a_pre_session_token_passes_with_a_session_that_has_ended() {
        let tok = issue(&KEY, None);
        let cookie = format!("svc_csrf={tok}");
        let req = post(&[("cookie", &cookie), ("x-csrf-token", &tok)]);
        assert!(check(&req, &origins(), &KEY, Some(SESSION), || true).is_ok());
        assert!(check(&req, &origins(), &KEY, Some(SESSION), || false).is_err());
        // A token of another session never does.
        let other = issue(&KEY, Some(&SESSION.replace('1', "2")));
        let cookie = format!("svc_csrf={other}");
        let req = post(&[("cookie", &cookie), ("x-csrf-token", &other)]);
        assert!(check(&req, &origins(), &KEY, Some(SESSION), || true).is_err());
    }

    #[test]
    fn matching_token_passes() {
        let tok = issue(&KEY, None);
        let cookie = format!("svc_csrf={tok}");
        assert!(check_with(&[("cookie", &cookie), ("x-csrf-token", &tok)], None).is_ok());
        let tok = issue(&KEY, Some(SESSION));
        let cookie = format!("svc_csrf={tok}");
        let headers = [
            ("cookie", cookie.as_str()),
            ("x-csrf-token", &tok),
            ("origin", "http://127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin"),
        ];
        assert!(check_with(&headers, Some(SESSION)).is_ok());
    }

    #[test]
    fn a_token_is_bound_to_its_session_and_key() {
        let tok = issue(&KEY, Some(SESSION));
        assert!(valid(&KEY, &tok, Some(SESSION)));
        assert!(!valid(&KEY, &tok, None));
        assert!(!valid(&KEY, &tok, Some(&SESSION.replace('1', "2"))));
        assert!(!valid(&[8; 32], &tok, Some(SESSION)));
        let pre = issue(&KEY, None);
        assert!(valid(&KEY, &pre, None));
        assert!(!valid(&KEY, &pre, Some(SESSION)));
        assert_ne!(issue(&KEY, None), pre);
        for bad in [
            "",
            ".",
            "tok",
            "a.b",
            &format!("{pre}x"),
            &pre.replace('.', ""),
        ] {
            assert!(!valid(&KEY, bad, None), "{bad:?}");
        }
    }

    #[test]
    fn same_site_passes_only_with_an_allowed_origin() {
        let tok = issue(&KEY, None);
        let cookie = format!("svc_csrf={tok}");
        let pair = [("cookie", cookie.as_str()), ("x-csrf-token", tok.as_str())];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut h = pair.to_vec();
            h.extend_from_slice(extra);
            check_with(&h, None)
        };
        assert!(with(&[("sec-fetch-site", "same-site")]).is_err());
        assert!(with(&[
            ("sec-fetch-site", "same-site"),
            ("origin", "http://evil.example.com")
        ])
        .is_err());
        assert!(with(&[
            ("sec-fetch-site", "same-site"),
            ("origin", "http://console.example.com")
        ])
        .is_ok());
        assert!(with(&[("sec-fetch-site", "none")]).is_ok());
    }

    #[test]
    fn a_foreign_origin_is_named_with_the_allowed_ones_and_the_setting() {
        let tok = issue(&KEY, None);
        let cookie = format!("svc_csrf={tok}");
        let headers = [
            ("cookie", cookie.as_str()),
            ("x-csrf-token", &tok),
            ("origin", "http://127.0.0.1:8081"),
        ];
        let message = check_with(&headers, None).unwrap_err().more.message;
        assert!(message.contains("http://127.0.0.1:8081"), "{message}");
        assert!(message.contains("http://127.0.0.1:8080"), "{message}");
        assert!(message.contains("CONSOLED_BASE_URL"), "{message}");
    }

    #[test]
    fn refusals() {
        let tok = issue(&KEY, None);
        let other = issue(&KEY, Some(SESSION));
        let cookie = format!("svc_csrf={tok}");
        let cookie_other = format!("svc_csrf={other}");
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
        let cases: &[Case] = &[
            (&[], None),
            (&[("cookie", &cookie)], None),
            (&[("x-csrf-token", &tok)], None),
            (&[("cookie", &cookie), ("x-csrf-token", &other)], None),
            (&[("cookie", "svc_csrf="), ("x-csrf-token", "")], None),
            // Equal but not ours, or not this session's.
            (&[("cookie", "svc_csrf=tok"), ("x-csrf-token", "tok")], None),
            (
                &[("cookie", &cookie), ("x-csrf-token", &tok)],
                Some(SESSION),
            ),
            (&[("cookie", &cookie_other), ("x-csrf-token", &other)], None),
            (
                &[
                    ("cookie", &cookie),
                    ("x-csrf-token", &tok),
                    ("origin", "https://evil.example"),
                ],
                None,
            ),
            (
                &[
                    ("cookie", &cookie),
                    ("x-csrf-token", &tok),
                    ("sec-fetch-site", "cross-site"),
                ],
                None,
            ),
        ];
        for (headers, session) in cases {
            let err = check_with(headers, *session).unwrap_err();
            assert_eq!(err.code, Code::CsrfInvalid, "{headers:?}");
        }
    }
}
