//! Tables `instances` and `stream_leases`: one lease row per open event stream, so the per-user
//! and per-token stream limit holds across every instance, and one row per running instance that
//! proves it alive. A lease counts only while its instance's row is alive: keeping streams alive
//! costs one row write per instance and heartbeat, however many streams it holds, and a crashed
//! instance's slots are free once its row lapses (`ALIVE_FOR`).

use std::time::Duration;

use super::Sql;

/// How often an instance renews its row.
pub const HEARTBEAT: Duration = Duration::from_secs(4);
/// How long a renewal keeps an instance alive. Three heartbeats: an instance survives two missed
/// ones (a slow database) before its streams stop counting; a crashed instance's slots are free
/// at most this long after its last heartbeat (docs/events.md, "Instances and leases").
pub const ALIVE_FOR: Duration = Duration::from_secs(12);
/// A lapsed instance's row and leases are deleted this long after it lapsed (they no longer
/// count anyway; an instance that comes back restores its leases).
pub const FORGET_AFTER: Duration = Duration::from_secs(60);

/// Whose streams a lease counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Holder {
    User(i64),
    Token(i64),
}

impl Holder {
    fn user(self) -> Option<i64> {
        match self {
            Holder::User(id) => Some(id),
            Holder::Token(_) => None,
        }
    }

    fn token(self) -> Option<i64> {
        match self {
            Holder::Token(id) => Some(id),
            Holder::User(_) => None,
        }
    }
}

/// What opening a stream presents: the SHA-256 of an API token or of a session cookie.
pub enum Credential {
    Token(Vec<u8>),
    Session(Vec<u8>),
}

impl Credential {
    /// The hash presented, whichever kind it is.
    pub fn hash(&self) -> &[u8] {
        match self {
            Credential::Token(h) | Credential::Session(h) => h,
        }
    }
}

/// The session rules the opening statement applies (as `sessions::find_valid` and
/// `auth::any_session` do).
pub struct SessionRules {
    pub idle: Duration,
    /// Mark the session as used when it was last marked longer ago than this.
    pub touch_after: f64,
}

/// The outcome of `open`, per credential.
#[derive(Debug, PartialEq)]
pub enum Opened {
    Token {
        lease: i64,
        token_id: i64,
        project_id: i64,
        /// Seconds until the token expires; `None`: never.
        remaining: Option<f64>,
    },
    Session {
        lease: i64,
        session_id: i64,
        user_id: i64,
        /// Seconds until the session ends unless used again.
        remaining: f64,
        orgs: Vec<i64>,
    },
    /// A token of a project whose organization is suspended or closed (`status`): refused, and
    /// the lease taken for it is to be released.
    Inactive {
        lease: i64,
        token_id: i64,
        status: String,
    },
    Unauthorized,
    MfaRequired,
    /// The holder has `limit` streams open on live instances.
    Full,
}

/// One row of `consoled_open_streams`.
fn outcome(row: &postgres::Row) -> Opened {
    match row.get::<_, &str>(0) {
        "ok" => match row.get::<_, Option<i64>>(2) {
            Some(token_id) => match row.get::<_, Option<String>>(8) {
                Some(status) if status != "active" => Opened::Inactive {
                    lease: row.get(1),
                    token_id,
                    status,
                },
                _ => Opened::Token {
                    lease: row.get(1),
                    token_id,
                    project_id: row.get(3),
                    remaining: row.get(6),
                },
            },
            None => Opened::Session {
                lease: row.get(1),
                session_id: row.get(4),
                user_id: row.get(5),
                remaining: row.get(6),
                orgs: row.get(7),
            },
        },
        "full" => Opened::Full,
        "mfa_required" => Opened::MfaRequired,
        _ => Opened::Unauthorized,
    }
}

/// Authenticates each credential and takes a lease for it, in one statement
/// (`consoled_open_streams`, migrations 0007, 0008, 0010 and 0016; `events::openings` gathers them): one outcome per
/// credential, in their order. The credentials of one holder are admitted in order
/// while the holder stays under `limit`. A suspended or closed organization is seen by nobody
/// (docs/API.md): a session's organizations are its active ones, and a token's organization
/// status comes along (`Opened::Inactive` unless active).
pub fn open(
    c: &mut impl Sql,
    instance: &str,
    credentials: &[&Credential],
    rules: &SessionRules,
    limit: usize,
) -> Result<Vec<Opened>, postgres::Error> {
    let mut tokens: Vec<Option<&[u8]>> = Vec::with_capacity(credentials.len());
    let mut sessions: Vec<Option<&[u8]>> = Vec::with_capacity(credentials.len());
    for credential in credentials {
        match credential {
            Credential::Token(h) => {
                tokens.push(Some(h));
                sessions.push(None);
            }
            Credential::Session(h) => {
                tokens.push(None);
                sessions.push(Some(h));
            }
        }
    }
    let limit = i32::try_from(limit).unwrap_or(i32::MAX);
    let rows = c.query(
        "SELECT s.outcome, s.lease_id, s.token_id, s.project_id, s.session_id, s.user_id,
                s.remaining,
                CASE WHEN s.orgs IS NOT NULL THEN ARRAY(
                    SELECT o.id FROM organizations o
                     WHERE o.id = ANY (s.orgs) AND o.status = 'active' ORDER BY o.id)
                END,
                (SELECT o.status FROM projects p JOIN organizations o ON o.id = p.org_id
                  WHERE p.id = s.project_id AND s.token_id IS NOT NULL)
           FROM consoled_open_streams($1, $2, $3, $4, $5, $6, $7) s
          ORDER BY s.item",
        &[
            &instance,
            &tokens,
            &sessions,
            &rules.idle.as_secs_f64(),
            &rules.touch_after,
            &limit,
            &ALIVE_FOR.as_secs_f64(),
        ],
    )?;
    Ok(rows.iter().map(outcome).collect())
}

