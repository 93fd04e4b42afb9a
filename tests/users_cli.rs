//! The operator's user commands (issue 32, item 6): `consoled user find|show|disable|enable|
//! signout|delete` print JSON like the other commands. A disabled user cannot sign in by any
//! route (password, second factor, provider, password reset), its sessions end and their streams
//! close within a second, and the API tokens it made are refused (their streams closed) until it
//! is enabled again. Every change tells every instance to forget the user (`u:`).

mod common;

use std::time::Duration;

use common::account::{cli, cli_fails, ready, Control};
use common::fake_idp::{AuthRequest, FakeIdp, Profile};
use common::sse::{self, Sse};
use common::*;
use consoled::http::percent_encode;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(5);
const SECOND: Duration = Duration::from_secs(1);

struct Account {
    client: Client,
    email: String,
    id: i64,
    project_id: i64,
}

fn account(server: &TestServer) -> Account {
    let mut client = server.client();
    let (email, state) = client.signup();
    Account {
        id: state["user"]["id"].as_i64().unwrap(),
        project_id: project_of(&state),
        client,
        email,
    }
}

impl Account {
    fn stream(&self, server: &TestServer) -> Sse {
        let cookie = format!("svc_session={}", self.client.cookies["svc_session"]);
        ready(sse::open(server.addr, &[("Cookie", &cookie)]))
    }
}

fn bearer(server: &TestServer, secret: &str) -> Sse {
    sse::open(
        server.addr,
        &[("Authorization", &format!("Bearer {secret}"))],
    )
}

/// An API token of `project` made by `user` (what a user-made token records), and its secret.
fn token_made_by(project: i64, user: i64) -> (i64, String) {
    let made = cli(&["token", "create", "--project", &project.to_string()]);
    let id = made["id"].as_i64().unwrap();
    db().execute(
        "UPDATE api_tokens SET created_by = $2 WHERE id = $1",
        &[&id, &user],
    )
    .unwrap();
    (id, made["token"].as_str().unwrap().to_string())
}

#[track_caller]
fn ends_within_a_second(s: &mut Sse, what: &str) {
    let took = s
        .wait_end(SECOND)
        .unwrap_or_else(|| panic!("{what} still open"));
    assert!(took < SECOND, "{what}: {took:?}");
}

#[test]
fn find_and_show_print_json_and_never_a_secret() {
    let server = TestServer::start();
    let domain = format!("{}.example.com", unique());
    let mut ids = Vec::new();
    for name in ["ada", "bob"] {
        let email = format!("{name}@{domain}");
        let r = server.client().post(
            "/auth/signup",
            &json!({"email": email, "password": PASSWORD, "name": name}),
        );
        r.expect(201);
        ids.push(r.json()["user"]["id"].as_i64().unwrap());
    }
    let found = cli(&[
        "user",
        "find",
        "--email",
        &format!("@{}", domain.to_uppercase()),
    ]);
    let users = found["users"].as_array().unwrap();
    assert_eq!(users.len(), 2, "{found}");
    assert_eq!(users[0]["id"], ids[0]);
    assert_eq!(users[0]["email"], format!("ada@{domain}"));
    assert_eq!(users[1]["name"], "bob");
    assert!(users[0]["disabled_at"].is_null());
    assert_eq!(users[0]["has_password"], true);
    let by_id = cli(&["user", "find", "--id", &ids[1].to_string()]);
    assert_eq!(by_id["users"][0]["email"], format!("bob@{domain}"));
    assert_eq!(
        cli(&["user", "find", "--id", "999999999"]),
        json!({"users": []})
    );
    let text = cli(&["user", "find", "--email", &domain]).to_string();
    assert!(!text.contains("$argon2"), "a hash was printed: {text}");

    let shown = cli(&["user", "show", "--email", &format!("ada@{domain}")]);
    assert_eq!(shown["user"]["id"], ids[0]);
    assert_eq!(shown["organizations"][0]["role"], "owner");
    assert_eq!(shown["projects"][0]["name"], "default");
    assert_eq!(shown["sessions"].as_array().unwrap().len(), 1);
    assert!(!shown.to_string().contains("$argon2"), "{shown}");

    for args in [
        &["user", "find"][..],
        &["user", "find", "--id", "1", "--email", "a"],
        &["user", "show"],
    ] {
        let err = cli_fails(args);
        assert!(err.contains("exactly one of --id"), "{args:?}: {err}");
    }
    let err = cli_fails(&["user", "show", "--id", "999999999"]);
    assert!(err.contains("no user with id 999999999"), "{err}");
    let err = cli_fails(&["user", "disable", "--email", "nobody@nowhere.example"]);
    assert!(err.contains("no account with the address"), "{err}");
}

