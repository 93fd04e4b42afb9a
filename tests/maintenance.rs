//! The maintenance sweep: rows that can never be used again are deleted, live ones are kept.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn count(sql: &str, id: i64) -> i64 {
    db().query_one(sql, &[&id]).unwrap().get(0)
}

#[test]
fn the_sweep_removes_dead_sessions_and_mail_tokens_and_keeps_live_ones() {
    let server = TestServer::start();
    let mut c = server.client();
    let (_, state) = c.signup();
    let user = state["user"]["id"].as_i64().unwrap();
    let mut db = db();
    let insert_token = |db: &mut postgres::Client, hash: &[u8], expires: &str, used: &str| {
        db.execute(
            &format!(
                "INSERT INTO mail_tokens (user_id, purpose, token_hash, email, expires_at, used_at)
                 VALUES ($1, 'password_reset', $2, 'x@example.com', {expires}, {used})"
            ),
            &[&user, &hash],
        )
        .unwrap();
    };
    let tag = consoled::crypto::random_bytes::<8>();
    let hash = |n: u8| [&tag[..], &[n]].concat();
    insert_token(&mut db, &hash(1), "now() - interval '2 days'", "NULL");
    insert_token(
        &mut db,
        &hash(2),
        "now() + interval '1 hour'",
        "now() - interval '2 days'",
    );
    insert_token(&mut db, &hash(3), "now() + interval '1 hour'", "NULL");
    insert_token(&mut db, &hash(4), "now() - interval '1 hour'", "NULL");
    db.execute(
        "INSERT INTO sessions (token_hash, user_id, mfa_pending, expires_at)
         VALUES ($1, $2, false, now() - interval '1 second')",
        &[&hash(9), &user],
    )
    .unwrap();

    // A new instance sweeps at start.
    let _other = TestServer::start();
    let deadline = Instant::now() + Duration::from_secs(10);
    let dead_left = |db: &mut postgres::Client| -> i64 {
        db.query_one(
            "SELECT (SELECT count(*) FROM mail_tokens WHERE token_hash = ANY($1))
                  + (SELECT count(*) FROM sessions WHERE token_hash = $2)",
            &[&vec![hash(1), hash(2)], &hash(9)],
        )
        .unwrap()
        .get(0)
    };
    while dead_left(&mut db) > 0 {
        assert!(Instant::now() < deadline, "dead rows were not swept");
        std::thread::sleep(Duration::from_millis(100));
    }
    let kept: i64 = db
        .query_one(
            "SELECT count(*) FROM mail_tokens WHERE token_hash = ANY($1)",
            &[&vec![hash(3), hash(4)]],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        kept, 2,
        "a live token and one expired less than a day ago stay"
    );
    assert_eq!(
        count("SELECT count(*) FROM sessions WHERE user_id = $1", user),
        1,
        "the live session stays"
    );
    c.get("/auth/session").expect(200);
}
