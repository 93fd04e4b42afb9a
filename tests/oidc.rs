//! Company sign-in against a real OpenID Provider: panva's oidc-provider (OpenID Certified),
//! installed pinned from the npm registry by scripts/oidc-deps.sh and run on loopback by
//! tests/common/op.rs, through the browser's whole redirect flow (start, the provider's login
//! and consent pages, callback). Its issuers:
//!
//! - `corp` (RS256, `client_secret_basic`) and `partner` (ES256, `client_secret_post`): honest;
//! - `rotating`: rotates its signing key while consoled runs;
//! - `late`: answers 503 until told to come up (discovery failing at start);
//! - `short`: ID tokens live 1 s and the token answer takes 2.1 s (an expired token);
//! - `rogue`: publishes, under its keys' ids, other keys than those that sign (a token signed by
//!   another key);
//! - `swapped`: told to, signs a sign-in of client `consoled` in as client `other`, whose ID
//!   token is then for another audience.
//!
//! A disabled account (issue 32) is refused after a sign-in the provider vouched for.
//!
//! Every misbehaviour is the real provider's, configured or with its requests rewritten inside
//! its own process (tests/oidc/provider.mjs says how); none is a token made up here.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::op::{query_param, with_param, Browser, OpenIdProvider, Stop, CONSOLE, CONSOLED};
use common::*;
use serde_json::{json, Value};

const SECRET: &str = "a-client-secret-of-the-test-provider-0123456789";

fn op() -> Option<&'static OpenIdProvider> {
    static OP: OnceLock<Option<OpenIdProvider>> = OnceLock::new();
    OP.get_or_init(|| OpenIdProvider::start("tests/oidc.rs", &spec()))
        .as_ref()
}

fn client(id: &str, callbacks: &[&str], extra: Value) -> Value {
    let uris: Vec<String> = callbacks
        .iter()
        .map(|p| format!("{CONSOLED}/auth/oauth/{p}/callback"))
        .collect();
    let mut c = json!({"client_id": id, "client_secret": SECRET, "redirect_uris": uris});
    c.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    c
}

fn spec() -> Value {
    let plain = |name: &str| client("consoled", &[name], json!({}));
    json!({"issuers": [
        // `corp` also accepts consoled's `partner` callback: the premise of the mix-up attack.
        {"name": "corp", "alg": "RS256", "clients": [
            client("consoled", &["corp", "corp-b", "partner"], json!({})),
            client("consoled-hs", &["corp-hs"], json!({"id_token_alg": "HS256"})),
        ]},
        {"name": "partner", "alg": "ES256", "clients": [
            client("consoled-partner", &["partner"], json!({"auth": "client_secret_post"})),
        ]},
        {"name": "rotating", "alg": "RS256", "clients": [plain("rotating")]},
        {"name": "late", "alg": "RS256", "down": true, "clients": [plain("late")]},
        {"name": "short", "alg": "RS256", "id_token_ttl": 1, "slow_token_ms": 2100,
         "clients": [plain("short")]},
        {"name": "rogue", "alg": "RS256", "foreign_keys": true, "clients": [plain("rogue")]},
        {"name": "swapped", "alg": "RS256", "clients": [
            plain("swapped"), client("other", &["swapped"], json!({})),
        ]},
    ]})
}

/// A consoled provider: its name here, the issuer it points at, and its own settings.
struct Setup<'a> {
    name: &'a str,
    issuer: &'a str,
    client_id: &'a str,
    extra: Vec<(&'a str, String)>,
}

fn provider<'a>(name: &'a str, issuer: &'a str) -> Setup<'a> {
    Setup {
        name,
        issuer,
        client_id: "consoled",
        extra: Vec::new(),
    }
}

