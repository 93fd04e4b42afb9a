//! What `GET /auth/check` reads about the session a cookie names, in one statement: the session,
//! its user's address, and the user's active organizations with the role in each (API tokens
//! are read by `tokens::find`, the one lookup of a token).

use std::time::Duration;

use super::Sql;
use crate::access::Role;
use crate::crypto::token_hash;

/// A live session (full or pending) as the check sees it.
#[derive(Debug, Clone)]
pub struct SessionCaller {
    pub id: i64,
    pub public_id: String,
    pub user_id: i64,
    pub email: String,
    pub mfa_pending: bool,
    /// Unix seconds of the sign-in that created it.
    pub auth_time: i64,
    /// Seconds until its absolute end.
    pub ends_in: f64,
    /// Seconds since it was last marked as used.
    pub since_seen: f64,
    /// The user's organizations whose status is `active`, and the role in each.
    pub orgs: Vec<(i64, Role)>,
}

/// The live session of a cookie token, as `sessions::find_valid` decides it.
pub fn session(
    c: &mut impl Sql,
    token: &str,
    idle: Duration,
) -> Result<Option<SessionCaller>, postgres::Error> {
    let row = c.query_opt(
        "SELECT s.id, s.public_id, s.user_id, u.email, s.mfa_pending,
                extract(epoch FROM s.created_at)::bigint,
                extract(epoch FROM s.expires_at - now())::float8,
                extract(epoch FROM now() - s.last_seen_at)::float8,
                coalesce(o.ids, '{}'), coalesce(o.roles, '{}')
           FROM sessions s JOIN users u ON u.id = s.user_id
           LEFT JOIN LATERAL (
               SELECT array_agg(m.org_id ORDER BY m.org_id) AS ids,
                      array_agg(m.role ORDER BY m.org_id) AS roles
                 FROM memberships m JOIN organizations g ON g.id = m.org_id
                WHERE m.user_id = s.user_id AND g.status = 'active') o ON true
          WHERE s.token_hash = $1 AND s.expires_at > now()
            AND (s.mfa_pending OR s.last_seen_at > now() - make_interval(secs => $2))",
        &[&token_hash(token), &idle.as_secs_f64()],
    )?;
    Ok(row.map(|r| {
        let ids: Vec<i64> = r.get(8);
        let roles: Vec<String> = r.get(9);
        SessionCaller {
            id: r.get(0),
            public_id: r.get(1),
            user_id: r.get(2),
            email: r.get(3),
            mfa_pending: r.get(4),
            auth_time: r.get(5),
            ends_in: r.get(6),
            since_seen: r.get(7),
            orgs: ids
                .into_iter()
                .zip(roles)
                // The column's CHECK admits only the role names.
                .filter_map(|(id, role)| Some((id, Role::parse(&role)?)))
                .collect(),
        }
    }))
}
