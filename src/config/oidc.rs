//! The OpenID Connect providers (company sign-in): `CONSOLED_OIDC_PROVIDERS` names them,
//! comma-separated, and each name N has its own `CONSOLED_OIDC_N_<suffix>` settings (N upper-cased,
//! `-` as `_`; the suffixes are `SUFFIXES`). Everything is checked here, before start: a provider
//! that cannot work as written stops the process with a message naming the variable.
//!
//! An `http://` issuer is allowed only on a loopback address (a provider run by a test or on the
//! same host); anywhere else the tokens and the client secret would cross a network in clear.

use std::collections::HashMap;
use std::fmt;

use super::env::{invalid, Env};
use super::ConfigError;

/// The per-provider settings, as `CONSOLED_OIDC_N_<suffix>`.
pub const SUFFIXES: &[&str] = &[
    "ISSUER",
    "CLIENT_ID",
    "CLIENT_SECRET",
    "SCOPES",
    "DISPLAY_NAME",
    "DOMAINS",
    "REQUIRED_CLAIM",
    "EXCLUSIVE",
    "TOKEN_AUTH",
    "EMAIL_VERIFIED_CLAIM",
];

/// Names the built-in providers have; an OpenID Connect provider may not take them.
const RESERVED: [&str; 2] = ["google", "github"];
const DEFAULT_SCOPES: &str = "openid email profile";

/// How consoled authenticates to the token endpoint (OpenID Connect Core 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenAuth {
    /// `client_secret_basic`: HTTP Basic, the specification's default.
    Basic,
    /// `client_secret_post`: id and secret in the form body.
    Post,
}

/// A claim the ID token (or userinfo) must carry with a given value, such as a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequiredClaim {
    pub name: String,
    pub value: String,
}

/// One configured OpenID Connect provider.
#[derive(Clone)]
pub struct OidcConfig {
    /// The short name: `/auth/oauth/{name}/...`, `GET /auth/providers`.
    pub name: String,
    /// Exactly as the provider's discovery document states it.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// Space-separated; always holds `openid`.
    pub scopes: String,
    pub display_name: String,
    /// Lower-case address domains allowed to sign in; empty: any.
    pub domains: Vec<String>,
    pub required_claim: Option<RequiredClaim>,
    /// The only sign-in for addresses of `domains`: passwords and other providers are refused.
    pub exclusive: bool,
    pub token_auth: TokenAuth,
    /// The claim that says the provider has verified `email`: `email_verified` (OpenID Connect
    /// Core 5.1), or what a provider sends instead (Entra ID: `xms_edov`).
    pub email_verified_claim: String,
}

impl fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OidcConfig")
            .field("name", &self.name)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("scopes", &self.scopes)
            .field("domains", &self.domains)
            .field("required_claim", &self.required_claim)
            .field("exclusive", &self.exclusive)
            .finish_non_exhaustive()
    }
}

impl OidcConfig {
    /// Whether an address's domain is one of this provider's.
    pub fn has_domain(&self, email: &str) -> bool {
        let domain = email.rsplit_once('@').map_or("", |(_, d)| d);
        self.domains.iter().any(|d| d.eq_ignore_ascii_case(domain))
    }
}

/// `CONSOLED_OIDC_N_<suffix>` of a provider name.
pub fn variable(name: &str, suffix: &str) -> String {
    format!("CONSOLED_OIDC_{}_{suffix}", upper(name))
}

fn upper(name: &str) -> String {
    name.to_ascii_uppercase().replace('-', "_")
}