/// A server with these providers, each discovered before it returns.
fn server(op: &OpenIdProvider, providers: &[Setup]) -> TestServer {
    let names: Vec<&str> = providers.iter().map(|p| p.name).collect();
    let mut vars: Vec<(String, String)> = vec![
        ("CONSOLED_BASE_URL".into(), CONSOLED.into()),
        ("CONSOLED_CONSOLE_URL".into(), CONSOLE.into()),
        ("CONSOLED_OIDC_PROVIDERS".into(), names.join(",")),
    ];
    for p in providers {
        let var = |suffix: &str| consoled::config::oidc::variable(p.name, suffix);
        vars.push((var("ISSUER"), op.issuer(p.issuer).into()));
        vars.push((var("CLIENT_ID"), p.client_id.into()));
        vars.push((var("CLIENT_SECRET"), SECRET.into()));
        vars.extend(p.extra.iter().map(|(k, v)| (var(k), v.clone())));
    }
    let refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = TestServer::with(&refs);
    for p in providers.iter().filter(|p| p.issuer != "late") {
        wait_listed(&server, p.name);
    }
    server
}

fn listed(server: &TestServer) -> Value {
    let r = server.client().get("/auth/providers");
    r.expect(200);
    r.json()
}

#[track_caller]
fn wait_listed(server: &TestServer, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !listed(server)["providers"]
        .as_array()
        .unwrap()
        .contains(&json!(name))
    {
        assert!(Instant::now() < deadline, "{name} never listed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A person at the provider: a fresh login name with these claims (and a fresh address).
fn person(op: &OpenIdProvider, claims: Value) -> (String, String) {
    let login = format!("u{}", unique());
    let email = unique_email();
    let mut all = json!({"email": email, "email_verified": true, "name": "Ada Lovelace"});
    all.as_object_mut()
        .unwrap()
        .extend(claims.as_object().unwrap().clone());
    op.account(&login, all);
    (login, email)
}

/// Signed in at the console: the Auth state of the browser's new session.
#[track_caller]
fn signed_in(b: &mut Browser, stop: &Stop) -> Value {
    match stop {
        Stop::Console(url) => assert_eq!(url, &format!("{CONSOLE}/"), "signed in"),
        other => panic!("not at the console: {other:?}"),
    }
    let r = b.consoled.get("/auth/session");
    r.expect(200);
    r.json()
}

/// Refused: at the console's login page with `error`, and no session.
#[track_caller]
fn refused(b: &mut Browser, stop: &Stop, error: &str) {
    match stop {
        Stop::Console(url) => assert_eq!(url, &format!("{CONSOLE}/login?error={error}")),
        other => panic!("not at the console: {other:?}"),
    }
    b.consoled
        .get("/auth/session")
        .expect_error(401, "unauthorized");
}

#[test]
fn company_accounts_sign_in_through_the_whole_redirect_flow() {
    let Some(op) = op() else { return };
    let mut partner = provider("partner", "partner");
    partner.client_id = "consoled-partner";
    partner.extra = vec![
        ("TOKEN_AUTH", "client_secret_post".into()),
        ("DISPLAY_NAME", "Partner SSO".into()),
    ];
    let mut corp = provider("corp", "corp");
    corp.extra = vec![("DISPLAY_NAME", "Corp SSO".into())];
    let s = server(op, &[corp, partner]);
    assert_eq!(
        listed(&s),
        json!({"providers": ["corp", "partner"],
               "display_names": {"corp": "Corp SSO", "partner": "Partner SSO"}})
    );
    // RS256 with client_secret_basic, ES256 with client_secret_post.
    for name in ["corp", "partner"] {
        let (login, email) = person(op, json!({}));
        let mut b = Browser::new(s.addr);
        let stop = b.sign_in(name, &login);
        let state = signed_in(&mut b, &stop);
        assert_eq!(state["user"]["email"], email.as_str());
        assert_eq!(state["user"]["email_verified"], true);
        assert_eq!(state["user"]["has_password"], false);
        assert_eq!(state["user"]["name"], "Ada Lovelace");
        let id = state["user"]["id"].as_i64().unwrap();
        // Linked by issuer and subject.
        let row = db()
            .query_one(
                "SELECT provider, subject FROM external_identities WHERE user_id = $1",
                &[&id],
            )
            .unwrap();
        assert_eq!(row.get::<_, String>(0), op.issuer(name));
        assert_eq!(row.get::<_, String>(1), login);
        // Again, from another browser: the same account.
        let mut again = Browser::new(s.addr);
        let stop = again.sign_in(name, &login);
        assert_eq!(signed_in(&mut again, &stop)["user"]["id"], id);
    }
}

/// Issue 32: a disabled account is refused by a company sign-in too, once the provider vouched
/// for the person (`error=account_disabled`, no session); enabled, it signs in again.
#[test]
fn a_disabled_account_cannot_sign_in_through_a_company_provider() {
    let Some(op) = op() else { return };
    let s = server(op, &[provider("corp", "corp")]);
    let (login, _) = person(op, json!({}));
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("corp", &login);
    let id = signed_in(&mut b, &stop)["user"]["id"].to_string();
    common::account::cli(&["user", "disable", "--id", &id]);
    b.consoled
        .get("/auth/session")
        .expect_error(401, "unauthorized");
    let mut again = Browser::new(s.addr);
    let stop = again.sign_in("corp", &login);
    refused(&mut again, &stop, "account_disabled");
    common::account::cli(&["user", "enable", "--id", &id]);
    let mut back = Browser::new(s.addr);
    let stop = back.sign_in("corp", &login);
    assert_eq!(signed_in(&mut back, &stop)["user"]["id"].to_string(), id);
}

#[test]
fn the_provider_rules_decide_who_comes_in() {
    let Some(op) = op() else { return };
    let mut corp = provider("corp", "corp");
    corp.extra = vec![
        ("DOMAINS", "example.com".into()),
        ("REQUIRED_CLAIM", "groups=console-users".into()),
        ("SCOPES", "openid email profile groups".into()),
    ];
    let s = server(op, &[corp]);
    let member = json!({"groups": ["staff", "console-users"]});

    let (login, _) = person(op, member.clone());
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("corp", &login);
    signed_in(&mut b, &stop);

    // Not in the group.
    let (login, email) = person(op, json!({"groups": ["staff"]}));
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("corp", &login);
    refused(&mut b, &stop, "not_allowed");
    assert_eq!(users_with(&email), 0);

    // An address outside the provider's domains.
    let (login, _) = person(
        op,
        json!({"groups": "console-users", "email": "ada@example.org"}),
    );
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("corp", &login);
    refused(&mut b, &stop, "not_allowed");

    // An address the provider does not vouch for: no account is made or entered.
    let mut unverified = member.clone();
    unverified["email_verified"] = json!(false);
    let (login, email) = person(op, unverified);
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("corp", &login);
    refused(&mut b, &stop, "email_unverified");
    assert_eq!(users_with(&email), 0);

    // The person cancels at the provider.
    let mut b = Browser::new(s.addr);
    let page = b.run(&format!("{CONSOLED}/auth/oauth/corp/start"), false);
    let Stop::Page { url, html } = &page else {
        panic!("{page:?}")
    };
    let abort = html
        .split("href=\"")
        .find_map(|s| s.split('"').next().filter(|h| h.contains("/abort")))
        .expect("the login page offers to cancel");
    let stop = b.run(&common::op::absolute(url, abort), false);
    refused(&mut b, &stop, "oauth_denied");
}

/// Entra ID vouches for addresses with `xms_edov`, never `email_verified`: the provider's setting
/// names the claim, and only that claim counts.
#[test]
fn another_claim_may_vouch_for_the_address() {
    let Some(op) = op() else { return };
    let mut corp = provider("corp", "corp");
    corp.extra = vec![("EMAIL_VERIFIED_CLAIM", "xms_edov".into())];
    let s = server(op, &[corp]);
    let (login, email) = person(op, json!({"email_verified": false, "xms_edov": true}));
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("corp", &login);
    let state = signed_in(&mut b, &stop);
    assert_eq!(
        (
            state["user"]["email"].as_str(),
            state["user"]["email_verified"].as_bool()
        ),
        (Some(email.as_str()), Some(true))
    );
    let (login, email) = person(op, json!({"email_verified": true}));
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("corp", &login);
    refused(&mut b, &stop, "email_unverified");
    assert_eq!(users_with(&email), 0);
}

fn users_with(email: &str) -> i64 {
    db().query_one("SELECT count(*) FROM users WHERE email = $1", &[&email])
        .unwrap()
        .get(0)
}

/// A fresh address domain, so that the exclusive rule of one test touches no other.
fn fresh_domain() -> String {
    let n: String = unique()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    format!("d{n}.example")
}

#[test]
fn an_exclusive_provider_is_the_only_way_in_for_its_domains() {
    let Some(op) = op() else { return };
    let domain = fresh_domain();
    let mut corp = provider("corp", "corp");
    corp.extra = vec![
        ("DOMAINS", domain.clone()),
        ("EXCLUSIVE", "true".into()),
        ("DISPLAY_NAME", "Corp SSO".into()),
    ];
    let mut partner = provider("partner", "partner");
    partner.client_id = "consoled-partner";
    partner.extra = vec![("TOKEN_AUTH", "client_secret_post".into())];
    let s = server(op, &[corp, partner]);
    let email = format!("grace@{domain}");

    // No password sign-up or sign-in for the domain, with a message that names the way in.
    let mut c = s.client();
    let r = c.post(
        "/auth/signup",
        &json!({"email": email, "password": PASSWORD, "name": "Grace"}),
    );
    r.expect_error(403, "sso_required");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Corp SSO"));
    assert_eq!(r.json()["error"]["details"]["provider"], "corp");
    c.login(&email, PASSWORD).expect_error(403, "sso_required");
    // Other domains are not touched.
    c.login(&unique_email(), PASSWORD)
        .expect_error(401, "invalid_credentials");

    // Another provider vouching for an address of the domain is refused.
    let (login, _) = person(op, json!({"email": email}));
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("partner", &login);
    refused(&mut b, &stop, "sso_required");
    assert_eq!(users_with(&email), 0, "nothing is left of the refusal");

    // The company's provider lets the person in.
    let (login, _) = person(op, json!({"email": email}));
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("corp", &login);
    assert_eq!(signed_in(&mut b, &stop)["user"]["email"], email.as_str());
}

#[test]
fn a_token_signed_by_another_key_is_refused() {
    let Some(op) = op() else { return };
    let s = server(op, &[provider("rogue", "rogue")]);
    let (login, email) = person(op, json!({}));
    let mut b = Browser::new(s.addr);
    let before = op.seen("rogue", "/token");
    let stop = b.sign_in("rogue", &login);
    refused(&mut b, &stop, "oauth_failed");
    assert_eq!(
        op.seen("rogue", "/token"),
        before + 1,
        "the provider issued a token"
    );
    assert_eq!(users_with(&email), 0);
}

#[test]
fn an_hmac_signed_token_is_refused() {
    let Some(op) = op() else { return };
    let mut hs = provider("corp-hs", "corp");
    hs.client_id = "consoled-hs";
    let s = server(op, &[hs]);
    let (login, _) = person(op, json!({}));
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("corp-hs", &login);
    refused(&mut b, &stop, "oauth_failed");
}

#[test]
fn a_token_for_another_audience_is_refused() {
    let Some(op) = op() else { return };
    let s = server(op, &[provider("swapped", "swapped")]);
    let (login, _) = person(op, json!({}));
    let swap = |from: Value| {
        op.command(
            &json!({"cmd": "wrong_audience", "issuer": "swapped", "from": from, "to": "other"}),
        )
    };
    swap(json!("consoled"));
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("swapped", &login);
    swap(Value::Null);
    refused(&mut b, &stop, "oauth_failed");
    // The same person, the provider honest again.
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("swapped", &login);
    signed_in(&mut b, &stop);
}

#[test]
fn an_expired_token_is_refused() {
    let Some(op) = op() else { return };
    let s = server(op, &[provider("short", "short")]);
    let (login, _) = person(op, json!({}));
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("short", &login);
    refused(&mut b, &stop, "oauth_failed");
}

#[test]
fn a_replayed_state_is_refused() {
    let Some(op) = op() else { return };
    let s = server(op, &[provider("corp", "corp")]);
    let (login, _) = person(op, json!({}));
    let mut b = Browser::new(s.addr);
    let page = b.run(&format!("{CONSOLED}/auth/oauth/corp/start"), false);
    let Stop::Callback(callback) = b.log_in_and_consent(page, &login, true) else {
        panic!("expected the callback");
    };
    let binding = b.consoled.cookies["svc_oauth"].clone();
    let stop = b.run(&callback, false);
    signed_in(&mut b, &stop);
    // The same response again, with the browser's binding cookie put back.
    let mut replay = Browser::new(s.addr);
    replay.consoled.cookies.insert("svc_oauth".into(), binding);
    let stop = replay.run(&callback, false);
    refused(&mut replay, &stop, "oauth_failed");
}

#[test]
fn a_wrong_nonce_is_refused() {
    let Some(op) = op() else { return };
    let s = server(op, &[provider("corp", "corp")]);
    let (login, email) = person(op, json!({}));
    let mut b = Browser::new(s.addr);
    let start = b.request("GET", &format!("{CONSOLED}/auth/oauth/corp/start"), &[]);
    let to_provider = start.header("location").unwrap().to_string();
    assert_eq!(query_param(&to_provider, "nonce").unwrap().len(), 43);
    // Someone on the way to the provider changes the nonce; the provider signs it in the token.
    let tampered = with_param(&to_provider, "nonce", "a-nonce-consoled-never-sent");
    let page = b.run(&tampered, false);
    let stop = b.log_in_and_consent(page, &login, false);
    refused(&mut b, &stop, "oauth_failed");
    assert_eq!(users_with(&email), 0);
}

#[test]
fn a_mix_up_between_two_providers_is_refused() {
    let Some(op) = op() else { return };
    let mut partner = provider("partner", "partner");
    partner.client_id = "consoled-partner";
    partner.extra = vec![("TOKEN_AUTH", "client_secret_post".into())];
    let s = server(op, &[provider("corp", "corp"), partner]);
    let (login, email) = person(op, json!({}));

    // RFC 9207's attack: a sign-in started at `partner` is sent on to `corp` (whose client
    // accepts consoled's partner callback), so that corp's answer comes back on partner's path.
    // Its `iss` names corp: refused before the code goes to partner's token endpoint.
    let mut b = Browser::new(s.addr);
    let start = b.request("GET", &format!("{CONSOLED}/auth/oauth/partner/start"), &[]);
    let to_partner = start.header("location").unwrap().to_string();
    let to_corp = with_param(
        &to_partner.replace(op.issuer("partner"), op.issuer("corp")),
        "client_id",
        "consoled",
    );
    let page = b.run(&to_corp, false);
    let Stop::Callback(callback) = b.log_in_and_consent(page, &login, true) else {
        panic!("expected the callback");
    };
    assert!(callback.starts_with(&format!("{CONSOLED}/auth/oauth/partner/callback")));
    assert_eq!(
        query_param(&callback, "iss").as_deref(),
        Some(op.issuer("corp"))
    );
    let before = op.seen("partner", "/token");
    let stop = b.run(&callback, false);
    refused(&mut b, &stop, "oauth_failed");
    assert_eq!(
        op.seen("partner", "/token"),
        before,
        "the code never reached partner"
    );

    // A response of corp delivered on partner's path: its state is corp's.
    let mut b = Browser::new(s.addr);
    let page = b.run(&format!("{CONSOLED}/auth/oauth/corp/start"), false);
    let Stop::Callback(callback) = b.log_in_and_consent(page, &login, true) else {
        panic!("expected the callback");
    };
    let stop = b.run(&callback.replace("/oauth/corp/", "/oauth/partner/"), false);
    refused(&mut b, &stop, "oauth_failed");
    assert_eq!(users_with(&email), 0);
}

#[test]
fn sign_in_goes_on_through_a_key_rotation() {
    let Some(op) = op() else { return };
    let s = server(op, &[provider("rotating", "rotating")]);
    let (login, _) = person(op, json!({}));
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("rotating", &login);
    let id = signed_in(&mut b, &stop)["user"]["id"].clone();
    let fetched = op.seen("rotating", "/jwks");
    op.command(&json!({"cmd": "rotate", "issuer": "rotating"}));
    // The first token signed with the new key makes consoled fetch the keys once more.
    for _ in 0..2 {
        let mut b = Browser::new(s.addr);
        let stop = b.sign_in("rotating", &login);
        assert_eq!(signed_in(&mut b, &stop)["user"]["id"], id);
    }
    assert_eq!(op.seen("rotating", "/jwks"), fetched + 1);
}

#[test]
fn a_provider_down_at_start_is_listed_once_it_answers() {
    let Some(op) = op() else { return };
    let s = server(op, &[provider("late", "late")]);
    // Asked at least once, and not listed while it fails; its start says so.
    let deadline = Instant::now() + Duration::from_secs(10);
    while op.seen("late", "/.well-known/openid-configuration") == 0 {
        assert!(Instant::now() < deadline, "discovery never tried");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(listed(&s)["providers"], json!([]));
    let mut b = Browser::new(s.addr);
    let stop = b.run(&format!("{CONSOLED}/auth/oauth/late/start"), false);
    refused(&mut b, &stop, "provider_unavailable");
    b.consoled
        .get("/auth/oauth/unknown/start")
        .expect_error(404, "not_found");

    op.command(&json!({"cmd": "up", "issuer": "late"}));
    wait_listed(&s, "late");
    let (login, _) = person(op, json!({}));
    let mut b = Browser::new(s.addr);
    let stop = b.sign_in("late", &login);
    signed_in(&mut b, &stop);
}

/// The binary as an operator runs it: each sign-in and each refusal is a security event, the
/// discovery is logged, and no secret of the run (client secret, code, state, nonce) is.
#[test]
fn sign_ins_and_refusals_are_logged_without_secrets() {
    let Some(op) = op() else { return };
    let env = |name: &str, issuer: &str| {
        [
            (
                format!("CONSOLED_OIDC_{name}_ISSUER"),
                op.issuer(issuer).to_string(),
            ),
            (
                format!("CONSOLED_OIDC_{name}_CLIENT_ID"),
                "consoled".to_string(),
            ),
            (
                format!("CONSOLED_OIDC_{name}_CLIENT_SECRET"),
                SECRET.to_string(),
            ),
        ]
    };
    let mut vars: Vec<(String, String)> = vec![
        ("CONSOLED_BASE_URL".into(), CONSOLED.into()),
        ("CONSOLED_CONSOLE_URL".into(), CONSOLE.into()),
        ("CONSOLED_OIDC_PROVIDERS".into(), "corp,rogue".into()),
    ];
    vars.extend(env("CORP", "corp"));
    vars.extend(env("ROGUE", "rogue"));
    let refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = binary::Spawned::start(env!("CARGO_BIN_EXE_consoled"), &refs);
    server.wait_log(
        &["oidc corp: discovered", op.issuer("corp")],
        Duration::from_secs(15),
    );
    server.wait_log(&["oidc rogue: discovered"], Duration::from_secs(15));

    let (login, _) = person(op, json!({}));
    let mut b = Browser::new(server.addr);
    let page = b.run(&format!("{CONSOLED}/auth/oauth/corp/start"), false);
    let Stop::Callback(callback) = b.log_in_and_consent(page, &login, true) else {
        panic!("expected the callback");
    };
    let stop = b.run(&callback, false);
    let user = signed_in(&mut b, &stop)["user"]["id"].to_string();
    server.wait_log(
        &[
            "event=provider_signin ",
            &format!("user_id={user}"),
            "provider=corp",
        ],
        Duration::from_secs(5),
    );

    let mut b = Browser::new(server.addr);
    let stop = b.sign_in("rogue", &login);
    refused(&mut b, &stop, "oauth_failed");
    let line = server.wait_log(
        &[
            "event=provider_signin_failed",
            "provider=rogue",
            "reason=oauth_failed",
        ],
        Duration::from_secs(5),
    );
    assert!(line.contains("signature does not verify"), "{line}");

    let log = server.log().join("\n");
    let secrets = [
        SECRET.to_string(),
        query_param(&callback, "code").unwrap(),
        query_param(&callback, "state").unwrap(),
    ];
    for secret in secrets {
        assert!(!log.contains(&secret), "{secret} in the log");
    }
}
