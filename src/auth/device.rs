//! The device cookie `svc_device` (OWASP's device cookies): issued by every successful sign-in,
//! bound to that account, it lets its browser past the failed-sign-in limits of the address and
//! the account (docs/API.md, "Cookies").
//!
//! Its value carries two tags under a key derived from the CSRF key (so every instance mints and
//! recognises the same cookies): one over its random part, one over the random part and the
//! account's address. An address known to be over its budget is refused from memory unless its
//! cookie carries both for the account it signs in to (issue 37, item 3): a made-up value, or a
//! cookie of another account, costs no database work, while the owner's browser still gets in.
//! The database still decides whether a recognised cookie is live (`db::devices`).
//!
//! Layout, 32 bytes in base64url (43 characters, the shape of every token of ours): 16 random
//! bytes, 8 bytes of the first tag, 8 of the second. Cookies minted before the tags have neither
//! and count as no cookie; the next sign-in replaces them.

use std::time::Duration;

use crate::app::App;
use crate::crypto::{b64url, b64url_decode, constant_time_eq, hmac_sha256, random_bytes};
use crate::http::cookies::SetCookie;
use crate::http::json::Email;
use crate::http::Request;
use crate::limits::Kind;

pub const COOKIE: &str = "svc_device";

const LABEL: &[u8] = b"consoled device cookie v1";

/// The cookie's lifetime, renewed at each sign-in with it.
pub fn lifetime() -> Duration {
    Kind::DeviceCookieFailures.rule().window
}

/// A new cookie value for the account of `email`.
pub fn mint(app: &App, email: &Email) -> String {
    let random = random_bytes::<16>();
    let key = key(app);
    let mut raw = random.to_vec();
    raw.extend_from_slice(&tag(&key, b"k", &random, b""));
    raw.extend_from_slice(&tag(&key, b"a", &random, email.as_str().as_bytes()));
    b64url(&raw)
}

/// The request's cookie when it was minted by us, for any account: what the sign-in screen can
/// tell before the body (and so the account) is read.
pub fn ours(app: &App, req: &Request) -> Option<String> {
    let value = req.cookie(COOKIE)?;
    let (random, first, _) = split(&value)?;
    constant_time_eq(&tag(&key(app), b"k", &random, b""), &first).then_some(value)
}

/// The request's cookie when it was minted by us for the account of `email`.
pub fn for_account(app: &App, req: &Request, email: &Email) -> Option<String> {
    let value = req.cookie(COOKIE)?;
    let (random, first, second) = split(&value)?;
    let key = key(app);
    let ok = constant_time_eq(&tag(&key, b"k", &random, b""), &first)
        & constant_time_eq(
            &tag(&key, b"a", &random, email.as_str().as_bytes()),
            &second,
        );
    ok.then_some(value)
}

/// Sent only to the login endpoint; the browser keeps it across sign-outs.
pub fn set_cookie(app: &App, value: &str) -> String {
    SetCookie {
        name: COOKIE,
        value,
        http_only: true,
        same_site: "Strict",
        secure: app.config.cookie_secure,
        path: "/auth/login",
        max_age: Some(lifetime().as_secs()),
    }
    .render()
}

fn key(app: &App) -> [u8; 32] {
    hmac_sha256(&app.csrf_key, &[LABEL])
}

/// The random part and the two tags of a value of the right shape.
fn split(value: &str) -> Option<([u8; 16], [u8; 8], [u8; 8])> {
    if !super::is_token_shaped(value) {
        return None;
    }
    let raw = b64url_decode(value)?;
    Some((
        raw.get(..16)?.try_into().ok()?,
        raw.get(16..24)?.try_into().ok()?,
        raw.get(24..32)?.try_into().ok()?,
    ))
}

/// 8 bytes of HMAC-SHA-256 over the kind of tag, the random part and (for the account's tag)
/// the address, length-prefixed so that no two inputs read alike.
fn tag(key: &[u8; 32], kind: &[u8], random: &[u8], account: &[u8]) -> [u8; 8] {
    let len = (account.len() as u32).to_be_bytes();
    let mac = hmac_sha256(key, &[kind, random, &len, account]);
    mac[..8].try_into().expect("8 of 32 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_token_shaped_and_its_tags_bind_it_to_the_key_and_the_account() {
        let key = [7u8; 32];
        let random = [1u8; 16];
        let ada = tag(&key, b"a", &random, b"ada@example.com");
        assert_ne!(ada, tag(&key, b"a", &random, b"bob@example.com"));
        assert_ne!(ada, tag(&[8u8; 32], b"a", &random, b"ada@example.com"));
        assert_ne!(tag(&key, b"k", &random, b""), tag(&key, b"a", &random, b""));
        let mut raw = random.to_vec();
        raw.extend_from_slice(&tag(&key, b"k", &random, b""));
        raw.extend_from_slice(&ada);
        let value = b64url(&raw);
        assert!(super::super::is_token_shaped(&value), "{value}");
        assert_eq!(split(&value).unwrap().2, ada);
        assert!(split("too short").is_none());
    }
}
