//! A stolen copy of the session cookie after the owner acts (issue 37, items 5 to 7): every
//! action that ends the user's other sessions also gives this session a new token and ends the
//! streams opened with the old one within a second (a browser's `EventSource` reconnects with the
//! new cookie by itself); ending other sessions asks for the same proof of presence as the
//! second factor's changes; a password change voids the reset links mailed before it.

mod common;

use std::time::Duration;

use common::sse::{self, Ev, Sse};
use common::*;
use consoled::crypto::{base32_decode, totp_code, unix_now};
use consoled::db::mail_tokens::{self, Purpose};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(5);
const NEW_PASSWORD: &str = "a brand new secret";

fn stream(server: &TestServer, token: &str) -> Sse {
    let mut s = sse::open(server.addr, &[("Cookie", &format!("svc_session={token}"))]);
    assert_eq!(s.status, 200, "{}", String::from_utf8_lossy(&s.body));
    assert_eq!(s.next(T), Ev::Ready);
    s
}

/// DELETE with the CSRF header and an optional JSON body, as the console sends it.
fn delete(c: &mut Client, path: &str, body: Option<&Value>) -> Response {
    let token = c.csrf();
    match body {
        None => c.send("DELETE", path, &[("X-CSRF-Token", &token)], b""),
        Some(body) => c.send(
            "DELETE",
            path,
            &[
                ("X-CSRF-Token", &token),
                ("Content-Type", "application/json"),
            ],
            &serde_json::to_vec(body).unwrap(),
        ),
    }
}

/// Sets up the second factor's offer on `c`; returns a code that enables it.
fn offer_totp(c: &mut Client) -> String {
    let r = c.post("/auth/mfa/totp/setup", &json!({}));
    r.expect(200);
    let secret = base32_decode(r.json()["secret"].as_str().unwrap()).unwrap();
    totp_code(&secret, unix_now() / 30)
}

/// The owner's session and a thief's copy of its cookie, each with a stream open; `act` is the
/// owner's action. Afterwards: both streams opened with the old token end within a second, the
/// old cookie is refused, and the owner's browser opens a new stream with the new cookie, which
/// stays open.
fn rotation_ends_old_streams(act: impl FnOnce(&TestServer, &mut Client) -> Response) {
    let server = TestServer::start();
    let mut owner = server.client();
    owner.signup();
    let old = owner.cookies["svc_session"].clone();
    let mut thief = server.client();
    thief.cookies.insert("svc_session".into(), old.clone());
    let mut thiefs = stream(&server, &old);
    let mut owners = stream(&server, &old);

    let r = act(&server, &mut owner);
    assert!(r.status < 300, "the action: {}", r.status);
    let new = owner.cookies["svc_session"].clone();
    assert_ne!(new, old, "the response set a new session cookie");
    for (who, s) in [("thief", &mut thiefs), ("owner", &mut owners)] {
        let took = s.wait_end(Duration::from_secs(1));
        assert!(
            took.is_some(),
            "the {who}'s stream on the old token still runs"
        );
    }
    thief.get("/auth/session").expect_error(401, "unauthorized");
    owner.get("/auth/session").expect(200);
    let mut again = stream(&server, &new);
    assert_eq!(
        again.next(Duration::from_secs(1)),
        Ev::Timeout,
        "it stays open"
    );
}

#[test]
fn a_password_change_ends_the_streams_of_the_old_token() {
    rotation_ends_old_streams(|_, c| {
        c.post(
            "/auth/password/change",
            &json!({"current_password": PASSWORD, "password": NEW_PASSWORD}),
        )
    });
}

#[test]
fn enabling_the_second_factor_ends_the_streams_of_the_old_token() {
    rotation_ends_old_streams(|_, c| {
        let code = offer_totp(c);
        c.post("/auth/mfa/totp/enable", &json!({ "code": code }))
    });
}

