//! Streams that resume (issue 35): a stream opened with `Last-Event-ID` gets `ready` with
//! `{"resumed":true}` and exactly the changes it missed that its principal may see now, from
//! the instance it was on or another one; when the instance cannot tell them all (an id it never
//! heard or has forgotten, a listener outage since), `ready` as before, and the client reloads.

mod common;

use std::time::Duration;

use common::account::{sign_up, SignedUp};
use common::sse::{self, Ev, Sse};
use common::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(5);

fn next_id() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static SEQ: AtomicI64 = AtomicI64::new(0);
    std::process::id() as i64 * 1_000_000 + SEQ.fetch_add(1, Ordering::SeqCst)
}

/// Announces a `server` change of `project` and `org`; its resource id.
fn emit(project: Option<i64>, org: Option<i64>) -> i64 {
    let id = next_id();
    db().execute(
        "SELECT consoled_notify_change('server', $1, 'update', $2, $3)",
        &[&id, &project, &org],
    )
    .unwrap();
    id
}

/// Someone signed up, with a token of their personal organization's project.
struct Account {
    client: Client,
    user_id: i64,
    org_id: i64,
    project_id: i64,
    token: String,
}

fn account(server: &TestServer) -> Account {
    let SignedUp {
        client,
        user_id,
        org_id,
        project_id,
    } = sign_up(server);
    let (_, token) = consoled::db::tokens::create(&mut db(), project_id, "resume").unwrap();
    Account {
        client,
        user_id,
        org_id,
        project_id,
        token,
    }
}

impl Account {
    fn bearer(&self) -> (&'static str, String) {
        ("Authorization", format!("Bearer {}", self.token))
    }

    fn cookie(&self) -> (&'static str, String) {
        let session = &self.client.cookies["svc_session"];
        ("Cookie", format!("svc_session={session}"))
    }
}

/// A stream with `credential`, and `Last-Event-ID: last` when given; its first event.
fn open(server: &TestServer, credential: &(&str, String), last: Option<&str>) -> (Sse, Ev) {
    let mut headers = vec![(credential.0, credential.1.as_str())];
    headers.extend(last.map(|id| ("Last-Event-ID", id)));
    let mut s = sse::open(server.addr, &headers);
    assert_eq!(s.status, 200, "{}", String::from_utf8_lossy(&s.body));
    let first = s.next(T);
    (s, first)
}

/// Reads `s` up to the `server` change `marker`, returning the ids of the changes before it.
fn ids_until(s: &mut Sse, marker: i64) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        match s.next_event(T) {
            Ev::Change(v) if v["id"] == marker => return seen,
            Ev::Change(v) => seen.push(v["id"].clone()),
            other => panic!("expected changes up to {marker}, got {other:?} after {seen:?}"),
        }
    }
}

/// The stream's last change id once it has read the change `marker` (and nothing else of
/// its own before it).
fn last_id_after(s: &mut Sse, marker: i64) -> String {
    ids_until(s, marker);
    s.last_id.clone().expect("an id line")
}

#[test]
fn a_resumed_stream_gets_exactly_the_changes_it_missed_then_live_ones() {
    let server = TestServer::start();
    let a = account(&server);
    let (mut s, first) = open(&server, &a.bearer(), None);
    assert_eq!(first, Ev::Ready);
    let seen = emit(Some(a.project_id), Some(a.org_id));
    let last = last_id_after(&mut s, seen);
    drop(s);

    // While it is away: two of its project's changes, one of another project's.
    let missed = [
        emit(Some(a.project_id), Some(a.org_id)),
        emit(Some(a.project_id + 1_000_000), None),
        emit(Some(a.project_id), None),
    ];
    let (mut s, first) = open(&server, &a.bearer(), Some(&last));
    assert_eq!(first, Ev::Resumed);
    let head_end = s.raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let resumed = "retry: 3000\nevent: ready\ndata: {\"resumed\":true}\n\n";
    assert_eq!(
        String::from_utf8_lossy(&s.raw[head_end..head_end + resumed.len() + 4]),
        format!("{:x}\r\n{resumed}", resumed.len())
    );
    // Then live changes, and nothing else between.
    let live = emit(Some(a.project_id), None);
    assert_eq!(
        ids_until(&mut s, live),
        vec![json!(missed[0]), json!(missed[2])]
    );
    let metrics = String::from_utf8_lossy(&server.client().get("/metrics").body).to_string();
    assert!(
        metrics.contains("consoled_streams_resumed_total 1"),
        "{metrics}"
    );
}

