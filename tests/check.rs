//! `GET /auth/check` (issue 31, items 1 and 6): the one check every other console service asks.
//! It names the caller of a session or an API token in `X-Consoled-*` headers and the body,
//! refuses with JSON 401, and applies the CSRF rules to a state-changing original request. How it
//! remembers what it checked is `tests/check_memory.rs`.

mod common;

use std::time::Duration;

use common::checks::*;
use common::*;
use serde_json::{json, Value};

#[test]
fn a_session_is_named_in_headers_and_body() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, state) = c.signup();
    let user_id = state["user"]["id"].as_i64().unwrap();
    let org = state["organizations"][0]["id"].as_i64().unwrap();
    let signed_in = consoled::crypto::unix_now() as i64;
    let r = by_session(server.addr, &c);
    r.expect(200);
    let public_id = c.get("/auth/sessions").json()["sessions"][0]["id"].clone();
    assert_eq!(
        r.header("X-Consoled-User"),
        Some(user_id.to_string().as_str())
    );
    assert_eq!(r.header("X-Consoled-Email"), Some(email.as_str()));
    assert_eq!(r.header("X-Consoled-Auth"), Some("session"));
    assert_eq!(r.header("X-Consoled-Session"), public_id.as_str());
    assert_eq!(
        r.header("X-Consoled-Orgs"),
        Some(format!("{org}:owner").as_str())
    );
    let auth_time: i64 = r.header("X-Consoled-Auth-Time").unwrap().parse().unwrap();
    assert!(
        (auth_time - signed_in).abs() <= 5,
        "{auth_time} {signed_in}"
    );
    for absent in ["X-Consoled-Token", "X-Consoled-Project", "X-Consoled-Scope"] {
        assert_eq!(r.header(absent), None, "{absent}");
    }
    assert_eq!(r.header("Cache-Control"), Some("no-store"));
    assert_eq!(
        r.json(),
        json!({
            "auth": "session", "user_id": user_id, "email": email, "session_id": public_id,
            "auth_time": auth_time, "orgs": [{"id": org, "role": "owner"}]
        })
    );
    // The session's secret appears nowhere in the answer.
    let token = &c.cookies["svc_session"];
    assert!(!format!("{:?}{}", r.headers, String::from_utf8_lossy(&r.body)).contains(token));
}

#[test]
fn only_active_organizations_are_listed_and_changes_show_within_a_second() {
    let server = TestServer::start();
    let mut c = server.client();
    let (_, state) = c.signup();
    let user_id = state["user"]["id"].as_i64().unwrap();
    let own = state["organizations"][0]["id"].as_i64().unwrap();
    by_session(server.addr, &c).expect(200);
    let team: i64 = db()
        .query_one(
            "INSERT INTO organizations (name, kind) VALUES ('t', 'team') RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    db().execute(
        "INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, 'viewer')",
        &[&team, &user_id],
    )
    .unwrap();
    let orgs = || {
        by_session(server.addr, &c)
            .header("X-Consoled-Orgs")
            .map(String::from)
    };
    let both = format!("{own}:owner,{team}:viewer");
    until(Duration::from_secs(1), || orgs().as_deref() == Some(&both)).expect("joined");
    db().execute(
        "UPDATE organizations SET status = 'suspended' WHERE id = $1",
        &[&team],
    )
    .unwrap();
    let one = format!("{own}:owner");
    until(Duration::from_secs(1), || orgs().as_deref() == Some(&one)).expect("suspended");
}

#[test]
fn a_token_is_named_by_its_project_scope_and_maker() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, state) = c.signup();
    let project = project_of(&state);
    let (id, secret) = make_token(&mut c, project, "read");
    let r = by_token(server.addr, &secret);
    r.expect(200);
    let user = state["user"]["id"].as_i64().unwrap();
    let expect = [
        ("X-Consoled-Auth", "token".to_string()),
        ("X-Consoled-Token", id.to_string()),
        ("X-Consoled-Project", project.to_string()),
        ("X-Consoled-Scope", "read".to_string()),
        ("X-Consoled-User", user.to_string()),
        ("X-Consoled-Email", email.clone()),
    ];
    for (name, value) in expect {
        assert_eq!(r.header(name), Some(value.as_str()), "{name}");
    }
    for absent in [
        "X-Consoled-Session",
        "X-Consoled-Auth-Time",
        "X-Consoled-Orgs",
    ] {
        assert_eq!(r.header(absent), None, "{absent}");
    }
    assert_eq!(r.json()["token_id"], id);
    assert!(!String::from_utf8_lossy(&r.body).contains(&secret));
    // The command line's token: no maker, everything allowed.
    let (_, cli) = consoled::db::tokens::create(&mut db(), project, "cli").unwrap();
    let r = by_token(server.addr, &cli);
    r.expect(200);
    assert_eq!(r.header("X-Consoled-User"), None);
    assert_eq!(r.header("X-Consoled-Scope"), Some("read_write"));
    assert_eq!(r.json()["user_id"], Value::Null);
}

