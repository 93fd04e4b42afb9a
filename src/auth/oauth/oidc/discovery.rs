//! A provider's discovery document (OpenID Connect Discovery 1.0), fetched from
//! `{issuer}/.well-known/openid-configuration` and checked before anything in it is used: the
//! issuer it states must be the configured one exactly (section 4.3: otherwise a document could
//! speak for another issuer), and every endpoint must be one we may call (`https://`, or
//! `http://` on a loopback address).

use std::time::Duration;

use serde_json::Value;

use crate::auth::oauth::client;
use crate::config::oidc::{endpoint_allowed, TokenAuth};
use crate::config::{OidcConfig, ProviderConfig};

/// What sign-in needs from the document.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The client and its endpoints: authorization, token, userinfo (empty when the provider has
    /// none).
    pub endpoints: ProviderConfig,
    pub jwks_uri: String,
    /// RFC 9207: the provider adds `iss` to its authorization responses, and a response without
    /// it, or with another, is refused.
    pub iss_parameter: bool,
}

/// `{issuer}/.well-known/openid-configuration`, a terminating `/` of the issuer removed first
/// (Discovery 1.0, section 4).
pub fn url(issuer: &str) -> String {
    format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    )
}

/// Fetches and checks the document.
pub fn fetch(config: &OidcConfig, timeout: Duration) -> Result<Discovered, String> {
    let doc = client::fetch_json(&url(&config.issuer), timeout)?;
    parse(&doc, config)
}

/// The document's meaning for `config`, or what is wrong with it.
pub fn parse(doc: &Value, config: &OidcConfig) -> Result<Discovered, String> {
    let issuer = doc["issuer"].as_str().unwrap_or_default();
    if issuer != config.issuer {
        return Err(format!(
            "the discovery document names the issuer {issuer:?}, not {:?}: set {} to exactly \
             the issuer the provider states",
            config.issuer,
            crate::config::oidc::variable(&config.name, "ISSUER")
        ));
    }
    let endpoint = |name: &str, required: bool| -> Result<String, String> {
        match doc[name].as_str() {
            Some(url) if endpoint_allowed(url) => Ok(url.to_string()),
            Some(url) => Err(format!(
                "{name} {url:?} is neither https:// nor http:// on a loopback address"
            )),
            None if required => Err(format!("the discovery document has no {name}")),
            None => Ok(String::new()),
        }
    };
    let discovered = Discovered {
        endpoints: ProviderConfig {
            client_id: config.client_id.clone(),
            client_secret: config.client_secret.clone(),
            auth_url: endpoint("authorization_endpoint", true)?,
            token_url: endpoint("token_endpoint", true)?,
            api_url: endpoint("userinfo_endpoint", false)?,
        },
        jwks_uri: endpoint("jwks_uri", true)?,
        iss_parameter: doc["authorization_response_iss_parameter_supported"] == true,
    };
    if let Some(warning) = auth_method_warning(doc, config) {
        log::warn!("oidc {}: {warning}", config.name);
    }
    Ok(discovered)
}

