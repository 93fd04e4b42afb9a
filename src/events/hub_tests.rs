//! Unit tests of `hub`.
use super::*;
use crate::events::change::Change;
use crate::events::delivery::Batch;
use crate::events::history::{Limits, View};

fn change(kind: &str, id: i64, project: Option<i64>, org: Option<i64>) -> Change {
    Change {
        kind: kind.into(),
        id,
        op: "update".into(),
        project_id: project,
        org_id: org,
        event_id: None,
    }
}

fn received(sub: &Subscription) -> usize {
    sub.rx.try_iter().count()
}

fn session(hub: &Arc<Hub>, session_id: i64, user_id: i64, orgs: &[i64]) -> Subscription {
    tagged(hub, session_id, user_id, orgs, 0)
}

fn tagged(hub: &Arc<Hub>, session_id: i64, user_id: i64, orgs: &[i64], tag: u64) -> Subscription {
    let (sub, load) = hub.subscribe(
        Scope::Session {
            session_id,
            user_id,
            token_tag: tag,
        },
        8,
    );
    if let Some(v) = load {
        hub.set_orgs(user_id, orgs, v);
    }
    sub
}

#[test]
fn token_streams_see_only_their_project() {
    let hub = Arc::new(Hub::new());
    let (tok, _) = hub.subscribe(
        Scope::Token {
            token_id: 1,
            project_id: 10,
        },
        8,
    );
    hub.route(&change("server", 1, Some(10), Some(100)), &[]);
    hub.route(&change("server", 2, Some(11), Some(100)), &[]);
    hub.route(&change("organization", 100, None, Some(100)), &[]);
    assert_eq!(received(&tok), 1);
}

#[test]
fn session_streams_follow_orgs_projects_and_own_user() {
    let hub = Arc::new(Hub::new());
    let me = session(&hub, 1, 7, &[100]);
    hub.remember_project(10, 100);
    hub.remember_project(20, 200);
    hub.route(&change("server", 1, Some(10), None), &[]);
    hub.route(&change("server", 2, Some(20), None), &[]);
    hub.route(&change("user", 7, None, None), &[]);
    hub.route(&change("user", 8, None, None), &[]);
    assert_eq!(received(&me), 2);
}

#[test]
fn a_stale_org_read_never_overwrites_a_newer_one() {
    let hub = Arc::new(Hub::new());
    let (sub, load) = hub.subscribe(
        Scope::Session {
            session_id: 1,
            user_id: 7,
            token_tag: 0,
        },
        8,
    );
    let v = hub.begin_reload(7).unwrap();
    hub.set_orgs(7, &[200], v);
    hub.set_orgs(7, &[100], load.unwrap());
    hub.route(&change("organization", 200, None, Some(200)), &[]);
    hub.route(&change("organization", 100, None, Some(100)), &[]);
    assert_eq!(received(&sub), 1);
}

#[test]
fn a_former_member_gets_the_membership_change_then_nothing() {
    let hub = Arc::new(Hub::new());
    let me = session(&hub, 1, 7, &[100, 200]);
    let v = hub.begin_reload(7).unwrap();
    hub.set_orgs(7, &[100], v);
    hub.route(&change("membership", 5, None, Some(200)), &[]);
    hub.route(&change("membership", 6, None, Some(200)), &[]);
    hub.route(&change("server", 1, None, Some(200)), &[]);
    assert_eq!(received(&me), 1);
}

#[test]
fn full_queue_drops_and_flags_resync() {
    let hub = Arc::new(Hub::new());
    let (sub, _) = hub.subscribe(
        Scope::Token {
            token_id: 1,
            project_id: 10,
        },
        2,
    );
    let routed: Vec<Routed> = (0..3)
        .map(|i| hub.route(&change("server", i, Some(10), None), &[]))
        .collect();
    assert_eq!(routed[2].dropped, 1);
    assert!(sub.signals.resync_flagged());
    // The older changes made room: the newest one waits behind the resync.
    let queued: Vec<Msg> = sub.rx.try_iter().collect();
    assert_eq!(queued.len(), 1);
    assert!(queued[0].contains("\"id\":2"), "{}", queued[0]);
}

