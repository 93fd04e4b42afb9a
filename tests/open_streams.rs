//! `consoled_open_streams`, the statement that opens a group of streams (`db::leases::open`), read
//! straight from the database: every outcome of one group that names every kind of credential,
//! the leases it writes and the rows it touches. The statement was rewritten for speed (migration
//! 0016); these are the answers it must keep giving.

mod common;

use common::*;

/// Seconds a session may stay unused, and after which it is written as seen again.
const IDLE: f64 = 1800.0;
const TOUCH_AFTER: f64 = 60.0;

/// One item of a group: a token's hash or a session's.
type Item = (Option<Vec<u8>>, Option<Vec<u8>>);

struct Fixture<'a> {
    tx: postgres::Transaction<'a>,
    project: i64,
    org: i64,
}

impl Fixture<'_> {
    /// A command-line token (no maker) of the project unless `maker` is given; `extra` is SQL
    /// setting its other columns. Returns its hash.
    fn token(&mut self, maker: Option<i64>, extra: &str) -> Vec<u8> {
        let hash = format!("open-streams-{}", unique()).into_bytes();
        self.tx
            .execute(
                "INSERT INTO api_tokens (project_id, name, token_hash, created_by)
                 VALUES ($1, 't', $2, $3)",
                &[&self.project, &hash, &maker],
            )
            .unwrap();
        if !extra.is_empty() {
            self.tx
                .execute(
                    &format!("UPDATE api_tokens SET {extra} WHERE token_hash = $1"),
                    &[&hash],
                )
                .unwrap();
        }
        hash
    }

    /// A user of the project's organization (`member`), disabled or not.
    fn user(&mut self, member: bool, disabled: bool) -> i64 {
        let id: i64 = self
            .tx
            .query_one(
                "INSERT INTO users (email, name, disabled_at)
                 VALUES ($1, 'u', CASE WHEN $2 THEN now() END) RETURNING id",
                &[&unique_email(), &disabled],
            )
            .unwrap()
            .get(0);
        if member {
            self.tx
                .execute(
                    "INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, 'member')",
                    &[&self.org, &id],
                )
                .unwrap();
        }
        id
    }

    /// A session of `user` last seen `seen_ago` seconds ago.
    fn session(&mut self, user: i64, pending: bool, seen_ago: f64) -> Vec<u8> {
        let hash = format!("open-streams-{}", unique()).into_bytes();
        self.tx
            .execute(
                "INSERT INTO sessions (token_hash, user_id, mfa_pending, expires_at, last_seen_at)
                 VALUES ($1, $2, $3, now() + interval '1 day',
                         now() - make_interval(secs => $4))",
                &[&hash, &user, &pending, &seen_ago],
            )
            .unwrap();
        hash
    }

    fn ts(&mut self, sql: &str, hash: &[u8]) -> bool {
        self.tx.query_one(sql, &[&hash]).unwrap().get(0)
    }
}

