//! Email verification and password reset, with mail delivered over real SMTP to a sink on
//! loopback (tests/common/smtp.rs) or written as `.eml` files.
//!
//! Every server's sender thread takes any due outbox row of the shared database, so a mail of
//! one test could go out through another test's server. The tests here therefore run one at a
//! time (`serial`), and look only at mails to their own unique addresses.

mod common;

use std::sync::{Barrier, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use common::smtp::{link_token, Mime, SmtpSink};
use common::*;
use consoled::limits::Bucket;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);
const CONSOLE: &str = "http://console.test:3000";
const NEW_PASSWORD: &str = "a brand new secret";

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A server that sends mail to a sink. Fields drop in order: server first, the lock last.
struct Setup {
    server: TestServer,
    sink: SmtpSink,
    _serial: MutexGuard<'static, ()>,
}

fn with_sink(extra: &[(&str, &str)]) -> Setup {
    let guard = serial();
    let sink = SmtpSink::start();
    let server = TestServer::with(&smtp_vars(&sink.url(), extra));
    Setup {
        server,
        sink,
        _serial: guard,
    }
}

fn smtp_vars<'a>(url: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut vars = vec![
        ("CONSOLED_SMTP_URL", url),
        ("CONSOLED_MAIL_SENDER", "true"),
        ("CONSOLED_CONSOLE_URL", CONSOLE),
        ("CONSOLED_MAIL_FROM", "Console <noreply@console.test>"),
    ];
    vars.extend_from_slice(extra);
    vars
}

