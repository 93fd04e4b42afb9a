//! A discovered provider's callback, after the state checks: the `iss` response parameter
//! (RFC 9207), the code exchange, the ID token (signature, then OpenID Connect Core 3.1.3.7's
//! claims), userinfo for what the token lacks, and the provider's own admission rules (required
//! claim, address domains).

use serde_json::{Map, Value};

use super::{jws, Discovered, OidcProvider};
use crate::auth::oauth::client::Exchange;
use crate::auth::oauth::{claims, google, printable, Declined, Identity};
use crate::config::OidcConfig;
use crate::crypto::unix_now;
use crate::http::json::Email;
use crate::http::Request;

/// RFC 9207: a provider that announces the `iss` response parameter must send it, and it must be
/// this provider's issuer: else the response came from another provider (a mix-up) and its code
/// must not be sent to this one's token endpoint. A provider that does not announce it may still
/// send it; it is checked then too.
pub fn check_response_issuer(
    req: &Request,
    provider: &OidcProvider,
    discovered: &Discovered,
) -> Result<(), Declined> {
    match req.query_param("iss") {
        Some(iss) if iss == provider.config.issuer => Ok(()),
        Some(iss) => Err(Declined::failed(format!(
            "the authorization response names the issuer {:?}, not {} (mix-up)",
            printable(&iss),
            provider.config.issuer
        ))),
        None if discovered.iss_parameter => Err(Declined::failed(
            "the authorization response lacks the iss parameter the provider announces",
        )),
        None => Ok(()),
    }
}

/// The identity the provider vouches for, after every check; the claims it was read from.
pub fn identity(
    provider: &OidcProvider,
    discovered: &Discovered,
    exchange: &Exchange,
    nonce: &str,
) -> Result<Identity, Declined> {
    let config = &provider.config;
    let tokens = exchange.tokens()?;
    let id_token = tokens
        .get("id_token")
        .and_then(Value::as_str)
        .ok_or_else(|| Declined::failed("the token answer has no id_token"))?;
    let token = jws::parse(id_token).map_err(Declined::failed)?;
    let claims = provider
        .keys
        .verify(token, &discovered.jwks_uri, exchange.timeout)
        .map_err(Declined::failed)?;
    let expected = claims::Expected {
        issuers: &[config.issuer.as_str()],
        client_id: &config.client_id,
        nonce,
        now: unix_now(),
    };
    claims::as_expected(&claims, &expected).map_err(Declined::failed)?;
    claims::timely(&claims, expected.now).map_err(Declined::failed)?;
    let claims = with_userinfo(config, exchange, &tokens, claims)?;
    check_required_claim(config, &claims)?;
    let identity = read_identity(&claims, &config.email_verified_claim);
    check_domain(config, &identity)?;
    Ok(identity)
}

/// The token's claims, completed from the userinfo endpoint when they lack the address, its
/// verification or the required claim (many providers put only `sub` into an ID token issued with a code). The
/// token's own claims win; userinfo must describe the same `sub` (OpenID Connect Core 5.3.2).
fn with_userinfo(
    config: &OidcConfig,
    exchange: &Exchange,
    tokens: &Map<String, Value>,
    mut claims: Value,
) -> Result<Value, Declined> {
    let lacks_required = config
        .required_claim
        .as_ref()
        .is_some_and(|r| claims.get(&r.name).is_none());
    let lacks_verification = claims.get(&config.email_verified_claim).is_none();
    let userinfo = &exchange.config.api_url;
    let complete = claims.get("email").is_some() && !lacks_verification && !lacks_required;
    if complete || userinfo.is_empty() {
        return Ok(claims);
    }
    let access_token = tokens["access_token"].as_str().unwrap_or_default();
    let info = exchange.get(userinfo, access_token, "application/json")?;
    if info["sub"] != claims["sub"] {
        return Err(Declined::failed("userinfo describes another subject"));
    }
    if let (Value::Object(from), Value::Object(into)) = (info, &mut claims) {
        for (name, value) in from {
            into.entry(name).or_insert(value);
        }
    }
    Ok(claims)
}

/// The identity of the claims; the address counts as verified when `verified_claim` is true.
fn read_identity(claims: &Value, verified_claim: &str) -> Identity {
    let email = claims["email"].as_str().and_then(|e| Email::parse(e).ok());
    let name = ["name", "preferred_username"]
        .into_iter()
        .filter_map(|c| claims[c].as_str())
        .find(|n| !n.trim().is_empty())
        .unwrap_or_default();
    Identity {
        subject: claims["sub"].as_str().unwrap_or_default().to_string(),
        email,
        email_verified: google::is_true(&claims[verified_claim]),
        name: name.to_string(),
    }
}

