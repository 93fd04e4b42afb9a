//! `GET /auth/check` (issue 31, items 1, 2 and 6): the one check every other console service
//! asks. It names the caller of a session or an API token in `X-Consoled-*` headers and the
//! body, refuses with JSON 401, applies the CSRF rules to a state-changing original request,
//! answers a repeated check without a database statement, and refuses a revoked credential on
//! every instance within a second; while the listener is away, it asks the database.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn cookie(c: &Client) -> String {
    format!("svc_session={}", c.cookies["svc_session"])
}

/// `GET /auth/check` with `headers` only (as a proxy sends the original request's).
fn check(addr: std::net::SocketAddr, headers: &[(&str, &str)]) -> Response {
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    raw_request(addr, "GET", "/auth/check", &headers, b"")
}

fn by_session(addr: std::net::SocketAddr, c: &Client) -> Response {
    check(addr, &[("Cookie", &cookie(c))])
}

fn by_token(addr: std::net::SocketAddr, secret: &str) -> Response {
    check(addr, &[("Authorization", &format!("Bearer {secret}"))])
}

/// Polls until `f` holds (at most `within`); how long it took.
fn until(within: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn make_token(c: &mut Client, project: i64, scope: &str) -> (i64, String) {
    let r = c.post(
        &format!("/v1/projects/{project}/tokens"),
        &json!({"name": "check", "scope": scope}),
    );
    r.expect(201);
    (
        r.json()["id"].as_i64().unwrap(),
        r.json()["token"].as_str().unwrap().to_string(),
    )
}

fn metric(c: &mut Client, line: &str) -> u64 {
    let text = String::from_utf8(c.get("/metrics").body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

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

/// Item 2: a session or token checked once is checked again without a database statement.
#[test]
fn a_repeated_check_costs_no_statement() {
    let counter = pgcount::CountingProxy::start(db_target());
    let url = database_url_via(counter.port);
    let server = TestServer::with(&[("DATABASE_URL", &url)]);
    let mut c = server.client();
    let (_, state) = c.signup();
    let (_, secret) = make_token(&mut c, project_of(&state), "read");
    by_session(server.addr, &c).expect(200);
    by_token(server.addr, &secret).expect(200);
    // The keeper's heartbeat and the batch of uses may fall into a window: the best of several.
    let mut best = u64::MAX;
    for _ in 0..5 {
        let before = counter.round_trips();
        for _ in 0..20 {
            by_session(server.addr, &c).expect(200);
            by_token(server.addr, &secret).expect(200);
        }
        best = best.min(counter.round_trips() - before);
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(best, 0, "round trips for 40 repeated checks");
    assert!(metric(&mut c, "consoled_checks_total{from=\"memory\"}") >= 200);
}

/// Item 2: a logout, a revocation, a new session token and a membership change are refused (or
/// shown) by every instance within a second, even one that answered from memory just before.
#[test]
fn every_instance_refuses_a_revoked_credential_within_a_second() {
    let (a, b) = (TestServer::start(), TestServer::start());
    let mut c = a.client();
    let (email, state) = c.signup();
    let project = project_of(&state);
    let (id, secret) = make_token(&mut c, project, "read");
    for addr in [a.addr, b.addr] {
        by_session(addr, &c).expect(200);
        by_token(addr, &secret).expect(200);
    }
    // The token, revoked on a.
    let path = format!("/v1/projects/{project}/tokens/{id}");
    let csrf = c.csrf();
    c.send("DELETE", &path, &[("X-CSRF-Token", &csrf)], b"")
        .expect(204);
    let refused = |r: Response| r.status == 401;
    until(Duration::from_secs(1), || {
        refused(by_token(b.addr, &secret))
    })
    .expect("token on b");
    // A password change gives the session a new token: the old one is refused on b.
    let old = c.clone();
    let r = c.post(
        "/auth/password/change",
        &json!({"current_password": PASSWORD, "password": "another fine passphrase"}),
    );
    r.expect(204);
    until(Duration::from_secs(1), || refused(by_session(b.addr, &old))).expect("old token on b");
    by_session(b.addr, &c).expect(200);
    // A logout on a.
    let live = c.clone();
    c.post_empty("/auth/logout").expect(204);
    until(Duration::from_secs(1), || {
        refused(by_session(b.addr, &live))
    })
    .expect("logout on b");
    // A membership change (the personal organization is left, as a removal would do).
    let mut d = a.client();
    d.login(&email, "another fine passphrase").expect(200);
    by_session(b.addr, &d).expect(200);
    let user = state["user"]["id"].as_i64().unwrap();
    db().execute("DELETE FROM memberships WHERE user_id = $1", &[&user])
        .unwrap();
    let no_orgs = || by_session(b.addr, &d).header("X-Consoled-Orgs").is_none();
    until(Duration::from_secs(1), no_orgs).expect("membership on b");
}

/// Item 2: while the listener is disconnected, news may be missed, so every check asks the
/// database; once it listens again, checks are answered from memory again.
#[test]
fn with_the_listener_away_checks_go_to_the_database() {
    let proxy = DbProxy::start();
    let server = TestServer::with(&[("CONSOLED_DATABASE_DIRECT_URL", &proxy.url())]);
    let mut c = server.client();
    c.signup();
    by_session(server.addr, &c).expect(200);
    by_session(server.addr, &c).expect(200);
    let from_db = |c: &mut Client| metric(c, "consoled_checks_total{from=\"database\"}");
    let before = from_db(&mut c);
    proxy.cut();
    // The listener notices within its poll (a quarter of a second).
    std::thread::sleep(Duration::from_millis(1000));
    for _ in 0..3 {
        by_session(server.addr, &c).expect(200);
    }
    assert_eq!(from_db(&mut c) - before, 3, "checks answered from memory");
    // A session ended meanwhile (its news lost): refused at once.
    db().execute(
        "DELETE FROM sessions WHERE token_hash = $1",
        &[&consoled::crypto::token_hash(&c.cookies["svc_session"])],
    )
    .unwrap();
    by_session(server.addr, &c).expect_error(401, "unauthorized");
    // Listening again: answers from memory again.
    proxy.restore();
    let mut e = server.client();
    e.signup();
    let memory = |c: &mut Client| metric(c, "consoled_checks_total{from=\"memory\"}");
    let listening = until(Duration::from_secs(10), || {
        by_session(server.addr, &e).expect(200);
        let before = memory(&mut e);
        by_session(server.addr, &e).expect(200);
        memory(&mut e) > before
    });
    listening.expect("checks from memory once the listener is back");
}

/// Item 2: a session used only through checks from memory stays alive: its uses are written in
/// batches, so its idle timeout sees them.
#[test]
fn uses_answered_from_memory_keep_the_session_alive() {
    let server = TestServer::with(&[("CONSOLED_SESSION_IDLE_SECONDS", "3")]);
    let mut c = server.client();
    c.signup();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(6) {
        by_session(server.addr, &c).expect(200);
        std::thread::sleep(Duration::from_millis(250));
    }
    // Read from the database: the row saw the uses.
    c.get("/auth/session").expect(200);
    let idle: f64 = db()
        .query_one(
            "SELECT extract(epoch FROM now() - last_seen_at)::float8 FROM sessions WHERE token_hash = $1",
            &[&consoled::crypto::token_hash(&c.cookies["svc_session"])],
        )
        .unwrap()
        .get(0);
    assert!(idle < 2.0, "last seen {idle} s ago");
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
