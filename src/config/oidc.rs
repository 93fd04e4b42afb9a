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
    let required = |suffix: &str| {
        env.get(&var(suffix)).ok_or_else(|| {
            ConfigError(format!(
                "{} is not set: CONSOLED_OIDC_PROVIDERS lists {name}, which needs its issuer, \
                 client id and client secret (docs/OPERATIONS.md, \"Company sign-in\")",
                var(suffix)
            ))
        })
    };
    let issuer = required("ISSUER")?.trim().to_string();
    check_issuer(&var("ISSUER"), &issuer)?;
    let p = OidcConfig {
        name: name.to_string(),
        issuer,
        client_id: required("CLIENT_ID")?.trim().to_string(),
        // Read through `Env::get`, as every secret, so that it may come from a file as they do.
        client_secret: required("CLIENT_SECRET")?.trim().to_string(),
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
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env(pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    const CORP: [(&str, &str); 4] = [
        ("CONSOLED_OIDC_PROVIDERS", "corp"),
        (
            "CONSOLED_OIDC_CORP_ISSUER",
            "https://sso.example.com/realms/corp",
        ),
        ("CONSOLED_OIDC_CORP_CLIENT_ID", "consoled"),
        ("CONSOLED_OIDC_CORP_CLIENT_SECRET", "s3cret"),
    ];

    fn with(extra: &[(&str, &str)]) -> Result<Vec<OidcConfig>, ConfigError> {
        let mut pairs = CORP.to_vec();
        pairs.extend_from_slice(extra);
        read(&env(&pairs))
    }

    #[test]
    fn a_provider_with_defaults() {
        let p = &with(&[]).unwrap()[0];
        assert_eq!(p.name, "corp");
        assert_eq!(p.issuer, "https://sso.example.com/realms/corp");
        assert_eq!(p.scopes, "openid email profile");
        assert_eq!(p.display_name, "corp");
        assert!(p.domains.is_empty() && !p.exclusive && p.required_claim.is_none());
        assert_eq!(p.token_auth, TokenAuth::Basic);
        assert_eq!(p.email_verified_claim, "email_verified");
        assert!(!format!("{p:?}").contains("s3cret"));
        assert!(read(&env(&[])).unwrap().is_empty());
    }

    #[test]
    fn every_setting_is_read() {
        let p = &with(&[
            ("CONSOLED_OIDC_CORP_SCOPES", "openid email groups"),
            ("CONSOLED_OIDC_CORP_DISPLAY_NAME", "Corp SSO"),
            ("CONSOLED_OIDC_CORP_DOMAINS", "Example.com, @example.org"),
            ("CONSOLED_OIDC_CORP_REQUIRED_CLAIM", "groups=console users"),
            ("CONSOLED_OIDC_CORP_EXCLUSIVE", "true"),
            ("CONSOLED_OIDC_CORP_TOKEN_AUTH", "client_secret_post"),
            ("CONSOLED_OIDC_CORP_EMAIL_VERIFIED_CLAIM", "xms_edov"),
        ])
        .unwrap()[0];
        assert_eq!(p.scopes, "openid email groups");
        assert_eq!(p.display_name, "Corp SSO");
        assert_eq!(p.domains, ["example.com", "example.org"]);
        assert!(p.has_domain("a@EXAMPLE.com") && !p.has_domain("a@sub.example.com"));
        let claim = p.required_claim.as_ref().unwrap();
        assert_eq!(
            (claim.name.as_str(), claim.value.as_str()),
            ("groups", "console users")
        );
        assert!(p.exclusive);
        assert_eq!(p.token_auth, TokenAuth::Post);
        assert_eq!(p.email_verified_claim, "xms_edov");
    }

    #[test]
    fn issuers_are_https_or_loopback_http() {
        for fine in [
            "http://127.0.0.1:9000",
            "http://127.8.0.1/realms/x",
            "http://[::1]:9000/",
            "http://localhost:8080/tenant/v2.0",
            "https://login.microsoftonline.com/0b1c/v2.0",
            "https://tenant.auth0.com/",
        ] {
            let issuer = ("CONSOLED_OIDC_CORP_ISSUER", fine);
            assert!(with(&[issuer]).is_ok(), "{fine}");
        }
        for bad in [
            "http://sso.example.com",
            "http://10.0.0.1",
            "http://127.0.0.1.example.com",
            "ftp://x",
            "https://",
            "https://sso.example.com/?realm=x",
            "https://user@sso.example.com",
            "sso.example.com",
        ] {
            let err = with(&[("CONSOLED_OIDC_CORP_ISSUER", bad)]).unwrap_err();
            assert!(err.0.contains("CONSOLED_OIDC_CORP_ISSUER"), "{bad}: {err}");
        }
    }

    #[test]
    fn mistakes_are_named() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("CONSOLED_OIDC_PROVIDERS", "corp,google")], "built in"),
            (&[("CONSOLED_OIDC_PROVIDERS", "corp,corp")], "twice"),
            (&[("CONSOLED_OIDC_PROVIDERS", "Corp")], "lower-case"),
            (
                &[("CONSOLED_OIDC_PROVIDERS", "corp,other")],
                "CONSOLED_OIDC_OTHER_ISSUER",
            ),
            (&[("CONSOLED_OIDC_CORP_SCOPES", "email")], "openid"),
            (&[("CONSOLED_OIDC_CORP_DOMAINS", "localhost")], "domains"),
            (
                &[("CONSOLED_OIDC_CORP_REQUIRED_CLAIM", "groups")],
                "CLAIM=VALUE",
            ),
            (
                &[("CONSOLED_OIDC_CORP_TOKEN_AUTH", "private_key_jwt")],
                "client_secret_basic",
            ),
            (
                &[("CONSOLED_OIDC_CORP_EXCLUSIVE", "true")],
                "CONSOLED_OIDC_CORP_DOMAINS",
            ),
        ];
        for (extra, expected) in cases {
            let err = with(extra).unwrap_err();
            assert!(err.0.contains(expected), "{extra:?}: {err}");
        }
    }

    #[test]
    fn a_domain_has_at_most_one_exclusive_provider() {
        let two = [
            ("CONSOLED_OIDC_PROVIDERS", "corp,b-2"),
            ("CONSOLED_OIDC_CORP_DOMAINS", "example.com"),
            ("CONSOLED_OIDC_CORP_EXCLUSIVE", "true"),
            ("CONSOLED_OIDC_B_2_ISSUER", "https://b.example.net"),
            ("CONSOLED_OIDC_B_2_CLIENT_ID", "x"),
            ("CONSOLED_OIDC_B_2_CLIENT_SECRET", "y"),
            ("CONSOLED_OIDC_B_2_DOMAINS", "example.com"),
        ];
        assert_eq!(with(&two).unwrap().len(), 2, "one exclusive, one not");
        let both = [two.as_slice(), &[("CONSOLED_OIDC_B_2_EXCLUSIVE", "yes")]].concat();
        let err = with(&both).unwrap_err();
        assert!(err.0.contains("only one provider"), "{err}");
    }

    #[test]
    fn provider_variables_are_checked_against_the_list() {
        let vars: HashMap<String, String> = [("CONSOLED_OIDC_PROVIDERS", "corp,my-idp")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            check_variable("CONSOLED_OIDC_CORP_ISSUER", &vars),
            Some(Ok(()))
        );
        let secret = check_variable("CONSOLED_OIDC_MY_IDP_CLIENT_SECRET", &vars);
        assert_eq!(secret, Some(Ok(())));
        let other = check_variable("CONSOLED_OIDC_OTHER_ISSUER", &vars).unwrap();
        assert!(other.unwrap_err().contains("named other"));
        // Not a provider's setting: left to the general check (a misspelling, named as such).
        assert_eq!(check_variable("CONSOLED_OIDC_CORP_ISUER", &vars), None);
        assert_eq!(check_variable("CONSOLED_WORKERS", &vars), None);
    }
}