/// Waits until `n` mails to `rcpt` carry a `{page}?token=` link; returns their tokens in order.
#[track_caller]
fn wait_tokens(sink: &SmtpSink, rcpt: &str, page: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let tokens: Vec<String> = sink.to(rcpt).iter().filter_map(|m| m.token(page)).collect();
        if tokens.len() >= n {
            return tokens;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} {page} mails to {rcpt} arrived",
            tokens.len()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that no further mail to `rcpt` arrives (beyond the `already` it has) for a while.
#[track_caller]
fn assert_no_more_mail(sink: &SmtpSink, rcpt: &str, already: usize) {
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(sink.to(rcpt).len(), already, "unexpected mail to {rcpt}");
}

fn user_id(email: &str) -> i64 {
    db().query_one("SELECT id FROM users WHERE email = $1", &[&email])
        .unwrap()
        .get(0)
}

fn email_verified(c: &mut Client) -> bool {
    let r = c.get("/auth/session");
    r.expect(200);
    r.json()["user"]["email_verified"].as_bool().unwrap()
}

fn verify(c: &mut Client, token: &str) -> Response {
    c.post("/auth/verify-email", &json!({ "token": token }))
}

fn forgot(c: &mut Client, email: &str) -> Response {
    c.post("/auth/password/forgot", &json!({ "email": email }))
}

fn reset(c: &mut Client, token: &str, password: &str) -> Response {
    c.post(
        "/auth/password/reset",
        &json!({ "token": token, "password": password }),
    )
}

#[test]
fn signup_mail_arrives_over_smtp_and_its_link_verifies_the_address_once() {
    let s = with_sink(&[]);
    let mut c = s.server.client();
    let (email, state) = c.signup();
    assert_eq!(state["user"]["email_verified"], false);

    let mail = s.sink.wait_for(&email, 1, WAIT).remove(0);
    assert_eq!(mail.from, "noreply@console.test");
    assert_eq!(mail.subject(), "Confirm your email address");
    let text = mail.text();
    let link = format!("{CONSOLE}/verify-email?token=");
    assert!(text.contains(&link), "link from the configured URL: {text}");
    let token = mail.token("verify-email").unwrap();
    assert_eq!(token.len(), 43, "32 random bytes, base64url");

    let stored: Vec<u8> = db()
        .query_one(
            "SELECT token_hash FROM mail_tokens WHERE user_id = $1 AND purpose = 'verify_email'",
            &[&user_id(&email)],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        stored,
        consoled::crypto::token_hash(&token),
        "only the hash is stored"
    );

    assert!(!email_verified(&mut c));
    verify(&mut c, &token).expect(204);
    assert!(email_verified(&mut c));
    verify(&mut c, &token).expect_error(400, "invalid_token");
    // Verifying needs no session.
    let mut stranger = s.server.client();
    verify(&mut stranger, &token).expect_error(400, "invalid_token");
    verify(&mut stranger, "x").expect_error(400, "invalid_token");
    verify(&mut stranger, &consoled::crypto::new_token()).expect_error(400, "invalid_token");
    stranger
        .post("/auth/verify-email", &json!({}))
        .expect_error(400, "invalid_input");
}

#[test]
fn expired_verification_token_is_refused() {
    let s = with_sink(&[]);
    let mut c = s.server.client();
    let (email, _) = c.signup();
    let token = wait_tokens(&s.sink, &email, "verify-email", 1).remove(0);
    let expires_in: f64 = db()
        .query_one(
            "SELECT extract(epoch FROM expires_at - created_at)::float8 FROM mail_tokens
              WHERE user_id = $1",
            &[&user_id(&email)],
        )
        .unwrap()
        .get(0);
    assert!((expires_in - 86400.0).abs() < 5.0, "24 hours: {expires_in}");
    db().execute(
        "UPDATE mail_tokens SET expires_at = now() - interval '1 second' WHERE user_id = $1",
        &[&user_id(&email)],
    )
    .unwrap();
    verify(&mut c, &token).expect_error(400, "invalid_token");
    assert!(!email_verified(&mut c));
}

#[test]
fn resend_is_limited_per_minute_and_per_day_and_silent_once_verified() {
    let s = with_sink(&[]);
    let mut c = s.server.client();
    let (email, _) = c.signup();
    let id = user_id(&email);
    wait_tokens(&s.sink, &email, "verify-email", 1);

    let mut anonymous = s.server.client();
    anonymous
        .post_empty("/auth/verify-email/resend")
        .expect_error(401, "unauthorized");

    c.post_empty("/auth/verify-email/resend").expect(204);
    wait_tokens(&s.sink, &email, "verify-email", 2);
    let r = c.post_empty("/auth/verify-email/resend");
    r.expect_error(429, "rate_limited");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");

    // Move the last minute into the past: four more resends fill the day's five.
    let age_minute = || {
        db().execute(
            "UPDATE rate_events SET at = at - interval '61 seconds' WHERE bucket = $1",
            &[&Bucket::VerifyMailsPerMinute(id).key()],
        )
        .unwrap();
    };
    for _ in 0..4 {
        age_minute();
        c.post_empty("/auth/verify-email/resend").expect(204);
    }
    age_minute();
    let r = c.post_empty("/auth/verify-email/resend");
    r.expect_error(429, "rate_limited");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((61..=86400).contains(&retry), "a day's limit: {retry}");
    let tokens = wait_tokens(&s.sink, &email, "verify-email", 6);
    assert_no_more_mail(&s.sink, &email, 6);

    // Every mailed token works until one of them is used; then the address is verified.
    verify(&mut c, &tokens[3]).expect(204);
    db().execute(
        "DELETE FROM rate_events WHERE bucket = $1 OR bucket = $2",
        &[
            &Bucket::VerifyMailsPerMinute(id).key(),
            &Bucket::VerifyMailsPerDay(id).key(),
        ],
    )
    .unwrap();
    for _ in 0..3 {
        c.post_empty("/auth/verify-email/resend").expect(204);
    }
    assert_no_more_mail(&s.sink, &email, 6);
}

#[test]
fn resend_refuses_a_session_that_still_needs_its_second_factor() {
    let s = with_sink(&[]);
    let mut c = s.server.client();
    let (email, _) = c.signup();
    db().execute(
        "UPDATE users SET totp_secret = '\\x3132'::bytea WHERE email = $1",
        &[&email],
    )
    .unwrap();
    let mut pending = s.server.client();
    let r = pending.login(&email, PASSWORD);
    r.expect(200);
    assert_eq!(r.json()["mfa_required"], true);
    pending
        .post_empty("/auth/verify-email/resend")
        .expect_error(401, "mfa_required");
}

#[test]
fn forgot_mails_known_addresses_only_and_always_answers_204() {
    let s = with_sink(&[]);
    let mut c = s.server.client();
    let (email, _) = c.signup();
    let mut anonymous = s.server.client();
    let r = forgot(&mut anonymous, &format!("  {}  ", email.to_uppercase()));
    r.expect(204);
    assert!(r.body.is_empty());
    wait_tokens(&s.sink, &email, "reset-password", 1);
    let mail = s
        .sink
        .to(&email)
        .into_iter()
        .find(|m| m.token("reset-password").is_some())
        .unwrap();
    assert_eq!(mail.subject(), "Reset your password");
    assert!(mail
        .text()
        .contains(&format!("{CONSOLE}/reset-password?token=")));

    let unknown = unique_email();
    forgot(&mut anonymous, &unknown).expect(204);
    forgot(&mut anonymous, "not an address").expect_error(400, "invalid_input");
    assert_no_more_mail(&s.sink, &unknown, 0);
    let queued: i64 = db()
        .query_one(
            "SELECT count(*) FROM outbox WHERE recipient = $1",
            &[&unknown],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        queued, 0,
        "the row of an unknown address is dropped, not retried"
    );
}

/// Issue 15, item 3: a stranger's forgot requests, from another client, cannot use up the
/// owner's reset mail.
#[test]
fn a_stranger_cannot_silence_the_owners_reset_mail() {
    let s = with_sink(&[]);
    let mut c = s.server.client();
    let (email, _) = c.signup();
    let mut stranger = s.server.client();
    for _ in 0..10 {
        forgot(&mut stranger, &email).expect(204);
    }
    wait_tokens(&s.sink, &email, "reset-password", 3);
    let mut owner = s.server.client();
    forgot(&mut owner, &email).expect(204);
    let token = wait_tokens(&s.sink, &email, "reset-password", 4).remove(3);
    reset(&mut owner, &token, NEW_PASSWORD).expect(204);
    owner.login(&email, NEW_PASSWORD).expect(200);
}

/// Past its cap a client's forgot requests leave no trace: each answer is still 204, but no
/// row is added to any table, whatever addresses it names.
#[test]
fn forgot_from_one_client_is_capped_and_leaves_bounded_rows() {
    let s = with_sink(&[]);
    let mut c = s.server.client();
    let ip = c.ip.clone();
    let addresses: Vec<String> = (0..60).map(|_| unique_email()).collect();
    for address in &addresses {
        forgot(&mut c, address).expect(204);
    }
    for _ in 0..20 {
        forgot(&mut c, &addresses[0]).expect(204);
    }
    let mut db = db();
    let rows: i64 = db
        .query_one(
            "SELECT count(*) FROM rate_events
              WHERE bucket LIKE '%:' || $1 OR split_part(bucket, ':', 2) = ANY($2)",
            &[&ip, &addresses],
        )
        .unwrap()
        .get(0);
    // 20 requests counted (per client and per address and client), then nothing.
    assert!((20..=40).contains(&rows), "{rows} rate rows for one client");
    // Capped: not even a known address gets a reset mail from this client now (the one mail
    // is the signup's verification).
    let mut other = s.server.client();
    let (email, _) = other.signup();
    forgot(&mut c, &email).expect(204);
    s.sink.wait_for(&email, 1, WAIT);
    assert_no_more_mail(&s.sink, &email, 1);
}

#[test]
fn at_most_three_reset_mails_per_address_and_client_per_hour() {
    let s = with_sink(&[]);
    let mut c = s.server.client();
    let (email, _) = c.signup();
    let mut anonymous = s.server.client();
    for _ in 0..5 {
        forgot(&mut anonymous, &email).expect(204);
    }
    wait_tokens(&s.sink, &email, "reset-password", 3);
    thread::sleep(Duration::from_millis(1500));
    let resets = s
        .sink
        .to(&email)
        .iter()
        .filter(|m| m.token("reset-password").is_some())
        .count();
    assert_eq!(resets, 3);
}

#[test]
fn forgot_takes_the_same_time_for_known_and_unknown_addresses() {
    let s = with_sink(&[]);
    let known: Vec<String> = (0..12).map(|_| s.server.client().signup().0).collect();
    for email in &known {
        s.sink.wait_for(email, 1, WAIT);
    }
    let mut c = s.server.client();
    for _ in 0..5 {
        forgot(&mut c, &unique_email()).expect(204);
    }
    // Each timed request comes from its own client, so that every one stays under the
    // per-client caps and does the full work (count and queue) being compared.
    let time = |c: &mut Client, email: &str| {
        c.ip = unique_ip();
        let start = Instant::now();
        forgot(c, email).expect(204);
        start.elapsed().as_secs_f64() * 1000.0
    };
    let (mut k, mut u) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        for email in &known {
            k.push(time(&mut c, email));
            u.push(time(&mut c, &unique_email()));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (mk, mu) = (median(&mut k), median(&mut u));
    eprintln!(
        "forgot median over {} trials: known {mk:.2} ms, unknown {mu:.2} ms",
        k.len()
    );
    // A password hash (tens of ms) or an inline SMTP conversation would show; noise would not.
    assert!(
        (mk - mu).abs() < 5.0_f64.max(0.5 * mk.min(mu)),
        "known {mk:.2} ms vs unknown {mu:.2} ms"
    );
    for email in &known {
        wait_tokens(&s.sink, email, "reset-password", 3);
    }
}

#[test]
fn reset_replaces_the_password_ends_every_session_and_verifies_the_address() {
    let s = with_sink(&[]);
    let mut first = s.server.client();
    let (email, _) = first.signup();
    let mut second = s.server.client();
    second.login(&email, PASSWORD).expect(200);
    // A client locked out by failed sign-ins can still reset, and then sign in.
    let mut locked = s.server.client();
    for _ in 0..10 {
        locked
            .login(&email, "wrong password!")
            .expect_error(401, "invalid_credentials");
    }
    locked
        .login(&email, PASSWORD)
        .expect_error(429, "rate_limited");

    let mut anonymous = s.server.client();
    forgot(&mut anonymous, &email).expect(204);
    let older = wait_tokens(&s.sink, &email, "reset-password", 1).remove(0);
    forgot(&mut anonymous, &email).expect(204);
    let newer = wait_tokens(&s.sink, &email, "reset-password", 2).remove(1);

    reset(&mut anonymous, &older, NEW_PASSWORD).expect_error(400, "invalid_token");
    reset(&mut anonymous, &newer, "short").expect_error(400, "invalid_input");
    reset(&mut anonymous, &newer, &"p".repeat(129)).expect_error(400, "invalid_input");
    reset(&mut anonymous, "", NEW_PASSWORD).expect_error(400, "invalid_token");

    let r = reset(&mut anonymous, &newer, NEW_PASSWORD);
    r.expect(204);
    assert!(
        r.set_cookie("svc_csrf").is_some(),
        "a new CSRF token comes with the cleared session cookie"
    );
    assert!(
        r.set_cookie("svc_session")
            .is_none_or(|c| c.contains("Max-Age=0")),
        "a reset never signs in"
    );
    reset(&mut anonymous, &newer, NEW_PASSWORD).expect_error(400, "invalid_token");

    first.get("/auth/session").expect_error(401, "unauthorized");
    second
        .get("/auth/session")
        .expect_error(401, "unauthorized");
    let mut fresh = s.server.client();
    fresh
        .login(&email, PASSWORD)
        .expect_error(401, "invalid_credentials");
    let r = locked.login(&email, NEW_PASSWORD);
    r.expect(200);
    assert_eq!(r.json()["user"]["email_verified"], true);
}

#[test]
fn a_reset_token_works_once_even_when_used_twice_at_the_same_time() {
    let s = with_sink(&[]);
    let (email, _) = s.server.client().signup();
    forgot(&mut s.server.client(), &email).expect(204);
    let token = wait_tokens(&s.sink, &email, "reset-password", 1).remove(0);
    let barrier = Barrier::new(2);
    let statuses: Vec<u16> = thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let mut c = s.server.client();
                c.csrf();
                let (barrier, token) = (&barrier, &token);
                scope.spawn(move || {
                    barrier.wait();
                    reset(&mut c, token, NEW_PASSWORD).status
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut sorted = statuses.clone();
    sorted.sort();
    assert_eq!(sorted, [204, 400], "{statuses:?}");
}

#[test]
fn mail_queued_while_the_smtp_server_is_down_arrives_when_it_comes_back() {
    let _serial = serial();
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let url = format!("smtp://127.0.0.1:{port}");
    let server = TestServer::with(&smtp_vars(&url, &[("CONSOLED_MAIL_RETRY_SECONDS", "0.2")]));
    let mut c = server.client();
    let start = Instant::now();
    let (email, _) = c.signup();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "signup waited on SMTP"
    );
    let id = user_id(&email);

    // Wait for two failed attempts; the row says why, and no live token was left behind.
    let deadline = Instant::now() + WAIT;
    let row = loop {
        let row = db()
            .query_opt(
                "SELECT attempts, last_error, row_to_json(o)::text FROM outbox o WHERE user_id = $1",
                &[&id],
            )
            .unwrap()
            .expect("the mail stays queued");
        if row.get::<_, i32>(0) >= 2 {
            break row;
        }
        assert!(Instant::now() < deadline, "no retry happened");
        thread::sleep(Duration::from_millis(20));
    };
    let last_error: String = row.get(1);
    assert!(!last_error.is_empty());
    let snapshot: String = row.get(2);
    let tokens: i64 = db()
        .query_one(
            "SELECT count(*) FROM mail_tokens WHERE user_id = $1",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert_eq!(tokens, 0, "a failed send leaves no token");

    let sink = SmtpSink::on(port);
    let token = wait_tokens(&sink, &email, "verify-email", 1).remove(0);
    assert!(!snapshot.contains(&token), "the outbox row held the token");
    assert!(!last_error.contains(&token));
    let left: i64 = db()
        .query_one("SELECT count(*) FROM outbox WHERE user_id = $1", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the row is deleted once sent");
    verify(&mut c, &token).expect(204);
    assert!(email_verified(&mut c));
    let metrics = String::from_utf8(c.get("/metrics").body).unwrap();
    assert!(
        metrics.contains("consoled_mail_failures_total")
            && !metrics.contains("consoled_mail_failures_total 0\n"),
        "{metrics}"
    );
}

#[test]
fn a_mail_server_that_hangs_slows_no_request() {
    let _serial = serial();
    // Accepts connections (the kernel does) but never speaks: the sender waits for its timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("smtp://{}", silent.local_addr().unwrap());
    let server = TestServer::with(&smtp_vars(&url, &[]));
    let mut c = server.client();
    let (email, _) = c.signup();
    thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let start = Instant::now();
        forgot(&mut c, &email).expect(204);
        c.post_empty("/auth/verify-email/resend");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "a request waited on SMTP: {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn two_instances_never_send_one_mail_twice() {
    let _serial = serial();
    let sink = SmtpSink::start();
    let url = sink.url();
    let servers = [
        TestServer::with(&smtp_vars(&url, &[])),
        TestServer::with(&smtp_vars(&url, &[])),
    ];
    let emails: Vec<String> = (0..8).map(|i| servers[i % 2].client().signup().0).collect();
    for email in &emails {
        sink.wait_for(email, 1, WAIT);
    }
    thread::sleep(Duration::from_millis(1000));
    for email in &emails {
        assert_eq!(sink.to(email).len(), 1, "{email}");
    }
}

#[test]
fn without_smtp_mails_are_eml_files_in_the_mail_dir() {
    let _serial = serial();
    let server = TestServer::with(&[
        ("CONSOLED_CONSOLE_URL", CONSOLE),
        ("CONSOLED_MAIL_SENDER", "true"),
    ]);
    let mut c = server.client();
    let (email, _) = c.signup();
    let deadline = Instant::now() + WAIT;
    let mail = loop {
        let found = std::fs::read_dir(&server.mail_dir.0)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "eml"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .map(|raw| Mime::parse(&raw))
            .find(|m| m.header("to").is_some_and(|to| to.contains(&email)));
        if let Some(mail) = found {
            break mail;
        }
        assert!(Instant::now() < deadline, "no .eml file for {email}");
        thread::sleep(Duration::from_millis(20));
    };
    let token = link_token(&mail.text(), &format!("{CONSOLE}/verify-email")).unwrap();
    verify(&mut c, &token).expect(204);
    assert!(email_verified(&mut c));
}

#[test]
fn enabling_and_disabling_the_second_factor_are_announced_by_mail() {
    use consoled::crypto::{base32_decode, totp_code, unix_now, TOTP_STEP};
    let setup = with_sink(&[]);
    let mut c = setup.server.client();
    let (email, _) = c.signup();
    let r = c.post("/auth/mfa/totp/setup", &json!({}));
    r.expect(200);
    let secret = base32_decode(r.json()["secret"].as_str().unwrap()).unwrap();
    let step = unix_now() / TOTP_STEP;
    c.post(
        "/auth/mfa/totp/enable",
        &json!({"code": totp_code(&secret, step)}),
    )
    .expect(200);
    let subject_of = |m: &common::smtp::Received| {
        m.data
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("subject:"))
            .unwrap_or("")
            .to_ascii_lowercase()
    };
    // The verification mail of the signup comes too: wait for both.
    let mails = setup.sink.wait_for(&email, 2, WAIT);
    assert!(
        mails.iter().any(|m| subject_of(m).contains("enabled")),
        "{:?}",
        mails.iter().map(subject_of).collect::<Vec<_>>()
    );
    c.post(
        "/auth/mfa/totp/disable",
        &json!({"code": totp_code(&secret, step + 1)}),
    )
    .expect(204);
    let mails = setup.sink.wait_for(&email, 3, WAIT);
    assert!(mails.iter().any(|m| subject_of(m).contains("disabled")));
    assert!(mails
        .iter()
        .all(|m| !m.data.contains(&consoled::crypto::base32_encode(&secret))));
}

/// Links a stranger's provider identity to an account whose address is unproven, as the
/// service did before it refused unverified provider addresses (issue 15); returns the
/// stranger's session token.
fn legacy_link(user_id: i64, subject: &str) -> String {
    let mut db = db();
    db.execute(
        "INSERT INTO external_identities (provider, subject, user_id, email)
         SELECT 'google', $1, id, email FROM users WHERE id = $2",
        &[&subject, &user_id],
    )
    .unwrap();
    insert_session(&mut db, user_id)
}

#[test]
fn proving_the_address_by_mail_removes_links_made_while_it_was_unproven() {
    let s = with_sink(&[]);
    // Verification link: the owner signed up, a stranger's link was attached meanwhile.
    let mut owner = s.server.client();
    let (email, _) = owner.signup();
    let id = user_id(&email);
    let stranger = legacy_link(id, &unique());
    let mut attacker = s.server.client();
    attacker.cookies.insert("svc_session".into(), stranger);
    attacker.get("/auth/session").expect(200);
    let token = wait_tokens(&s.sink, &email, "verify-email", 1).remove(0);
    verify(&mut owner, &token).expect(204);
    assert_eq!(links_of(id), 0, "the stranger's link is gone");
    attacker
        .get("/auth/session")
        .expect_error(401, "unauthorized");

    // Reset link: the account has only the stranger's link and no password.
    let victim = unique_email();
    let id: i64 = db()
        .query_one(
            "INSERT INTO users (email, name) VALUES ($1, 'Squatter') RETURNING id",
            &[&victim],
        )
        .unwrap()
        .get(0);
    let stranger = legacy_link(id, &unique());
    let mut attacker = s.server.client();
    attacker.cookies.insert("svc_session".into(), stranger);
    attacker.get("/auth/session").expect(200);
    let mut anonymous = s.server.client();
    forgot(&mut anonymous, &victim).expect(204);
    let token = wait_tokens(&s.sink, &victim, "reset-password", 1).remove(0);
    reset(&mut anonymous, &token, NEW_PASSWORD).expect(204);
    assert_eq!(links_of(id), 0, "the stranger's link is gone");
    attacker
        .get("/auth/session")
        .expect_error(401, "unauthorized");
    owner.login(&victim, NEW_PASSWORD).expect(200);
}
