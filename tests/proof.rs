//! A second factor planted before the address was proven (issue 37, item 1): a stranger signs up
//! with the owner's address and enables TOTP at once; when the owner proves the address (a reset
//! link, or a provider that has verified it), every factor and device cookie enrolled before
//! the proof goes with the stranger's password and sessions. A factor the owner enrolled after
//! the address was proven stays.

mod common;

use common::fake_idp::{AuthRequest, FakeIdp, Profile};
use common::*;
use consoled::crypto::{base32_decode, totp_code, unix_now};
use consoled::db::mail_tokens::{self, Purpose};
use consoled::http::percent_encode;
use serde_json::{json, Value};

const NEW_PASSWORD: &str = "the owner's own secret";

/// The stranger's side: signs up with `email` (never proven) on `c`, signs in once more (a
/// device cookie), enables TOTP; returns the user id and the recovery codes.
fn plant_second_factor(c: &mut Client, email: &str) -> (i64, Vec<String>) {
    let r = c.post(
        "/auth/signup",
        &json!({"email": email, "password": PASSWORD, "name": "Stranger"}),
    );
    r.expect(201);
    let id = r.json()["user"]["id"].as_i64().unwrap();
    c.login(email, PASSWORD).expect(200);
    assert!(c.cookies.contains_key("svc_device"));
    let r = c.post("/auth/mfa/totp/setup", &json!({}));
    r.expect(200);
    let secret = base32_decode(r.json()["secret"].as_str().unwrap()).unwrap();
    let code = totp_code(&secret, unix_now() / 30);
    let r = c.post("/auth/mfa/totp/enable", &json!({ "code": code }));
    r.expect(200);
    let codes = r.json()["recovery_codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    (id, codes)
}

/// What the account still holds of an enrolment: (TOTP secret set, recovery codes, device
/// cookies).
fn enrolled(user_id: i64) -> (bool, i64, i64) {
    let row = db()
        .query_one(
            "SELECT totp_secret IS NOT NULL OR totp_pending IS NOT NULL,
                    (SELECT count(*) FROM recovery_codes WHERE user_id = $1),
                    (SELECT count(*) FROM device_cookies WHERE user_id = $1)
               FROM users WHERE id = $1",
            &[&user_id],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

fn reset(server: &TestServer, user_id: i64, email: &str) {
    let token = mail_tokens::create(&mut db(), user_id, Purpose::PasswordReset, email).unwrap();
    server
        .client()
        .post(
            "/auth/password/reset",
            &json!({"token": token, "password": NEW_PASSWORD}),
        )
        .expect(204);
}

/// The stranger's recovery codes no longer complete any sign-in of the account.
fn recovery_codes_are_dead(server: &TestServer, email: &str, codes: &[String]) {
    let mut c = server.client();
    let r = c.login(email, NEW_PASSWORD);
    r.expect(200);
    assert_eq!(r.json()["mfa_required"], false, "no second factor is asked");
    c.post("/auth/mfa/totp", &json!({ "code": codes[0] }))
        .expect_error(400, "invalid_input");
}

#[test]
fn a_reset_removes_the_second_factor_enrolled_before_the_address_was_proven() {
    let server = TestServer::start();
    let email = unique_email();
    let mut stranger = server.client();
    let (id, codes) = plant_second_factor(&mut stranger, &email);
    assert_eq!(enrolled(id), (true, 10, 1));
    reset(&server, id, &email);
    assert_eq!(
        enrolled(id),
        (false, 0, 0),
        "(TOTP, recovery codes, devices)"
    );
    stranger
        .get("/auth/session")
        .expect_error(401, "unauthorized");
    recovery_codes_are_dead(&server, &email, &codes);
}

/// The owner clicked the verification link the stranger's sign-up sent them first: the factor
/// was still enrolled before the address was proven, and the owner's reset removes it.
#[test]
fn a_factor_enrolled_before_a_verification_link_does_not_survive_the_owners_reset() {
    let server = TestServer::start();
    let email = unique_email();
    let mut stranger = server.client();
    let (id, codes) = plant_second_factor(&mut stranger, &email);
    let verify = mail_tokens::create(&mut db(), id, Purpose::VerifyEmail, &email).unwrap();
    server
        .client()
        .post("/auth/verify-email", &json!({ "token": verify }))
        .expect(204);
    assert!(enrolled(id).0, "a verification link removes nothing");
    reset(&server, id, &email);
    assert_eq!(enrolled(id), (false, 0, 0));
    recovery_codes_are_dead(&server, &email, &codes);
}

/// The owner's own factor, enrolled once the address was proven, survives a reset: the owner
/// still needs it to sign in.
#[test]
fn a_factor_enrolled_after_the_proof_survives_a_reset() {
    let server = TestServer::start();
    let mut owner = server.client();
    let (email, state) = owner.signup();
    let id = state["user"]["id"].as_i64().unwrap();
    let verify = mail_tokens::create(&mut db(), id, Purpose::VerifyEmail, &email).unwrap();
    owner
        .post("/auth/verify-email", &json!({ "token": verify }))
        .expect(204);
    let r = owner.post("/auth/mfa/totp/setup", &json!({}));
    let secret = base32_decode(r.json()["secret"].as_str().unwrap()).unwrap();
    let code = totp_code(&secret, unix_now() / 30);
    owner
        .post("/auth/mfa/totp/enable", &json!({ "code": code }))
        .expect(200);
    reset(&server, id, &email);
    assert!(enrolled(id).0);
    let r = server.client().login(&email, NEW_PASSWORD);
    r.expect(200);
    assert_eq!(r.json()["mfa_required"], true);
}

/// The reproduction through a provider: the owner signs in with Google, which has
/// verified the address; before, the owner was stuck at `mfa_required` and the stranger's
/// recovery code completed the owner's sign-in.
#[test]
fn a_provider_proof_removes_the_second_factor_enrolled_before_it() {
    let google = FakeIdp::google();
    let vars: Vec<(String, String)> = google.env();
    let refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = TestServer::with(&refs);
    let email = unique_email();
    let mut stranger = server.client();
    let (id, codes) = plant_second_factor(&mut stranger, &email);

    let mut owner = server.client();
    let r = owner.get("/auth/oauth/google/start");
    r.expect(302);
    let auth = AuthRequest::parse(r.header("location").unwrap());
    let code = google.authorize(&auth, &Profile::new(&email));
    let query = format!(
        "code={}&state={}",
        percent_encode(&code),
        percent_encode(auth.get("state"))
    );
    let r = owner.get(&format!("/auth/oauth/google/callback?{query}"));
    r.expect(302);
    let location = r.header("location").unwrap();
    assert!(!location.ends_with("/login/mfa"), "{location}");
    let state: Value = owner.get("/auth/session").expect(200).json();
    assert_eq!(state["user"]["id"], id);
    assert_eq!(state["user"]["mfa_enabled"], false);
    assert_eq!(enrolled(id), (false, 0, 0));
    stranger
        .get("/auth/session")
        .expect_error(401, "unauthorized");
    owner
        .post("/auth/mfa/totp", &json!({ "code": codes[0] }))
        .expect_error(400, "invalid_input");
}
