//! Sign-in with Google and GitHub against fake providers on loopback (tests/common/fake_idp.rs):
//! the redirect and its binding cookie, account creation, return and linking, the second
//! factor, every refusal, PKCE, and a provider that hangs.

mod common;

use std::time::{Duration, Instant};

use common::fake_idp::{AuthRequest, FakeIdp, Profile};
use common::*;
use consoled::http::percent_encode;
use serde_json::{json, Value};

const CONSOLE: &str = "http://console.test";
const BASE: &str = "http://consoled.test";
const FAILED: &str = "http://console.test/login?error=oauth_failed";

struct World {
    server: TestServer,
    google: FakeIdp,
    github: FakeIdp,
}

fn world() -> World {
    world_with(&[])
}

fn world_with(extra: &[(&str, &str)]) -> World {
    let google = FakeIdp::google();
    let github = FakeIdp::github();
    let mut vars = google.env();
    vars.extend(github.env());
    vars.push(("CONSOLED_CONSOLE_URL".into(), CONSOLE.into()));
    vars.push(("CONSOLED_BASE_URL".into(), BASE.into()));
    vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    World {
        server: TestServer::with(&refs),
        google,
        github,
    }
}

impl World {
    fn idp(&self, provider: &str) -> &FakeIdp {
        match provider {
            "google" => &self.google,
            _ => &self.github,
        }
    }

    /// `start`, as the browser follows it: the parameters of the redirect to the provider.
    fn begin(&self, c: &mut Client, provider: &str) -> AuthRequest {
        let r = c.get(&format!("/auth/oauth/{provider}/start"));
        r.expect(302);
        AuthRequest::parse(r.header("location").expect("Location"))
    }

    fn callback(&self, c: &mut Client, provider: &str, query: &str) -> Response {
        c.get(&format!("/auth/oauth/{provider}/callback?{query}"))
    }

    /// `sign_in`, which must succeed: the Auth state of the new session.
    #[track_caller]
    fn signed_in(&self, c: &mut Client, provider: &str, profile: &Profile) -> Value {
        let r = self.sign_in(c, provider, profile);
        assert_signed_in(c, &r)
    }

    /// The whole dance: start, the user agrees at the provider, callback.
    fn sign_in(&self, c: &mut Client, provider: &str, profile: &Profile) -> Response {
        let auth = self.begin(c, provider);
        let code = self.idp(provider).authorize(&auth, profile);
        self.callback(c, provider, &code_query(&code, auth.get("state")))
    }
}

fn code_query(code: &str, state: &str) -> String {
    format!(
        "code={}&state={}",
        percent_encode(code),
        percent_encode(state)
    )
}

/// A 302 to the console's login page with `error=oauth_failed`, no session, binding cookie gone.
#[track_caller]
fn assert_refused(c: &mut Client, r: &Response) {
    assert_refused_with(c, r, FAILED);
}

#[track_caller]
fn assert_refused_with(c: &mut Client, r: &Response, location: &str) {
    r.expect(302);
    assert_eq!(r.header("location"), Some(location));
    assert!(
        r.set_cookie("svc_session").is_none(),
        "no session on a refusal"
    );
    let cleared = r.set_cookie("svc_oauth").expect("binding cookie cleared");
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    c.get("/auth/session").expect_error(401, "unauthorized");
}