#[test]
fn a_stream_resumes_on_another_instance() {
    let (one, two) = (TestServer::start(), TestServer::start());
    let a = account(&one);
    let (mut s, _) = open(&one, &a.cookie(), None);
    let seen = emit(None, Some(a.org_id));
    let last = last_id_after(&mut s, seen);
    drop(s);
    let missed = [
        emit(Some(a.project_id), Some(a.org_id)),
        emit(None, Some(a.org_id)),
    ];
    let (mut s, first) = open(&two, &a.cookie(), Some(&last));
    assert_eq!(first, Ev::Resumed);
    let live = emit(None, Some(a.org_id));
    assert_eq!(
        ids_until(&mut s, live),
        vec![json!(missed[0]), json!(missed[1])]
    );
}

/// An id this instance never heard, one it has forgotten (more changes since than it keeps),
/// and one heard before its listener was away: `ready` as for a client that sent none.
#[test]
fn a_gap_the_history_does_not_cover_is_answered_with_a_plain_ready() {
    let server = TestServer::with(&[("CONSOLED_STREAM_HISTORY", "3")]);
    let a = account(&server);
    let (_, first) = open(&server, &a.bearer(), Some("1-0123456789abcdef"));
    assert_eq!(first, Ev::Ready);

    let (mut s, _) = open(&server, &a.bearer(), None);
    let seen = emit(Some(a.project_id), None);
    let last = last_id_after(&mut s, seen);
    for _ in 0..3 {
        emit(Some(a.project_id), None);
    }
    let (_, first) = open(&server, &a.bearer(), Some(&last));
    assert_eq!(first, Ev::Ready);
    let metrics = String::from_utf8_lossy(&server.client().get("/metrics").body).to_string();
    assert!(
        metrics.contains("consoled_streams_not_resumed_total 2"),
        "{metrics}"
    );

    // The listener away and back: what it heard before does not count any more.
    let other = TestServer::start();
    let (mut s, _) = open(&other, &a.bearer(), None);
    let seen = emit(Some(a.project_id), None);
    let last = last_id_after(&mut s, seen);
    let name = consoled::events::listener::application_name(&other.app().hub.leases.instance_id);
    let killed: bool = db()
        .query_one(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert!(killed);
    assert_eq!(s.next_event(T), Ev::Resync, "the listener is back");
    let (_, first) = open(&other, &a.bearer(), Some(&last));
    assert_eq!(first, Ev::Ready);
}

/// A new team organization with a project in it: (org, project).
fn team() -> (i64, i64) {
    let mut c = db();
    let org: i64 = c
        .query_one(
            "INSERT INTO organizations (name, kind) VALUES ($1, 'team') RETURNING id",
            &[&format!("resume-{}", unique())],
        )
        .unwrap()
        .get(0);
    let project: i64 = c
        .query_one(
            "INSERT INTO projects (org_id, name) VALUES ($1, 'p') RETURNING id",
            &[&org],
        )
        .unwrap()
        .get(0);
    (org, project)
}

/// Adds `user` to `org`; the membership's id.
fn join(org: i64, user: i64) -> i64 {
    db().query_one(
        "INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, 'member') RETURNING id",
        &[&org, &user],
    )
    .unwrap()
    .get(0)
}

/// Removed from one organization and added to another while away: the replay is what the user
/// may see now. Nothing of the organization left (not even what happened while still a member),
/// except the `membership delete` that says so, as a connected stream would have had it; the new
/// organization's changes, from before the user joined too. (The stream reopens once the
/// instance has heard the gap's changes, as a browser's does three seconds later: one that
/// reopens before the instance heard its user's membership change gets a plain `ready`, by
/// design, and the test waits on another user's stream for that.)
#[test]
fn a_membership_changed_during_the_gap_replays_only_what_the_user_may_see_now() {
    let server = TestServer::start();
    let a = account(&server);
    let b = account(&server);
    let (mut watch, _) = open(&server, &b.cookie(), None);
    let (left, left_project) = team();
    let removed = join(left, a.user_id);
    let (joined, _) = team();
    let (mut s, _) = open(&server, &a.cookie(), None);
    let seen = emit(None, Some(a.org_id));
    let last = last_id_after(&mut s, seen);
    drop(s);

    let while_member = emit(Some(left_project), None);
    db().execute("DELETE FROM memberships WHERE id = $1", &[&removed])
        .unwrap();
    emit(None, Some(left));
    let own = emit(Some(a.project_id), Some(a.org_id));
    let before_joining = emit(None, Some(joined));
    let added = join(joined, a.user_id);
    // Notifications are heard in commit order: once this reaches `watch`, the instance has
    // heard everything above.
    let heard = emit(None, Some(b.org_id));
    ids_until(&mut watch, heard);
    let (mut s, first) = open(&server, &a.cookie(), Some(&last));
    assert_eq!(first, Ev::Resumed);
    let live = emit(None, Some(a.org_id));
    let replayed = ids_until(&mut s, live);
    assert!(!replayed.contains(&json!(while_member)), "{replayed:?}");
    assert_eq!(
        replayed,
        vec![
            json!(removed),
            json!(own),
            json!(before_joining),
            json!(added)
        ]
    );
}
