//! The hub's writes for idle streams (`CONSOLED_STREAM_DIRECT`) over real HTTP: a client sees the
//! same bytes, in the same order, with them and without them; and a stream the hub keeps busy is
//! not quiet, so it gets no ping until the hub stops writing.

mod common;

use std::time::{Duration, Instant};

use common::sse::{self, Ev, Sse};
use common::*;

const T: Duration = Duration::from_secs(5);

/// A session stream of a new account, past its `ready`, and the account's project.
fn stream_of_new_account(server: &TestServer) -> (Sse, i64) {
    let mut client = server.client();
    let (_, state) = client.signup();
    let project: i64 = project_of(&state);
    let cookie = format!("svc_session={}", client.cookies["svc_session"]);
    let mut s = sse::open(server.addr, &[("Cookie", &cookie)]);
    assert_eq!(s.status, 200);
    assert_eq!(s.next(T), Ev::Ready);
    // The sign-up's own changes may still come; a marker change says they are through.
    let marker = -(std::process::id() as i64);
    notify(project, marker);
    while s.change(T)["id"] != marker {}
    (s, project)
}

fn notify(project: i64, id: i64) {
    db().execute(
        "SELECT consoled_notify_change('server', $1, 'update', $2, NULL)",
        &[&id, &project],
    )
    .unwrap();
}

#[test]
fn changes_arrive_whole_and_in_order_with_and_without_the_hubs_writes() {
    for direct in ["true", "false"] {
        let server = TestServer::with(&[("CONSOLED_STREAM_DIRECT", direct)]);
        let (mut s, project) = stream_of_new_account(&server);
        // One at a time (the stream is idle for each: the hub's path) and a burst in one
        // transaction (the stream busy: its thread's path), interleaved.
        let mut want = Vec::new();
        for round in 0..5 {
            let id = 1000 * round;
            notify(project, id);
            want.push(id);
            db().execute(
                "SELECT consoled_notify_change('server', $1::bigint + g, 'update', $2, NULL)
                   FROM generate_series(1, 20) g",
                &[&id, &project],
            )
            .unwrap();
            want.extend((1..=20).map(|g| id + g));
        }
        let got: Vec<i64> = want
            .iter()
            .map(|_| s.change(T)["id"].as_i64().unwrap())
            .collect();
        assert_eq!(got, want, "CONSOLED_STREAM_DIRECT={direct}");
        // Nothing else, and every byte so far parsed as whole chunks of whole events.
        assert_eq!(s.next(Duration::from_millis(300)), Ev::Timeout);
    }
}

#[test]
fn a_stream_the_hub_keeps_busy_gets_no_ping_until_it_is_quiet() {
    let server = TestServer::with(&[("CONSOLED_PING_SECONDS", "0.5")]);
    let (mut s, project) = stream_of_new_account(&server);
    // A change every 0.2 s for 1.5 s: never 0.5 s of quiet, so no ping.
    let started = Instant::now();
    let mut id = 1;
    while started.elapsed() < Duration::from_millis(1500) {
        notify(project, id);
        match s.next(T) {
            Ev::Change(v) => assert_eq!(v["id"], id),
            other => panic!("change {id}: got {other:?}"),
        }
        id += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    // Then quiet: a ping about 0.5 s after the last change.
    let quiet = Instant::now();
    assert_eq!(s.next(T), Ev::Ping);
    let gap = quiet.elapsed().as_secs_f64();
    assert!(gap > 0.2 && gap < 1.5, "ping after {gap} s of quiet");
}