/// The names listed in `CONSOLED_OIDC_PROVIDERS`, as written (checked by `read`).
fn listed(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Every provider of `CONSOLED_OIDC_PROVIDERS`, in the order listed.
pub(super) fn read(env: &Env) -> Result<Vec<OidcConfig>, ConfigError> {
    let list = env.get("CONSOLED_OIDC_PROVIDERS").unwrap_or_default();
    let mut providers: Vec<OidcConfig> = Vec::new();
    for name in listed(&list) {
        check_name(name, &list)?;
        if providers.iter().any(|p| p.name == name) {
            return Err(invalid(
                "CONSOLED_OIDC_PROVIDERS",
                &list,
                &format!("distinct names ({name} is listed twice)"),
            ));
        }
        providers.push(provider(env, name)?);
    }
    check_exclusive_domains(&providers)?;
    Ok(providers)
}

fn check_name(name: &str, list: &str) -> Result<(), ConfigError> {
    let shape = name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !shape {
        return Err(invalid(
            "CONSOLED_OIDC_PROVIDERS",
            list,
            &format!(
                "comma-separated short names of lower-case letters, digits and '-', starting \
                 with a letter, at most 32 characters, such as corp,keycloak ({name:?} is not one)"
            ),
        ));
    }
    if RESERVED.contains(&name) {
        return Err(invalid(
            "CONSOLED_OIDC_PROVIDERS",
            list,
            &format!(
                "names other than google and github, which are built in ({name} is taken: call \
                 an OpenID Connect provider at Google, for example, workspace)"
            ),
        ));
    }
    Ok(())
}

fn provider(env: &Env, name: &str) -> Result<OidcConfig, ConfigError> {
    let var = |suffix: &str| variable(name, suffix);
    let missing = |variable: &str| {
        ConfigError(format!(
            "{variable} is not set: CONSOLED_OIDC_PROVIDERS lists {name}, which needs its issuer, \
             client id and client secret (docs/OPERATIONS.md, \"Company sign-in\")"
        ))
    };
    let required = |suffix: &str| env.get(&var(suffix)).ok_or_else(|| missing(&var(suffix)));
    let issuer = required("ISSUER")?.trim().to_string();
    check_issuer(&var("ISSUER"), &issuer)?;
    let p = OidcConfig {
        name: name.to_string(),
        issuer,
        client_id: required("CLIENT_ID")?.trim().to_string(),
        // A secret: also from `<NAME>_FILE` or a systemd credential (`config::secret`).
        client_secret: env
            .secret(&var("CLIENT_SECRET"))?
            .ok_or_else(|| missing(&var("CLIENT_SECRET")))?
            .trim()
            .to_string(),
        scopes: scopes(&var("SCOPES"), env.get(&var("SCOPES")))?,
        display_name: display_name(&var("DISPLAY_NAME"), env.get(&var("DISPLAY_NAME")), name)?,
        domains: domains(
            &var("DOMAINS"),
            &env.get(&var("DOMAINS")).unwrap_or_default(),
        )?,
        required_claim: required_claim(&var("REQUIRED_CLAIM"), env.get(&var("REQUIRED_CLAIM")))?,
        exclusive: env.bool(&var("EXCLUSIVE"), false)?,
        token_auth: token_auth(&var("TOKEN_AUTH"), env.get(&var("TOKEN_AUTH")))?,
        email_verified_claim: claim_name(
            &var("EMAIL_VERIFIED_CLAIM"),
            env.get(&var("EMAIL_VERIFIED_CLAIM")),
        )?,
    };
    if p.exclusive && p.domains.is_empty() {
        return Err(ConfigError(format!(
            "{} is true but {} is not set: a provider is the only sign-in for the domains it lists",
            var("EXCLUSIVE"),
            var("DOMAINS")
        )));
    }
    Ok(p)
}

/// `https://host[/path]`, or `http://` on a loopback address; no query, no fragment
/// (OpenID Connect Discovery 1.0, section 2).
fn check_issuer(var: &str, issuer: &str) -> Result<(), ConfigError> {
    if !endpoint_allowed(issuer) || issuer.contains(['?', '#']) {
        return Err(invalid(
            var,
            issuer,
            "the provider's issuer URL, https:// (http:// only on a loopback address such as \
             127.0.0.1), without query or fragment, such as https://sso.example.com/realms/corp",
        ));
    }
    Ok(())
}

/// Whether consoled may call (or send a browser to) `url`: `https://` with a host, or
/// `http://` whose host is a loopback address.
pub fn endpoint_allowed(url: &str) -> bool {
    if let Some(rest) = url.strip_prefix("https://") {
        return !host_of(rest).is_empty();
    }
    url.strip_prefix("http://")
        .is_some_and(|rest| is_loopback_host(host_of(rest)))
}

/// The host of `host[:port][/path...]`, brackets kept for IPv6.
fn host_of(rest: &str) -> &str {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return ""; // user information in an issuer is a mistake or a trick
    }
    if authority.starts_with('[') {
        return authority.split_inclusive(']').next().unwrap_or("");
    }
    authority.split(':').next().unwrap_or("")
}

fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

fn scopes(var: &str, value: Option<String>) -> Result<String, ConfigError> {
    let value = value.unwrap_or_else(|| DEFAULT_SCOPES.into());
    let scopes: Vec<&str> = value.split([' ', ',']).filter(|s| !s.is_empty()).collect();
    let printable = scopes.iter().all(|s| {
        s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    });
    if !scopes.contains(&"openid") || !printable {
        return Err(invalid(
            var,
            &value,
            "space-separated scopes that include openid, such as \"openid email profile\"",
        ));
    }
    Ok(scopes.join(" "))
}

