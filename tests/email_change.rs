//! Changing the account's address (issue 32, item 4), with mail over real SMTP to a sink on
//! loopback: proof of presence, a link to the new address, the change made only when it is
//! followed, the old address told when and from where, and an address of another account
//! answered exactly as a free one.
//!
//! This binary has its own database, and its servers' senders take any due mail of it: the tests
//! run one at a time (`serial`) and look only at mails to their own unique addresses.

mod common;

use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use common::account::{send_json, Control};
use common::smtp::SmtpSink;
use common::*;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);
const CONSOLE: &str = "http://console.test:3000";

static SERIAL: Mutex<()> = Mutex::new(());

/// A server that sends mail to a sink. Fields drop in order: server first, the lock last.
struct Setup {
    server: TestServer,
    sink: SmtpSink,
    _serial: MutexGuard<'static, ()>,
}

fn with_sink() -> Setup {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let sink = SmtpSink::start();
    let url = sink.url();
    let server = TestServer::with(&[
        ("CONSOLED_SMTP_URL", url.as_str()),
        ("CONSOLED_MAIL_SENDER", "true"),
        ("CONSOLED_CONSOLE_URL", CONSOLE),
        ("CONSOLED_MAIL_FROM", "Console <noreply@console.test>"),
    ]);
    Setup {
        server,
        sink,
        _serial: guard,
    }
}

fn change(c: &mut Client, body: serde_json::Value) -> Response {
    c.post("/auth/account/email", &body)
}

fn confirm(c: &mut Client, token: &str) -> Response {
    c.post("/auth/account/email/confirm", &json!({ "token": token }))
}

