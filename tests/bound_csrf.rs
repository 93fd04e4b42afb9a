//! The CSRF token is bound to the session (issue 25, item 5): a cookie and header planted from
//! another browser are refused, the token changes with every change of the session, a same-site
//! request passes only from an allowed origin, and instances share the key that signs tokens.

mod common;

use common::*;
use consoled::crypto::{base32_decode, totp_code, unix_now};
use serde_json::json;

const CT: (&str, &str) = ("Content-Type", "application/json");

/// `c`'s session cookie with someone else's CSRF pair, as a sibling subdomain can plant it.
fn post_with_pair(c: &mut Client, path: &str, pair: &str) -> Response {
    let mut planted = c.clone();
    planted.cookies.insert("svc_csrf".into(), pair.to_string());
    planted.send("POST", path, &[CT, ("X-CSRF-Token", pair)], b"{}")
}

#[test]
fn a_csrf_pair_from_another_browser_is_refused_on_a_signed_in_session() {
    let server = TestServer::start();
    // Browser A: a pair fetched before sign-in, and one of A's own session.
    let mut a = server.client();
    let a_anonymous = a.csrf();
    a.signup();
    let a_signed_in = a.csrf();
    // Browser B, signed in.
    let mut b = server.client();
    b.signup();
    for pair in [&a_anonymous, &a_signed_in] {
        let r = post_with_pair(&mut b, "/auth/logout", pair);
        r.expect_error(403, "csrf_invalid");
        assert!(r.set_cookie("svc_session").is_none(), "not signed out");
    }
    b.get("/auth/session").expect(200);
    // B's own pair still works.
    b.post_empty("/auth/logout").expect(204);
}

#[test]
fn the_token_changes_with_the_session_and_the_old_one_is_refused() {
    let server = TestServer::start();
    let mut c = server.client();
    let before = c.csrf();
    let (email, _) = c.signup();
    let after_signup = c.csrf();
    assert_ne!(before, after_signup, "sign-up sets a new token");
    // The anonymous token no longer passes with the new session.
    post_with_pair(&mut c, "/auth/verify-email/resend", &before).expect_error(403, "csrf_invalid");
    let r = c.post_empty("/auth/logout");
    r.expect(204);
    let after_logout = r.set_cookie("svc_csrf").expect("logout sets a new token");
    assert!(!after_logout.contains(&after_signup));
    let r = c.login(&email, PASSWORD);
    r.expect(200);
    let after_login = c.csrf();
    assert!(r.set_cookie("svc_csrf").unwrap().contains(&after_login));
    assert_ne!(after_login, after_signup);
    post_with_pair(&mut c, "/auth/verify-email/resend", &after_signup)
        .expect_error(403, "csrf_invalid");
    // GET /auth/csrf keeps a valid token and replaces a stale one.
    assert!(c.get("/auth/csrf").set_cookie("svc_csrf").is_none());
    c.cookies.insert("svc_csrf".into(), after_signup.clone());
    let fresh = c.get("/auth/csrf");
    let fresh = fresh
        .set_cookie("svc_csrf")
        .expect("a stale token is replaced");
    assert!(!fresh.contains(&after_signup));
    c.post_empty("/auth/verify-email/resend").expect(204);
}

#[test]
fn the_second_factor_changes_the_token_at_each_step() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, _) = c.signup();
    let r = c.post("/auth/mfa/totp/setup", &json!({}));
    let secret = base32_decode(r.json()["secret"].as_str().unwrap()).unwrap();
    let code = totp_code(&secret, unix_now() / 30);
    let r = c.post("/auth/mfa/totp/enable", &json!({ "code": code }));
    let recovery = r.json()["recovery_codes"][0].as_str().unwrap().to_string();
    let mut b = server.client();
    let anonymous = b.csrf();
    let r = b.login(&email, PASSWORD);
    assert_eq!(r.json()["mfa_required"], true);
    let pending = b.csrf();
    assert_ne!(pending, anonymous, "the pending session gets its own token");
    let r = b.post("/auth/mfa/totp", &json!({ "code": recovery }));
    r.expect(200);
    let full = b.csrf();
    assert!(r.set_cookie("svc_csrf").unwrap().contains(&full));
    assert_ne!(full, pending);
    post_with_pair(&mut b, "/auth/verify-email/resend", &pending).expect_error(403, "csrf_invalid");
}

#[test]
fn a_client_that_keeps_a_cleared_session_cookie_can_sign_in_again() {
    // curl's cookie jar keeps svc_session after logout clears it; the token logout issued is a
    // pre-session one, and it passes because that session has ended.
    let server = TestServer::start();
    let mut c = server.client();
    let (email, _) = c.signup();
    let session = c.cookies["svc_session"].clone();
    c.post_empty("/auth/logout").expect(204);
    let pre_session = c.cookies["svc_csrf"].clone();
    let mut kept = c.clone();
    kept.cookies.insert("svc_session".into(), session);
    let body = serde_json::to_vec(&json!({"email": email, "password": PASSWORD})).unwrap();
    kept.send(
        "POST",
        "/auth/login",
        &[CT, ("X-CSRF-Token", &pre_session)],
        &body,
    )
    .expect(200);
}

