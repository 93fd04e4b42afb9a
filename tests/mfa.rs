//! The second factor over HTTP: enrolment, login with TOTP or recovery codes, the pending-session
//! state, replay and concurrency, wrong-code limits, disable and regeneration.
//!
//! Codes are computed here from the secret the server hands out. To stay fast and free of step
//! boundary flakes, a test never waits for the next 30-second step: it uses the current step and
//! the next (the server accepts ±1), which both stay within the window if a boundary passes.

mod common;

use std::sync::Barrier;
use std::time::Duration;

use common::*;
use consoled::crypto::{base32_decode, sha256, totp_code, unix_now};
use consoled::limits::Bucket;
use postgres::fallible_iterator::FallibleIterator;
use serde_json::{json, Value};

fn now_step() -> u64 {
    unix_now() / 30
}

/// A 6-digit code that is valid at no step near now.
fn wrong_code(secret: &[u8]) -> String {
    let s = now_step();
    (100_000..)
        .map(|n| n.to_string())
        .find(|c| (s - 3..=s + 3).all(|step| totp_code(secret, step) != *c))
        .unwrap()
}

struct Enrolled {
    email: String,
    user_id: i64,
    secret: Vec<u8>,
    /// The step whose code enabled the factor (already consumed).
    step: u64,
    recovery: Vec<String>,
}

/// Signs up on `c` and enables the second factor; `c` keeps its full session.
fn enroll(c: &mut Client) -> Enrolled {
    let (email, state) = c.signup();
    let r = c.post("/auth/mfa/totp/setup", &json!({}));
    r.expect(200);
    let secret = base32_decode(r.json()["secret"].as_str().unwrap()).unwrap();
    let step = now_step();
    let r = c.post(
        "/auth/mfa/totp/enable",
        &json!({"code": totp_code(&secret, step)}),
    );
    r.expect(200);
    let recovery = r.json()["recovery_codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    Enrolled {
        email,
        user_id: state["user"]["id"].as_i64().unwrap(),
        secret,
        step,
        recovery,
    }
}

/// A fresh client holding a pending session of the user.
fn pending(server: &TestServer, email: &str) -> Client {
    let mut c = server.client();
    let r = c.login(email, PASSWORD);
    r.expect(200);
    assert_eq!(r.json()["mfa_required"], true);
    c
}

fn submit(c: &mut Client, code: &str) -> Response {
    c.post("/auth/mfa/totp", &json!({ "code": code }))
}

fn session_token(c: &Client) -> String {
    c.cookies["svc_session"].clone()
}

/// A client carrying only the given session token (and its own CSRF cookie).
fn client_with_session(server: &TestServer, token: &str) -> Client {
    let mut c = server.client();
    c.cookies.insert("svc_session".into(), token.to_string());
    c
}

/// Wrong codes counted on the user's pending session.
fn pending_failed_codes(user_id: i64) -> i32 {
    db().query_one(
        "SELECT failed_codes FROM sessions WHERE user_id = $1 AND mfa_pending",
        &[&user_id],
    )
    .unwrap()
    .get(0)
}