/// Item 6: no, an unknown, a malformed or an expired credential, and a pending session, are each
/// a JSON 401, never a 5xx.
#[test]
fn refusals_are_json_401s() {
    let server = TestServer::start();
    let mut c = server.client();
    let (_, state) = c.signup();
    let project = project_of(&state);
    let unknown = format!("csd_{}", consoled::crypto::new_token());
    let expired = {
        let (id, secret) = make_token(&mut c, project, "read");
        db().execute(
            "UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE id = $1",
            &[&id],
        )
        .unwrap();
        secret
    };
    let garbage = format!("svc_session={}", "x".repeat(43));
    let cases: Vec<Vec<(&str, String)>> = vec![
        vec![],
        vec![("Cookie", garbage)],
        vec![("Cookie", "svc_session=short".into())],
        vec![("Authorization", format!("Bearer {unknown}"))],
        vec![("Authorization", "Bearer csdt_nope".into())],
        vec![("Authorization", format!("Bearer {expired}"))],
        vec![("Authorization", "Basic dXNlcjpwYXNz".into())],
        // An Authorization header decides, even beside a live session cookie.
        vec![("Authorization", "Bearer x".into()), ("Cookie", cookie(&c))],
    ];
    for headers in cases {
        let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        check(server.addr, &h).expect_error(401, "unauthorized");
    }
    // A session waiting for its second factor never passes.
    let mut m = server.client();
    let (email, _) = m.signup();
    let setup = m.post("/auth/mfa/totp/setup", &json!({}));
    let secret = consoled::crypto::base32_decode(setup.json()["secret"].as_str().unwrap()).unwrap();
    let code = consoled::crypto::totp_code(&secret, consoled::crypto::unix_now() / 30);
    m.post("/auth/mfa/totp/enable", &json!({ "code": code }))
        .expect(200);
    let mut pending = server.client();
    pending.login(&email, PASSWORD).expect(200);
    by_session(server.addr, &pending).expect_error(401, "mfa_required");
}

/// A POST (or any method that changes state) to a sibling service is CSRF-checked here: the
/// original request's `X-CSRF-Token`, `svc_csrf` cookie, `Origin` and `Sec-Fetch-Site`.
#[test]
fn a_state_changing_original_request_must_pass_the_csrf_rules() {
    let server = TestServer::start();
    let mut c = server.client();
    let (_, state) = c.signup();
    let token = c.csrf();
    let pair = format!("{}; svc_csrf={token}", cookie(&c));
    let session = cookie(&c);
    let post = ("X-Original-Method", "POST");
    check(server.addr, &[("Cookie", &session), post]).expect_error(403, "csrf_invalid");
    check(server.addr, &[("Cookie", &pair), post]).expect_error(403, "csrf_invalid");
    check(
        server.addr,
        &[("Cookie", &pair), ("X-CSRF-Token", &token), post],
    )
    .expect(200);
    let foreign = ("Origin", "https://evil.example");
    check(
        server.addr,
        &[("Cookie", &pair), ("X-CSRF-Token", &token), post, foreign],
    )
    .expect_error(403, "csrf_invalid");
    let delete = ("X-Forwarded-Method", "DELETE");
    check(server.addr, &[("Cookie", &session), delete]).expect_error(403, "csrf_invalid");
    // A client's own line of the other header cannot make a POST look safe.
    let both = [
        ("Cookie", session.as_str()),
        ("X-Original-Method", "GET"),
        delete,
    ];
    check(server.addr, &both).expect_error(403, "csrf_invalid");
    for safe in ["GET", "HEAD", "OPTIONS"] {
        check(
            server.addr,
            &[("Cookie", &session), ("X-Original-Method", safe)],
        )
        .expect(200);
    }
    // A token is not sent by a browser on its own: no CSRF rule for it.
    let (_, secret) = make_token(&mut c, project_of(&state), "read_write");
    let bearer = format!("Bearer {secret}");
    check(server.addr, &[("Authorization", &bearer), post]).expect(200);
}

/// `HEAD /auth/check` answers the same without a body: a proxy's connection stays open for the
/// next check (nginx closes an `auth_request` upstream whose answer has a body to skip).
#[test]
fn head_answers_the_same_headers_without_a_body() {
    use std::io::{BufReader, Read, Write};
    let server = TestServer::start();
    let mut c = server.client();
    let (email, _) = c.signup();
    let head = |cookie: &str| {
        let mut s = std::net::TcpStream::connect(server.addr).unwrap();
        let request = format!(
            "HEAD /auth/check HTTP/1.1\r\nHost: x\r\nConnection: close\r\nCookie: {cookie}\r\n\r\n"
        );
        s.write_all(request.as_bytes()).unwrap();
        let mut reader = BufReader::new(s);
        let (status, headers) = read_head(&mut reader);
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).unwrap();
        (status, headers, rest)
    };
    let (status, headers, rest) = head(&cookie(&c));
    assert_eq!(status, 200);
    let email_header = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("x-consoled-email"))
        .map(|(_, v)| v.clone());
    assert_eq!(email_header, Some(email));
    assert!(rest.is_empty(), "a body after HEAD: {rest:?}");
    let (status, _, rest) = head("svc_session=none");
    assert_eq!((status, rest.len()), (401, 0));
}

/// A token of an organization that is suspended stops passing on every instance within a second
/// (the status change sends `t:` for each of its live tokens), and passes again once resumed.
#[test]
fn a_token_of_a_suspended_organization_stops_passing_within_a_second() {
    let server = TestServer::start();
    let mut c = server.client();
    let (_, state) = c.signup();
    let project = project_of(&state);
    let org = state["organizations"][0]["id"].as_i64().unwrap();
    let (_, secret) = make_token(&mut c, project, "read");
    by_token(server.addr, &secret).expect(200);
    let status = |s: &str| {
        db().execute(
            "UPDATE organizations SET status = $2 WHERE id = $1",
            &[&org, &s],
        )
        .unwrap();
    };
    status("suspended");
    until(Duration::from_secs(1), || {
        by_token(server.addr, &secret).status == 401
    })
    .expect("refused once suspended");
    by_token(server.addr, &secret).expect_error(401, "unauthorized");
    status("active");
    until(Duration::from_secs(1), || {
        by_token(server.addr, &secret).status == 200
    })
    .expect("passes again once resumed");
}