/// Waits for the `n`th mail to `rcpt` with this subject; its text.
#[track_caller]
fn mail(sink: &SmtpSink, rcpt: &str, subject: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(m) = sink.to(rcpt).iter().find(|m| m.subject() == subject) {
            return m.text();
        }
        assert!(Instant::now() < deadline, "no mail {subject:?} to {rcpt}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_address_changes_only_when_the_link_is_followed_and_the_old_one_is_told() {
    let s = with_sink();
    let mut c = s.server.client();
    let (old, state) = c.signup();
    let id = state["user"]["id"].as_i64().unwrap();
    let verify = s.sink.wait_for(&old, 1, WAIT)[0]
        .token("verify-email")
        .unwrap();
    let new = unique_email();

    let r = change(
        &mut c,
        json!({ "email": format!("  {}  ", new.to_uppercase()) }),
    );
    r.expect(202);
    assert!(r.body.is_empty());
    let text = mail(&s.sink, &new, "Confirm your new email address");
    let token = common::smtp::link_token(&text, "change-email").expect("a link");
    assert!(
        text.contains(&format!("{CONSOLE}/change-email?token=")),
        "{text}"
    );
    // Nothing changes until the link is followed.
    let session = c.get("/auth/session").json();
    assert_eq!(session["user"]["email"], old);
    assert!(s
        .sink
        .to(&old)
        .iter()
        .all(|m| m.subject() != "Your email address was changed"));

    // The link needs no session (it may open in another browser).
    let mut elsewhere = s.server.client();
    elsewhere.extra_headers.push((
        "User-Agent".into(),
        "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0".into(),
    ));
    let mut heard = Control::listen();
    confirm(&mut elsewhere, &token).expect(204);
    let announced = heard.heard(Duration::from_secs(1));
    assert!(announced.user_change(id, "update"), "{announced:?}");
    let user = c.get("/auth/session").json()["user"].clone();
    assert_eq!(user["email"], new);
    assert_eq!(
        user["email_verified"], true,
        "the link proves the new address"
    );
    confirm(&mut elsewhere, &token).expect_error(400, "invalid_token");

    let told = mail(&s.sink, &old, "Your email address was changed");
    assert!(told.contains(&format!("New address: {new}")), "{told}");
    assert!(
        told.contains("When: 20") && told.contains("Z (UTC)"),
        "{told}"
    );
    assert!(
        told.contains(&format!("From: {} (Firefox on Linux)", elsewhere.ip)),
        "{told}"
    );
    // Sign-in follows the address; the links mailed to the old one are dead.
    s.server
        .client()
        .login(&old, PASSWORD)
        .expect_error(401, "invalid_credentials");
    s.server.client().login(&new, PASSWORD).expect(200);
    c.post("/auth/verify-email", &json!({ "token": verify }))
        .expect_error(400, "invalid_token");
    let purposes: Vec<String> = db()
        .query(
            "SELECT purpose FROM mail_tokens WHERE user_id = $1 AND used_at IS NOT NULL",
            &[&id],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(purposes, vec!["email_change".to_string()]);
}

/// The one who asks learns nothing about the new address: the same answer (status, body, header
/// names), and the same in the export afterwards (a change link minted for each address); the
/// owner of the taken address hears that someone tried, and gets no link.
#[test]
fn an_address_of_another_account_is_answered_as_a_free_one() {
    let s = with_sink();
    let mut owner = s.server.client();
    let (taken, _) = owner.signup();
    let mut c = s.server.client();
    let (mine, state) = c.signup();
    let id = state["user"]["id"].as_i64().unwrap();
    let free = unique_email();

    let to_taken = change(&mut c, json!({ "email": taken }));
    let to_free = change(&mut c, json!({ "email": free }));
    assert_eq!(to_taken.status, 202);
    assert_eq!(
        (to_taken.status, &to_taken.body),
        (to_free.status, &to_free.body)
    );
    let names = |r: &Response| -> Vec<String> {
        let mut n: Vec<String> = r.headers.iter().map(|(k, _)| k.to_lowercase()).collect();
        n.sort();
        n
    };
    assert_eq!(names(&to_taken), names(&to_free));

    let text = mail(&s.sink, &taken, "Someone tried to use your email address");
    assert!(text.contains("nothing was changed"), "{text}");
    assert!(common::smtp::link_token(&text, "change-email").is_none());
    mail(&s.sink, &free, "Confirm your new email address");
    let export = c.get("/auth/account/export").json();
    let links: Vec<(String, String)> = export["mail_links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let field = |k: &str| l[k].as_str().unwrap().to_string();
            (field("purpose"), field("email"))
        })
        .collect();
    for address in [&taken, &free] {
        assert!(
            links.contains(&("email_change".to_string(), address.to_string())),
            "{links:?}"
        );
    }
    assert_eq!(c.get("/auth/session").json()["user"]["email"], mine);
    let asked: i64 = db()
        .query_one(
            "SELECT count(*) FROM rate_events WHERE bucket = $1",
            &[&format!("email-change:{id}")],
        )
        .unwrap()
        .get(0);
    assert_eq!(asked, 2, "both requests count alike");
}

/// Asking needs the password or a recent sign-in; bad input is a 400; five requests a day.
#[test]
fn asking_needs_proof_and_valid_input_and_is_limited() {
    let s = with_sink();
    let mut c = s.server.client();
    let (mine, state) = c.signup();
    let id = state["user"]["id"].as_i64().unwrap();
    db().execute(
        "UPDATE sessions SET created_at = now() - interval '301 seconds' WHERE user_id = $1",
        &[&id],
    )
    .unwrap();
    let new = unique_email();
    change(&mut c, json!({ "email": new })).expect_error(403, "reauth_required");
    change(&mut c, json!({ "email": new, "password": "not it" }))
        .expect_error(403, "reauth_required");
    for (body, field) in [
        (json!({}), "email"),
        (json!({ "email": "no at sign" }), "email"),
        (json!({ "email": 5 }), "email"),
        (
            json!({ "email": mine.to_uppercase(), "password": PASSWORD }),
            "email",
        ),
    ] {
        let r = change(&mut c, body.clone());
        r.expect_error(400, "invalid_input");
        assert_eq!(r.json()["error"]["details"]["field"], field, "{body}");
    }
    let asked: Vec<String> = (0..5).map(|_| unique_email()).collect();
    for to in &asked {
        change(&mut c, json!({ "email": to, "password": PASSWORD })).expect(202);
    }
    let r = change(
        &mut c,
        json!({ "email": unique_email(), "password": PASSWORD }),
    );
    r.expect_error(429, "rate_limited");
    assert!(r.header("retry-after").is_some());
    let mut stranger = s.server.client();
    stranger
        .post("/auth/account/email", &json!({ "email": new }))
        .expect_error(401, "unauthorized");
    confirm(&mut stranger, "short").expect_error(400, "invalid_token");
    send_json(
        &mut stranger,
        "POST",
        "/auth/account/email/confirm",
        &json!({ "token": 1 }),
    )
    .expect_error(400, "invalid_input");
    // A newer request voids the older links: only the last one works.
    let tokens: Vec<String> = asked
        .iter()
        .map(|to| {
            let text = mail(&s.sink, to, "Confirm your new email address");
            common::smtp::link_token(&text, "change-email").unwrap()
        })
        .collect();
    confirm(&mut stranger, &tokens[0]).expect_error(400, "invalid_token");
    confirm(&mut stranger, &tokens[4]).expect(204);
    assert_eq!(c.get("/auth/session").json()["user"]["email"], asked[4]);
}

/// A second factor enabled before the first address was proven is the account holder's once
/// the holder has proven a new address by its link: a later reset through that address keeps it
/// (issue 37's removal is for a factor that may be a stranger's to the address's owner).
#[test]
fn a_factor_enabled_before_proof_survives_a_reset_after_an_address_change() {
    let s = with_sink();
    let mut c = s.server.client();
    let (_, state) = c.signup();
    let id = state["user"]["id"].as_i64().unwrap();
    let setup = c.post("/auth/mfa/totp/setup", &json!({}));
    let secret = consoled::crypto::base32_decode(setup.json()["secret"].as_str().unwrap());
    let code = consoled::crypto::totp_code(&secret.unwrap(), consoled::crypto::unix_now() / 30);
    c.post("/auth/mfa/totp/enable", &json!({ "code": code }))
        .expect(200);
    let new = unique_email();
    change(&mut c, json!({ "email": new })).expect(202);
    let text = mail(&s.sink, &new, "Confirm your new email address");
    let token = common::smtp::link_token(&text, "change-email").unwrap();
    confirm(&mut s.server.client(), &token).expect(204);

    let mut anonymous = s.server.client();
    anonymous
        .post("/auth/password/forgot", &json!({ "email": new }))
        .expect(204);
    let text = mail(&s.sink, &new, "Reset your password");
    let reset = common::smtp::link_token(&text, "reset-password").unwrap();
    let body = json!({ "token": reset, "password": "a new password for the reset" });
    anonymous.post("/auth/password/reset", &body).expect(204);
    let kept: bool = db()
        .query_one(
            "SELECT totp_secret IS NOT NULL FROM users WHERE id = $1",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert!(kept, "the reset removed the holder's own second factor");
}