fn outbox_kinds(user_id: i64) -> Vec<String> {
    db().query(
        "SELECT kind FROM outbox WHERE user_id = $1 ORDER BY id",
        &[&user_id],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// A server whose mail can never be delivered, so that queued notification rows stay in the
/// outbox for the test to see (the sender itself is tested with the mail module).
fn server_holding_mail() -> TestServer {
    TestServer::with(&[("CONSOLED_SMTP_URL", "smtp://127.0.0.1:1")])
}

#[test]
fn enrolment_offers_a_secret_and_confirms_it_with_a_code() {
    let server = TestServer::start();
    let mut c = server.client();
    let (email, state) = c.signup();
    let user_id = state["user"]["id"].as_i64().unwrap();

    // Enabling without an offer is refused.
    c.post("/auth/mfa/totp/enable", &json!({"code": "123456"}))
        .expect_error(400, "invalid_input");

    let first = c.post("/auth/mfa/totp/setup", &json!({}));
    first.expect(200);
    assert_eq!(first.header("cache-control"), Some("no-store"));
    let first_secret = base32_decode(first.json()["secret"].as_str().unwrap()).unwrap();
    let r = c.post("/auth/mfa/totp/setup", &json!({}));
    r.expect(200);
    let body = r.json();
    let secret_b32 = body["secret"].as_str().unwrap();
    assert_eq!(secret_b32.len(), 32, "20 bytes in unpadded base32");
    assert!(secret_b32
        .bytes()
        .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b)));
    let secret = base32_decode(secret_b32).unwrap();
    assert_eq!(secret.len(), 20);
    assert_ne!(secret, first_secret);
    let label = email.replace('@', "%40");
    assert_eq!(
        body["otpauth_uri"],
        format!(
            "otpauth://totp/consoled:{label}?secret={secret_b32}&issuer=consoled\
             &algorithm=SHA1&digits=6&period=30"
        )
    );
    let offered: Option<Vec<u8>> = db()
        .query_one("SELECT totp_pending FROM users WHERE id = $1", &[&user_id])
        .unwrap()
        .get(0);
    assert_eq!(offered.as_deref(), Some(&secret[..]));

    // A code of the replaced offer, a wrong code, a recovery-code shape, garbage.
    let step = now_step();
    c.post(
        "/auth/mfa/totp/enable",
        &json!({"code": totp_code(&first_secret, step)}),
    )
    .expect_error(401, "invalid_code");
    c.post(
        "/auth/mfa/totp/enable",
        &json!({"code": wrong_code(&secret)}),
    )
    .expect_error(401, "invalid_code");
    c.post(
        "/auth/mfa/totp/enable",
        &json!({"code": "abcd-efgh-ijkl-mnop"}),
    )
    .expect_error(400, "invalid_input");
    c.post("/auth/mfa/totp/enable", &json!({"code": "12345"}))
        .expect_error(400, "invalid_input");
    c.post("/auth/mfa/totp/enable", &json!({}))
        .expect_error(400, "invalid_input");
    assert_eq!(c.get("/auth/session").json()["user"]["mfa_enabled"], false);

    let r = c.post(
        "/auth/mfa/totp/enable",
        &json!({"code": totp_code(&secret, step)}),
    );
    r.expect(200);
    let codes: Vec<String> = r.json()["recovery_codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(codes.len(), 10);
    let mut distinct = codes.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 10);
    for code in &codes {
        assert_eq!(code.len(), 19, "{code}");
        assert!(code.split('-').all(|g| g.len() == 4), "{code}");
    }
    let state = c.get("/auth/session");
    state.expect(200);
    assert_eq!(state.json()["user"]["mfa_enabled"], true);

    // Stored: the secret moved over, the codes only as hashes of their compact form.
    let mut db = db();
    let row = db
        .query_one(
            "SELECT totp_secret, totp_pending, totp_last_step FROM users WHERE id = $1",
            &[&user_id],
        )
        .unwrap();
    assert_eq!(
        row.get::<_, Option<Vec<u8>>>(0).as_deref(),
        Some(&secret[..])
    );
    assert_eq!(row.get::<_, Option<Vec<u8>>>(1), None);
    assert_eq!(row.get::<_, Option<i64>>(2), Some(step as i64));
    let stored: Vec<Vec<u8>> = db
        .query(
            "SELECT code_hash FROM recovery_codes WHERE user_id = $1 AND used_at IS NULL",
            &[&user_id],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(stored.len(), 10);
    for code in &codes {
        let hash = sha256(code.replace('-', "").as_bytes()).to_vec();
        assert!(stored.contains(&hash), "{code} not stored as its hash");
    }

    // Enabled: a new offer or a second enable is refused, the secret stays.
    c.post("/auth/mfa/totp/setup", &json!({}))
        .expect_error(400, "invalid_input");
    c.post(
        "/auth/mfa/totp/enable",
        &json!({"code": totp_code(&secret, step + 1)}),
    )
    .expect_error(400, "invalid_input");
}

#[test]
fn enable_ends_other_sessions_and_queues_the_notification() {
    let server = server_holding_mail();
    let mut a = server.client();
    let (email, state) = a.signup();
    let user_id = state["user"]["id"].as_i64().unwrap();
    let mut b = server.client();
    b.login(&email, PASSWORD).expect(200);
    b.get("/auth/session").expect(200);
    let mut listener = db();
    listener.batch_execute("LISTEN consoled_change").unwrap();

    let r = a.post("/auth/mfa/totp/setup", &json!({}));
    let secret = base32_decode(r.json()["secret"].as_str().unwrap()).unwrap();
    a.post(
        "/auth/mfa/totp/enable",
        &json!({"code": totp_code(&secret, now_step())}),
    )
    .expect(200);

    // mfa_enabled is announced as a `user` change (setup alone is not visible to clients), once.
    let mine = json!({"type": "user", "id": user_id, "op": "update",
                      "project_id": null, "org_id": null});
    let mut announced: Vec<Value> = Vec::new();
    let mut notifications = listener.notifications();
    let mut iter = notifications.timeout_iter(Duration::from_millis(500));
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(n)) = iter.next() {
        if std::time::Instant::now() > deadline {
            break;
        }
        let mut v: Value = serde_json::from_str(n.payload()).unwrap();
        // Every change carries its event id besides the five fields clients get (0015).
        let event_id = v.as_object_mut().unwrap().remove("event_id");
        assert!(event_id.is_some_and(|id| id.is_string()), "{v}");
        if v == mine {
            announced.push(v);
        }
    }
    assert_eq!(announced.len(), 1, "{announced:?}");

    b.get("/auth/session").expect_error(401, "unauthorized");
    a.get("/auth/session").expect(200);
    assert_eq!(
        outbox_kinds(user_id),
        ["verify_email", "mfa_enabled"],
        "the notification is queued with the change"
    );
    let recipient: String = db()
        .query_one(
            "SELECT recipient FROM outbox WHERE user_id = $1 AND kind = 'mfa_enabled'",
            &[&user_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(recipient, email);
}

#[test]
fn login_with_a_second_factor_rotates_the_session_token() {
    let server = TestServer::start();
    let mut owner = server.client();
    let user = enroll(&mut owner);

    let mut c = server.client();
    let r = c.login(&user.email, PASSWORD);
    r.expect(200);
    let state = r.json();
    assert_eq!(state["mfa_required"], true);
    assert_eq!(state["user"]["mfa_enabled"], true);
    assert!(
        r.set_cookie("svc_session").unwrap().contains("Max-Age=600"),
        "a pending session lives 10 minutes"
    );
    let pending_token = session_token(&c);
    c.get("/auth/session").expect_error(401, "mfa_required");

    c.post("/auth/mfa/totp", &json!({"code": wrong_code(&user.secret)}))
        .expect_error(401, "invalid_code");
    let r = submit(&mut c, &totp_code(&user.secret, user.step + 1));
    r.expect(200);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let state = r.json();
    assert_eq!(state["mfa_required"], false);
    assert_eq!(state["user"]["id"], user.user_id);
    assert_eq!(state["organizations"].as_array().unwrap().len(), 1);
    let cookie = r.set_cookie("svc_session").unwrap();
    assert!(cookie.contains("Max-Age=604800") && cookie.contains("HttpOnly"));
    let full_token = session_token(&c);
    assert_ne!(full_token, pending_token, "token rotated");

    let s = c.get("/auth/session");
    s.expect(200);
    assert_eq!(s.json()["mfa_required"], false);
    client_with_session(&server, &pending_token)
        .get("/auth/session")
        .expect_error(401, "unauthorized");
    let mut old = client_with_session(&server, &pending_token);
    submit(&mut old, &user.recovery[0]).expect_error(401, "unauthorized");

    // A full session has nothing left to complete.
    submit(&mut c, &user.recovery[1]).expect_error(400, "invalid_input");
    // No session at all.
    submit(&mut server.client(), "123456").expect_error(401, "unauthorized");
}

#[test]
fn a_pending_session_is_refused_everywhere_but_logout() {
    let server = TestServer::start();
    let mut owner = server.client();
    let user = enroll(&mut owner);
    let mut c = pending(&server, &user.email);

    let code = json!({"code": totp_code(&user.secret, user.step + 1)});
    let mut checked = 0;
    for (method, path, body) in [
        ("GET", "/auth/session", None),
        ("POST", "/auth/mfa/totp/setup", Some(json!({}))),
        ("POST", "/auth/mfa/totp/enable", Some(code.clone())),
        ("POST", "/auth/mfa/totp/disable", Some(code.clone())),
        ("POST", "/auth/mfa/recovery-codes", Some(code.clone())),
        ("POST", "/auth/verify-email/resend", None),
        ("GET", "/v1/events", None),
    ] {
        // Routes other branches add are checked once they are part of the build.
        if !consoled::router::ROUTES
            .iter()
            .any(|r| r.pattern == path && consoled::router::method_name(r.method) == method)
        {
            continue;
        }
        let r = match (method, body) {
            ("GET", _) => c.get(path),
            (_, Some(body)) => c.post(path, &body),
            (_, None) => c.post_empty(path),
        };
        r.expect_error(401, "mfa_required");
        checked += 1;
    }
    assert!(checked >= 5);
    // The refused calls consumed nothing: the code still completes the session afterwards.
    let mut other = pending(&server, &user.email);
    submit(&mut other, &totp_code(&user.secret, user.step + 1)).expect(200);

    let token = session_token(&c);
    c.post_empty("/auth/logout").expect(204);
    let mut old = client_with_session(&server, &token);
    old.get("/auth/session").expect_error(401, "unauthorized");
    submit(&mut old, &user.recovery[0]).expect_error(401, "unauthorized");
}

#[test]
fn malformed_codes_are_400_and_do_not_count() {
    let server = TestServer::start();
    let mut owner = server.client();
    let user = enroll(&mut owner);
    let mut c = pending(&server, &user.email);
    for bad in [
        json!({"code": "12345"}),
        json!({"code": "1234567"}),
        json!({"code": "12a456"}),
        json!({"code": "abcd-efgh-ijkl"}),
        json!({"code": 123456}),
        json!({"code": ""}),
        json!({}),
    ] {
        c.post("/auth/mfa/totp", &bad)
            .expect_error(400, "invalid_input");
    }
    let failed = pending_failed_codes(user.user_id);
    assert_eq!(failed, 0);
    // Spaces as authenticator apps show them are fine.
    let code = totp_code(&user.secret, user.step + 1);
    submit(&mut c, &format!("{} {}", &code[..3], &code[3..])).expect(200);
}

#[test]
fn an_accepted_code_is_never_accepted_again() {
    let server = TestServer::start();
    let mut owner = server.client();
    let user = enroll(&mut owner);

    // The code that enabled the factor is spent.
    let mut first = pending(&server, &user.email);
    submit(&mut first, &totp_code(&user.secret, user.step)).expect_error(401, "invalid_code");
    let next = totp_code(&user.secret, user.step + 1);
    submit(&mut first, &next).expect(200);

    // The next login cannot reuse it, nor an older step.
    let mut second = pending(&server, &user.email);
    submit(&mut second, &next).expect_error(401, "invalid_code");
    submit(&mut second, &totp_code(&user.secret, user.step)).expect_error(401, "invalid_code");
    // Refusals spend nothing else: a recovery code still completes this login.
    submit(&mut second, &user.recovery[0]).expect(200);
}

#[test]
fn concurrent_submissions_of_one_code_let_exactly_one_win() {
    let server = TestServer::start();
    let mut owner = server.client();
    let user = enroll(&mut owner);
    let code = totp_code(&user.secret, user.step + 1);
    // Five pending sessions of the user, plus a second submission on one of them.
    let mut clients: Vec<Client> = (0..5).map(|_| pending(&server, &user.email)).collect();
    let mut twin = server.client();
    twin.cookies = clients[0].cookies.clone();
    clients.push(twin);

    let barrier = Barrier::new(clients.len());
    let statuses: Vec<(u16, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .map(|c| {
                let (barrier, code) = (&barrier, &code);
                s.spawn(move || {
                    c.csrf();
                    barrier.wait();
                    let r = submit(c, code);
                    let code = if r.status == 200 {
                        String::new()
                    } else {
                        r.code()
                    };
                    (r.status, code)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wins = statuses.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(wins, 1, "{statuses:?}");
    for (status, code) in statuses.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(*status, 401, "{statuses:?}");
        assert!(code == "invalid_code" || code == "unauthorized", "{code}");
    }
}

#[test]
fn a_recovery_code_works_once() {
    let server = TestServer::start();
    let mut owner = server.client();
    let user = enroll(&mut owner);

    // Case and hyphens do not matter.
    let typed = user.recovery[3].replace('-', "").to_uppercase();
    let mut c = pending(&server, &user.email);
    let r = submit(&mut c, &typed);
    r.expect(200);
    assert_eq!(r.json()["mfa_required"], false);

    let mut again = pending(&server, &user.email);
    submit(&mut again, &user.recovery[3]).expect_error(401, "invalid_code");
    submit(&mut again, "abcd-efgh-2345-6777").expect_error(401, "invalid_code");
    submit(&mut again, &user.recovery[4]).expect(200);
    let used: i64 = db()
        .query_one(
            "SELECT count(*) FROM recovery_codes WHERE user_id = $1 AND used_at IS NOT NULL",
            &[&user.user_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(used, 2);
}

#[test]
fn five_wrong_codes_revoke_the_pending_session() {
    let server = TestServer::start();
    let mut owner = server.client();
    let user = enroll(&mut owner);
    let wrong = wrong_code(&user.secret);

    // Four are forgiven.
    let mut c = pending(&server, &user.email);
    for _ in 0..4 {
        submit(&mut c, &wrong).expect_error(401, "invalid_code");
    }
    submit(&mut c, &user.recovery[0]).expect(200);

    let mut c = pending(&server, &user.email);
    let token = session_token(&c);
    for _ in 0..4 {
        submit(&mut c, &wrong).expect_error(401, "invalid_code");
    }
    let fifth = submit(&mut c, &wrong);
    fifth.expect_error(401, "invalid_code");
    assert!(
        fifth
            .set_cookie("svc_session")
            .unwrap()
            .contains("Max-Age=0"),
        "the dead cookie is cleared"
    );
    let mut old = client_with_session(&server, &token);
    submit(&mut old, &user.recovery[1]).expect_error(401, "unauthorized");
    old.get("/auth/session").expect_error(401, "unauthorized");
    let pending_rows: i64 = db()
        .query_one(
            "SELECT count(*) FROM sessions WHERE user_id = $1 AND mfa_pending",
            &[&user.user_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(pending_rows, 0);
    // Signing in again starts over.
    let mut fresh = pending(&server, &user.email);
    submit(&mut fresh, &user.recovery[1]).expect(200);
}

#[test]
fn twenty_wrong_codes_an_hour_block_the_user_everywhere() {
    let server = TestServer::start();
    let mut owner = server.client();
    let user = enroll(&mut owner);
    let wrong = wrong_code(&user.secret);
    let bucket = Bucket::WrongCodes(user.user_id).key();
    // 18 wrong codes of the last hour, as if made in other sessions (cheaper than 18 logins).
    db().execute(
        "INSERT INTO rate_events (bucket, at)
         SELECT $1, now() - interval '50 minutes' + n * interval '1 second'
           FROM generate_series(1, 18) n",
        &[&bucket],
    )
    .unwrap();

    let mut c = pending(&server, &user.email);
    submit(&mut c, &wrong).expect_error(401, "invalid_code");
    // The enrolment endpoints count toward the same cap: this is the 20th.
    owner
        .post("/auth/mfa/recovery-codes", &json!({"code": wrong}))
        .expect_error(401, "invalid_code");

    // Now even a right code is refused, on every session, until the oldest ages out.
    let r = submit(&mut c, &user.recovery[0]);
    r.expect_error(429, "rate_limited");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((590..=601).contains(&retry), "Retry-After {retry}");
    owner
        .post("/auth/mfa/totp/disable", &json!({"code": user.recovery[0]}))
        .expect_error(429, "rate_limited");
    // The refusals consumed nothing and did not count against the session.
    let failed = pending_failed_codes(user.user_id);
    assert_eq!(failed, 1);

    // Once the window has passed for the old events, the recovery code still works.
    db().execute(
        "UPDATE rate_events SET at = at - interval '1 hour' WHERE bucket = $1",
        &[&bucket],
    )
    .unwrap();
    submit(&mut c, &user.recovery[0]).expect(200);
}

#[test]
fn a_pending_session_expires() {
    let server = TestServer::with(&[("CONSOLED_MFA_PENDING_SECONDS", "1")]);
    let mut owner = server.client();
    let user = enroll(&mut owner);
    let mut c = server.client();
    let r = c.login(&user.email, PASSWORD);
    assert!(r.set_cookie("svc_session").unwrap().contains("Max-Age=1"));
    std::thread::sleep(Duration::from_millis(1500));
    submit(&mut c, &totp_code(&user.secret, user.step + 1)).expect_error(401, "unauthorized");
    // The code was not spent by the expired attempt.
    let mut fresh = pending(&server, &user.email);
    submit(&mut fresh, &totp_code(&user.secret, user.step + 1)).expect(200);
}

#[test]
fn disable_removes_the_factor_and_ends_other_sessions() {
    let server = server_holding_mail();
    let mut a = server.client();
    let user = enroll(&mut a);
    let mut b = pending(&server, &user.email);
    submit(&mut b, &user.recovery[0]).expect(200);

    a.post(
        "/auth/mfa/totp/disable",
        &json!({"code": wrong_code(&user.secret)}),
    )
    .expect_error(401, "invalid_code");
    a.post("/auth/mfa/totp/disable", &json!({"code": user.recovery[0]}))
        .expect_error(401, "invalid_code");
    b.get("/auth/session").expect(200);
    let r = a.post(
        "/auth/mfa/totp/disable",
        &json!({"code": totp_code(&user.secret, user.step + 1)}),
    );
    r.expect(204);
    assert!(r.body.is_empty());

    b.get("/auth/session").expect_error(401, "unauthorized");
    let s = a.get("/auth/session");
    s.expect(200);
    assert_eq!(s.json()["user"]["mfa_enabled"], false);
    let mut db = db();
    let row = db
        .query_one(
            "SELECT totp_secret IS NULL AND totp_pending IS NULL AND totp_last_step IS NULL
               FROM users WHERE id = $1",
            &[&user.user_id],
        )
        .unwrap();
    assert!(row.get::<_, bool>(0));
    let codes: i64 = db
        .query_one(
            "SELECT count(*) FROM recovery_codes WHERE user_id = $1",
            &[&user.user_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(codes, 0);
    assert_eq!(
        outbox_kinds(user.user_id),
        ["verify_email", "mfa_enabled", "mfa_disabled"]
    );

    // Off: login is complete at once, and disabling again is refused as a state error.
    let mut c = server.client();
    let r = c.login(&user.email, PASSWORD);
    r.expect(200);
    assert_eq!(r.json()["mfa_required"], false);
    a.post("/auth/mfa/totp/disable", &json!({"code": "123456"}))
        .expect_error(400, "invalid_input");
    a.post("/auth/mfa/recovery-codes", &json!({"code": "123456"}))
        .expect_error(400, "invalid_input");
    // And it can be enabled again with a new secret.
    let r = a.post("/auth/mfa/totp/setup", &json!({}));
    r.expect(200);
}

#[test]
fn recovery_codes_can_be_replaced() {
    let server = TestServer::start();
    let mut a = server.client();
    let user = enroll(&mut a);

    let r = a.post(
        "/auth/mfa/recovery-codes",
        &json!({"code": user.recovery[0]}),
    );
    r.expect(200);
    let new: Vec<String> = r.json()["recovery_codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v: &Value| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(new.len(), 10);
    assert!(new.iter().all(|c| !user.recovery.contains(c)));

    // The old codes are void, the new ones work, and the session that asked lives on.
    let mut c = pending(&server, &user.email);
    submit(&mut c, &user.recovery[1]).expect_error(401, "invalid_code");
    submit(&mut c, &new[0]).expect(200);
    a.get("/auth/session").expect(200);

    // A TOTP code works for this too.
    let r = a.post(
        "/auth/mfa/recovery-codes",
        &json!({"code": totp_code(&user.secret, user.step + 1)}),
    );
    r.expect(200);
    let newest = r.json()["recovery_codes"].clone();
    let mut c = pending(&server, &user.email);
    submit(&mut c, &new[1]).expect_error(401, "invalid_code");
    submit(&mut c, newest[0].as_str().unwrap()).expect(200);
}

/// Makes every session of the user look signed in `secs` seconds ago (a stolen cookie, used
/// long after its owner's sign-in).
fn age_sessions(user_id: i64, secs: f64) {
    db().execute(
        "UPDATE sessions SET created_at = now() - make_interval(secs => $2) WHERE user_id = $1",
        &[&user_id, &secs],
    )
    .unwrap();
}

/// Issue 15, item 2: a stolen session cookie alone cannot enrol, replace or remove the second
/// factor. Each change needs the current password, or a sign-in younger than
/// CONSOLED_REAUTH_SECONDS (300 by default), and is mailed to the owner.
#[test]
fn second_factor_changes_need_a_recent_sign_in_or_the_password() {
    let server = server_holding_mail();
    let mut c = server.client();
    let (email, state) = c.signup();
    let user_id = state["user"]["id"].as_i64().unwrap();
    age_sessions(user_id, 301.0);

    // The thief has the cookie, not the password.
    let r = c.post("/auth/mfa/totp/setup", &json!({}));
    r.expect_error(403, "reauth_required");
    c.post(
        "/auth/mfa/totp/setup",
        &json!({"password": "not the password"}),
    )
    .expect_error(403, "reauth_required");
    let r = c.post("/auth/mfa/totp/setup", &json!({"password": PASSWORD}));
    r.expect(200);
    let secret = base32_decode(r.json()["secret"].as_str().unwrap()).unwrap();
    let step = now_step();
    c.post(
        "/auth/mfa/totp/enable",
        &json!({"code": totp_code(&secret, step)}),
    )
    .expect_error(403, "reauth_required");
    let r = c.post(
        "/auth/mfa/totp/enable",
        &json!({"code": totp_code(&secret, step), "password": PASSWORD}),
    );
    r.expect(200);
    let recovery = r.json()["recovery_codes"][0].as_str().unwrap().to_string();

    c.post("/auth/mfa/recovery-codes", &json!({"code": recovery}))
        .expect_error(403, "reauth_required");
    c.post(
        "/auth/mfa/totp/disable",
        &json!({"code": totp_code(&secret, step + 1)}),
    )
    .expect_error(403, "reauth_required");
    let r = c.post(
        "/auth/mfa/recovery-codes",
        &json!({"code": recovery, "password": PASSWORD}),
    );
    r.expect(200);
    let recovery = r.json()["recovery_codes"][0].as_str().unwrap().to_string();

    // A fresh sign-in (password and second factor) is proof enough for the next 300 s.
    let mut fresh = pending(&server, &email);
    submit(&mut fresh, &totp_code(&secret, step + 1)).expect(200);
    fresh
        .post(
            "/auth/mfa/totp/disable",
            &json!({"code": wrong_code(&secret)}),
        )
        .expect_error(401, "invalid_code");
    fresh
        .post("/auth/mfa/totp/disable", &json!({"code": recovery}))
        .expect(204);
    // Each change told the owner.
    let kinds = outbox_kinds(user_id);
    for kind in ["mfa_enabled", "mfa_recovery_codes", "mfa_disabled"] {
        assert!(kinds.iter().any(|k| k == kind), "{kinds:?}");
    }
}

/// Wrong passwords on these endpoints count toward the sign-in throttle of the address: a
/// stolen cookie is no way round it.
#[test]
fn reauth_passwords_are_throttled_like_sign_ins() {
    let server = TestServer::start();
    let mut c = server.client();
    let (_, state) = c.signup();
    age_sessions(state["user"]["id"].as_i64().unwrap(), 301.0);
    for _ in 0..10 {
        c.post(
            "/auth/mfa/totp/setup",
            &json!({"password": "wrong password!"}),
        )
        .expect_error(403, "reauth_required");
    }
    c.post("/auth/mfa/totp/setup", &json!({"password": PASSWORD}))
        .expect_error(429, "rate_limited");
}

/// An account without a password re-proves itself by signing in again through its provider;
/// until then no password can stand in.
#[test]
fn accounts_without_a_password_need_a_fresh_sign_in() {
    let server = TestServer::start();
    let mut c = server.client();
    let (_, state) = c.signup();
    let user_id = state["user"]["id"].as_i64().unwrap();
    db().execute(
        "UPDATE users SET password_hash = NULL WHERE id = $1",
        &[&user_id],
    )
    .unwrap();
    age_sessions(user_id, 301.0);
    let r = c.post("/auth/mfa/totp/setup", &json!({"password": PASSWORD}));
    r.expect_error(403, "reauth_required");
    age_sessions(user_id, 10.0);
    c.post("/auth/mfa/totp/setup", &json!({})).expect(200);
}

#[test]
fn the_reauth_window_is_configurable() {
    let server = TestServer::with(&[("CONSOLED_REAUTH_SECONDS", "30")]);
    let mut c = server.client();
    let (_, state) = c.signup();
    age_sessions(state["user"]["id"].as_i64().unwrap(), 31.0);
    c.post("/auth/mfa/totp/setup", &json!({}))
        .expect_error(403, "reauth_required");
}
