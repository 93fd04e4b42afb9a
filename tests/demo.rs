//! The demo page: served at `/` only with CONSOLED_DEMO=true, under a Content-Security-Policy
//! whose nonce is fresh per response and matches the page's inline script and style.
//! (The page in a real browser: tests/e2e.rs, `make e2e`.)

mod common;

use common::TestServer;

#[test]
fn the_demo_is_off_by_default() {
    let server = TestServer::start();
    server.client().get("/").expect_error(404, "not_found");
}

fn nonce_of(csp: &str) -> &str {
    let start = csp.find("script-src 'nonce-").expect("a script nonce") + 18;
    let len = csp[start..].find('\'').unwrap();
    &csp[start..start + len]
}

#[test]
fn the_demo_page_allows_only_its_own_inline_script_and_style() {
    let server = TestServer::with(&[("CONSOLED_DEMO", "true")]);
    let mut client = server.client();
    let first = client.get("/");
    first.expect(200);
    assert_eq!(
        first.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(first.header("cache-control"), Some("no-store"));
    let csp = first.header("content-security-policy").expect("a CSP");
    assert!(csp.starts_with("default-src 'none';"), "{csp}");
    assert!(csp.contains("connect-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("unsafe"), "{csp}");
    let nonce = nonce_of(csp).to_string();
    assert!(csp.contains(&format!("style-src 'nonce-{nonce}'")), "{csp}");
    let body = String::from_utf8(first.body.clone()).unwrap();
    assert!(body.contains(&format!("<script nonce=\"{nonce}\">")));
    assert!(body.contains(&format!("<style nonce=\"{nonce}\">")));
    assert!(body.contains("new EventSource(\"/v1/events\")"));

    let second = client.get("/");
    let again = nonce_of(second.header("content-security-policy").unwrap());
    assert_ne!(again, nonce, "a nonce is never reused");
    assert!(nonce.len() >= 22, "at least 128 bits: {nonce}");
}

#[test]
fn the_mail_link_pages_are_the_demo_only_when_it_is_on() {
    let off = TestServer::start();
    let paths = [
        "/verify-email?token=abc",
        "/reset-password?token=abc",
        "/change-email?token=abc",
        "/invitation?token=abc",
    ];
    for path in paths {
        off.client().get(path).expect_error(404, "not_found");
    }
    let on = TestServer::with(&[("CONSOLED_DEMO", "true")]);
    let mut client = on.client();
    for path in paths {
        let r = client.get(path);
        r.expect(200);
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{path}");
        let csp = r.header("content-security-policy").expect("a CSP");
        assert!(!csp.contains("unsafe"), "{csp}");
        let body = String::from_utf8(r.body.clone()).unwrap();
        // The steps the mails lead to, and the calls that finish them.
        for needle in [
            "id=\"verify-submit\"",
            "id=\"reset-form\"",
            "id=\"forgot-form\"",
            "\"/auth/verify-email\"",
            "\"/auth/password/reset\"",
            "\"/auth/password/forgot\"",
            "id=\"change-email-submit\"",
            "\"/auth/account/email/confirm\"",
            // The account panel: name and locale, a new address, the export, deletion.
            "id=\"profile-form\"",
            "id=\"email-form\"",
            "\"/auth/account/export\"",
            "id=\"delete-form\"",
            "id=\"invitation-accept\"",
            "\"/v1/invitations/accept\"",
            "body.invitation = linkToken",
        ] {
            assert!(body.contains(needle), "{path}: {needle}");
        }
    }
}

/// `make run`'s mode: the binary logs each mailed link; the link opens the demo page, and the
/// token in it is what the page posts to finish verification and set a new password.
#[test]
fn make_run_logs_mailed_links_that_open_the_demo_and_carry_working_tokens() {
    let server = common::binary::Spawned::start(env!("CARGO_BIN_EXE_consoled"), &[]);
    let mut client = common::Client::new(server.addr);
    let (email, _) = client.signup();

    let link = server.mailed_link(&email, "verify-email");
    let path = link
        .strip_prefix(&server.url)
        .unwrap_or_else(|| panic!("{link} is on {}", server.url));
    assert!(path.starts_with("/verify-email?token="), "{link}");
    let fresh = String::from_utf8(client.get(path).expect(200).body.clone()).unwrap();
    assert!(
        fresh.contains("<body data-link=\"\">"),
        "a fresh link offers Confirm"
    );
    let token = path.split_once("token=").unwrap().1;
    client
        .post("/auth/verify-email", &serde_json::json!({ "token": token }))
        .expect(204);
    // The link opened again: the page knows it was used (and offers no "Confirm"), and the API
    // refuses it, saying so.
    let used = String::from_utf8(client.get(path).expect(200).body.clone()).unwrap();
    assert!(used.contains("<body data-link=\"used\">"));
    let again = client.post("/auth/verify-email", &serde_json::json!({ "token": token }));
    again.expect_error(400, "invalid_token");
    assert_eq!(
        again.json()["error"]["details"],
        serde_json::json!({"field": "token", "rule": "used already"})
    );
    let unknown = client.post(
        "/auth/verify-email",
        &serde_json::json!({ "token": "A".repeat(token.len()) }),
    );
    unknown.expect_error(400, "invalid_token");
    assert!(unknown.json()["error"].get("details").is_none());
    assert_eq!(
        client.get("/auth/session").json()["user"]["email_verified"],
        true
    );

    client
        .post(
            "/auth/password/forgot",
            &serde_json::json!({ "email": email }),
        )
        .expect(204);
    let link = server.mailed_link(&email, "reset-password");
    let path = link.strip_prefix(&server.url).unwrap();
    client.get(path).expect(200);
    let token = path.split_once("token=").unwrap().1;
    let new_password = "another long secret";
    client
        .post(
            "/auth/password/reset",
            &serde_json::json!({ "token": token, "password": new_password }),
        )
        .expect(204);
    client.login(&email, new_password).expect(200);
    // Never a password in the log, nor a session token.
    let log = server.log().join("\n");
    assert!(!log.contains(new_password) && !log.contains(common::PASSWORD));
}
