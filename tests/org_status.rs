//! What an organization's status and a member's removal do to streams, tokens and management
//! (issue 32): `consoled org suspend` stops the organization's changes reaching any stream and
//! refuses its tokens, on every instance at once; `org resume` undoes it; a removed member's
//! streams stop carrying the organization's changes at once.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::account::cli;
use common::sse::{self, Ev, Sse};
use common::teams::{join, server, Person};
use common::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(5);

fn consoled(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_consoled"))
        .args(args)
        .env("DATABASE_URL", database_url())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run consoled")
}

fn emit(kind: &str, id: i64, project: Option<i64>, org: Option<i64>) {
    db().execute(
        "SELECT consoled_notify_change($1, $2, 'update', $3, $4)",
        &[&kind, &id, &project, &org],
    )
    .unwrap();
}

fn next_id() -> i64 {
    static SEQ: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
    std::process::id() as i64 * 1_000_000 + SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

fn session_stream(server: &TestServer, p: &Person) -> Sse {
    let mut s = sse::open(server.addr, &[("Cookie", &p.cookie())]);
    assert_eq!(s.status, 200);
    assert_eq!(s.next(T), Ev::Ready);
    s
}

/// Reads `s` up to a `ticket` change of `org` (emitted now), returning the changes before it:
/// proves the stream is alive and shows what else reached it.
fn changes_until_marker(s: &mut Sse, org: i64) -> Vec<Value> {
    let id = next_id();
    emit("ticket", id, None, Some(org));
    let mut before = Vec::new();
    loop {
        match s.next_event(T) {
            Ev::Change(v) if v["type"] == "ticket" && v["id"] == id => return before,
            Ev::Change(v) => before.push(v),
            other => panic!("expected the marker, got {other:?} after {before:?}"),
        }
    }
}

fn a_project(p: &mut Person, org: i64) -> i64 {
    let r = p.post(
        &format!("/v1/organizations/{org}/projects"),
        &json!({ "name": format!("p-{}", unique()) }),
    );
    r.expect(201);
    r.json()["id"].as_i64().unwrap()
}

/// Suspended: the organization's changes reach no stream (the one announcing the suspension
/// aside), its tokens' streams end within a second on every instance and new ones are refused,
/// and nothing in it can be changed; it can still be read and left. Resumed: all of it comes
/// back.
#[test]
fn a_suspended_organization_reaches_no_stream_and_its_tokens_are_refused() {
    let server = server();
    let other_instance = common::teams::server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Suspended");
    let project = a_project(&mut ada, org);
    let mut bob = Person::verified(&server);
    join(&mut ada, &mut bob, org, "member");
    let secret = cli(&["token", "create", "--project", &project.to_string()])["token"]
        .as_str()
        .unwrap()
        .to_string();
    let bearer = format!("Bearer {secret}");
    let mut tokens = sse::open(other_instance.addr, &[("Authorization", &bearer)]);
    assert_eq!(tokens.next(T), Ev::Ready);
    let mut stream = session_stream(&server, &bob);
    // Bob's join may reach his stream after its `ready` (as below, in the removal's test).
    changes_until_marker(&mut stream, bob.personal_org);

    let out = cli(&["org", "suspend", "--id", &org.to_string()]);
    // Committed before the command printed this: from here, within a second.
    let committed = Instant::now();
    assert_eq!(
        out,
        json!({"id": org, "status": "suspended", "changed": true})
    );
    let ended = tokens.wait_end(Duration::from_secs(3));
    assert!(
        ended.is_some() && committed.elapsed() < Duration::from_secs(1),
        "{ended:?} {:?}",
        committed.elapsed()
    );
    match stream.next_event(T) {
        Ev::Change(v) => assert_eq!(
            v,
            json!({"type": "organization", "id": org, "op": "update", "project_id": null, "org_id": org})
        ),
        other => panic!("{other:?}"),
    }
    // Nothing of the organization arrives any more, by its id or by a project's.
    emit("server", next_id(), Some(project), Some(org));
    emit("server", next_id(), Some(project), None);
    emit("ticket", next_id(), None, Some(org));
    assert_eq!(
        changes_until_marker(&mut stream, bob.personal_org),
        Vec::<Value>::new()
    );

    let refused = sse::open(server.addr, &[("Authorization", &bearer)]);
    assert_eq!(refused.status, 403);
    assert_eq!(refused.json()["error"]["code"], "forbidden");
    assert_eq!(
        refused.json()["error"]["details"]["org_status"],
        "suspended"
    );

    let r = ada.get(&format!("/v1/organizations/{org}"));
    r.expect(200);
    assert_eq!(r.json()["status"], "suspended");
    ada.get(&format!("/v1/organizations/{org}/members"))
        .expect(200);
    ada.get(&format!("/v1/projects/{project}")).expect(200);
    let email = unique_email();
    let managing = [
        ada.patch(&format!("/v1/organizations/{org}"), &json!({ "name": "x" })),
        ada.post(
            &format!("/v1/organizations/{org}/invitations"),
            &json!({ "email": email, "role": "viewer" }),
        ),
        ada.post(
            &format!("/v1/organizations/{org}/projects"),
            &json!({ "name": "new" }),
        ),
        ada.delete(&format!("/v1/projects/{project}")),
        ada.patch(
            &format!("/v1/organizations/{org}/members/{}", bob.id),
            &json!({ "role": "viewer" }),
        ),
    ];
    for r in managing {
        r.expect_error(403, "forbidden");
        assert_eq!(r.json()["error"]["details"]["org_status"], "suspended");
    }

    let out = cli(&["org", "resume", "--id", &org.to_string()]);
    assert_eq!(out["status"], "active");
    let back = changes_until_marker(&mut stream, org);
    assert_eq!(back.len(), 1, "{back:?}");
    assert_eq!(back[0]["type"], "organization");
    let id = next_id();
    emit("server", id, Some(project), None);
    assert_eq!(stream.change(T)["id"], id);
    let mut tokens = sse::open(server.addr, &[("Authorization", &bearer)]);
    assert_eq!(tokens.next(T), Ev::Ready);
    ada.patch(
        &format!("/v1/organizations/{org}"),
        &json!({ "name": "Back" }),
    )
    .expect(200);
}

/// A member may leave a suspended organization; an invitation to it cannot be accepted.
#[test]
fn a_suspended_organization_can_be_left_but_not_joined() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Frozen");
    let mut bob = Person::verified(&server);
    join(&mut ada, &mut bob, org, "viewer");
    let mut cy = Person::verified(&server);
    ada.invite(org, &cy.email, "member");
    let token = common::teams::invitation_token(&cy.email, 1);
    cli(&["org", "suspend", "--id", &org.to_string()]);
    let r = cy.accept(&token);
    r.expect_error(403, "forbidden");
    assert_eq!(r.json()["error"]["details"]["org_status"], "suspended");
    bob.delete(&format!("/v1/organizations/{org}/members/{}", bob.id))
        .expect(204);
    cli(&["org", "resume", "--id", &org.to_string()]);
    cy.accept(&token).expect(200);
}

