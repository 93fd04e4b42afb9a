//! Unit tests of `history`.
use super::*;

const ME: i64 = 7;

/// An event id as the database writes it.
fn id(transaction: u64, n: u64) -> String {
    format!("{transaction}-{n:016x}")
}

fn reach(project: Option<i64>, org: Option<i64>) -> Reach {
    Reach {
        project,
        org,
        ..Reach::default()
    }
}

/// A history of `n` changes `c0`..: project 10 in org 100 for even ones, project 20 in org 200
/// for odd ones, recorded at `at`.
fn filled(limits: Limits, n: usize, at: Instant) -> History {
    let mut h = History::new(limits);
    for i in 0..n {
        let (p, o) = if i % 2 == 0 { (10, 100) } else { (20, 200) };
        h.record(
            Some(&id(1, i as u64)),
            format!("c{i}").into(),
            reach(Some(p), Some(o)),
            at,
        );
    }
    h
}

fn texts(events: Option<Vec<Msg>>) -> Option<Vec<String>> {
    events.map(|v| v.iter().map(|m| m.to_string()).collect())
}

fn lots() -> Limits {
    Limits {
        changes: 1000,
        age: Duration::from_secs(60),
    }
}

#[test]
fn a_known_id_replays_what_followed_it_that_the_view_may_see() {
    let now = Instant::now();
    let mut h = filled(lots(), 6, now);
    let token = View::Project(10);
    assert_eq!(
        texts(h.replay(&id(1, 0x1), token, 10, now)),
        Some(vec!["c2".into(), "c4".into()])
    );
    let member = View::User {
        id: ME,
        orgs: &[200],
    };
    assert_eq!(
        texts(h.replay(&id(1, 0x0), member, 10, now)),
        Some(vec!["c1".into(), "c3".into(), "c5".into()])
    );
    // The newest: nothing missed, and still resumed.
    assert_eq!(texts(h.replay(&id(1, 0x5), token, 10, now)), Some(vec![]));
}

#[test]
fn an_unknown_or_forgotten_id_is_not_resumed() {
    let now = Instant::now();
    let few = Limits {
        changes: 3,
        age: Duration::from_secs(60),
    };
    let mut h = filled(few, 6, now);
    assert_eq!(h.len(), 3);
    assert!(h.replay(&id(9, 0x9), View::Project(10), 10, now).is_none());
    assert!(h.replay(&id(1, 0x2), View::Project(10), 10, now).is_none());
    assert!(h.replay(&id(1, 0x3), View::Project(10), 10, now).is_some());
    h.clear();
    assert!(h.replay(&id(1, 0x5), View::Project(10), 10, now).is_none());
}

#[test]
fn changes_older_than_the_age_are_forgotten_but_the_newest_is_kept() {
    let then = Instant::now();
    let mut h = filled(lots(), 3, then);
    let later = then + Duration::from_secs(61);
    assert!(h
        .replay(&id(1, 0x1), View::Project(10), 10, later)
        .is_none());
    // However quiet the cluster was, a client holding the newest id missed nothing.
    assert_eq!(
        texts(h.replay(&id(1, 0x2), View::Project(10), 10, later)),
        Some(vec![])
    );
    assert_eq!(h.len(), 1);
}

#[test]
fn more_visible_changes_than_a_queue_holds_are_not_resumed() {
    let now = Instant::now();
    let mut h = filled(lots(), 9, now);
    // Four even changes after 1-0 for project 10.
    assert_eq!(
        h.replay(&id(1, 0x0), View::Project(10), 4, now)
            .map(|v| v.len()),
        Some(4)
    );
    assert!(h.replay(&id(1, 0x0), View::Project(10), 3, now).is_none());
    // What the view cannot see does not count.
    assert!(h.replay(&id(1, 0x0), View::Project(20), 4, now).is_some());
}

#[test]
fn a_member_sees_their_own_user_changes_and_the_announcements_that_concern_them() {
    let now = Instant::now();
    let mut h = History::new(lots());
    h.record(Some(&id(1, 0xa)), "start".into(), Reach::default(), now);
    let user = |u| Reach {
        users: vec![u].into(),
        ..Reach::default()
    };
    h.record(Some(&id(2, 0xa)), "me".into(), user(ME), now);
    h.record(Some(&id(2, 0xb)), "someone".into(), user(8), now);
    let left = Reach {
        org: Some(300),
        users: vec![ME].into(),
        ..Reach::default()
    };
    h.record(Some(&id(3, 0xa)), "I left 300".into(), left, now);
    h.record(
        Some(&id(3, 0xb)),
        "after".into(),
        reach(None, Some(300)),
        now,
    );
    let view = View::User {
        id: ME,
        orgs: &[100],
    };
    assert_eq!(
        texts(h.replay(&id(1, 0xa), view, 10, now)),
        Some(vec!["me".into(), "I left 300".into()])
    );
}

#[test]
fn a_repeated_id_resumes_from_its_first_place() {
    let now = Instant::now();
    let mut h = History::new(lots());
    h.record(
        Some(&id(1, 0xa)),
        "first".into(),
        reach(Some(10), None),
        now,
    );
    h.record(
        Some(&id(1, 0xb)),
        "between".into(),
        reach(Some(10), None),
        now,
    );
    h.record(
        Some(&id(1, 0xa)),
        "again".into(),
        reach(Some(10), None),
        now,
    );
    assert_eq!(
        texts(h.replay(&id(1, 0xa), View::Project(10), 10, now)),
        Some(vec!["between".into(), "again".into()])
    );
}

#[test]
fn no_history_when_none_is_kept() {
    let now = Instant::now();
    let none = Limits {
        changes: 0,
        age: Duration::from_secs(60),
    };
    let mut h = filled(none, 3, now);
    assert!(h.is_empty());
    assert!(h.replay(&id(1, 0x1), View::Project(10), 10, now).is_none());
}

#[test]
fn the_users_of_a_transaction_concern_each_of_its_changes() {
    let mut c = Concerns::default();
    c.user(1);
    assert_eq!(c.change(Some(&id(40, 0xa))), &[1]);
    // PostgreSQL folded a second `u:1` of transaction 40 into the first.
    c.user(2);
    assert_eq!(c.change(Some(&id(40, 0xb))), &[1, 2]);
    // The next transaction starts afresh.
    c.user(3);
    assert_eq!(c.change(Some(&id(41, 0xa))), &[3]);
    assert!(c.change(Some(&id(42, 0xa))).is_empty());
    assert!(c.change(None).is_empty());
}

#[test]
fn only_ids_of_the_databases_form_are_known() {
    let now = Instant::now();
    let mut h = History::new(lots());
    for odd in [
        "1-2",
        "x-0000000000000001",
        "1-000000000000000g",
        "-0000000000000001",
    ] {
        h.record(Some(odd), "odd".into(), reach(Some(10), None), now);
        assert!(h.replay(odd, View::Project(10), 10, now).is_none(), "{odd}");
    }
    h.record(None, "without".into(), reach(Some(10), None), now);
    h.record(Some(&id(2, 1)), "named".into(), reach(Some(10), None), now);
    assert_eq!(h.len(), 6);
    assert_eq!(
        texts(h.replay(&id(2, 1), View::Project(10), 10, now)),
        Some(vec![])
    );
}
