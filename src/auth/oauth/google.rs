//! Google (OpenID Connect): the `id_token` of the token answer identifies the person.
//!
//! The token comes straight from Google's token endpoint over TLS, so its claims are checked
//! without verifying the signature (OpenID Connect Core 3.1.3.7; docs/API.md, "Decisions"): `iss`, `aud`,
//! `exp` and `nonce`. The identity is `sub`; the address and its verification come from the
//! claims, or from the userinfo endpoint when the token carries no address.

use serde_json::Value;

use super::client::Exchange;
use super::{claims, Declined, Identity};
use crate::crypto::{b64url_decode, unix_now};
use crate::http::json::Email;

const ISSUERS: [&str; 2] = ["https://accounts.google.com", "accounts.google.com"];

pub fn identity(exchange: &Exchange, nonce: Option<&str>) -> Result<Identity, Declined> {
    let tokens = exchange.tokens()?;
    let id_token = tokens
        .get("id_token")
        .and_then(Value::as_str)
        .ok_or_else(|| Declined::failed("google: no id_token"))?;
    let claims = decode_claims(id_token)?;
    let nonce = nonce.ok_or_else(|| Declined::failed("google: state without nonce"))?;
    check_claims(&claims, &exchange.config.client_id, nonce, unix_now())?;
    let subject = claims["sub"].as_str().unwrap_or_default().to_string();
    let (email, email_verified) = match claims.get("email").and_then(Value::as_str) {
        Some(email) => (Some(email.to_string()), is_true(&claims["email_verified"])),
        None => {
            let access_token = tokens["access_token"].as_str().unwrap_or_default();
            userinfo(exchange, access_token, &subject)?
        }
    };
    // An address we could not accept at signup is no address.
    let email = email.and_then(|e| Email::parse(&e).ok());
    let name = claims["name"].as_str().unwrap_or_default().to_string();
    Ok(Identity {
        subject,
        email,
        email_verified,
        name,
    })
}

/// The payload of a compact JWS, not verified (see the module comment).
fn decode_claims(jwt: &str) -> Result<Value, Declined> {
    let parts: Vec<&str> = jwt.split('.').collect();
    let invalid = || Declined::failed("google: id_token is not a JWT");
    if parts.len() != 3 {
        return Err(invalid());
    }
    let payload = b64url_decode(parts[1]).ok_or_else(invalid)?;
    match serde_json::from_slice(&payload) {
        Ok(claims @ Value::Object(_)) => Ok(claims),
        _ => Err(invalid()),
    }
}

/// OpenID Connect Core 3.1.3.7's checks that apply without keys (`claims::as_expected`).
fn check_claims(claims: &Value, client_id: &str, nonce: &str, now: u64) -> Result<(), Declined> {
    let expected = claims::Expected {
        issuers: &ISSUERS,
        client_id,
        nonce,
        now,
    };
    claims::as_expected(claims, &expected).map_err(|e| Declined::failed(format!("google: {e}")))
}

/// `email_verified` as Google sends it (a boolean; some tokens carry the string "true").
pub(super) fn is_true(v: &Value) -> bool {
    v.as_bool() == Some(true) || v.as_str() == Some("true")
}

/// Address and verification from the userinfo endpoint, which must describe the same `sub`.
fn userinfo(
    exchange: &Exchange,
    access_token: &str,
    subject: &str,
) -> Result<(Option<String>, bool), Declined> {
    let info = exchange.get(&exchange.config.api_url, access_token, "application/json")?;
    if info["sub"].as_str() != Some(subject) {
        return Err(Declined::failed(
            "google: userinfo describes another subject",
        ));
    }
    let email = info["email"].as_str().map(str::to_string);
    Ok((email, is_true(&info["email_verified"])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: u64 = 1_700_000_000;

    fn good() -> Value {
        json!({
            "iss": "https://accounts.google.com", "aud": "client", "exp": NOW + 60,
            "nonce": "n1", "sub": "1234",
        })
    }

    fn accepted(claims: &Value) -> bool {
        check_claims(claims, "client", "n1", NOW).is_ok()
    }

    #[test]
    fn good_claims_pass_and_each_wrong_one_fails() {
        assert!(accepted(&good()));
        let mut short_iss = good();
        short_iss["iss"] = json!("accounts.google.com");
        assert!(accepted(&short_iss));
        for (claim, bad) in [
            ("iss", json!("https://evil.example")),
            ("aud", json!("other-client")),
            ("aud", json!(["other", "client"])),
            ("exp", json!(NOW)),
            ("exp", json!("soon")),
            ("nonce", json!("n2")),
            ("sub", json!("")),
        ] {
            let mut claims = good();
            claims[claim] = bad.clone();
            assert!(!accepted(&claims), "{claim} = {bad}");
        }
        for claim in ["iss", "aud", "exp", "nonce", "sub"] {
            let mut claims = good();
            claims.as_object_mut().unwrap().remove(claim);
            assert!(!accepted(&claims), "without {claim}");
        }
    }

    #[test]
    fn audience_lists_need_azp() {
        let mut claims = good();
        claims["aud"] = json!(["client"]);
        assert!(accepted(&claims));
        claims["aud"] = json!(["client", "other"]);
        assert!(!accepted(&claims));
        claims["azp"] = json!("client");
        assert!(accepted(&claims));
    }

    #[test]
    fn decodes_only_compact_jws_payloads() {
        let payload = crate::crypto::b64url(br#"{"sub":"1"}"#);
        assert_eq!(
            decode_claims(&format!("e30.{payload}.sig")).unwrap()["sub"],
            "1"
        );
        assert!(decode_claims(&payload).is_err());
        assert!(decode_claims("a.b!.c").is_err());
        let array = crate::crypto::b64url(b"[1]");
        assert!(decode_claims(&format!("e30.{array}.")).is_err());
    }
}