/// `CONSOLED_OIDC_N_REQUIRED_CLAIM`: the claim equals the value, or is a list holding it.
fn check_required_claim(config: &OidcConfig, claims: &Value) -> Result<(), Declined> {
    let Some(required) = &config.required_claim else {
        return Ok(());
    };
    let value = &claims[&required.name];
    let held = match value {
        Value::String(s) => *s == required.value,
        Value::Array(list) => list.iter().any(|v| v.as_str() == Some(&required.value)),
        Value::Bool(b) => b.to_string() == required.value,
        Value::Number(n) => n.to_string() == required.value,
        _ => false,
    };
    if held {
        return Ok(());
    }
    Err(Declined::not_allowed(format!(
        "claim {} does not hold the required value",
        required.name
    )))
}

/// `CONSOLED_OIDC_N_DOMAINS`: a verified address must be of one of them. An unverified or
/// missing address is left to the account rules, which refuse it as `email_unverified`.
fn check_domain(config: &OidcConfig, identity: &Identity) -> Result<(), Declined> {
    match &identity.email {
        Some(email) if identity.email_verified && !config.domains.is_empty() => {
            if config.has_domain(email.as_str()) {
                Ok(())
            } else {
                Err(Declined::not_allowed(format!(
                    "the address's domain is not one of {}",
                    config.domains.join(", ")
                )))
            }
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::oidc::{RequiredClaim, TokenAuth};
    use serde_json::json;

    fn config(domains: &[&str], required: Option<(&str, &str)>) -> OidcConfig {
        OidcConfig {
            name: "corp".into(),
            issuer: "https://sso.example.com".into(),
            client_id: "consoled".into(),
            client_secret: "s".into(),
            scopes: "openid".into(),
            display_name: "Corp".into(),
            domains: domains.iter().map(|d| d.to_string()).collect(),
            required_claim: required.map(|(name, value)| RequiredClaim {
                name: name.into(),
                value: value.into(),
            }),
            exclusive: false,
            token_auth: TokenAuth::Basic,
            email_verified_claim: "email_verified".into(),
        }
    }

    #[test]
    fn the_required_claim_is_a_value_or_a_list_holding_it() {
        let c = config(&[], Some(("groups", "console")));
        for held in [json!("console"), json!(["a", "console"])] {
            assert!(check_required_claim(&c, &json!({"groups": held})).is_ok());
        }
        for missing in [
            json!({}),
            json!({"groups": ["consoles"]}),
            json!({"groups": "x"}),
        ] {
            let refused = check_required_claim(&c, &missing).unwrap_err();
            assert_eq!(refused.code(), "not_allowed");
        }
        let flag = config(&[], Some(("console_user", "true")));
        assert!(check_required_claim(&flag, &json!({"console_user": true})).is_ok());
        assert!(check_required_claim(&flag, &json!({"console_user": "false"})).is_err());
        assert!(check_required_claim(&config(&[], None), &json!({})).is_ok());
    }

    #[test]
    fn only_verified_addresses_of_the_domains_pass() {
        let c = config(&["example.com"], None);
        let id = |email: &str, verified: bool| {
            let claims = json!({"sub": "1", "email": email, "email_verified": verified});
            read_identity(&claims, "email_verified")
        };
        assert!(check_domain(&c, &id("Ada@Example.com", true)).is_ok());
        let other = check_domain(&c, &id("ada@example.org", true)).unwrap_err();
        assert_eq!(other.code(), "not_allowed");
        assert!(check_domain(&c, &id("ada@sub.example.com", true)).is_err());
        // Left to the account rules (email_unverified).
        assert!(check_domain(&c, &id("ada@example.org", false)).is_ok());
        assert!(check_domain(&config(&[], None), &id("ada@example.org", true)).is_ok());
    }

    #[test]
    fn identities_read_the_standard_claims() {
        let claims = json!({
            "sub": "s-1", "email": " Ada@Example.COM ", "email_verified": "true",
            "preferred_username": "ada",
        });
        let id = read_identity(&claims, "email_verified");
        assert_eq!(id.subject, "s-1");
        assert_eq!(id.email.unwrap().as_str(), "ada@example.com");
        assert!(id.email_verified);
        assert_eq!(id.name, "ada");
        assert!(!read_identity(&claims, "xms_edov").email_verified);
        let entra = json!({"sub": "s-3", "email": "a@example.com", "xms_edov": true});
        assert!(read_identity(&entra, "xms_edov").email_verified);
        assert!(!read_identity(&entra, "email_verified").email_verified);
        let bare = read_identity(
            &json!({"sub": "s-2", "email": "not an address"}),
            "email_verified",
        );
        assert!(bare.email.is_none() && !bare.email_verified && bare.name.is_empty());
    }
}