/// Disabling ends the user's sessions and closes their streams and those of the tokens the user
/// made within a second, refuses those tokens and every sign-in; a command-line token of the
/// same project goes on. Enabling lets the user and the tokens back in.
#[test]
fn disabling_ends_access_at_once_and_enabling_restores_it() {
    let server = TestServer::start();
    let mut a = account(&server);
    let mut sessions = [a.stream(&server), a.stream(&server)];
    let (_, made) = token_made_by(a.project_id, a.id);
    let mut made_stream = ready(bearer(&server, &made));
    let cli_token = cli(&["token", "create", "--project", &a.project_id.to_string()]);
    let cli_secret = cli_token["token"].as_str().unwrap();
    let mut cli_stream = ready(bearer(&server, cli_secret));
    let mut control = Control::listen();

    let out = cli(&["user", "disable", "--id", &a.id.to_string()]);
    assert_eq!(
        out,
        json!({"user_id": a.id, "disabled": true, "changed": true, "sessions_ended": 1})
    );
    for s in &mut sessions {
        ends_within_a_second(s, "session stream");
    }
    ends_within_a_second(&mut made_stream, "stream of a token the user made");
    let heard = control.heard(SECOND);
    assert!(heard.forget(a.id), "{heard:?}");
    assert!(heard.user_change(a.id, "update"), "{heard:?}");

    // Refused while disabled: the session, the token the user made, and sign-in (only once the
    // password is right: a wrong one says nothing about the account).
    a.client
        .get("/auth/session")
        .expect_error(401, "unauthorized");
    let refused = bearer(&server, &made);
    assert_eq!(refused.status, 401);
    let mut c = server.client();
    c.login(&a.email, "not the password")
        .expect_error(401, "invalid_credentials");
    let r = c.login(&a.email, PASSWORD);
    r.expect_error(403, "account_disabled");
    assert!(r.set_cookie("svc_session").is_none());
    assert!(
        consoled::db::tokens::find(&mut db(), &made)
            .unwrap()
            .is_none(),
        "the one token look-up refuses it too"
    );
    // The command-line token of the same project is nobody's: it goes on.
    let marker = 7_000_000 + i64::from(std::process::id());
    db().execute(
        "SELECT consoled_notify_change('server', $1, 'update', $2)",
        &[&marker, &a.project_id],
    )
    .unwrap();
    // (Past the token's own announcement, which may reach the stream after it opened.)
    let seen = loop {
        let change = cli_stream.change(T);
        if change["type"] == "server" {
            break change;
        }
    };
    assert_eq!(seen["id"], marker);
    let again = cli(&["user", "disable", "--email", &a.email]);
    assert_eq!(again["changed"], false);

    let out = cli(&["user", "enable", "--id", &a.id.to_string()]);
    assert_eq!(
        out,
        json!({"user_id": a.id, "disabled": false, "changed": true, "sessions_ended": 0})
    );
    let heard = control.heard(SECOND);
    assert!(
        heard.forget(a.id) && heard.user_change(a.id, "update"),
        "{heard:?}"
    );
    c.login(&a.email, PASSWORD).expect(200);
    ready(bearer(&server, &made));
}

/// The routes that sign in without a password at that moment: a pending session's second
/// factor, a provider, a password reset. Each refuses a disabled account.
#[test]
fn a_disabled_user_cannot_sign_in_by_any_route() {
    let google = FakeIdp::google();
    let mut vars = google.env();
    vars.push(("CONSOLED_CONSOLE_URL".into(), "http://console.test".into()));
    let refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = TestServer::with(&refs);

    // A provider account: signed in once, disabled, refused on its return.
    let profile = Profile::new(&unique_email());
    let mut c = server.client();
    let first = google_sign_in(&google, &mut c, &profile);
    assert_eq!(first.header("location"), Some("http://console.test/"));
    let id = user_id_of(&profile.email);
    cli(&["user", "disable", "--id", &id.to_string()]);
    let mut c = server.client();
    let r = google_sign_in(&google, &mut c, &profile);
    assert_eq!(
        r.header("location"),
        Some("http://console.test/login?error=account_disabled")
    );
    assert!(r.set_cookie("svc_session").is_none());

    // A second factor on a pending session (one left from before the disabling): refused.
    let mut m = server.client();
    let (email, state) = m.signup();
    let user = state["user"]["id"].as_i64().unwrap();
    let setup = m.post("/auth/mfa/totp/setup", &json!({}));
    let secret = consoled::crypto::base32_decode(setup.json()["secret"].as_str().unwrap()).unwrap();
    let step = consoled::crypto::unix_now() / 30;
    let code = consoled::crypto::totp_code(&secret, step);
    let enabled = m.post("/auth/mfa/totp/enable", &json!({ "code": code }));
    enabled.expect(200);
    let recovery = enabled.json()["recovery_codes"][0]
        .as_str()
        .unwrap()
        .to_string();
    cli(&["user", "disable", "--email", &email]);
    let mut p = server.client();
    p.login(&email, PASSWORD)
        .expect_error(403, "account_disabled");
    let pending = consoled::crypto::new_token();
    db().execute(
        "INSERT INTO sessions (token_hash, user_id, mfa_pending, expires_at)
         VALUES ($1, $2, true, now() + interval '10 minutes')",
        &[&consoled::crypto::token_hash(&pending), &user],
    )
    .unwrap();
    p.cookies.insert("svc_session".into(), pending);
    p.post("/auth/mfa/totp", &json!({ "code": recovery }))
        .expect_error(403, "account_disabled");

    // A password reset with a link mailed before the disabling: refused before any hash.
    let token = consoled::crypto::new_token();
    db().execute(
        "INSERT INTO mail_tokens (user_id, purpose, token_hash, email, expires_at)
         VALUES ($1, 'password_reset', $2, $3, now() + interval '1 hour')",
        &[&user, &consoled::crypto::token_hash(&token), &email],
    )
    .unwrap();
    server
        .client()
        .post(
            "/auth/password/reset",
            &json!({"token": token, "password": "a brand new secret"}),
        )
        .expect_error(403, "account_disabled");

    // Enabled again: the same ways in work.
    cli(&["user", "enable", "--email", &email]);
    let mut again = server.client();
    let r = again.login(&email, PASSWORD);
    r.expect(200);
    assert_eq!(r.json()["mfa_required"], true);
    cli(&["user", "enable", "--id", &id.to_string()]);
    let mut g = server.client();
    let r = google_sign_in(&google, &mut g, &profile);
    assert_eq!(r.header("location"), Some("http://console.test/"));
}

