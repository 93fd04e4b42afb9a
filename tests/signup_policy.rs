//! Who may sign up (issue 32): `CONSOLED_SIGNUP` (`open`, `invite`, `closed`) and
//! `CONSOLED_SIGNUP_DOMAINS`, the same for sign-up with a password and for a first sign-in
//! through Google or GitHub (fake providers on loopback); sign-up through an invitation verifies
//! the address and joins the organization.

mod common;

use common::account::cli;
use common::fake_idp::{AuthRequest, FakeIdp, Profile};
use common::teams::{invitation_token, server_with, sink, Person};
use common::*;
use consoled::http::percent_encode;
use serde_json::{json, Value};

const CONSOLE: &str = "http://console.test";

fn signup(c: &mut Client, email: &str, invitation: Option<&str>) -> Response {
    let mut body = json!({"email": email, "password": PASSWORD, "name": "New Person"});
    if let Some(token) = invitation {
        body["invitation"] = json!(token);
    }
    c.post("/auth/signup", &body)
}

/// Servers with both fake providers, the console at `CONSOLE`, and `extra` settings.
struct Providers {
    server: TestServer,
    github: FakeIdp,
    google: FakeIdp,
}

fn with_providers(extra: &[(&str, &str)]) -> Providers {
    let (github, google) = (FakeIdp::github(), FakeIdp::google());
    let mut vars: Vec<(String, String)> = github.env();
    vars.extend(google.env());
    vars.push(("CONSOLED_CONSOLE_URL".into(), CONSOLE.into()));
    vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Providers {
        server: server_with(&refs),
        github,
        google,
    }
}

impl Providers {
    /// A whole provider sign-in; the callback's `Location`.
    fn sign_in(&self, provider: &str, email: &str) -> String {
        let mut c = self.server.client();
        let r = c.get(&format!("/auth/oauth/{provider}/start"));
        r.expect(302);
        let auth = AuthRequest::parse(r.header("location").unwrap());
        let idp = if provider == "github" {
            &self.github
        } else {
            &self.google
        };
        let code = idp.authorize(&auth, &Profile::new(email));
        let query = format!(
            "code={}&state={}",
            percent_encode(&code),
            percent_encode(auth.get("state"))
        );
        let r = c.get(&format!("/auth/oauth/{provider}/callback?{query}"));
        r.expect(302);
        r.header("location").unwrap().to_string()
    }
}

fn has_account(email: &str) -> bool {
    db().query_opt("SELECT 1 FROM users WHERE email = $1", &[&email])
        .unwrap()
        .is_some()
}

/// `closed`: no new account by any route; existing accounts sign in as before.
#[test]
fn closed_signup_refuses_every_new_account() {
    let open = server_with(&[]);
    let existing = Person::new(&open);
    let p = with_providers(&[("CONSOLED_SIGNUP", "closed")]);
    let mut c = p.server.client();
    let email = unique_email();
    let r = signup(&mut c, &email, None);
    r.expect_error(403, "signup_closed");
    assert_eq!(r.json()["error"]["details"]["signup"], "closed");
    assert!(!has_account(&email));
    for provider in ["github", "google"] {
        let email = unique_email();
        let location = p.sign_in(provider, &email);
        assert_eq!(location, format!("{CONSOLE}/login?error=signup_closed"));
        assert!(!has_account(&email));
    }
    c.login(&existing.email, PASSWORD).expect(200);
}

/// `invite`: a password sign-up needs an invitation's link (for its own address), which makes
/// the address verified; a provider sign-in needs a live invitation of the verified address.
#[test]
fn invite_only_signup_admits_invited_addresses() {
    let p = with_providers(&[("CONSOLED_SIGNUP", "invite")]);
    let mut c = p.server.client();
    let email = unique_email();
    let r = signup(&mut c, &email, None);
    r.expect_error(403, "signup_closed");
    assert_eq!(r.json()["error"]["details"]["signup"], "invite");

    let invitation = cli(&["invitation", "create", "--email", &email]);
    assert_eq!(invitation["org_id"], Value::Null);
    assert_eq!(invitation["email"], email.as_str());
    let token = invitation_token(&email, 1);
    let someone_else = unique_email();
    signup(&mut c, &someone_else, Some(&token)).expect_error(400, "invalid_input");
    let r = signup(&mut c, &email, Some(&token));
    r.expect(201);
    assert_eq!(r.json()["user"]["email_verified"], true);
    assert_eq!(r.json()["organizations"].as_array().unwrap().len(), 1);
    let again = unique_email();
    signup(&mut server_client(&p), &again, Some(&token)).expect_error(400, "invalid_input");

    // A provider sign-in: refused without an invitation, admitted with one.
    let email = unique_email();
    let location = p.sign_in("github", &email);
    assert_eq!(location, format!("{CONSOLE}/login?error=signup_closed"));
    cli(&["invitation", "create", "--email", &email]);
    assert_eq!(p.sign_in("github", &email), format!("{CONSOLE}/"));
    assert!(has_account(&email));
}