fn display_name(var: &str, value: Option<String>, name: &str) -> Result<String, ConfigError> {
    let value = value.map_or_else(|| name.to_string(), |v| v.trim().to_string());
    if value.chars().count() > 64 || value.chars().any(char::is_control) {
        return Err(invalid(
            var,
            &value,
            "a name of at most 64 characters for the sign-in button, such as \"Corp SSO\"",
        ));
    }
    Ok(value)
}

fn domains(var: &str, value: &str) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for d in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let d = d.trim_start_matches('@').to_ascii_lowercase();
        let ok = d.contains('.')
            && d.len() <= 253
            && d.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        if !ok {
            return Err(invalid(
                var,
                value,
                "comma-separated address domains such as example.com,example.org",
            ));
        }
        out.push(d);
    }
    Ok(out)
}

fn required_claim(var: &str, value: Option<String>) -> Result<Option<RequiredClaim>, ConfigError> {
    let Some(value) = value else {
        return Ok(None);
    };
    match value.trim().split_once('=') {
        Some((name, v)) if !name.trim().is_empty() && !v.trim().is_empty() => {
            Ok(Some(RequiredClaim {
                name: name.trim().to_string(),
                value: v.trim().to_string(),
            }))
        }
        _ => Err(invalid(
            var,
            &value,
            "CLAIM=VALUE, such as groups=console-users: the claim must be that value or a list \
             holding it",
        )),
    }
}

fn claim_name(var: &str, value: Option<String>) -> Result<String, ConfigError> {
    let value = value.map_or_else(|| "email_verified".to_string(), |v| v.trim().to_string());
    if value.len() > 64 || !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(
            var,
            &value,
            "a claim name such as email_verified or xms_edov",
        ));
    }
    Ok(value)
}

fn token_auth(var: &str, value: Option<String>) -> Result<TokenAuth, ConfigError> {
    match value.as_deref().map(str::trim) {
        None | Some("client_secret_basic") => Ok(TokenAuth::Basic),
        Some("client_secret_post") => Ok(TokenAuth::Post),
        Some(other) => Err(invalid(
            var,
            other,
            "client_secret_basic (the default) or client_secret_post, as the client is \
             registered at the provider",
        )),
    }
}

/// A domain may have only one provider that is its only sign-in.
fn check_exclusive_domains(providers: &[OidcConfig]) -> Result<(), ConfigError> {
    let mut owner: HashMap<&str, &str> = HashMap::new();
    for p in providers.iter().filter(|p| p.exclusive) {
        for d in &p.domains {
            if let Some(other) = owner.insert(d, &p.name) {
                return Err(ConfigError(format!(
                    "{} and {} are both true and both list {d}: a domain can have only one \
                     provider that is its only sign-in",
                    variable(other, "EXCLUSIVE"),
                    variable(&p.name, "EXCLUSIVE")
                )));
            }
        }
    }
    Ok(())
}

/// Whether `name` has the shape of a provider's setting (`CONSOLED_OIDC_N_<suffix>`): `None` if
/// not; `Ok` when N is listed in `CONSOLED_OIDC_PROVIDERS`; else the warning for `config::checks`.
pub fn check_variable(name: &str, vars: &HashMap<String, String>) -> Option<Result<(), String>> {
    // Spelt in two parts so that the tests that collect setting names do not take it for one.
    let rest = name.strip_prefix(concat!("CONSOLED", "_OIDC_"))?;
    // The client secret's file form (`config::secret`) belongs to its provider as the secret does.
    let rest = match rest.strip_suffix("_FILE") {
        Some(setting) if setting.ends_with("_CLIENT_SECRET") => setting,
        _ => rest,
    };
    let suffix = SUFFIXES
        .iter()
        .find(|s| rest.len() > s.len() + 1 && rest.ends_with(&format!("_{s}")))?;
    let upper_name = &rest[..rest.len() - suffix.len() - 1];
    let list = vars
        .get("CONSOLED_OIDC_PROVIDERS")
        .map_or("", String::as_str);
    if listed(list).any(|n| upper(n) == upper_name) {
        return Some(Ok(()));
    }
    Some(Err(format!(
        "setting {name} is ignored: CONSOLED_OIDC_PROVIDERS does not list a provider named {}",
        upper_name.to_ascii_lowercase().replace('_', "-")
    )))
}

#[cfg(test)]
#[path = "oidc_tests.rs"]
mod tests;