/// A Google sign-in as the browser follows it: start, the user agrees, the callback's 302.
fn google_sign_in(google: &FakeIdp, c: &mut Client, profile: &Profile) -> Response {
    let r = c.get("/auth/oauth/google/start");
    r.expect(302);
    let auth = AuthRequest::parse(r.header("location").unwrap());
    let code = google.authorize(&auth, profile);
    let query = format!(
        "code={}&state={}",
        percent_encode(&code),
        percent_encode(auth.get("state"))
    );
    let r = c.get(&format!("/auth/oauth/google/callback?{query}"));
    r.expect(302);
    r
}

fn user_id_of(email: &str) -> i64 {
    db().query_one("SELECT id FROM users WHERE email = $1", &[&email])
        .unwrap()
        .get(0)
}

#[test]
fn signout_ends_every_session_and_its_streams_within_a_second() {
    let server = TestServer::start();
    let a = account(&server);
    let mut other = server.client();
    other.login(&a.email, PASSWORD).expect(200);
    let mut streams = [a.stream(&server), a.stream(&server)];
    let mut control = Control::listen();
    let out = cli(&["user", "signout", "--email", &a.email]);
    assert_eq!(out, json!({"user_id": a.id, "sessions_ended": 2}));
    for s in &mut streams {
        ends_within_a_second(s, "session stream");
    }
    let heard = control.heard(SECOND);
    assert!(heard.forget(a.id), "{heard:?}");
    other.get("/auth/session").expect_error(401, "unauthorized");
    // Not disabled: the user signs in again.
    other.login(&a.email, PASSWORD).expect(200);
}

/// `user delete` is the user's own deletion, refused while the user alone owns a team.
#[test]
fn delete_removes_the_user_and_refuses_the_last_owner_of_a_team() {
    let server = TestServer::start();
    let mut a = account(&server);
    let b = account(&server);
    let team: i64 = db()
        .query(
            "WITH o AS (INSERT INTO organizations (name, kind) VALUES ('Acme', 'team') RETURNING id)
             INSERT INTO memberships (org_id, user_id, role)
             SELECT o.id, u.id, CASE WHEN u.id = $1 THEN 'owner' ELSE 'member' END
               FROM o, users u WHERE u.id IN ($1, $2) RETURNING org_id",
            &[&a.id, &b.id],
        )
        .unwrap()[0]
        .get(0);
    let mut stream = a.stream(&server);
    let err = cli_fails(&["user", "delete", "--id", &a.id.to_string()]);
    assert!(
        err.contains(&format!("Acme (id {team})")) && err.contains("last owner"),
        "{err}"
    );
    a.client.get("/auth/session").expect(200);

    db().execute(
        "UPDATE memberships SET role = 'owner' WHERE org_id = $1 AND user_id = $2",
        &[&team, &b.id],
    )
    .unwrap();
    let mut control = Control::listen();
    let out = cli(&["user", "delete", "--email", &a.email]);
    assert_eq!(out, json!({"user_id": a.id, "deleted": true}));
    ends_within_a_second(&mut stream, "session stream");
    let heard = control.heard(SECOND);
    assert!(
        heard.forget(a.id) && heard.user_change(a.id, "delete"),
        "{heard:?}"
    );
    let left: Vec<Value> = cli(&["user", "find", "--id", &a.id.to_string()])["users"]
        .as_array()
        .unwrap()
        .clone();
    assert!(left.is_empty());
    let personal: i64 = db()
        .query_one(
            "SELECT count(*) FROM projects WHERE id = $1",
            &[&a.project_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(personal, 0, "the personal organization's project went too");
    let kept: i64 = db()
        .query_one(
            "SELECT count(*) FROM memberships WHERE org_id = $1",
            &[&team],
        )
        .unwrap()
        .get(0);
    assert_eq!(kept, 1, "the team stays with its other owner");
}