/// A 302 to the console's start page with a full session; the Auth state of that session.
#[track_caller]
fn assert_signed_in(c: &mut Client, r: &Response) -> Value {
    r.expect(302);
    assert_eq!(r.header("location"), Some("http://console.test/"));
    let cookie = r.set_cookie("svc_session").expect("session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    let state = c.get("/auth/session");
    state.expect(200);
    state.json()
}

fn user_id(state: &Value) -> i64 {
    state["user"]["id"].as_i64().unwrap()
}

fn state_hash(state: &str) -> Vec<u8> {
    consoled::crypto::token_hash(state)
}

#[test]
fn providers_lists_only_configured_ones_sorted() {
    let w = world();
    let r = w.server.client().get("/auth/providers");
    r.expect(200);
    assert_eq!(
        r.json(),
        json!({"providers": ["github", "google"],
               "display_names": {"github": "GitHub", "google": "Google"}})
    );
    assert_eq!(r.header("cache-control"), Some("no-store"));

    let google_only = TestServer::with(&[
        ("CONSOLED_GOOGLE_CLIENT_ID", "id"),
        ("CONSOLED_GOOGLE_CLIENT_SECRET", "secret"),
        ("CONSOLED_GITHUB_CLIENT_ID", "id without a secret"),
    ]);
    let r = google_only.client().get("/auth/providers");
    assert_eq!(
        r.json(),
        json!({"providers": ["google"], "display_names": {"google": "Google"}})
    );
    let none = TestServer::start();
    assert_eq!(
        none.client().get("/auth/providers").json(),
        json!({"providers": [], "display_names": {}})
    );
}

#[test]
fn unknown_or_disabled_provider_is_404_on_start_and_callback() {
    let w = world();
    let mut c = w.server.client();
    for path in [
        "/auth/oauth/facebook/start",
        "/auth/oauth/facebook/callback?code=a&state=b",
        "/auth/oauth/Google/start",
    ] {
        c.get(path).expect_error(404, "not_found");
    }
    let google_only = TestServer::with(&[
        ("CONSOLED_GOOGLE_CLIENT_ID", "id"),
        ("CONSOLED_GOOGLE_CLIENT_SECRET", "secret"),
    ]);
    let mut c = google_only.client();
    c.get("/auth/oauth/github/start")
        .expect_error(404, "not_found");
    c.get("/auth/oauth/github/callback?code=a&state=b")
        .expect_error(404, "not_found");
    c.get("/auth/oauth/google/start").expect(302);
}

#[test]
fn start_redirects_to_the_provider_with_state_pkce_and_nonce() {
    let w = world();
    let mut c = w.server.client();
    let r = c.get("/auth/oauth/google/start");
    r.expect(302);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let cookie = r.set_cookie("svc_oauth").expect("binding cookie");
    for attribute in [
        "Path=/auth/oauth",
        "Max-Age=600",
        "HttpOnly",
        "SameSite=Lax",
    ] {
        assert!(cookie.contains(attribute), "{attribute} missing: {cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "plain-http test server: {cookie}"
    );

    let google = AuthRequest::parse(r.header("location").unwrap());
    assert_eq!(google.url, w.google.url("/authorize"));
    assert_eq!(google.get("client_id"), "fake-client-id");
    assert_eq!(
        google.get("redirect_uri"),
        "http://consoled.test/auth/oauth/google/callback"
    );
    assert_eq!(google.get("response_type"), "code");
    assert_eq!(google.get("scope"), "openid email profile");
    assert_eq!(google.get("code_challenge_method"), "S256");
    assert_eq!(google.get("code_challenge").len(), 43, "base64url SHA-256");
    assert_eq!(google.get("state").len(), 43);
    assert_eq!(google.get("nonce").len(), 43);

    let github = w.begin(&mut c, "github");
    assert_eq!(github.url, w.github.url("/authorize"));
    assert_eq!(github.get("scope"), "read:user user:email");
    assert_eq!(
        github.get("redirect_uri"),
        "http://consoled.test/auth/oauth/github/callback"
    );
    assert_eq!(github.get("code_challenge_method"), "S256");
    assert!(!github.params.contains_key("nonce"), "GitHub is not OIDC");
    assert_ne!(github.get("state"), google.get("state"));
    assert_ne!(github.get("code_challenge"), google.get("code_challenge"));

    // Stored hashed, naming its provider, with the verifier of the challenge.
    let row = db()
        .query_one(
            "SELECT provider, pkce_verifier, nonce, expires_at - now() < interval '601 seconds'
               FROM oauth_states WHERE state_hash = $1",
            &[&state_hash(google.get("state"))],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "google");
    let verifier: String = row.get(1);
    assert_eq!(
        consoled::auth::oauth::pkce_challenge(&verifier),
        google.get("code_challenge")
    );
    assert_eq!(
        row.get::<_, Option<String>>(2).as_deref(),
        Some(google.get("nonce"))
    );
    assert!(row.get::<_, bool>(3));

    let secure = world_with(&[("CONSOLED_COOKIE_SECURE", "true")]);
    let r = secure.server.client().get("/auth/oauth/github/start");
    assert!(r.set_cookie("svc_oauth").unwrap().contains("; Secure"));
}

#[test]
fn google_first_sign_in_creates_user_org_and_default_project() {
    let w = world();
    let mut c = w.server.client();
    let email = unique_email();
    let r = w.sign_in(&mut c, "google", &Profile::new(&email.to_uppercase()));
    assert!(r
        .set_cookie("svc_oauth")
        .is_some_and(|c| c.contains("Max-Age=0")));
    let state = assert_signed_in(&mut c, &r);
    assert_eq!(state["mfa_required"], false);
    let user = &state["user"];
    assert_eq!(user["email"], email.as_str(), "normalised");
    assert_eq!(user["name"], "Grace Hopper");
    assert_eq!(user["email_verified"], true);
    assert_eq!(user["has_password"], false);
    let orgs = state["organizations"].as_array().unwrap();
    assert_eq!(orgs.len(), 1);
    assert_eq!(orgs[0]["kind"], "personal");
    assert_eq!(orgs[0]["role"], "owner");
    assert_eq!(orgs[0]["status"], "active");
    let projects: i64 = db()
        .query_one(
            "SELECT count(*) FROM projects WHERE org_id = $1 AND name = 'default'",
            &[&orgs[0]["id"].as_i64().unwrap()],
        )
        .unwrap()
        .get(0);
    assert_eq!(projects, 1);

    // The token request carried the PKCE verifier and the exact redirect URI.
    let token_request = w
        .google
        .seen()
        .into_iter()
        .find(|s| s.path == "/token")
        .unwrap();
    assert!(token_request.body.contains("code_verifier="));
    assert!(token_request
        .body
        .contains("redirect_uri=http%3A%2F%2Fconsoled.test%2Fauth%2Foauth%2Fgoogle%2Fcallback"));
}

#[test]
fn returning_google_user_signs_in_to_the_same_account() {
    let w = world();
    let email = unique_email();
    let mut profile = Profile::new(&email);
    let mut first = w.server.client();
    let id = user_id(&w.signed_in(&mut first, "google", &profile));
    // The subject decides, not the address (which may change at the provider).
    profile.email = unique_email();
    let mut again = w.server.client();
    let state = w.signed_in(&mut again, "google", &profile);
    assert_eq!(user_id(&state), id);
    assert_eq!(state["user"]["email"], email.as_str());
    let linked: String = db()
        .query_one(
            "SELECT email FROM external_identities WHERE provider = 'google' AND subject = $1",
            &[&profile.subject],
        )
        .unwrap()
        .get(0);
    assert_eq!(linked, profile.email, "latest address recorded");
}

#[test]
fn google_without_email_claims_falls_back_to_userinfo() {
    let w = world();
    w.google.set_claim("email", Value::Null);
    w.google.set_claim("email_verified", Value::Null);
    let mut c = w.server.client();
    let email = unique_email();
    let state = w.signed_in(&mut c, "google", &Profile::new(&email));
    assert_eq!(state["user"]["email"], email.as_str());
    assert_eq!(state["user"]["email_verified"], true);
    let userinfo = w
        .google
        .seen()
        .into_iter()
        .find(|s| s.path == "/v1/userinfo")
        .expect("userinfo called");
    assert!(userinfo.headers["authorization"].starts_with("Bearer at-"));
}

#[test]
fn github_sign_in_creates_then_finds_the_user() {
    let w = world();
    let email = unique_email();
    let profile = Profile::new(&email);
    let mut c = w.server.client();
    let state = w.signed_in(&mut c, "github", &profile);
    assert_eq!(state["user"]["email"], email.as_str());
    assert_eq!(state["user"]["email_verified"], true);
    assert_eq!(state["user"]["name"], "Grace Hopper");
    let mut again = w.server.client();
    let second = w.signed_in(&mut again, "github", &profile);
    assert_eq!(user_id(&second), user_id(&state));

    let seen = w.github.seen();
    let token = seen.iter().find(|s| s.path == "/token").unwrap();
    assert_eq!(token.method, "POST");
    assert!(token.headers["accept"].contains("application/json"));
    assert!(token.headers["content-type"].starts_with("application/x-www-form-urlencoded"));
    for path in ["/api/v3/user", "/api/v3/user/emails"] {
        let call = seen.iter().find(|s| s.path == path).expect(path);
        assert!(call.headers["authorization"].starts_with("Bearer at-"));
        assert_eq!(call.headers["accept"], "application/vnd.github+json");
        assert!(call.headers["user-agent"].starts_with("consoled/"));
    }
}

#[test]
fn github_form_encoded_token_answer_is_understood() {
    let w = world();
    w.github.set_always_form(true);
    let mut c = w.server.client();
    w.signed_in(&mut c, "github", &Profile::new(&unique_email()));
}

#[test]
fn verified_provider_email_links_an_existing_verified_account() {
    let w = world();
    let mut owner = w.server.client();
    let (email, signup) = owner.signup();
    db().execute(
        "UPDATE users SET email_verified = true WHERE id = $1",
        &[&user_id(&signup)],
    )
    .unwrap();
    let mut c = w.server.client();
    let profile = Profile::new(&email);
    let state = w.signed_in(&mut c, "github", &profile);
    assert_eq!(user_id(&state), user_id(&signup));
    assert_eq!(
        state["user"]["has_password"], true,
        "a verified account keeps its password"
    );
    owner.get("/auth/session").expect(200);
    let linked: i64 = db()
        .query_one(
            "SELECT user_id FROM external_identities WHERE provider = 'github' AND subject = $1",
            &[&profile.subject],
        )
        .unwrap()
        .get(0);
    assert_eq!(linked, user_id(&signup));
}

#[test]
fn linking_an_unverified_account_removes_the_squatters_password_and_sessions() {
    let w = world();
    // Someone signed up with this address without ever proving they own it...
    let mut squatter = w.server.client();
    let (email, signup) = squatter.signup();
    // ...then its owner signs in with Google, which has verified the address.
    let mut owner = w.server.client();
    let state = w.signed_in(&mut owner, "google", &Profile::new(&email));
    assert_eq!(user_id(&state), user_id(&signup));
    assert_eq!(state["user"]["email_verified"], true);
    assert_eq!(state["user"]["has_password"], false);
    squatter
        .get("/auth/session")
        .expect_error(401, "unauthorized");
    squatter
        .login(&email, PASSWORD)
        .expect_error(401, "invalid_credentials");
}

#[test]
fn unverified_provider_email_never_links_an_existing_account() {
    let w = world();
    let mut owner = w.server.client();
    let (email, signup) = owner.signup();
    let mut c = w.server.client();
    let profile = Profile::new(&email).unverified();
    let r = w.sign_in(&mut c, "google", &profile);
    assert_refused_with(&mut c, &r, UNVERIFIED);
    assert_eq!(links_of(user_id(&signup)), 0);
    owner.get("/auth/session").expect(200);
}

/// The takeover of issue 15: a Google account that claims the victim's address without Google
/// having verified it must not create the victim's account (nor sign in, nor queue a mail).
#[test]
fn an_unverified_provider_address_never_creates_an_account() {
    let w = world();
    let victim = unique_email();
    let mut attacker = w.server.client();
    let profile = Profile::new(&victim).unverified();
    let r = w.sign_in(&mut attacker, "google", &profile);
    assert_refused_with(&mut attacker, &r, UNVERIFIED);
    let mut db = db();
    let users: i64 = db
        .query_one("SELECT count(*) FROM users WHERE email = $1", &[&victim])
        .unwrap()
        .get(0);
    assert_eq!(users, 0, "no account for an address nobody proved");
    let mails: i64 = db
        .query_one(
            "SELECT count(*) FROM outbox WHERE recipient = $1",
            &[&victim],
        )
        .unwrap()
        .get(0);
    assert_eq!(mails, 0, "no mail to the victim either");
    // The victim can still sign up with their own address.
    let mut owner = w.server.client();
    owner
        .post(
            "/auth/signup",
            &json!({"email": victim, "password": PASSWORD, "name": "Victim"}),
        )
        .expect(201);
}

/// A link made before this defence (the account's address still unproven) signs nobody in
/// once the provider's address is unverified, and is removed when the owner proves the address
/// with their own verified provider account; the attacker's session and stream end.
#[test]
fn proving_the_address_removes_links_made_while_it_was_unproven() {
    let w = world();
    let victim = unique_email();
    let attacker_profile = Profile::new(&victim).unverified();
    let (victim_id, attacker_token) = legacy_takeover(&victim, "google", &attacker_profile.subject);
    let mut attacker = w.server.client();
    attacker
        .cookies
        .insert("svc_session".into(), attacker_token.clone());
    attacker.get("/auth/session").expect(200);
    let mut stream = common::sse::open(
        w.server.addr,
        &[("Cookie", &format!("svc_session={attacker_token}"))],
    );

    // The same Google subject with its unverified address: refused, not signed in.
    let mut again = w.server.client();
    let r = w.sign_in(&mut again, "google", &attacker_profile);
    assert_refused_with(&mut again, &r, UNVERIFIED);

    // The owner signs in with their own Google account, which has verified the address.
    let mut owner = w.server.client();
    let state = w.signed_in(&mut owner, "google", &Profile::new(&victim));
    assert_eq!(user_id(&state), victim_id);
    assert_eq!(state["user"]["email_verified"], true);
    assert_eq!(links_of(victim_id), 1, "only the owner's own link is left");
    attacker
        .get("/auth/session")
        .expect_error(401, "unauthorized");
    assert!(
        stream.wait_end(Duration::from_secs(3)).is_some(),
        "the attacker's stream ends"
    );
    // Even if the attacker's Google account later shows a verified address of its own, the
    // subject no longer leads to the victim's account.
    let mut later = w.server.client();
    let own = Profile {
        email: unique_email(),
        email_verified: true,
        ..attacker_profile
    };
    let state = w.signed_in(&mut later, "google", &own);
    assert_ne!(user_id(&state), victim_id);
}

/// Migration 0002 removes links that may have been attached while the account's address was
/// unproven: every link of an unverified account, and an account-creating link of an account
/// whose address was proven later by mail.
#[test]
fn migration_removes_links_attached_while_the_address_was_unproven() {
    // A server applies the migrations to this binary's fresh database first.
    let _w = world();
    let mut db = db();
    let unverified = unique_email();
    let (unverified_id, token1) = legacy_takeover(&unverified, "google", &unique());
    let reset = unique_email();
    let (reset_id, token2) = legacy_takeover(&reset, "github", &unique());
    // The owner already did forgot + reset under the old code: the address is verified and
    // a reset token was used after the link was made.
    db.batch_execute(&format!(
        "UPDATE users SET email_verified = true, password_hash = 'x' WHERE id = {reset_id};
         INSERT INTO mail_tokens (user_id, purpose, token_hash, email, expires_at, used_at)
         VALUES ({reset_id}, 'password_reset', '\\x{}', '{reset}', now() + interval '1 hour',
                 now() + interval '1 second')",
        hex(&consoled::crypto::random_bytes::<32>())
    ))
    .unwrap();
    // A legitimate account made by a verified sign-in, never proven again: kept.
    let fine = unique_email();
    let (fine_id, token3) = legacy_takeover(&fine, "google", &unique());
    db.execute(
        "UPDATE users SET email_verified = true WHERE id = $1",
        &[&fine_id],
    )
    .unwrap();

    let (_, name, sql) = consoled::db::migrate::MIGRATIONS
        .iter()
        .find(|m| m.1.starts_with("0002_"))
        .expect("migration 0002");
    db.batch_execute(sql)
        .unwrap_or_else(|e| panic!("{name}: {e}"));

    assert_eq!(links_of(unverified_id), 0);
    assert_eq!(links_of(reset_id), 0);
    assert_eq!(links_of(fine_id), 1);
    let mut live = |token: &str| -> i64 {
        db.query_one(
            "SELECT count(*) FROM sessions WHERE token_hash = $1",
            &[&consoled::crypto::token_hash(token)],
        )
        .unwrap()
        .get(0)
    };
    assert_eq!(live(&token1), 0, "sessions of a removed link end");
    assert_eq!(live(&token2), 0);
    assert_eq!(live(&token3), 1);
}

const UNVERIFIED: &str = "http://console.test/login?error=email_unverified";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the service before this defence stored after an unverified provider sign-in: an
/// unverified account without password created by the link (in one transaction, so with the
/// same `created_at`), and a session for whoever signed in. Returns the user id and the token.
fn legacy_takeover(email: &str, provider: &str, subject: &str) -> (i64, String) {
    let mut db = db();
    let mut tx = db.transaction().unwrap();
    let id: i64 = tx
        .query_one(
            "INSERT INTO users (email, name) VALUES ($1, 'Attacker') RETURNING id",
            &[&email],
        )
        .unwrap()
        .get(0);
    tx.execute(
        "INSERT INTO external_identities (provider, subject, user_id, email) VALUES ($1, $2, $3, $4)",
        &[&provider, &subject, &id, &email],
    )
    .unwrap();
    let token = insert_session(&mut tx, id);
    tx.commit().unwrap();
    (id, token)
}

#[test]
fn user_with_second_factor_gets_a_pending_session() {
    let w = world();
    let mut owner = w.server.client();
    let (email, signup) = owner.signup();
    db().execute(
        "UPDATE users SET email_verified = true, totp_secret = '\\x3132333435363738393031323334353637383930'
          WHERE id = $1",
        &[&user_id(&signup)],
    )
    .unwrap();
    let mut c = w.server.client();
    let r = w.sign_in(&mut c, "google", &Profile::new(&email));
    r.expect(302);
    assert_eq!(r.header("location"), Some("http://console.test/login/mfa"));
    let cookie = r.set_cookie("svc_session").expect("pending session cookie");
    assert!(cookie.contains("Max-Age=600"), "{cookie}");
    assert!(
        r.set_cookie("svc_csrf").is_some(),
        "a CSRF token for the new session"
    );
    c.get("/auth/session").expect_error(401, "mfa_required");
}

#[test]
fn callback_without_a_valid_state_is_refused() {
    let w = world();
    let mut c = w.server.client();
    let auth = w.begin(&mut c, "google");
    let code = w.google.authorize(&auth, &Profile::new(&unique_email()));
    let r = w.callback(&mut c, "google", &format!("code={}", percent_encode(&code)));
    assert_refused(&mut c, &r);

    let auth = w.begin(&mut c, "google");
    let code = w.google.authorize(&auth, &Profile::new(&unique_email()));
    let r = w.callback(&mut c, "google", &code_query(&code, "not-the-state"));
    assert_refused(&mut c, &r);
    let r = w.callback(&mut c, "google", &code_query(&code, ""));
    assert_refused(&mut c, &r);
}

#[test]
fn state_of_the_other_provider_is_refused_and_used_up() {
    let w = world();
    let mut c = w.server.client();
    let auth = w.begin(&mut c, "google");
    let binding = c.cookies["svc_oauth"].clone();
    let code = w.google.authorize(&auth, &Profile::new(&unique_email()));
    let query = code_query(&code, auth.get("state"));
    let r = w.callback(&mut c, "github", &query);
    assert_refused(&mut c, &r);
    // The binding cookie went with the refusal; restore it to show the state itself is gone.
    c.cookies.insert("svc_oauth".into(), binding);
    let r = w.callback(&mut c, "google", &query);
    assert_refused(&mut c, &r);
    assert!(
        w.github.seen().is_empty(),
        "no exchange with the wrong provider"
    );
}

#[test]
fn a_state_is_single_use() {
    let w = world();
    let mut c = w.server.client();
    let auth = w.begin(&mut c, "github");
    let binding = c.cookies["svc_oauth"].clone();
    let code = w.github.authorize(&auth, &Profile::new(&unique_email()));
    let query = code_query(&code, auth.get("state"));
    let r = w.callback(&mut c, "github", &query);
    assert_signed_in(&mut c, &r);
    let mut replay = w.server.client();
    replay.cookies.insert("svc_oauth".into(), binding);
    let r = w.callback(&mut replay, "github", &query);
    assert_refused(&mut replay, &r);
}

#[test]
fn an_expired_state_is_refused() {
    let w = world();
    let mut c = w.server.client();
    let auth = w.begin(&mut c, "google");
    let code = w.google.authorize(&auth, &Profile::new(&unique_email()));
    let n = db()
        .execute(
            "UPDATE oauth_states SET expires_at = now() - interval '1 second' WHERE state_hash = $1",
            &[&state_hash(auth.get("state"))],
        )
        .unwrap();
    assert_eq!(n, 1);
    let r = w.callback(&mut c, "google", &code_query(&code, auth.get("state")));
    assert_refused(&mut c, &r);
}

#[test]
fn state_is_bound_to_the_browser_that_started() {
    let w = world();
    // Missing binding cookie.
    let mut c = w.server.client();
    let auth = w.begin(&mut c, "google");
    let code = w.google.authorize(&auth, &Profile::new(&unique_email()));
    c.cookies.remove("svc_oauth");
    let r = w.callback(&mut c, "google", &code_query(&code, auth.get("state")));
    assert_refused(&mut c, &r);

    // Login CSRF: an attacker's state and code delivered to a victim's browser.
    let mut attacker = w.server.client();
    let auth = w.begin(&mut attacker, "github");
    let code = w.github.authorize(&auth, &Profile::new(&unique_email()));
    let mut victim = w.server.client();
    w.begin(&mut victim, "github");
    let r = w.callback(&mut victim, "github", &code_query(&code, auth.get("state")));
    assert_refused(&mut victim, &r);
}

#[test]
fn provider_errors_are_denied_or_failed() {
    let w = world();
    let mut c = w.server.client();
    let auth = w.begin(&mut c, "google");
    let binding = c.cookies["svc_oauth"].clone();
    let state = percent_encode(auth.get("state"));
    let r = w.callback(
        &mut c,
        "google",
        &format!("error=access_denied&state={state}"),
    );
    assert_refused_with(&mut c, &r, "http://console.test/login?error=oauth_denied");
    // The attempt is used up by the error answer.
    c.cookies.insert("svc_oauth".into(), binding);
    let code = w.google.authorize(&auth, &Profile::new(&unique_email()));
    let r = w.callback(&mut c, "google", &code_query(&code, auth.get("state")));
    assert_refused(&mut c, &r);

    let auth = w.begin(&mut c, "github");
    let state = percent_encode(auth.get("state"));
    let r = w.callback(
        &mut c,
        "github",
        &format!("error=temporarily_unavailable&error_description=x%0D%0Ay&state={state}"),
    );
    assert_refused(&mut c, &r);
}

#[test]
fn a_failed_code_exchange_is_refused() {
    let w = world();
    for provider in ["google", "github"] {
        let mut c = w.server.client();
        let auth = w.begin(&mut c, provider);
        // A code the provider never issued: Google answers 400, GitHub 200 with `error`.
        let r = w.callback(&mut c, provider, &code_query("forged", auth.get("state")));
        assert_refused(&mut c, &r);
    }
}

#[test]
fn pkce_verifier_is_checked_by_the_provider() {
    let w = world();
    for provider in ["google", "github"] {
        let mut c = w.server.client();
        let auth = w.begin(&mut c, provider);
        // The provider remembers another challenge than the one consoled sent.
        let other = consoled::auth::oauth::pkce_challenge("someone else's verifier");
        let code =
            w.idp(provider)
                .authorize_with_challenge(&auth, &Profile::new(&unique_email()), &other);
        let r = w.callback(&mut c, provider, &code_query(&code, auth.get("state")));
        assert_refused(&mut c, &r);
    }
}

#[test]
fn wrong_id_token_claims_are_refused() {
    let w = world();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let cases = [
        ("iss", json!("https://evil.example.com")),
        ("aud", json!("another-client")),
        ("exp", json!(now - 5)),
        ("nonce", json!("another-nonce")),
        ("nonce", Value::Null),
    ];
    for (claim, value) in cases {
        w.google.reset_claims();
        // `null` removes the claim.
        w.google.set_claim(claim, value.clone());
        let mut c = w.server.client();
        let r = w.sign_in(&mut c, "google", &Profile::new(&unique_email()));
        r.expect(302);
        assert_eq!(r.header("location"), Some(FAILED), "{claim} = {value}");
        assert_refused(&mut c, &r);
    }
    w.google.reset_claims();
    let mut c = w.server.client();
    w.signed_in(&mut c, "google", &Profile::new(&unique_email()));
}

#[test]
fn github_without_a_verified_primary_email_is_refused() {
    let w = world();
    w.github.set_primary_unverified(true);
    let mut c = w.server.client();
    let email = unique_email();
    let r = w.sign_in(&mut c, "github", &Profile::new(&email));
    assert_refused_with(&mut c, &r, UNVERIFIED);
    let users: i64 = db()
        .query_one("SELECT count(*) FROM users WHERE email = $1", &[&email])
        .unwrap()
        .get(0);
    assert_eq!(users, 0);
}

#[test]
fn a_hanging_provider_fails_within_the_timeout_and_blocks_nobody() {
    let w = world_with(&[("CONSOLED_OAUTH_TIMEOUT_SECONDS", "1")]);
    w.google.set_hang(true);
    let mut c = w.server.client();
    let auth = w.begin(&mut c, "google");
    let code = w.google.authorize(&auth, &Profile::new(&unique_email()));
    let query = code_query(&code, auth.get("state"));
    let addr = w.server.addr;
    let cookies = c.cookies.clone();
    let started = Instant::now();
    let hanging = std::thread::spawn(move || {
        let mut c = Client::new(addr);
        c.cookies = cookies;
        let r = c.get(&format!("/auth/oauth/google/callback?{query}"));
        (r, started.elapsed())
    });
    // Meanwhile the server answers others at once.
    std::thread::sleep(Duration::from_millis(200));
    let quick = Instant::now();
    w.server.client().get("/auth/providers").expect(200);
    assert!(quick.elapsed() < Duration::from_millis(500));
    let (r, took) = hanging.join().unwrap();
    assert!(
        took >= Duration::from_millis(900),
        "gave up too early: {took:?}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
    r.expect(302);
    assert_eq!(r.header("location"), Some(FAILED));
    assert!(r.set_cookie("svc_session").is_none());
}

/// An account without a password proves itself for second-factor changes by signing in again
/// through its provider (issue 15, item 2).
#[test]
fn a_provider_account_re_proves_itself_by_signing_in_again() {
    let w = world();
    let profile = Profile::new(&unique_email());
    let mut c = w.server.client();
    let state = w.signed_in(&mut c, "google", &profile);
    db().execute(
        "UPDATE sessions SET created_at = now() - interval '301 seconds' WHERE user_id = $1",
        &[&user_id(&state)],
    )
    .unwrap();
    c.post("/auth/mfa/totp/setup", &json!({}))
        .expect_error(403, "reauth_required");
    w.signed_in(&mut c, "google", &profile);
    c.post("/auth/mfa/totp/setup", &json!({})).expect(200);
}

/// Issue 25, item 2: an account made by a provider sign-in has no password; it sets one without
/// a current password soon after signing in, and only then (a stolen old cookie cannot), and
/// the password then signs in. The provider sign-in's session is listed with the others.
#[test]
fn a_provider_account_sets_a_first_password_soon_after_signing_in() {
    let w = world();
    let email = unique_email();
    let profile = Profile::new(&email);
    let mut c = w.server.client();
    let state = w.signed_in(&mut c, "github", &profile);
    assert_eq!(state["user"]["has_password"], false);
    let r = c.get("/auth/sessions");
    r.expect(200);
    assert_eq!(r.json()["sessions"][0]["current"], true);
    db().execute(
        "UPDATE sessions SET created_at = now() - interval '301 seconds' WHERE user_id = $1",
        &[&user_id(&state)],
    )
    .unwrap();
    let change = json!({"password": "my first own password"});
    c.post("/auth/password/change", &change)
        .expect_error(403, "reauth_required");
    w.signed_in(&mut c, "github", &profile);
    c.post("/auth/password/change", &change).expect(204);
    assert_eq!(c.get("/auth/session").json()["user"]["has_password"], true);
    w.server
        .client()
        .login(&email, "my first own password")
        .expect(200);
}