pub fn release(c: &mut impl Sql, ids: &[i64]) -> Result<u64, postgres::Error> {
    c.execute("DELETE FROM stream_leases WHERE id = ANY($1)", &[&ids])
}

/// Renews this instance's row: one row written, however many streams it holds. Returns false
/// when the row was missing or had lapsed: other instances may have deleted its leases meanwhile
/// (`forget_dead`), and the caller restores them (`restore`).
pub fn heartbeat(c: &mut impl Sql, instance: &str) -> Result<bool, postgres::Error> {
    let row = c.query_one(
        "WITH before AS (SELECT alive_until > now() AS alive FROM instances WHERE id = $1)
         INSERT INTO instances (id, alive_until) VALUES ($1, now() + make_interval(secs => $2))
         ON CONFLICT (id) DO UPDATE SET alive_until = EXCLUDED.alive_until
         RETURNING coalesce((SELECT alive FROM before), false)",
        &[&instance, &ALIVE_FOR.as_secs_f64()],
    )?;
    Ok(row.get(0))
}

/// Recreates the rows of this instance's live leases that are gone (after `heartbeat` said the
/// instance had lapsed). Rows still there are left alone.
pub fn restore(
    c: &mut impl Sql,
    instance: &str,
    live: &[(i64, Holder)],
) -> Result<u64, postgres::Error> {
    let ids: Vec<i64> = live.iter().map(|(id, _)| *id).collect();
    let users: Vec<Option<i64>> = live.iter().map(|(_, h)| h.user()).collect();
    let tokens: Vec<Option<i64>> = live.iter().map(|(_, h)| h.token()).collect();
    c.execute(
        "INSERT INTO stream_leases (id, instance_id, user_id, token_id)
         SELECT l.id, $1, l.u, l.t
           FROM unnest($2::bigint[], $3::bigint[], $4::bigint[]) AS l(id, u, t)
          WHERE (l.u IS NULL OR EXISTS (SELECT 1 FROM users WHERE id = l.u))
            AND (l.t IS NULL OR EXISTS (SELECT 1 FROM api_tokens WHERE id = l.t))
         ON CONFLICT (id) DO NOTHING",
        &[&instance, &ids, &users, &tokens],
    )
}

/// Deletes instances that lapsed more than `FORGET_AFTER` ago, with their leases. Writes nothing
/// while every instance is alive.
pub fn forget_dead(c: &mut impl Sql) -> Result<u64, postgres::Error> {
    c.execute(
        "WITH dead AS (
             DELETE FROM instances WHERE alive_until < now() - make_interval(secs => $1)
             RETURNING id)
         DELETE FROM stream_leases WHERE instance_id IN (SELECT id FROM dead)",
        &[&FORGET_AFTER.as_secs_f64()],
    )
}

/// Deletes leases of no instance: those an instance of the previous version left when its time
/// ran out (`expires_at`), and those whose instance was forgotten while one was being taken.
/// Scans every lease, so it runs once, when an instance starts.
pub fn forget_orphans(c: &mut impl Sql) -> Result<u64, postgres::Error> {
    c.execute(
        "DELETE FROM stream_leases l
          WHERE l.expires_at < now()
             OR (NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = l.instance_id)
                 AND l.expires_at IS NULL
                 AND l.created_at < now() - make_interval(secs => $1))",
        &[&FORGET_AFTER.as_secs_f64()],
    )
}

/// Drops an instance's row and every lease of it (shutdown).
pub fn release_instance(c: &mut impl Sql, instance: &str) -> Result<u64, postgres::Error> {
    let n = c.execute(
        "DELETE FROM stream_leases WHERE instance_id = $1",
        &[&instance],
    )?;
    c.execute("DELETE FROM instances WHERE id = $1", &[&instance])?;
    Ok(n)
}
