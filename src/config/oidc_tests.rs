//! Unit tests of the OpenID Connect provider settings.
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
    // The secret's file form is the provider's too; no other setting has one.
    let file = check_variable("CONSOLED_OIDC_MY_IDP_CLIENT_SECRET_FILE", &vars);
    assert_eq!(file, Some(Ok(())));
    assert_eq!(
        check_variable("CONSOLED_OIDC_CORP_ISSUER_FILE", &vars),
        None
    );
    let other = check_variable("CONSOLED_OIDC_OTHER_ISSUER", &vars).unwrap();
    assert!(other.unwrap_err().contains("named other"));
    // Not a provider's setting: left to the general check (a misspelling, named as such).
    assert_eq!(check_variable("CONSOLED_OIDC_CORP_ISUER", &vars), None);
    assert_eq!(check_variable("CONSOLED_WORKERS", &vars), None);
}

/// A provider's client secret, as every secret, may come from a file instead (`config::secret`),
/// never from two places.
#[test]
fn the_client_secret_may_come_from_a_file() {
    let dir = std::env::temp_dir().join(format!("consoled-oidc-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("corp");
    std::fs::write(&file, "from-a-file\n").unwrap();
    let path = file.to_str().unwrap();
    let mut pairs: Vec<(&str, &str)> = CORP[..3].to_vec();
    pairs.push(("CONSOLED_OIDC_CORP_CLIENT_SECRET_FILE", path));
    assert_eq!(read(&env(&pairs)).unwrap()[0].client_secret, "from-a-file");
    let both = with(&[("CONSOLED_OIDC_CORP_CLIENT_SECRET_FILE", path)]).unwrap_err();
    assert!(both.0.contains("two places"), "{}", both.0);
    assert!(!both.0.contains("s3cret") && !both.0.contains("from-a-file"));
    std::fs::remove_dir_all(&dir).unwrap();
}