#[test]
fn ending_the_other_sessions_ends_the_streams_of_the_old_token() {
    rotation_ends_old_streams(|_, c| delete(c, "/auth/sessions", None));
}

#[test]
fn ending_another_session_ends_the_streams_of_the_old_token() {
    rotation_ends_old_streams(|server, c| {
        let email = c.get("/auth/session").json()["user"]["email"]
            .as_str()
            .unwrap()
            .to_string();
        let mut other = server.client();
        other.login(&email, PASSWORD).expect(200);
        let list = c.get("/auth/sessions").json();
        let id = list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["current"] == false)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        delete(c, &format!("/auth/sessions/{id}"), None)
    });
}

/// Item 7 (ASVS 7.5.2): a stolen cookie older than `CONSOLED_REAUTH_SECONDS` cannot end the
/// owner's newer sessions without the password; ending its own session (a logout) needs none.
#[test]
fn ending_other_sessions_needs_a_recent_sign_in_or_the_password() {
    let server = TestServer::start();
    let mut thief = server.client();
    let (email, state) = thief.signup();
    db().execute(
        "UPDATE sessions SET created_at = now() - interval '301 seconds' WHERE user_id = $1",
        &[&state["user"]["id"].as_i64().unwrap()],
    )
    .unwrap();
    let mut owner = server.client();
    owner.login(&email, PASSWORD).expect(200);
    let list = thief.get("/auth/sessions").json();
    let ids: Vec<(String, bool)> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_string(), s["current"] == true))
        .collect();
    let owners = &ids.iter().find(|(_, current)| !current).unwrap().0;
    let own = &ids.iter().find(|(_, current)| *current).unwrap().0;

    for path in [
        "/auth/sessions".to_string(),
        format!("/auth/sessions/{owners}"),
    ] {
        delete(&mut thief, &path, None).expect_error(403, "reauth_required");
        let wrong = json!({"password": "not the password"});
        delete(&mut thief, &path, Some(&wrong)).expect_error(403, "reauth_required");
    }
    owner.get("/auth/session").expect(200);
    // With the password, the old session may: the owner's session ends.
    let proof = json!({ "password": PASSWORD });
    delete(
        &mut thief,
        &format!("/auth/sessions/{owners}"),
        Some(&proof),
    )
    .expect(204);
    owner.get("/auth/session").expect_error(401, "unauthorized");
    // Ending its own session is a logout, which needs no proof.
    let r = delete(&mut thief, &format!("/auth/sessions/{own}"), None);
    r.expect(204);
    thief.get("/auth/session").expect_error(401, "unauthorized");
}

/// Item 6: a reset link mailed before a password change (or a reset mail still queued) no longer
/// works after it: the change would otherwise be undone by whoever holds the link, and every
/// session of the owner ended.
#[test]
fn a_password_change_voids_the_reset_links_sent_before_it() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, state) = c.signup();
    let id = state["user"]["id"].as_i64().unwrap();
    let link = mail_tokens::create(&mut db(), id, Purpose::PasswordReset, &email).unwrap();
    server
        .client()
        .post("/auth/password/forgot", &json!({ "email": email }))
        .expect(204);
    let queued = || -> i64 {
        db().query_one(
            "SELECT count(*) FROM outbox WHERE kind = 'password_reset' AND recipient = $1",
            &[&email],
        )
        .unwrap()
        .get(0)
    };
    assert_eq!(queued(), 1);
    c.post(
        "/auth/password/change",
        &json!({"current_password": PASSWORD, "password": NEW_PASSWORD}),
    )
    .expect(204);
    assert_eq!(queued(), 0, "the queued reset mail is dropped");
    server
        .client()
        .post(
            "/auth/password/reset",
            &json!({"token": link, "password": "someone else's pick"}),
        )
        .expect_error(400, "invalid_token");
    c.get("/auth/session").expect(200);
    server.client().login(&email, NEW_PASSWORD).expect(200);
}