/// The operator's commands refuse what they cannot do, with a message; a closed organization
/// stays closed.
#[test]
fn org_commands_refuse_unknown_and_closed_organizations() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Closed");
    let out = consoled(&["org", "suspend", "--id", "999999999"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let again = cli(&["org", "resume", "--id", &org.to_string()]);
    assert_eq!(again["changed"], false);
    db().execute(
        "UPDATE organizations SET status = 'closed' WHERE id = $1",
        &[&org],
    )
    .unwrap();
    let out = consoled(&["org", "resume", "--id", &org.to_string()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("closed"));
    let r = ada.get(&format!("/v1/organizations/{org}"));
    assert_eq!(r.json()["status"], "closed");
    ada.post(
        &format!("/v1/organizations/{org}/projects"),
        &json!({ "name": "x" }),
    )
    .expect_error(403, "forbidden");
}

/// A removed member's open stream stops carrying the organization's changes at once (the
/// removal itself is the last it sees); a member who stays sees them.
#[test]
fn a_removed_members_stream_stops_carrying_the_organization_at_once() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Removal");
    let project = a_project(&mut ada, org);
    let mut bob = Person::verified(&server);
    join(&mut ada, &mut bob, org, "member");
    let mut bobs = session_stream(&server, &bob);
    let mut adas = session_stream(&server, &ada);
    // Bob's join may still be on its way to the instance when his stream opens, and reach the
    // stream after its `ready` (seen once in a full run: `insert` where `delete` was expected);
    // notifications are heard in commit order, so past a marker the removal's is the next.
    changes_until_marker(&mut bobs, bob.personal_org);

    ada.delete(&format!("/v1/organizations/{org}/members/{}", bob.id))
        .expect(204);
    match bobs.next_event(T) {
        Ev::Change(v) => {
            assert_eq!(
                (v["type"].as_str(), v["op"].as_str()),
                (Some("membership"), Some("delete"))
            )
        }
        other => panic!("{other:?}"),
    }
    let id = next_id();
    emit("server", id, Some(project), Some(org));
    assert_eq!(
        changes_until_marker(&mut bobs, bob.personal_org),
        Vec::<Value>::new()
    );
    let seen = changes_until_marker(&mut adas, org);
    assert!(seen.iter().any(|v| v["id"] == id), "{seen:?}");
}

/// A role changed reaches the member's stream, and the new role is what the member may do.
#[test]
fn a_role_change_is_announced_and_enforced_at_once() {
    let server = server();
    let mut ada = Person::verified(&server);
    let org = ada.team("Demotion");
    let mut bob = Person::verified(&server);
    join(&mut ada, &mut bob, org, "admin");
    let mut bobs = session_stream(&server, &bob);
    bob.post(
        &format!("/v1/organizations/{org}/projects"),
        &json!({ "name": "before" }),
    )
    .expect(201);
    ada.patch(
        &format!("/v1/organizations/{org}/members/{}", bob.id),
        &json!({ "role": "viewer" }),
    )
    .expect(200);
    let seen = changes_until_marker(&mut bobs, org);
    assert!(
        seen.iter()
            .any(|v| v["type"] == "membership" && v["op"] == "update"),
        "{seen:?}"
    );
    bob.post(
        &format!("/v1/organizations/{org}/projects"),
        &json!({ "name": "after" }),
    )
    .expect_error(403, "forbidden");
}

/// The status is the database's: set by any tool (here SQL, as the operator's own tooling
/// might), it reaches open streams as the command's does. Issue 32: on the landed main a member
/// of a suspended organization still received its changes and its tokens still streamed.
#[test]
fn a_status_set_in_the_database_stops_streams_and_tokens_too() {
    let server = TestServer::start();
    let mut client = server.client();
    let (_, state) = client.signup();
    let org = state["organizations"][0]["id"].as_i64().unwrap();
    let project = project_of(&state);
    let cookie = format!("svc_session={}", client.cookies["svc_session"]);
    let secret = cli(&["token", "create", "--project", &project.to_string()])["token"]
        .as_str()
        .unwrap()
        .to_string();
    let bearer = format!("Bearer {secret}");
    let mut tokens = sse::open(server.addr, &[("Authorization", &bearer)]);
    assert_eq!(tokens.next(T), Ev::Ready);
    let mut stream = sse::open(server.addr, &[("Cookie", &cookie)]);
    assert_eq!(stream.next(T), Ev::Ready);

    db().execute(
        "UPDATE organizations SET status = 'suspended' WHERE id = $1",
        &[&org],
    )
    .unwrap();
    assert!(tokens.wait_end(Duration::from_secs(1)).is_some());
    assert_eq!(stream.change(T)["type"], "organization");
    // A stream opened now, the user's first on its instance, does not see it either.
    let other = TestServer::start();
    let mut late = sse::open(other.addr, &[("Cookie", &cookie)]);
    assert_eq!(late.next(T), Ev::Ready);
    emit("server", next_id(), Some(project), Some(org));
    let user = state["user"]["id"].as_i64().unwrap();
    db().execute(
        "SELECT consoled_notify_change('user', $1, 'update')",
        &[&user],
    )
    .unwrap();
    // The user's own change follows: what came first would be the organization's.
    for s in [&mut stream, &mut late] {
        let after = s.change(T);
        assert_eq!(after["type"], "user", "{after}");
    }
    assert_eq!(
        sse::open(server.addr, &[("Authorization", &bearer)]).status,
        403
    );
}
