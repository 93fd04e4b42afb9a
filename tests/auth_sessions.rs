//! Accounts and sessions over HTTP: signup, login, logout, session, CSRF, input rules, limits.

mod common;

use std::time::{Duration, Instant};

use common::*;
use consoled::http::json::Email;
use consoled::limits::Bucket;
use serde_json::json;

#[test]
fn csrf_cookie_is_set_once_with_its_attributes() {
    let server = TestServer::start();
    let mut c = server.client();
    let r = c.get("/auth/csrf");
    r.expect(204);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let cookie = r.set_cookie("svc_csrf").expect("svc_csrf set");
    let value = cookie
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("svc_csrf=");
    let (random, mac) = value.split_once('.').expect("random.mac");
    assert_eq!(
        (random.len(), mac.len()),
        (22, 43),
        "16 random bytes and an HMAC-SHA-256, base64url: {value}"
    );
    assert!(
        cookie.contains("Path=/") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(
        !cookie.contains("HttpOnly"),
        "the page must be able to read it: {cookie}"
    );
    assert!(
        !cookie.contains("Secure"),
        "secure disabled for this test server: {cookie}"
    );
    let again = c.get("/auth/csrf");
    again.expect(204);
    assert!(
        again.set_cookie("svc_csrf").is_none(),
        "not replaced when present"
    );
}

#[test]
fn cookies_are_secure_by_default() {
    let server = TestServer::with(&[("CONSOLED_COOKIE_SECURE", "true")]);
    let mut c = server.client();
    let r = c.get("/auth/csrf");
    assert!(r.set_cookie("svc_csrf").unwrap().contains("Secure"));
    let (_, _) = c.signup();
    let (email, _) = c.signup();
    let r = c.login(&email, PASSWORD);
    assert!(r.set_cookie("svc_session").unwrap().contains("; Secure"));
}

#[test]
fn signup_creates_user_personal_org_and_default_project() {
    let server = TestServer::start();
    let mut c = server.client();
    let email = unique_email();
    let r = c.post(
        "/auth/signup",
        &json!({"email": format!("  {}  ", email.to_uppercase()), "password": PASSWORD, "name": " Ada "}),
    );
    r.expect(201);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let state = r.json();
    assert_eq!(state["mfa_required"], false);
    let user = &state["user"];
    assert_eq!(user["email"], email.as_str(), "trimmed and lower-cased");
    assert_eq!(user["name"], "Ada");
    assert_eq!(user["email_verified"], false);
    assert_eq!(user["mfa_enabled"], false);
    assert_eq!(user["has_password"], true);
    assert_eq!(user["locale"], "en");
    assert!(user["id"].as_i64().unwrap() > 0);
    let created = user["created"].as_str().unwrap();
    assert!(
        created.len() == 20 && created.ends_with('Z') && created.as_bytes()[10] == b'T',
        "{created}"
    );
    let orgs = state["organizations"].as_array().unwrap();
    assert_eq!(orgs.len(), 1);
    assert_eq!(orgs[0]["kind"], "personal");
    assert_eq!(orgs[0]["role"], "owner");
    assert_eq!(orgs[0]["status"], "active");

    let cookie = r.set_cookie("svc_session").unwrap();
    for attr in ["Path=/", "HttpOnly", "SameSite=Lax", "Max-Age=604800"] {
        assert!(cookie.contains(attr), "{attr} missing in {cookie}");
    }
    let mut db = db();
    let org_id = orgs[0]["id"].as_i64().unwrap();
    let projects = db
        .query("SELECT name FROM projects WHERE org_id = $1", &[&org_id])
        .unwrap();
    assert_eq!(projects.len(), 1);
    assert_eq!(projects[0].get::<_, String>(0), "default");
    let uid = user["id"].as_i64().unwrap();
    let hash: String = db
        .query_one("SELECT password_hash FROM users WHERE id = $1", &[&uid])
        .unwrap()
        .get(0);
    assert!(
        hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
        "{hash}"
    );
    assert!(!hash.contains(PASSWORD));
    let token = cookie
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("svc_session=");
    let stored: i64 = db
        .query_one(
            "SELECT count(*) FROM sessions WHERE token_hash = sha256($1::text::bytea)",
            &[&token],
        )
        .unwrap()
        .get(0);
    assert_eq!(stored, 1, "only the token's SHA-256 is stored");

    let me = c.get("/auth/session");
    me.expect(200);
    assert_eq!(me.json(), state);
}

#[test]
fn signup_with_a_taken_address_is_409_whatever_the_case() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, _) = c.signup();
    let mut other = server.client();
    let r = other.post(
        "/auth/signup",
        &json!({"email": email.to_uppercase(), "password": PASSWORD, "name": "X"}),
    );
    r.expect_error(409, "email_taken");
}