fn server_client(p: &Providers) -> Client {
    p.server.client()
}

/// Signing up through an organization's invitation joins it with the invited role; no
/// verification mail is sent (the link proved the address).
#[test]
fn signing_up_through_an_invitation_joins_the_organization() {
    let server = server_with(&[("CONSOLED_SIGNUP", "invite")]);
    let owner_server = server_with(&[]);
    let mut ada = Person::verified(&owner_server);
    let org = ada.team("Join by sign-up");
    let email = unique_email();
    ada.invite(org, &email, "admin");
    let token = invitation_token(&email, 1);
    let mut c = server.client();
    let r = signup(&mut c, &email, Some(&token));
    r.expect(201);
    let orgs = r.json()["organizations"].clone();
    let joined = orgs.as_array().unwrap().iter().find(|o| o["id"] == org);
    assert_eq!(joined.unwrap()["role"], "admin", "{orgs}");
    assert_eq!(r.json()["user"]["email_verified"], true);
    let members = ada.get(&format!("/v1/organizations/{org}/members")).json();
    assert_eq!(members["members"].as_array().unwrap().len(), 2);
    // Queued with the sign-up, it would be in the outbox or, sent, in the sink.
    let queued: i64 = db()
        .query_one(
            "SELECT count(*) FROM outbox WHERE kind = 'verify_email' AND recipient = $1",
            &[&email],
        )
        .unwrap()
        .get(0);
    assert_eq!(queued, 0);
    let verification = sink()
        .to(&email)
        .iter()
        .filter(|m| m.token("/verify-email").is_some())
        .count();
    assert_eq!(verification, 0);
}

/// `CONSOLED_SIGNUP_DOMAINS`: only addresses of those domains make accounts, by any route and
/// invited or not; other addresses get 403 `domain_not_allowed` naming the domains.
#[test]
fn only_allowed_domains_make_accounts() {
    let p = with_providers(&[("CONSOLED_SIGNUP_DOMAINS", "example.com, corp.example.org")]);
    let mut c = p.server.client();
    signup(&mut c, &unique_email(), None).expect(201);
    let mut c = p.server.client();
    let outside = format!("someone-{}@elsewhere.test", unique());
    let r = signup(&mut c, &outside, None);
    r.expect_error(403, "domain_not_allowed");
    assert_eq!(
        r.json()["error"]["details"]["domains"],
        json!(["example.com", "corp.example.org"])
    );
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("example.com"));
    // Not a suffix match: a subdomain is another domain.
    let sub = format!("someone-{}@sub.example.com", unique());
    signup(&mut c, &sub, None).expect_error(403, "domain_not_allowed");
    cli(&["invitation", "create", "--email", &outside]);
    let token = invitation_token(&outside, 1);
    signup(&mut c, &outside, Some(&token)).expect_error(403, "domain_not_allowed");
    let location = p.sign_in("google", &format!("g-{}@elsewhere.test", unique()));
    assert_eq!(
        location,
        format!("{CONSOLE}/login?error=domain_not_allowed")
    );
    assert_eq!(p.sign_in("google", &unique_email()), format!("{CONSOLE}/"));
}

/// A setting that cannot mean anything stops the start, naming it.
#[test]
fn a_bad_signup_setting_is_refused_at_start() {
    for (name, value) in [
        ("CONSOLED_SIGNUP", "invited"),
        ("CONSOLED_SIGNUP_DOMAINS", "example.com, not a domain"),
    ] {
        let mut vars = std::collections::HashMap::new();
        vars.insert("DATABASE_URL".to_string(), database_url());
        vars.insert(name.to_string(), value.to_string());
        let e = consoled::config::Config::from_vars(vars).unwrap_err();
        assert!(e.0.contains(name), "{}", e.0);
    }
}