/// One group naming each kind of credential: live tokens (one used a moment ago, one with an
/// end, one made by a member), refused tokens (revoked, expired, made by a disabled user, made by
/// someone who left, unknown), a token with nine leases on live instances and one on a lapsed
/// instance named three times (one admitted, two `full`), and sessions (one last seen ten minutes
/// ago, one seconds ago, one waiting for its second factor, one idle too long). Outcomes, leases,
/// holders, remaining seconds and organizations are as documented; `last_used_at` and
/// `last_seen_at` are written only when due, and a session's remaining seconds count from the
/// touch.
#[test]
fn a_group_answers_every_kind_of_credential() {
    let server = TestServer::start();
    let (_, state) = server.client().signup();
    let project = project_of(&state);
    let mut c = db();
    let org: i64 = c
        .query_one("SELECT org_id FROM projects WHERE id = $1", &[&project])
        .unwrap()
        .get(0);
    let mut f = Fixture {
        tx: c.transaction().unwrap(),
        project,
        org,
    };
    let member = f.user(true, false);
    let disabled = f.user(true, true);
    let gone = f.user(false, false);
    let live = f.token(None, "");
    let recent = f.token(None, "last_used_at = now() - interval '30 seconds'");
    let ending = f.token(None, "expires_at = now() + interval '100 seconds'");
    let made = f.token(Some(member), "");
    let revoked = f.token(None, "revoked_at = now()");
    let expired = f.token(None, "expires_at = now() - interval '1 second'");
    let by_disabled = f.token(Some(disabled), "");
    let by_gone = f.token(Some(gone), "");
    let busy = f.token(None, "");
    let (alive, lapsed) = (
        format!("alive-{}", unique()),
        format!("lapsed-{}", unique()),
    );
    f.tx.execute(
        "INSERT INTO instances (id, alive_until)
         VALUES ($1, now() + interval '1 hour'), ($2, now() - interval '1 minute')",
        &[&alive, &lapsed],
    )
    .unwrap();
    f.tx.execute(
        "INSERT INTO stream_leases (instance_id, token_id)
         SELECT CASE WHEN g <= 9 THEN $1 ELSE $2 END, t.id
           FROM api_tokens t, generate_series(1, 10) g WHERE t.token_hash = $3",
        &[&alive, &lapsed, &busy],
    )
    .unwrap();
    let stale = f.session(member, false, 600.0);
    let fresh = f.session(member, false, 30.0);
    let pending = f.session(member, true, 600.0);
    let idle = f.session(member, false, 2.0 * IDLE);

    let t = |h: &Vec<u8>| (Some(h.clone()), None);
    let s = |h: &Vec<u8>| (None, Some(h.clone()));
    let items: Vec<Item> = vec![
        t(&live),
        t(&recent),
        t(&ending),
        t(&made),
        t(&revoked),
        t(&expired),
        t(&by_disabled),
        t(&by_gone),
        t(&b"unknown".to_vec()),
        t(&busy),
        t(&busy),
        t(&busy),
        s(&stale),
        s(&fresh),
        s(&pending),
        s(&idle),
        s(&b"unknown".to_vec()),
    ];
    let tokens: Vec<Option<Vec<u8>>> = items.iter().map(|i| i.0.clone()).collect();
    let sessions: Vec<Option<Vec<u8>>> = items.iter().map(|i| i.1.clone()).collect();
    let instance = format!("group-{}", unique());
    let rows =
        f.tx.query(
            "SELECT item, outcome, lease_id, token_id, project_id, session_id, user_id,
                    remaining, orgs
               FROM consoled_open_streams($1, $2, $3, $4, $5, 10, 30) ORDER BY item",
            &[&instance, &tokens, &sessions, &IDLE, &TOUCH_AFTER],
        )
        .unwrap();
    let outcomes: Vec<&str> = rows.iter().map(|r| r.get(1)).collect();
    #[rustfmt::skip]
    assert_eq!(outcomes, [
        "ok", "ok", "ok", "ok",
        "unauthorized", "unauthorized", "unauthorized", "unauthorized", "unauthorized",
        "ok", "full", "full",
        "ok", "ok", "mfa_required", "unauthorized", "unauthorized",
    ]);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.get::<_, i32>(0), i as i32 + 1, "items in order");
        let lease: Option<i64> = r.get(2);
        assert_eq!(lease.is_some(), outcomes[i] == "ok", "item {i}");
        if let Some(lease) = lease {
            let (at, user, token): (String, Option<i64>, Option<i64>) = {
                let l =
                    f.tx.query_one(
                        "SELECT instance_id, user_id, token_id FROM stream_leases WHERE id = $1",
                        &[&lease],
                    )
                    .unwrap();
                (l.get(0), l.get(1), l.get(2))
            };
            assert_eq!(at, instance);
            let is_token = items[i].0.is_some();
            assert_eq!(token, if is_token { r.get(3) } else { None }, "item {i}");
            assert_eq!(user, if is_token { None } else { r.get(6) }, "item {i}");
        }
    }
    let leases: i64 =
        f.tx.query_one(
            "SELECT count(*) FROM stream_leases WHERE instance_id = $1",
            &[&instance],
        )
        .unwrap()
        .get(0);
    assert_eq!(leases, 7, "a lease per ok");
    let alive_until: bool =
        f.tx.query_one(
            "SELECT alive_until > now() FROM instances WHERE id = $1",
            &[&instance],
        )
        .unwrap()
        .get(0);
    assert!(alive_until, "the instance is written alive");

    // Tokens: their id and project, seconds until they end (none for those without an end).
    for i in [0, 1, 2, 3, 9] {
        assert!(rows[i].get::<_, Option<i64>>(3).is_some(), "item {i}");
        assert_eq!(rows[i].get::<_, Option<i64>>(4), Some(project), "item {i}");
        assert_eq!(rows[i].get::<_, Option<i64>>(5), None, "item {i}");
        assert_eq!(rows[i].get::<_, Option<Vec<i64>>>(8), None, "item {i}");
    }
    assert_eq!(rows[0].get::<_, Option<f64>>(7), None);
    let ends = rows[2].get::<_, Option<f64>>(7).unwrap();
    assert!((99.0..=100.0).contains(&ends), "{ends}");
    for (i, r) in rows.iter().enumerate().take(9).skip(4) {
        let nothing: (Option<i64>, Option<i64>, Option<f64>) = (r.get(3), r.get(5), r.get(7));
        assert_eq!(nothing, (None, None, None), "item {i}");
    }
    // Sessions: the user, the organizations, seconds until idle counted from the touch (the
    // session seen ten minutes ago is written as seen now, the one seen 30 s ago is not).
    for (i, left) in [(12, IDLE), (13, IDLE - 30.0)] {
        let r = &rows[i];
        assert_eq!(r.get::<_, Option<i64>>(6), Some(member), "item {i}");
        assert!(r.get::<_, Option<i64>>(5).is_some(), "item {i}");
        assert_eq!(r.get::<_, Option<Vec<i64>>>(8), Some(vec![org]), "item {i}");
        let remaining = r.get::<_, Option<f64>>(7).unwrap();
        assert!((remaining - left).abs() < 1.0, "item {i}: {remaining}");
    }
    assert_eq!(rows[14].get::<_, Option<f64>>(7), None, "pending: no end");
    assert_eq!(
        rows[14].get::<_, Option<Vec<i64>>>(8),
        None,
        "pending: no orgs"
    );

    let used =
        "SELECT last_used_at IS NOT DISTINCT FROM now() FROM api_tokens WHERE token_hash = $1";
    assert!(f.ts(used, &live) && f.ts(used, &ending) && f.ts(used, &made) && f.ts(used, &busy));
    assert!(!f.ts(used, &recent), "used 30 s ago: not written again");
    assert!(!f.ts(used, &revoked) && !f.ts(used, &by_disabled) && !f.ts(used, &by_gone));
    let seen = "SELECT last_seen_at = now() FROM sessions WHERE token_hash = $1";
    assert!(f.ts(seen, &stale), "seen ten minutes ago: written as seen");
    assert!(!f.ts(seen, &fresh) && !f.ts(seen, &pending) && !f.ts(seen, &idle));
    f.tx.rollback().unwrap();
}
