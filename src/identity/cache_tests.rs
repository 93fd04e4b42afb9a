use super::*;
use crate::access::Role;
use crate::db::tokens::TokenScope;
use crate::identity::CallerUser;

fn session(id: i64, user: i64, orgs: &[i64]) -> Arc<Caller> {
    Arc::new(Caller {
        user: Some(CallerUser {
            id: user,
            email: format!("u{user}@example.com"),
        }),
        by: By::Session {
            id,
            public_id: format!("{id:032x}"),
            auth_time: 0,
            orgs: orgs.iter().map(|&o| (o, Role::Member)).collect(),
        },
    })
}

fn token(id: i64, maker: Option<i64>, project_id: i64) -> Arc<Caller> {
    Arc::new(Caller {
        user: maker.map(|id| CallerUser {
            id,
            email: String::new(),
        }),
        by: By::Token {
            id,
            project_id,
            scope: TokenScope::Read,
        },
    })
}

fn long() -> Life {
    Life {
        ends_in: Some(Duration::from_secs(3600)),
        idle: Some((Duration::from_secs(3600), Duration::ZERO)),
    }
}

fn key(n: u8) -> SecretHash {
    [n; 32]
}

/// A trusted cache holding session 1 of user 10 (key 1, org 5) and token 2 made by user 10
/// (key 2, project 7), and token 3 of the command line (key 3, project 8).
fn holding() -> (Checked, Journal) {
    let (c, j) = (Checked::new(Duration::from_secs(60)), Journal::default());
    c.trust();
    c.put(key(1), session(1, 10, &[5]), long(), c.stamp(&j), &j);
    c.put(key(2), token(2, Some(10), 7), long(), c.stamp(&j), &j);
    c.put(key(3), token(3, None, 8), long(), c.stamp(&j), &j);
    (c, j)
}

fn held(c: &Checked) -> Vec<u8> {
    (1..=3)
        .filter(|&n| c.get(&key(n), Instant::now()).is_some())
        .collect()
}

#[test]
fn news_of_a_principal_forgets_exactly_what_it_names() {
    let (c, _) = holding();
    assert_eq!(held(&c), [1, 2, 3]);
    c.forget_token(3);
    assert_eq!(held(&c), [1, 2]);
    let (c, _) = holding();
    c.forget_session(1);
    assert_eq!(held(&c), [2, 3]);
    // A user's news: the user's sessions and the tokens the user made.
    let (c, _) = holding();
    c.forget_user(10);
    assert_eq!(held(&c), [3]);
    let (c, _) = holding();
    c.heard_change("organization", 5, "update");
    assert_eq!(held(&c), [2, 3]);
    c.heard_change("project", 8, "delete");
    assert_eq!(held(&c), [2]);
    c.heard_change("user", 10, "insert");
    assert_eq!(held(&c), [2]);
    c.heard_change("user", 10, "update");
    assert!(held(&c).is_empty() && c.is_empty());
}

#[test]
fn nothing_is_used_or_kept_while_the_listener_is_away() {
    let (c, j) = holding();
    c.distrust();
    assert!(held(&c).is_empty());
    c.put(key(1), session(1, 10, &[]), long(), c.stamp(&j), &j);
    assert!(c.is_empty());
    // An answer read before the listener came back is not kept either.
    let stamp = c.stamp(&j);
    c.trust();
    c.put(key(1), session(1, 10, &[]), long(), stamp, &j);
    assert!(c.is_empty());
    c.put(key(1), session(1, 10, &[]), long(), c.stamp(&j), &j);
    assert_eq!(held(&c), [1]);
}

#[test]
fn an_answer_is_not_kept_when_news_of_it_came_while_it_was_read() {
    let (c, j) = (Checked::new(Duration::from_secs(60)), Journal::default());
    c.trust();
    let stamp = c.stamp(&j);
    j.record(Mark::Session(1));
    c.put(key(1), session(1, 10, &[]), long(), stamp, &j);
    let stamp = c.stamp(&j);
    j.record(Mark::User(10));
    c.put(key(2), token(2, Some(10), 7), long(), stamp, &j);
    // News of someone else does not matter; news of an organization does (the epoch).
    let stamp = c.stamp(&j);
    j.record(Mark::Token(99));
    c.put(key(3), token(3, None, 8), long(), stamp, &j);
    assert_eq!(held(&c), [3]);
    let stamp = c.stamp(&j);
    c.heard_change("organization", 1, "update");
    c.put(key(1), session(1, 10, &[]), long(), stamp, &j);
    assert_eq!(held(&c), [3]);
}

#[test]
fn an_entry_is_used_until_its_end_its_idle_end_and_its_own_life() {
    let (c, j) = (Checked::new(Duration::from_secs(60)), Journal::default());
    c.trust();
    let now = Instant::now();
    let ends = |secs| Life {
        ends_in: Some(Duration::from_secs(secs)),
        idle: None,
    };
    c.put(key(1), token(1, None, 1), ends(10), c.stamp(&j), &j);
    c.put(
        key(2),
        token(2, None, 1),
        Life {
            ends_in: None,
            idle: None,
        },
        c.stamp(&j),
        &j,
    );
    let idle = Life {
        ends_in: Some(Duration::from_secs(3600)),
        idle: Some((Duration::from_secs(100), Duration::from_secs(90))),
    };
    c.put(key(3), session(3, 1, &[]), idle, c.stamp(&j), &j);
    let at = |secs| now + Duration::from_secs(secs);
    assert!(c.get(&key(1), at(9)).is_some() && c.get(&key(1), at(11)).is_none());
    assert!(c.get(&key(2), at(59)).is_some() && c.get(&key(2), at(61)).is_none());
    // Seen 90 s ago with 100 s of idle time: 10 s left, unless a use is noted meanwhile.
    assert!(c.get(&key(3), at(11)).is_none());
}

#[test]
fn a_use_is_noted_once_per_period_and_moves_the_idle_end() {
    let (c, j) = (Checked::new(Duration::from_secs(10)), Journal::default());
    c.trust();
    let now = Instant::now();
    let life = Life {
        ends_in: Some(Duration::from_secs(3600)),
        idle: Some((Duration::from_secs(30), Duration::ZERO)),
    };
    c.put(key(1), session(1, 1, &[]), life, c.stamp(&j), &j);
    let noted = |secs| {
        c.get(&key(1), now + Duration::from_secs(secs))
            .map(|h| h.note)
    };
    assert_eq!(noted(5), Some(false));
    assert_eq!(noted(11), Some(true));
    assert_eq!(noted(15), Some(false));
    // Noted at 11: the idle end is 41, not 30; noted again at 40, it is 70.
    assert_eq!(noted(40), Some(true));
    assert_eq!(noted(55), Some(true));
    assert_eq!(c.hits.load(Ordering::Relaxed), 5);
}
