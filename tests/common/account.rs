//! Helpers of the account tests (issue 32): requests with other methods than the client's own
//! helpers, the command line, and the control channel every instance listens on.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use serde_json::Value;

use super::sse::{self, Ev, Sse};
use super::{database_url, project_of, Client, Response, TestServer};

/// A request with a JSON body and the CSRF header (PATCH, DELETE, POST).
pub fn send_json(c: &mut Client, method: &str, path: &str, body: &Value) -> Response {
    let token = c.csrf();
    let body = serde_json::to_vec(body).unwrap();
    c.send(
        method,
        path,
        &[
            ("Content-Type", "application/json"),
            ("X-CSRF-Token", &token),
        ],
        &body,
    )
}

/// Runs the `consoled` binary against the test database.
pub fn consoled(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_consoled"))
        .args(args)
        .env("DATABASE_URL", database_url())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run consoled")
}

/// Runs a command that must succeed; its JSON output.
#[track_caller]
pub fn cli(args: &[&str]) -> Value {
    let out = consoled(args);
    assert!(
        out.status.success(),
        "consoled {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Runs a command that must fail with status 1; its message on stderr.
#[track_caller]
pub fn cli_fails(args: &[&str]) -> String {
    let out = consoled(args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "consoled {args:?} succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(out.stdout.is_empty(), "nothing on stdout on failure");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A connection listening on `consoled_control`, the channel that ends streams and tells every
/// instance to forget what it remembers of a user (`u:<id>`), and on `consoled_change`, where
/// changes are announced.
pub struct Control(postgres::Client);

/// What arrived: the control payloads and the announced changes, in order.
#[derive(Debug, Default)]
pub struct Heard {
    pub control: Vec<String>,
    pub changes: Vec<Value>,
}

impl Control {
    pub fn listen() -> Control {
        let mut c = super::db();
        c.batch_execute("LISTEN consoled_control; LISTEN consoled_change")
            .unwrap();
        Control(c)
    }

    /// Everything that arrives within `within`.
    pub fn heard(&mut self, within: Duration) -> Heard {
        let deadline = Instant::now() + within;
        let mut out = Heard::default();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return out;
            }
            match self.0.notifications().timeout_iter(left).next() {
                Ok(Some(n)) if n.channel() == "consoled_change" => {
                    out.changes.push(serde_json::from_str(n.payload()).unwrap());
                }
                Ok(Some(n)) => out.control.push(n.payload().to_string()),
                Ok(None) => return out,
                Err(e) => panic!("control listener: {e}"),
            }
        }
    }
}

impl Heard {
    /// Whether every instance was told to forget `user`.
    pub fn forget(&self, user: i64) -> bool {
        self.control.contains(&format!("u:{user}"))
    }

    /// Whether a `user` change of `op` was announced for `user`.
    pub fn user_change(&self, user: i64, op: &str) -> bool {
        self.changes
            .iter()
            .any(|c| c["type"] == "user" && c["id"] == user && c["op"] == op)
    }
}

/// Reads a stream's `ready`, failing on anything else.
#[track_caller]
pub fn ready(mut s: Sse) -> Sse {
    assert_eq!(s.status, 200, "{}", String::from_utf8_lossy(&s.body));
    assert_eq!(s.next(Duration::from_secs(5)), Ev::Ready);
    s
}

/// A stream of the session in `c`'s jar.
pub fn stream_of(server: &TestServer, c: &Client) -> Sse {
    let cookie = format!("svc_session={}", c.cookies["svc_session"]);
    ready(sse::open(server.addr, &[("Cookie", &cookie)]))
}

/// A team organization with these (user, role) members; its id.
pub fn team(name: &str, members: &[(i64, &str)]) -> i64 {
    let mut c = super::db();
    let org: i64 = c
        .query_one(
            "INSERT INTO organizations (name, kind) VALUES ($1, 'team') RETURNING id",
            &[&name],
        )
        .unwrap()
        .get(0);
    for (user, role) in members {
        c.execute(
            "INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, $3)",
            &[&org, user, role],
        )
        .unwrap();
    }
    org
}

/// Someone who signed up (and is signed in on `client`): their id, their personal organization
/// and its project.
pub struct SignedUp {
    pub client: Client,
    pub user_id: i64,
    pub org_id: i64,
    pub project_id: i64,
}

pub fn sign_up(server: &TestServer) -> SignedUp {
    let mut client = server.client();
    let (_, state) = client.signup();
    SignedUp {
        user_id: state["user"]["id"].as_i64().unwrap(),
        org_id: state["organizations"][0]["id"].as_i64().unwrap(),
        project_id: project_of(&state),
        client,
    }
}

impl SignedUp {
    /// The `Cookie` header's value of the session.
    pub fn cookie(&self) -> String {
        format!("svc_session={}", self.client.cookies["svc_session"])
    }
}