#[test]
fn dropping_the_subscription_cleans_every_index() {
    let hub = Arc::new(Hub::new());
    let me = session(&hub, 1, 7, &[100]);
    drop(me);
    let ix = hub.lock();
    assert!(ix.subs.is_empty() && ix.users.is_empty() && ix.by_org.is_empty());
    assert!(ix.by_session.is_empty());
}

/// A session's token replaced: the streams of the old token end, those of the new one and of
/// other sessions go on (after a reconnect: those of any token but the current one end).
#[test]
fn a_replaced_token_ends_only_its_own_streams() {
    let hub = Arc::new(Hub::new());
    let old = tagged(&hub, 1, 7, &[100], 11);
    let new = tagged(&hub, 1, 7, &[100], 22);
    let other = tagged(&hub, 2, 7, &[100], 11);
    assert_eq!(hub.end_session_tokens(1, |tag| tag == 11), 1);
    assert!(old.signals.ended().is_some());
    assert!(new.signals.ended().is_none() && other.signals.ended().is_none());
    assert_eq!(hub.end_session_tokens(2, |tag| tag != 33), 1);
    assert!(other.signals.ended().is_some() && new.signals.ended().is_none());
}

/// A suspended organization leaves the members' visible organizations (`u:` reloads them): the
/// `organization` change announcing it still reaches them, then nothing of it.
#[test]
fn a_suspended_organization_announces_itself_then_goes_quiet() {
    let hub = Arc::new(Hub::new());
    let me = session(&hub, 1, 7, &[100, 200]);
    let v = hub.begin_reload(7).unwrap();
    hub.set_orgs(7, &[200], v);
    hub.route(&change("organization", 100, None, Some(100)), &[]);
    hub.route(&change("organization", 100, None, Some(100)), &[]);
    hub.route(&change("server", 1, None, Some(100)), &[]);
    hub.route(&change("server", 2, None, Some(200)), &[]);
    assert_eq!(received(&me), 2);
}

/// A deleted project is forgotten: a later change naming only it finds no organization here.
#[test]
fn a_deleted_project_is_forgotten() {
    let hub = Arc::new(Hub::new());
    let _me = session(&hub, 1, 7, &[100]);
    hub.remember_project(10, 100);
    assert_eq!(
        hub.unknown_project(&change("server", 1, Some(10), None)),
        None
    );
    hub.forget_project(10);
    assert_eq!(
        hub.unknown_project(&change("server", 1, Some(10), None)),
        Some(10)
    );
}

/// A change with the event id `<transaction>-<n as 16 hex digits>`.
fn named(kind: &str, id: i64, project: Option<i64>, org: Option<i64>, eid: (u64, u64)) -> Change {
    Change {
        event_id: Some(event_id(eid)),
        ..change(kind, id, project, org)
    }
}

fn event_id((transaction, n): (u64, u64)) -> String {
    format!("{transaction}-{n:016x}")
}

/// A change routed before a stream subscribed is in its replay, one routed after in its queue:
/// never in neither.
#[test]
fn a_resumed_stream_replays_what_came_before_it_and_is_routed_what_comes_after() {
    let hub = Arc::new(Hub::new());
    hub.route(&named("server", 1, Some(10), Some(100), (5, 0xa)), &[]);
    hub.route(&named("server", 2, Some(10), Some(100), (5, 0xb)), &[]);
    hub.route(&named("server", 3, Some(11), Some(100), (6, 0xa)), &[]);
    let (tok, _) = hub.subscribe(
        Scope::Token {
            token_id: 1,
            project_id: 10,
        },
        8,
    );
    let missed = hub
        .replay(&event_id((5, 0xa)), View::Project(10), 8)
        .unwrap();
    assert_eq!(missed.len(), 1);
    let second = format!("event: change\nid: {}\n", event_id((5, 0xb)));
    assert!(missed[0].starts_with(&second), "{}", missed[0]);
    hub.route(&named("server", 4, Some(10), Some(100), (7, 0xa)), &[]);
    let queued: Vec<Msg> = tok.rx.try_iter().collect();
    assert_eq!(queued.len(), 1);
    let live = format!("id: {}\n", event_id((7, 0xa)));
    assert!(queued[0].contains(&live), "{}", queued[0]);
}

