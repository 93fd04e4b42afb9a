//! Helpers of the team tests (organizations, members, invitations, projects): servers whose
//! mail goes over real SMTP to one sink per test binary, people who sign up, and the `/v1`
//! requests with their CSRF header.
//!
//! Every server of a binary that uses these helpers sends its mail to the same sink (a sender
//! takes any due mail of the shared database, so a mail queued by one server may leave through
//! another): a test finds its own mail by its unique address.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::smtp::SmtpSink;
use super::{Client, Response, TestServer};

pub const WAIT: Duration = Duration::from_secs(20);

pub fn sink() -> &'static SmtpSink {
    static SINK: OnceLock<SmtpSink> = OnceLock::new();
    SINK.get_or_init(SmtpSink::start)
}

/// A server that mails through the binary's sink, with `extra` settings.
pub fn server_with(extra: &[(&str, &str)]) -> TestServer {
    let url = sink().url();
    let mut vars = vec![
        ("CONSOLED_SMTP_URL", url.as_str()),
        ("CONSOLED_MAIL_SENDER", "true"),
    ];
    vars.extend_from_slice(extra);
    TestServer::with(&vars)
}

pub fn server() -> TestServer {
    server_with(&[])
}

/// Someone signed up on `server`, with their personal organization.
pub struct Person {
    pub client: Client,
    pub email: String,
    pub id: i64,
    pub personal_org: i64,
}

impl Person {
    pub fn new(server: &TestServer) -> Person {
        let mut client = server.client();
        let (email, state) = client.signup();
        Person {
            client,
            email,
            id: state["user"]["id"].as_i64().unwrap(),
            personal_org: state["organizations"][0]["id"].as_i64().unwrap(),
        }
    }

    /// Marks the address verified, as following the verification mail does (tests/mail.rs
    /// covers that path).
    pub fn verified(server: &TestServer) -> Person {
        let person = Person::new(server);
        super::db()
            .execute(
                "UPDATE users SET email_verified = true WHERE id = $1",
                &[&person.id],
            )
            .unwrap();
        person
    }

    pub fn cookie(&self) -> String {
        format!("svc_session={}", self.client.cookies["svc_session"])
    }

    pub fn get(&mut self, path: &str) -> Response {
        self.client.get(path)
    }

    pub fn post(&mut self, path: &str, body: &Value) -> Response {
        self.client.post(path, body)
    }

    pub fn patch(&mut self, path: &str, body: &Value) -> Response {
        self.send("PATCH", path, Some(body))
    }

    pub fn delete(&mut self, path: &str) -> Response {
        self.send("DELETE", path, None)
    }

    /// A request with the CSRF header (and a JSON body, when one is given).
    pub fn send(&mut self, method: &str, path: &str, body: Option<&Value>) -> Response {
        let token = self.client.csrf();
        let bytes = body
            .map(|b| serde_json::to_vec(b).unwrap())
            .unwrap_or_default();
        let mut headers = vec![("X-CSRF-Token", token.as_str())];
        if body.is_some() {
            headers.push(("Content-Type", "application/json"));
        }
        self.client.send(method, path, &headers, &bytes)
    }

    /// A new team organization named `name`, this person its owner; its id.
    pub fn team(&mut self, name: &str) -> i64 {
        let r = self.post("/v1/organizations", &json!({ "name": name }));
        r.expect(201);
        r.json()["id"].as_i64().unwrap()
    }

    /// Invites `email` to `org` with `role`; the invitation's id.
    pub fn invite(&mut self, org: i64, email: &str, role: &str) -> i64 {
        let path = format!("/v1/organizations/{org}/invitations");
        let r = self.post(&path, &json!({ "email": email, "role": role }));
        r.expect(201);
        r.json()["id"].as_i64().unwrap()
    }

    pub fn accept(&mut self, token: &str) -> Response {
        self.post("/v1/invitations/accept", &json!({ "token": token }))
    }
}

/// The tokens of the invitation mails to `email` so far, oldest first.
pub fn invitation_tokens(email: &str) -> Vec<String> {
    sink()
        .to(email)
        .iter()
        .filter_map(|m| m.token("/invitation"))
        .collect()
}

/// The token of the `n`th (from 1) invitation mail to `email`, once it arrived.
#[track_caller]
pub fn invitation_token(email: &str, n: usize) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let tokens = invitation_tokens(email);
        // The sender commits the link's token after the sink has the mail: wait for the commit
        // (its outbox row goes in the same transaction).
        if tokens.len() >= n && !queued(email) {
            return tokens[n - 1].clone();
        }
        assert!(Instant::now() < deadline, "no invitation mail to {email}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether an invitation mail to `email` is still in the outbox.
fn queued(email: &str) -> bool {
    let n: i64 = super::db()
        .query_one(
            "SELECT count(*) FROM outbox WHERE kind = 'invitation' AND recipient = $1",
            &[&email],
        )
        .unwrap()
        .get(0);
    n > 0
}

/// `person` invited to `org` by `owner` with `role`, having accepted from the mail.
pub fn join(owner: &mut Person, person: &mut Person, org: i64, role: &str) {
    let n = invitation_tokens(&person.email).len() + 1;
    owner.invite(org, &person.email, role);
    let token = invitation_token(&person.email, n);
    person.accept(&token).expect(200);
}
