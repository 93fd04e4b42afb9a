//! The checks of an ID token's claims (OpenID Connect Core 3.1.3.7) that need no key: who issued
//! it (`iss`), for whom (`aud`, `azp`), until when (`exp`, and for signed tokens `iat` and `nbf`),
//! for which attempt (`nonce`) and about whom (`sub`). Google's token is checked with
//! `as_expected`; a discovered provider's, once its signature passed, with `as_expected` and
//! `timely`.

use serde_json::Value;

use crate::crypto::constant_time_eq;

/// Clock difference allowed between a provider and us where the specification allows one
/// (`iat`, `nbf`). `exp` gets none: the token has just been minted, and a provider's lifetime is
/// minutes at the least.
const LEEWAY_SECS: f64 = 300.0;

/// What the token must say.
pub struct Expected<'a> {
    /// Google accepts two spellings; a discovered provider exactly one, its issuer.
    pub issuers: &'a [&'a str],
    pub client_id: &'a str,
    pub nonce: &'a str,
    pub now: u64,
}

/// Steps 2, 3, 4, 5, 9 and 11, and a usable `sub`. The error is for the log.
pub fn as_expected(claims: &Value, expected: &Expected) -> Result<(), String> {
    let iss = claims["iss"].as_str().unwrap_or_default();
    if !expected.issuers.contains(&iss) {
        return Err(format!("wrong iss {:?}", super::printable(iss)));
    }
    if !audience_ok(claims, expected.client_id) {
        return Err("wrong aud or azp".into());
    }
    match claims["exp"].as_f64() {
        Some(exp) if exp > expected.now as f64 => {}
        _ => return Err("id_token expired or without exp".into()),
    }
    let nonce = claims["nonce"].as_str().unwrap_or_default();
    if !constant_time_eq(nonce.as_bytes(), expected.nonce.as_bytes()) {
        return Err("nonce does not match".into());
    }
    match claims["sub"].as_str() {
        Some(sub) if !sub.is_empty() && sub.len() <= 255 => Ok(()),
        _ => Err("no sub".into()),
    }
}

/// `iat` present and not in the future, `nbf` (when present) passed; both within the leeway.
pub fn timely(claims: &Value, now: u64) -> Result<(), String> {
    let latest = now as f64 + LEEWAY_SECS;
    match claims["iat"].as_f64() {
        Some(iat) if iat <= latest => {}
        Some(_) => return Err("id_token issued in the future (iat)".into()),
        None => return Err("id_token without iat".into()),
    }
    match &claims["nbf"] {
        Value::Null => Ok(()),
        nbf if nbf.as_f64().is_some_and(|nbf| nbf <= latest) => Ok(()),
        _ => Err("id_token not valid yet (nbf)".into()),
    }
}

/// `aud` is our client id, or a list holding it; a list with other audiences must name us as the
/// authorized party (`azp`), and an `azp`, when present, must be us.
fn audience_ok(claims: &Value, client_id: &str) -> bool {
    let ours = match &claims["aud"] {
        Value::String(aud) => aud == client_id,
        Value::Array(list) => {
            let ours = list.iter().any(|a| a.as_str() == Some(client_id));
            ours && (list.len() == 1 || claims["azp"].as_str() == Some(client_id))
        }
        _ => false,
    };
    ours && claims["azp"].as_str().is_none_or(|azp| azp == client_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: u64 = 1_700_000_000;

    fn good() -> Value {
        json!({
            "iss": "https://issuer.example", "aud": "client", "exp": NOW + 60,
            "iat": NOW, "nonce": "n1", "sub": "1234",
        })
    }

    fn ok(claims: &Value) -> bool {
        let expected = Expected {
            issuers: &["https://issuer.example"],
            client_id: "client",
            nonce: "n1",
            now: NOW,
        };
        as_expected(claims, &expected).is_ok() && timely(claims, NOW).is_ok()
    }

    #[test]
    fn good_claims_pass_and_each_wrong_one_fails() {
        assert!(ok(&good()));
        for (claim, bad) in [
            ("iss", json!("https://issuer.example/")),
            ("iss", json!("https://evil.example")),
            ("aud", json!("other-client")),
            ("aud", json!(["other", "client"])),
            ("aud", json!(7)),
            ("azp", json!("other-client")),
            ("exp", json!(NOW)),
            ("exp", json!("soon")),
            ("iat", json!(NOW + 301)),
            ("iat", json!("now")),
            ("nbf", json!(NOW + 301)),
            ("nbf", json!("later")),
            ("nonce", json!("n2")),
            ("nonce", json!(1)),
            ("sub", json!("")),
            ("sub", json!("x".repeat(256))),
            ("sub", json!(12)),
        ] {
            let mut claims = good();
            claims[claim] = bad.clone();
            assert!(!ok(&claims), "{claim} = {bad}");
        }
        for claim in ["iss", "aud", "exp", "iat", "nonce", "sub"] {
            let mut claims = good();
            claims.as_object_mut().unwrap().remove(claim);
            assert!(!ok(&claims), "without {claim}");
        }
    }

    #[test]
    fn small_clock_differences_pass() {
        let mut claims = good();
        claims["iat"] = json!(NOW + 299);
        claims["nbf"] = json!(NOW + 299);
        assert!(ok(&claims));
        claims["exp"] = json!(NOW + 1);
        assert!(ok(&claims));
    }

    #[test]
    fn audience_lists_need_azp() {
        let mut claims = good();
        claims["aud"] = json!(["client"]);
        assert!(ok(&claims));
        claims["aud"] = json!(["client", "other"]);
        assert!(!ok(&claims));
        claims["azp"] = json!("client");
        assert!(ok(&claims));
        claims["aud"] = json!("client");
        assert!(ok(&claims), "azp equal to us beside a single aud");
    }
}