/// A change that names only its project is kept with the project's organization, for the
/// session streams that resume later (none is open here now).
#[test]
fn a_change_naming_only_its_project_is_replayed_to_the_members_of_its_organization() {
    let hub = Arc::new(Hub::new());
    let change = named("server", 1, Some(10), None, (8, 0xa));
    assert_eq!(hub.unknown_project(&change), Some(10));
    hub.remember_project(10, 100);
    hub.route(&named("user", 7, None, None, (8, 0x0)), &[]);
    hub.route(&change, &[]);
    let member = View::User {
        id: 9,
        orgs: &[100],
    };
    assert_eq!(
        hub.replay(&event_id((8, 0x0)), member, 8).map(|m| m.len()),
        Some(1)
    );
}

/// Only `membership` and `organization` changes reach the users they concern without their
/// organization; the listener reconnecting forgets everything.
#[test]
fn announcements_reach_those_they_concern_and_a_reconnect_forgets_the_history() {
    let hub = Arc::new(Hub::new());
    hub.route(&named("user", 7, None, None, (9, 0x0)), &[]);
    hub.route(&named("membership", 5, None, Some(200), (9, 0xa)), &[7]);
    hub.route(&named("server", 5, None, Some(200), (9, 0xb)), &[7]);
    let me = View::User {
        id: 7,
        orgs: &[100],
    };
    let missed = hub.replay(&event_id((9, 0x0)), me, 8).unwrap();
    assert_eq!(missed.len(), 1);
    assert!(
        missed[0].contains("\"type\":\"membership\""),
        "{}",
        missed[0]
    );
    hub.forget_history();
    assert_eq!(hub.replay(&event_id((9, 0x0)), me, 8), None);
}

/// The listener routes every change it read before writing any (`route_into`, then `deliver`):
/// each stream still gets exactly the changes it may see, once each and in commit order, when
/// streams share some changes and not others and the batch is written by several threads.
#[test]
fn a_batch_reaches_each_stream_with_its_changes_in_order() {
    let hub = Arc::new(Hub::with(Limits::default(), 4));
    // Enough streams per project for the helpers to share the writing (`fanout`).
    let streams = |project: i64| -> Vec<Subscription> {
        (0..40)
            .map(|i| {
                let scope = Scope::Token {
                    token_id: project * 1000 + i,
                    project_id: project,
                };
                hub.subscribe(scope, 8).0
            })
            .collect()
    };
    let (ten, eleven) = (streams(10), streams(11));
    let mut batch = Batch::default();
    let projects = [10, 11, 10, 10, 11, 12, 10];
    for (id, project) in projects.iter().enumerate() {
        hub.route_into(
            &change("server", id as i64, Some(*project), None),
            &[],
            &mut batch,
        );
    }
    let routed = hub.deliver(batch);
    assert_eq!((routed.delivered, routed.dropped), (4 * 40 + 2 * 40, 0));
    let ids = |sub: &Subscription| -> Vec<i64> {
        sub.rx
            .try_iter()
            .map(|m| {
                let data = m.split("data: ").nth(1).expect("a change event");
                let v: serde_json::Value = serde_json::from_str(data.trim()).expect("json");
                v["id"].as_i64().expect("an id")
            })
            .collect()
    };
    for sub in &ten {
        assert_eq!(ids(sub), [0, 2, 3, 6]);
    }
    for sub in &eleven {
        assert_eq!(ids(sub), [1, 4]);
    }
}