#[test]
fn same_site_requests_pass_only_from_an_allowed_origin() {
    let server = TestServer::with(&[("CONSOLED_CONSOLE_URL", "https://console.example.com")]);
    let mut c = server.client();
    let token = c.csrf();
    let body = |email: &str| {
        serde_json::to_vec(&json!({"email": email, "password": PASSWORD, "name": "N"})).unwrap()
    };
    let same_site = ("Sec-Fetch-Site", "same-site");
    let csrf = ("X-CSRF-Token", token.as_str());
    for extra in [vec![], vec![("Origin", "https://evil.example.com")]] {
        let mut headers = vec![CT, csrf, same_site];
        headers.extend(extra);
        c.send("POST", "/auth/signup", &headers, &body(&unique_email()))
            .expect_error(403, "csrf_invalid");
    }
    let console = ("Origin", "https://console.example.com");
    c.send(
        "POST",
        "/auth/signup",
        &[CT, csrf, same_site, console],
        &body(&unique_email()),
    )
    .expect(201);
}

#[test]
fn a_token_from_one_instance_passes_on_another() {
    // No key configured: the instances share the one kept in the database.
    let (one, two) = (TestServer::start(), TestServer::start());
    let mut c = one.client();
    c.signup();
    c.addr = two.addr;
    c.post_empty("/auth/verify-email/resend").expect(204);
    // A data key: the CSRF key is derived from it, the same on every instance.
    let key = (
        "CONSOLED_DATA_KEY",
        "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=",
    );
    let (one, two) = (TestServer::with(&[key]), TestServer::with(&[key]));
    let mut c = one.client();
    c.signup();
    c.addr = two.addr;
    c.post_empty("/auth/logout").expect(204);
    // An instance with another key refuses it.
    let other = TestServer::with(&[(
        "CONSOLED_DATA_KEY",
        "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=",
    )]);
    let mut c = one.client();
    c.signup();
    c.addr = other.addr;
    c.post_empty("/auth/logout")
        .expect_error(403, "csrf_invalid");
}

/// Signs in again with the `svc_csrf` cookie the jar holds, as a console that read it afresh
/// does, without asking `GET /auth/csrf` first.
fn login_with_the_jar_token(c: &mut Client, email: &str) -> Response {
    let token = c.cookies.get("svc_csrf").cloned().unwrap_or_default();
    let body = serde_json::to_vec(&json!({"email": email, "password": PASSWORD})).unwrap();
    c.send(
        "POST",
        "/auth/login",
        &[CT, ("X-CSRF-Token", &token)],
        &body,
    )
}

/// Every answer that ends or clears the session re-issues the CSRF cookie, as a successful
/// logout does (issue 31): the fifth wrong code ends the pending session, and a logout of a
/// session that has ended answers 401; both clear `svc_session`, and the client's next sign-in
/// must not be refused for a token bound to the session that is gone.
#[test]
fn an_answer_that_clears_the_session_also_hands_out_a_new_csrf_token() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, _) = c.signup();
    let r = c.post("/auth/mfa/totp/setup", &json!({}));
    let secret = base32_decode(r.json()["secret"].as_str().unwrap()).unwrap();
    let code = totp_code(&secret, unix_now() / 30);
    c.post("/auth/mfa/totp/enable", &json!({ "code": code }))
        .expect(200);

    let mut b = server.client();
    assert_eq!(b.login(&email, PASSWORD).json()["mfa_required"], true);
    let mut last = None;
    for _ in 0..5 {
        // A recovery code nobody was given.
        last = Some(b.post("/auth/mfa/totp", &json!({ "code": "aaaa-bbbb-cccc-dddd" })));
    }
    let r = last.unwrap();
    r.expect_error(401, "invalid_code");
    assert!(r.set_cookie("svc_session").unwrap().contains("Max-Age=0"));
    assert!(r.set_cookie("svc_csrf").is_some(), "no new svc_csrf");
    let r = login_with_the_jar_token(&mut b, &email);
    r.expect(200);
    assert_eq!(r.json()["mfa_required"], true);

    // A logout of a session that ended meanwhile (elsewhere): 401, the cookie cleared.
    let mut d = server.client();
    let (email, _) = d.signup();
    d.csrf();
    db().execute(
        "DELETE FROM sessions WHERE token_hash = $1",
        &[&consoled::crypto::token_hash(&d.cookies["svc_session"])],
    )
    .unwrap();
    let r = d.post_empty("/auth/logout");
    r.expect_error(401, "unauthorized");
    assert!(r.set_cookie("svc_session").unwrap().contains("Max-Age=0"));
    assert!(r.set_cookie("svc_csrf").is_some(), "no new svc_csrf");
    login_with_the_jar_token(&mut d, &email).expect(200);
}
