//! `GET /auth/check` remembers what it checked (issue 31, item 2): a repeated check costs no
//! database statement; a logout, a revocation, a session's new token and a membership change are
//! refused (or shown) by every instance within a second, and so are a disabled user's sessions
//! and tokens; while the listener is away every check asks the database; uses answered from
//! memory still keep a session alive.

mod common;

use std::time::{Duration, Instant};

use common::checks::*;
use common::*;
use serde_json::json;

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
    // The keeper's heartbeat and the batch of uses may fall into a window, and the listener may
    // connect (or hear the sign-up's own news) only after the first checks, which then ask the
    // database: the best of several windows, each counted both ways.
    let memory = |c: &mut Client| metric(c, "consoled_checks_total{from=\"memory\"}");
    let mut windows = Vec::new();
    for _ in 0..5 {
        let answered = memory(&mut c);
        let before = counter.round_trips();
        for _ in 0..20 {
            by_session(server.addr, &c).expect(200);
            by_token(server.addr, &secret).expect(200);
        }
        let round_trips = counter.round_trips() - before;
        windows.push((round_trips, memory(&mut c) - answered));
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        windows.contains(&(0, 40)),
        "no window of 40 repeated checks all answered from memory without a round trip \
         (round trips, answers from memory): {windows:?}"
    );
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

/// Issue 32: the operator's `user disable` fails the user's sessions and the tokens the user
/// made on every instance within a second, even one that answered them from memory just before;
/// `user enable` lets the tokens back in (the sessions stay ended). A command-line token of the
/// same project never stops.
#[test]
fn a_disabled_users_sessions_and_tokens_fail_the_check_everywhere_within_a_second() {
    let (a, b) = (TestServer::start(), TestServer::start());
    let mut c = a.client();
    let (_, state) = c.signup();
    let (user, project) = (state["user"]["id"].to_string(), project_of(&state));
    let (_, secret) = make_token(&mut c, project, "read");
    let operators = common::account::cli(&["token", "create", "--project", &project.to_string()]);
    let operators = operators["token"].as_str().unwrap().to_string();
    for addr in [a.addr, b.addr] {
        by_session(addr, &c).expect(200);
        by_token(addr, &secret).expect(200);
        by_token(addr, &operators).expect(200);
    }
    common::account::cli(&["user", "disable", "--id", &user]);
    for (name, addr) in [("a", a.addr), ("b", b.addr)] {
        until(Duration::from_secs(1), || {
            by_token(addr, &secret).status == 401
        })
        .unwrap_or_else(|| panic!("the disabled maker's token still passes on {name}"));
        until(Duration::from_secs(1), || {
            by_session(addr, &c).status == 401
        })
        .unwrap_or_else(|| panic!("the disabled user's session still passes on {name}"));
        by_token(addr, &operators).expect(200);
    }
    common::account::cli(&["user", "enable", "--id", &user]);
    for (name, addr) in [("a", a.addr), ("b", b.addr)] {
        until(Duration::from_secs(1), || {
            by_token(addr, &secret).status == 200
        })
        .unwrap_or_else(|| panic!("the enabled maker's token is still refused on {name}"));
        by_session(addr, &c).expect_error(401, "unauthorized");
    }
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