#[test]
fn signup_field_limits_at_and_beyond_each_boundary() {
    let server = TestServer::start();
    let mut c = server.client();
    let domain = format!(
        "{}.{}.{}.com",
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61)
    );
    let exact = |n: usize| {
        let tag = format!("{:x}", rand_u32());
        format!(
            "{tag}{}@{domain}",
            "a".repeat(n - 1 - domain.len() - tag.len())
        )
    };
    let cases: Vec<(serde_json::Value, Option<&str>)> = vec![
        (json!({"password": "p".repeat(9)}), Some("password")),
        (json!({"password": "p".repeat(10)}), None),
        (json!({"password": "p".repeat(128)}), None),
        (json!({"password": "p".repeat(129)}), Some("password")),
        (json!({"name": ""}), Some("name")),
        (json!({"name": "n"}), None),
        (json!({"name": "n".repeat(100)}), None),
        (json!({"name": "n".repeat(101)}), Some("name")),
        (json!({"email": exact(254)}), None),
        (json!({"email": exact(255)}), Some("email")),
        (json!({"email": "not-an-address"}), Some("email")),
        (json!({"email": 42}), Some("email")),
        (json!({"name": null}), Some("name")),
    ];
    for (overrides, bad_field) in cases {
        let mut body = json!({"email": unique_email(), "password": PASSWORD, "name": "N"});
        for (k, v) in overrides.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = c.post("/auth/signup", &body);
        match bad_field {
            Some(field) => {
                r.expect_error(400, "invalid_input");
                assert_eq!(r.json()["error"]["details"]["field"], field, "{overrides}");
            }
            None => {
                r.expect(201);
            }
        }
    }
}

fn rand_u32() -> u32 {
    u32::from_le_bytes(consoled::crypto::random_bytes::<4>())
}

#[test]
fn malformed_bodies_and_media_types() {
    let server = TestServer::start();
    let mut c = server.client();
    let token = c.csrf();
    let csrf = ("X-CSRF-Token", token.as_str());
    let json_type = ("Content-Type", "application/json");
    for body in [
        &b"{"[..],
        b"[]",
        b"\"x\"",
        b"{\"email\": }",
        b"\xff\xfe\xfd",
    ] {
        let r = c.send("POST", "/auth/signup", &[json_type, csrf], body);
        r.expect_error(400, "invalid_input");
    }
    let r = c.send("POST", "/auth/signup", &[json_type, csrf], b"{}");
    r.expect_error(400, "invalid_input");
    assert!(r.json()["error"]["details"]["field"].is_string());
    let r = c.send(
        "POST",
        "/auth/login",
        &[("Content-Type", "text/plain"), csrf],
        b"{}",
    );
    r.expect_error(415, "unsupported_media_type");
    let r = c.send("POST", "/auth/login", &[csrf], b"email=a");
    r.expect_error(415, "unsupported_media_type");
    let big = vec![b' '; 64 * 1024 + 1];
    let r = c.send("POST", "/auth/login", &[json_type, csrf], &big);
    r.expect_error(413, "payload_too_large");
    let just_fits = format!(
        "{{\"email\": \"a@b.co\", \"password\": \"x\"{}}}",
        " ".repeat(64 * 1024 - 40)
    );
    let r = c.send(
        "POST",
        "/auth/login",
        &[json_type, csrf],
        just_fits.as_bytes(),
    );
    assert_eq!(r.status, 401, "a 64 KiB body is accepted");
}

