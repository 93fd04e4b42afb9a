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
