//! Password budgets under attack (issue 37, items 2 and 3): bursts from several threads on two
//! instances never verify more passwords than the budget allows, and an address known to be over
//! its budget is refused before any database work whatever `svc_device` cookie it makes up.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;

use common::pgcount::CountingProxy;
use common::*;
use serde_json::{json, Value};

/// Failed sign-ins per (account, client address): the budget every burst below runs into.
const BUDGET: usize = 10;
/// Requests in one burst, half on each instance.
const BURST: usize = 12;

fn metric(server: &TestServer, name: &str) -> u64 {
    let r = server.client().get("/metrics");
    let text = String::from_utf8(r.body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
        .parse()
        .unwrap()
}

/// Password verifications (and hashes) on both instances together.
fn hashes(servers: &[TestServer; 2]) -> u64 {
    servers
        .iter()
        .map(|s| metric(s, "consoled_hashes_total"))
        .sum()
}

/// Two instances on one database, each able to run and queue a whole burst at once.
fn two_instances() -> [TestServer; 2] {
    let settings = [
        ("CONSOLED_HASH_THREADS", "2"),
        ("CONSOLED_HASH_QUEUE", "16"),
    ];
    [TestServer::with(&settings), TestServer::with(&settings)]
}

/// `c` (its cookies and address) pointed at `server`.
fn on(c: &Client, server: &TestServer) -> Client {
    let mut c = c.clone();
    c.addr = server.addr;
    c
}

/// Sends `BURST` copies of one request at once from as many threads, alternating between the
/// instances; returns their statuses.
fn burst(servers: &[TestServer; 2], c: &Client, path: &str, body: &Value) -> Vec<u16> {
    let barrier = Arc::new(Barrier::new(BURST));
    let threads: Vec<_> = (0..BURST)
        .map(|i| {
            let mut c = on(c, &servers[i % 2]);
            let (barrier, path, body) = (barrier.clone(), path.to_string(), body.clone());
            thread::spawn(move || {
                let token = c.csrf();
                let body = serde_json::to_vec(&body).unwrap();
                let headers = [
                    ("Content-Type", "application/json"),
                    ("X-CSRF-Token", token.as_str()),
                ];
                barrier.wait();
                c.send("POST", &path, &headers, &body).status
            })
        })
        .collect();
    let mut statuses: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    statuses.sort_unstable();
    statuses
}

/// `BUDGET - 1` failures one after the other (alternating instances), then a burst: exactly one
/// more password is verified, and every other request of the burst is refused unverified.
#[track_caller]
fn holds_under_a_burst(
    servers: &[TestServer; 2],
    c: &Client,
    path: &str,
    body: &Value,
    wrong: u16,
) {
    for i in 0..BUDGET - 1 {
        let status = on(c, &servers[i % 2]).post(path, body).status;
        assert_eq!(status, wrong, "failure {i} before the burst");
    }
    let before = hashes(servers);
    let statuses = burst(servers, c, path, body);
    let verified = hashes(servers) - before;
    let mut expected = vec![wrong];
    expected.extend([429; BURST - 1]);
    expected.sort_unstable();
    assert_eq!(
        (statuses, verified),
        (expected, 1),
        "(statuses, passwords verified) of a burst against a budget with one place left"
    );
}

#[test]
fn a_burst_of_wrong_passwords_never_overruns_the_sign_in_budget() {
    let servers = two_instances();
    let (email, _) = servers[0].client().signup();
    let guesser = servers[0].client();
    let body = json!({"email": email, "password": "wrong password"});
    holds_under_a_burst(&servers, &guesser, "/auth/login", &body, 401);
}

#[test]
fn a_burst_of_wrong_current_passwords_never_overruns_the_budget() {
    let servers = two_instances();
    let mut c = servers[0].client();
    c.signup();
    let body = json!({"current_password": "wrong password", "password": "a brand new secret"});
    holds_under_a_burst(&servers, &c, "/auth/password/change", &body, 401);
    // The session is untouched, and the right password now waits too.
    c.get("/auth/session").expect(200);
}

#[test]
fn a_burst_of_wrong_re_authentication_passwords_never_overruns_the_budget() {
    let servers = two_instances();
    let mut c = servers[0].client();
    c.signup();
    let body = json!({"password": "wrong password"});
    holds_under_a_burst(&servers, &c, "/auth/mfa/totp/setup", &body, 403);
    c.post("/auth/mfa/totp/setup", &json!({ "password": PASSWORD }))
        .expect_error(429, "rate_limited");
}

/// A device cookie's own budget (5 failures) holds under a burst as well: the sixth concurrent
/// wrong password with it is not verified as a trusted device's.
#[test]
fn a_burst_with_a_device_cookie_never_overruns_its_budget() {
    let servers = two_instances();
    let mut owner = servers[0].client();
    let (email, _) = owner.signup();
    owner.login(&email, PASSWORD).expect(200);
    assert!(owner.cookies.contains_key("svc_device"));
    // The account is locked for everyone else, so only the cookie's budget lets a guess in.
    db().execute(
        "INSERT INTO rate_events (bucket) SELECT $1 FROM generate_series(1, 100)",
        &[&format!("login-account:{email}")],
    )
    .unwrap();
    let before = hashes(&servers);
    let body = json!({"email": email, "password": "wrong password"});
    let statuses = burst(&servers, &owner, "/auth/login", &body);
    let verified = hashes(&servers) - before;
    let failures: i32 = db()
        .query_one(
            "SELECT failures FROM device_cookies WHERE token_hash = $1",
            &[&consoled::crypto::token_hash(&owner.cookies["svc_device"])],
        )
        .unwrap()
        .get(0);
    let mut expected = vec![401; 5];
    expected.extend([429; BURST - 5]);
    assert_eq!((statuses, verified, failures), (expected, 5, 5));
}

/// Item 3: an address over its budget is refused from memory; a made-up `svc_device` cookie of
/// the right shape used to send every such request to the database (three statements each).
#[test]
fn a_made_up_device_cookie_does_not_buy_a_blocked_address_any_database_work() {
    let proxy = CountingProxy::start(db_target());
    let url = database_url_via(proxy.port);
    let server = TestServer::with(&[
        ("DATABASE_URL", &url),
        ("CONSOLED_LOGIN_FAILURES_PER_CLIENT", "3"),
    ]);
    let mut owner = server.client();
    let (email, _) = owner.signup();
    owner.login(&email, PASSWORD).expect(200);
    let mut guesser = server.client();
    for _ in 0..3 {
        guesser
            .login(&unique_email(), "wrong password")
            .expect_error(401, "invalid_credentials");
    }
    guesser
        .login(&email, "wrong password")
        .expect_error(429, "rate_limited");
    // The owner's genuine cookie, used for another account, is worth no more than a made-up one.
    let owners = owner.cookies["svc_device"].clone();
    let mut cookies = vec![owners];
    cookies.extend((0..300).map(|_| consoled::crypto::new_token()));
    let before = proxy.round_trips();
    for (i, cookie) in cookies.iter().enumerate() {
        guesser.cookies.insert("svc_device".into(), cookie.clone());
        let account = if i == 0 {
            unique_email()
        } else {
            email.clone()
        };
        guesser
            .login(&account, "wrong password")
            .expect_error(429, "rate_limited");
    }
    let spent = proxy.round_trips() - before;
    eprintln!("{spent} round trips for 301 refused sign-ins");
    // Background threads (the lease keeper's heartbeat) add a few; three per request was 900.
    assert!(spent < 30, "{spent} round trips for 301 refused sign-ins");
    // The owner's own browser behind the same address still gets in.
    owner.ip = guesser.ip.clone();
    owner.login(&email, PASSWORD).expect(200);
}