#[test]
fn unknown_paths_and_wrong_methods() {
    let server = TestServer::start();
    let mut c = server.client();
    c.get("/nope").expect_error(404, "not_found");
    c.get("/auth/oauth/nope/start")
        .expect_error(404, "not_found");
    let r = c.get("/auth/login");
    r.expect_error(405, "method_not_allowed");
    assert_eq!(r.header("allow"), Some("POST"));
    let r = c.send("DELETE", "/auth/csrf", &[], b"");
    r.expect_error(405, "method_not_allowed");
    assert_eq!(r.header("allow"), Some("GET"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
}

#[test]
fn posts_without_matching_csrf_are_refused() {
    let server = TestServer::start();
    let mut c = server.client();
    let token = c.csrf();
    let body =
        serde_json::to_vec(&json!({"email": unique_email(), "password": PASSWORD, "name": "N"}))
            .unwrap();
    let ct = ("Content-Type", "application/json");
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![ct],
        vec![ct, ("X-CSRF-Token", "wrong")],
        vec![
            ct,
            ("X-CSRF-Token", &token),
            ("Origin", "https://evil.example"),
        ],
        vec![
            ct,
            ("X-CSRF-Token", &token),
            ("Sec-Fetch-Site", "cross-site"),
        ],
    ];
    for headers in cases {
        c.send("POST", "/auth/signup", &headers, &body)
            .expect_error(403, "csrf_invalid");
    }
    // Header without the cookie.
    let mut fresh = server.client();
    fresh
        .send(
            "POST",
            "/auth/signup",
            &[ct, ("X-CSRF-Token", &token)],
            &body,
        )
        .expect_error(403, "csrf_invalid");
    // Our own origin passes.
    let origin = "http://127.0.0.1:8080".to_string();
    let r = c.send(
        "POST",
        "/auth/signup",
        &[ct, ("X-CSRF-Token", &token), ("Origin", &origin)],
        &body,
    );
    r.expect(201);
}

#[test]
fn login_logout_and_session() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, state) = c.signup();
    let first = c.cookies["svc_session"].clone();

    let mut b = server.client();
    b.get("/auth/session").expect_error(401, "unauthorized");
    let r = b.login(&format!(" {} ", email.to_uppercase()), PASSWORD);
    r.expect(200);
    assert_eq!(r.json()["user"], state["user"]);
    assert_eq!(r.json()["mfa_required"], false);
    assert_ne!(b.cookies["svc_session"], first, "a new token per login");
    b.get("/auth/session").expect(200);

    let b_token = b.cookies["svc_session"].clone();
    let r = b.post_empty("/auth/logout");
    r.expect(204);
    let cleared = r.set_cookie("svc_session").unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    // The revoked token no longer works, even if a client kept it; other sessions live on.
    let mut replay = server.client();
    replay.cookies.insert("svc_session".into(), b_token);
    replay
        .get("/auth/session")
        .expect_error(401, "unauthorized");
    c.get("/auth/session").expect(200);
    c.post_empty("/auth/logout").expect(204);
    let mut replay = server.client();
    replay.cookies.insert("svc_session".into(), first);
    replay
        .get("/auth/session")
        .expect_error(401, "unauthorized");
    c.post_empty("/auth/logout")
        .expect_error(401, "unauthorized");
}

#[test]
fn wrong_password_and_unknown_address_answer_alike() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, _) = c.signup();
    let mut x = server.client();
    let wrong = x.login(&email, "wrong password");
    wrong.expect_error(401, "invalid_credentials");
    let unknown = x.login(&unique_email(), "wrong password");
    unknown.expect_error(401, "invalid_credentials");
    assert_eq!(wrong.body, unknown.body);
    x.post("/auth/login", &json!({"email": email}))
        .expect_error(400, "invalid_input");
    x.post("/auth/login", &json!({"email": "nope", "password": "x"}))
        .expect_error(400, "invalid_input");
}

#[test]
fn unknown_addresses_cost_the_same_hash_work() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, _) = c.signup();
    let time = |c: &mut Client, email: &str| {
        let t = Instant::now();
        c.login(email, "wrong password").expect(401);
        t.elapsed()
    };
    let mut known = Vec::new();
    let mut unknown = Vec::new();
    for _ in 0..5 {
        let mut k = server.client();
        known.push(time(&mut k, &email));
        let mut u = server.client();
        unknown.push(time(&mut u, &unique_email()));
    }
    known.sort();
    unknown.sort();
    let (k, u) = (known[2].as_secs_f64(), unknown[2].as_secs_f64());
    // A hash is ~10+ ms; skipping it for unknown addresses would make them several times faster.
    assert!(
        u > k * 0.5 && u < k * 2.0,
        "median known {k:.4}s vs unknown {u:.4}s"
    );
}

#[test]
fn failed_logins_are_throttled_per_address_and_ip() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, _) = c.signup();
    let mut attacker = server.client();
    for _ in 0..10 {
        attacker
            .login(&email, "wrong password")
            .expect_error(401, "invalid_credentials");
    }
    let r = attacker.login(&email, PASSWORD);
    r.expect_error(429, "rate_limited");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=900).contains(&retry), "{retry}");
    // Another client address is not blocked by this one's failures.
    let mut other = server.client();
    other.login(&email, PASSWORD).expect(200);
}

#[test]
fn a_hundred_failures_per_address_block_every_ip() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, _) = c.signup();
    let mut db = db();
    // Ninety-nine failures from many addresses (recorded as the server does), then one more.
    db.execute(
        "INSERT INTO rate_events (bucket) SELECT $1 FROM generate_series(1, 99)",
        &[&Bucket::LoginAccount(&Email::parse(&email).unwrap()).key()],
    )
    .unwrap();
    server.client().login(&email, "wrong password").expect(401);
    let r = server.client().login(&email, PASSWORD);
    r.expect_error(429, "rate_limited");
    assert!(r.header("retry-after").is_some());
}

