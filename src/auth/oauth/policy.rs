//! Which way in an address may take. An OpenID Connect provider marked
//! `CONSOLED_OIDC_N_EXCLUSIVE=true` is the only sign-in for the domains it lists
//! (`CONSOLED_OIDC_N_DOMAINS`): a password sign-in or sign-up, and a sign-in through any other
//! provider, is refused for those addresses, so that the company's provider decides alone who may
//! enter (an employee who leaves is locked out there).

use serde_json::{json, Value};

use super::{Declined, Provider};
use crate::app::App;
use crate::auth;
use crate::config::{Config, OidcConfig};
use crate::error::{ApiError, ApiResult, Code};
use crate::http::json::Email;
use crate::http::Request;

/// The provider that is the only sign-in for this address's domain, if any.
pub fn exclusive_provider<'a>(config: &'a Config, email: &str) -> Option<&'a OidcConfig> {
    config
        .oidc
        .iter()
        .find(|p| p.exclusive && p.has_domain(email))
}

/// For password sign-in and sign-up: 403 `sso_required`, naming the provider, when the address
/// may sign in only through one. Looks at the address alone, so it tells nothing about whether an
/// account exists.
pub fn password_allowed(config: &Config, email: &Email) -> ApiResult<()> {
    let Some(provider) = exclusive_provider(config, email.as_str()) else {
        return Ok(());
    };
    let domain = email.as_str().rsplit_once('@').map_or("", |(_, d)| d);
    Err(ApiError::new(Code::SsoRequired)
        .message(format!(
            "Sign in with {}: addresses at {domain} sign in only through it, not with a \
             password.",
            provider.display_name
        ))
        .with_details(json!({
            "provider": provider.name,
            "display_name": provider.display_name,
            "start": format!("/auth/oauth/{}/start", provider.name),
        })))
}

/// `password_allowed` for `POST /auth/login`, with the refusal logged as a failed sign-in.
pub fn password_signin_allowed(app: &App, req: &Request, email: &Email) -> ApiResult<()> {
    password_allowed(&app.config, email).inspect_err(|e| {
        let provider = e
            .more
            .details
            .as_ref()
            .map_or(Value::Null, |d| d["provider"].clone());
        let fields = [
            ("reason", "sso_required".into()),
            ("provider", provider.as_str().unwrap_or_default().into()),
        ];
        auth::audit(app, req, auth::Event::SigninFailed, None, &fields);
    })
}

/// For a sign-in through `provider`: refused as `sso_required` when `email` belongs to another
/// provider's exclusive domains.
pub fn provider_allowed(config: &Config, provider: &Provider, email: &str) -> Result<(), Declined> {
    match exclusive_provider(config, email) {
        Some(owner) if owner.name != provider.name() => Err(Declined::sso_required(format!(
            "the address signs in only through {}",
            owner.name
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(exclusive: bool) -> Config {
        let vars: HashMap<String, String> = [
            ("DATABASE_URL", "postgres://a@b/c"),
            ("CONSOLED_OIDC_PROVIDERS", "corp"),
            ("CONSOLED_OIDC_CORP_ISSUER", "https://sso.example.com"),
            ("CONSOLED_OIDC_CORP_CLIENT_ID", "consoled"),
            ("CONSOLED_OIDC_CORP_CLIENT_SECRET", "s"),
            ("CONSOLED_OIDC_CORP_DISPLAY_NAME", "Corp SSO"),
            ("CONSOLED_OIDC_CORP_DOMAINS", "example.com"),
            (
                "CONSOLED_OIDC_CORP_EXCLUSIVE",
                if exclusive { "true" } else { "false" },
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Config::from_vars(vars).unwrap()
    }

    #[test]
    fn passwords_are_refused_only_for_exclusive_domains() {
        let c = config(true);
        let e = password_allowed(&c, &Email::parse("Ada@Example.com").unwrap()).unwrap_err();
        assert_eq!((e.code, e.code.status()), (Code::SsoRequired, 403));
        assert!(e.more.message.contains("Corp SSO"), "{}", e.more.message);
        assert_eq!(e.more.details.unwrap()["provider"], "corp");
        assert!(password_allowed(&c, &Email::parse("ada@example.org").unwrap()).is_ok());
        let open = config(false);
        assert!(password_allowed(&open, &Email::parse("ada@example.com").unwrap()).is_ok());
    }
}