/// The document lists the token endpoint's authentication methods, and ours is not among them:
/// the exchange will likely fail, and the setting to change is worth naming now.
fn auth_method_warning(doc: &Value, config: &OidcConfig) -> Option<String> {
    let methods = doc["token_endpoint_auth_methods_supported"].as_array()?;
    let ours = match config.token_auth {
        TokenAuth::Basic => "client_secret_basic",
        TokenAuth::Post => "client_secret_post",
    };
    if methods.iter().any(|m| m == ours) {
        return None;
    }
    Some(format!(
        "the provider does not list {ours} among its token endpoint authentication methods \
         ({}); set {} to one it lists",
        Value::Array(methods.clone()),
        crate::config::oidc::variable(&config.name, "TOKEN_AUTH")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(issuer: &str) -> OidcConfig {
        OidcConfig {
            name: "corp".into(),
            issuer: issuer.into(),
            client_id: "consoled".into(),
            client_secret: "s".into(),
            scopes: "openid email".into(),
            display_name: "Corp".into(),
            domains: vec![],
            required_claim: None,
            exclusive: false,
            token_auth: TokenAuth::Basic,
            email_verified_claim: "email_verified".into(),
        }
    }

    fn doc(issuer: &str) -> Value {
        json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/auth"),
            "token_endpoint": format!("{issuer}/token"),
            "userinfo_endpoint": format!("{issuer}/me"),
            "jwks_uri": format!("{issuer}/jwks"),
            "authorization_response_iss_parameter_supported": true,
        })
    }

    #[test]
    fn discovery_urls_follow_section_4() {
        assert_eq!(
            url("https://sso.example.com/realms/corp"),
            "https://sso.example.com/realms/corp/.well-known/openid-configuration"
        );
        assert_eq!(
            url("https://tenant.auth0.com/"),
            "https://tenant.auth0.com/.well-known/openid-configuration"
        );
    }

    #[test]
    fn a_good_document_gives_the_endpoints() {
        let issuer = "https://sso.example.com/realms/corp";
        let d = parse(&doc(issuer), &config(issuer)).unwrap();
        assert_eq!(d.endpoints.auth_url, format!("{issuer}/auth"));
        assert_eq!(d.endpoints.token_url, format!("{issuer}/token"));
        assert_eq!(d.endpoints.api_url, format!("{issuer}/me"));
        assert_eq!(d.endpoints.client_id, "consoled");
        assert_eq!(d.jwks_uri, format!("{issuer}/jwks"));
        assert!(d.iss_parameter);
        let mut without = doc(issuer);
        let map = without.as_object_mut().unwrap();
        map.remove("userinfo_endpoint");
        map.remove("authorization_response_iss_parameter_supported");
        let d = parse(&without, &config(issuer)).unwrap();
        assert!(d.endpoints.api_url.is_empty() && !d.iss_parameter);
    }

    #[test]
    fn the_issuer_must_be_exactly_the_configured_one() {
        let issuer = "https://sso.example.com/realms/corp";
        for other in [
            "https://sso.example.com/realms/corp/",
            "https://sso.example.com/realms/other",
            "",
        ] {
            let mut d = doc(issuer);
            d["issuer"] = json!(other);
            let err = parse(&d, &config(issuer)).unwrap_err();
            assert!(err.contains("CONSOLED_OIDC_CORP_ISSUER"), "{err}");
        }
    }

    #[test]
    fn endpoints_must_be_ones_we_may_call() {
        let issuer = "https://sso.example.com";
        for (field, value) in [
            ("token_endpoint", json!("http://sso.example.com/token")),
            ("jwks_uri", json!("file:///etc/passwd")),
            ("authorization_endpoint", json!(null)),
            ("jwks_uri", json!(null)),
            ("token_endpoint", json!(7)),
        ] {
            let mut d = doc(issuer);
            d[field] = value.clone();
            assert!(parse(&d, &config(issuer)).is_err(), "{field} = {value}");
        }
        let loopback = "http://127.0.0.1:9000";
        assert!(parse(&doc(loopback), &config(loopback)).is_ok());
    }

    #[test]
    fn an_unlisted_token_auth_method_is_named() {
        let issuer = "https://sso.example.com";
        let mut d = doc(issuer);
        d["token_endpoint_auth_methods_supported"] = json!(["client_secret_post"]);
        let warning = auth_method_warning(&d, &config(issuer)).unwrap();
        assert!(
            warning.contains("CONSOLED_OIDC_CORP_TOKEN_AUTH"),
            "{warning}"
        );
        d["token_endpoint_auth_methods_supported"] = json!(["client_secret_basic"]);
        assert_eq!(auth_method_warning(&d, &config(issuer)), None);
    }
}