#[test]
fn signups_are_limited_per_client_ip() {
    let server = TestServer::start();
    let mut c = server.client();
    for _ in 0..30 {
        c.cookies.remove("svc_session");
        let r = c.post(
            "/auth/signup",
            &json!({"email": unique_email(), "password": PASSWORD, "name": "N"}),
        );
        r.expect(201);
    }
    let r = c.post(
        "/auth/signup",
        &json!({"email": unique_email(), "password": PASSWORD, "name": "N"}),
    );
    r.expect_error(429, "rate_limited");
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() <= 300);
    server.client().signup();
}

#[test]
fn sessions_expire_when_idle() {
    let server = TestServer::with(&[("CONSOLED_SESSION_IDLE_SECONDS", "2")]);
    let mut c = server.client();
    c.signup();
    c.get("/auth/session").expect(200);
    std::thread::sleep(Duration::from_millis(2500));
    c.get("/auth/session").expect_error(401, "unauthorized");
}

#[test]
fn activity_extends_the_idle_timeout_but_not_the_absolute_lifetime() {
    let server = TestServer::with(&[
        ("CONSOLED_SESSION_IDLE_SECONDS", "2"),
        ("CONSOLED_SESSION_MAX_SECONDS", "4"),
    ]);
    let mut c = server.client();
    c.signup();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(3500) {
        c.get("/auth/session").expect(200);
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_millis(700));
    c.get("/auth/session").expect_error(401, "unauthorized");
}

#[test]
fn a_panicking_handler_is_a_500_and_the_worker_lives_on() {
    let server = TestServer::with(&[
        ("CONSOLED_TEST_PANIC_ROUTE", "true"),
        ("CONSOLED_WORKERS", "1"),
    ]);
    let mut c = server.client();
    for _ in 0..3 {
        let r = c.get("/__panic");
        r.expect_error(500, "internal");
        assert!(
            !String::from_utf8_lossy(&r.body).contains("panic route"),
            "no internals in the body"
        );
    }
    c.get("/healthz").expect(200);
    let metrics = String::from_utf8(c.get("/metrics").body).unwrap();
    assert!(
        metrics.contains("consoled_handler_panics_total 3"),
        "{metrics}"
    );
}

#[test]
fn health_readiness_and_metrics() {
    let server = TestServer::start();
    let mut c = server.client();
    c.get("/healthz").expect(200);
    c.get("/readyz").expect(200);
    c.get("/auth/csrf").expect(204);
    let r = c.get("/metrics");
    r.expect(200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let text = String::from_utf8(r.body).unwrap();
    for needle in [
        "consoled_requests_total{route=\"csrf\",status=\"204\"} 1",
        "consoled_request_duration_seconds_bucket{route=\"csrf\"",
        "consoled_hash_queue_depth",
        "consoled_db_pool_connections",
    ] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
}

#[test]
fn a_login_flood_is_refused_with_429_instead_of_queueing() {
    let server = TestServer::with(&[
        ("CONSOLED_HASH_THREADS", "1"),
        ("CONSOLED_HASH_QUEUE", "1"),
        ("CONSOLED_WORKERS", "24"),
    ]);
    let mut c = server.client();
    let (email, _) = c.signup();
    let addr = server.addr;
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let email = email.clone();
            std::thread::spawn(move || Client::new(addr).login(&email, PASSWORD))
        })
        .collect();
    let results: Vec<Response> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = results.iter().filter(|r| r.status == 200).count();
    let limited: Vec<&Response> = results.iter().filter(|r| r.status == 429).collect();
    assert_eq!(
        ok + limited.len(),
        16,
        "only 200 or 429: {:?}",
        results.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert!(
        ok >= 1 && !limited.is_empty(),
        "ok={ok} limited={}",
        limited.len()
    );
    for r in limited {
        assert_eq!(r.code(), "rate_limited");
        assert!(r.header("retry-after").is_some());
    }
}

#[test]
fn the_database_going_away_gives_503_then_recovers() {
    let proxy = DbProxy::start();
    let url = proxy.url();
    let server = TestServer::with(&[("DATABASE_URL", &url), ("CONSOLED_DB_TIMEOUT_SECONDS", "1")]);
    let mut c = server.client();
    c.signup();
    c.get("/auth/session").expect(200);
    proxy.cut();
    let t = Instant::now();
    let r = c.get("/auth/session");
    r.expect_error(503, "unavailable");
    assert!(r.header("retry-after").is_some());
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "503 within seconds, took {:?}",
        t.elapsed()
    );
    c.get("/readyz").expect_error(503, "unavailable");
    c.get("/healthz").expect(200);
    let r = c.post(
        "/auth/signup",
        &json!({"email": unique_email(), "password": PASSWORD, "name": "N"}),
    );
    r.expect_error(503, "unavailable");
    proxy.restore();
    let t = Instant::now();
    loop {
        let r = c.get("/auth/session");
        if r.status == 200 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "no recovery: {}",
            r.status
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    c.get("/readyz").expect(200);
}
