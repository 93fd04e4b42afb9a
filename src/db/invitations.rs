//! Table `invitations`: an address invited to an organization with a role (or, from the operator,
//! to sign up at all). The mailed link's token is minted when the mail is sent (`set_token`) and
//! only its SHA-256 is kept; a link works once, for `LIFETIME`.
//!
//! A cancelled or replaced invitation is not deleted but ended (its `expires_at` set to now), and
//! its queued mail is left to the sender, which finds it obsolete: deleting it would delete the
//! outbox row too (the foreign key), waiting for a sender that holds that row and in turn waits
//! for the invitation (a deadlock, found by schemathesis). Ended rows go a day later
//! (`purge_dead`).

use std::time::Duration;

use postgres::Row;
use serde_json::{json, Value};

use super::Sql;
use crate::access::Role;
use crate::crypto::{new_token, token_hash};
use crate::http::json::Email;

/// How long an invitation's link works.
pub const LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Clone)]
pub struct Invitation {
    pub id: i64,
    /// `None`: an invitation to sign up only.
    pub org_id: Option<i64>,
    pub email: String,
    pub role: Role,
    pub invited_by: Option<i64>,
    pub created: String,
    pub expires: String,
}

const COLUMNS: &str = "id, org_id, email, role, invited_by, \
     to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), \
     to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')";

impl Invitation {
    fn from_row(r: &Row) -> Invitation {
        Invitation {
            id: r.get(0),
            org_id: r.get(1),
            email: r.get(2),
            // The table's CHECK admits only the four names.
            role: Role::parse(r.get(3)).unwrap_or(Role::Viewer),
            invited_by: r.get(4),
            created: r.get(5),
            expires: r.get(6),
        }
    }

    /// The Invitation resource (docs/API.md): never its token.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id, "org_id": self.org_id, "email": self.email,
            "role": self.role.as_str(), "invited_by": self.invited_by,
            "created": self.created, "expires": self.expires,
        })
    }
}

/// Invites `email` with `role`, replacing an open invitation of the same address to the same
/// organization (its link stops working; its mail, unsent, is not sent).
pub fn create(
    c: &mut impl Sql,
    org_id: Option<i64>,
    email: &Email,
    role: Role,
    invited_by: Option<i64>,
) -> Result<Invitation, postgres::Error> {
    c.execute(
        "UPDATE invitations SET expires_at = now()
          WHERE org_id IS NOT DISTINCT FROM $1 AND email = $2
            AND accepted_at IS NULL AND expires_at > now()",
        &[&org_id, &email.as_str()],
    )?;
    let sql = format!(
        "INSERT INTO invitations (org_id, email, role, invited_by, expires_at)
         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5)) RETURNING {COLUMNS}"
    );
    let row = c.query_one(
        &sql,
        &[
            &org_id,
            &email.as_str(),
            &role.as_str(),
            &invited_by,
            &LIFETIME.as_secs_f64(),
        ],
    )?;
    Ok(Invitation::from_row(&row))
}

/// The open (not accepted, not expired) invitations of an organization, oldest first.
pub fn list_open(c: &mut impl Sql, org_id: i64) -> Result<Vec<Invitation>, postgres::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM invitations
          WHERE org_id = $1 AND accepted_at IS NULL AND expires_at > now() ORDER BY id"
    );
    Ok(c.query(&sql, &[&org_id])?
        .iter()
        .map(Invitation::from_row)
        .collect())
}

/// Cancels an open invitation of the organization (ends it; see the module's note); false when
/// it has none with that id.
pub fn cancel(c: &mut impl Sql, org_id: i64, id: i64) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "UPDATE invitations SET expires_at = now()
          WHERE id = $1 AND org_id = $2 AND accepted_at IS NULL AND expires_at > now()",
        &[&id, &org_id],
    )?;
    Ok(n == 1)
}

/// The live invitation of a link's token, without using it.
pub fn find_live(c: &mut impl Sql, token: &str) -> Result<Option<Invitation>, postgres::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM invitations
          WHERE token_hash = $1 AND accepted_at IS NULL AND expires_at > now()"
    );
    Ok(c.query_opt(&sql, &[&token_hash(token)])?
        .as_ref()
        .map(Invitation::from_row))
}

/// Uses a link: one statement, so of two concurrent uses exactly one gets the invitation.
pub fn consume(
    c: &mut impl Sql,
    token: &str,
    user_id: i64,
) -> Result<Option<Invitation>, postgres::Error> {
    let sql = format!(
        "UPDATE invitations SET accepted_at = now(), accepted_by = $2
          WHERE token_hash = $1 AND accepted_at IS NULL AND expires_at > now()
          RETURNING {COLUMNS}"
    );
    Ok(c.query_opt(&sql, &[&token_hash(token), &user_id])?
        .as_ref()
        .map(Invitation::from_row))
}

/// Whether a live invitation names this address (a provider sign-in under `CONSOLED_SIGNUP=invite`).
pub fn live_for_address(c: &mut impl Sql, email: &Email) -> Result<bool, postgres::Error> {
    let row = c.query_opt(
        "SELECT 1 FROM invitations
          WHERE email = $1 AND accepted_at IS NULL AND expires_at > now() LIMIT 1",
        &[&email.as_str()],
    )?;
    Ok(row.is_some())
}

/// What an invitation's mail says: the organization, the role and who invited.
#[derive(Debug, Clone)]
pub struct Mailing {
    pub org_name: Option<String>,
    pub role: Role,
    pub inviter: Option<String>,
}

/// The invitation an outbox row mails, while it is open; `None` once it was used or expired.
pub fn to_mail(c: &mut impl Sql, id: i64) -> Result<Option<Mailing>, postgres::Error> {
    let row = c.query_opt(
        "SELECT o.name, i.role, u.name
           FROM invitations i
           LEFT JOIN organizations o ON o.id = i.org_id
           LEFT JOIN users u ON u.id = i.invited_by
          WHERE i.id = $1 AND i.accepted_at IS NULL AND i.expires_at > now()",
        &[&id],
    )?;
    Ok(row.map(|r| Mailing {
        org_name: r.get(0),
        role: Role::parse(r.get(1)).unwrap_or(Role::Viewer),
        inviter: r.get(2),
    }))
}

/// Mints the link's token and keeps its hash, while the invitation is open; returns the token
/// (for the mail only), or `None` when it was used, cancelled or replaced meanwhile (the update
/// looks at the row again after any lock it waited for). A newer token replaces an older one.
pub fn set_token(c: &mut impl Sql, id: i64) -> Result<Option<String>, postgres::Error> {
    let token = new_token();
    let n = c.execute(
        "UPDATE invitations SET token_hash = $2
          WHERE id = $1 AND accepted_at IS NULL AND expires_at > now()",
        &[&id, &token_hash(&token)],
    )?;
    Ok((n == 1).then_some(token))
}

/// Deletes invitations used or expired more than a day ago.
pub fn purge_dead(c: &mut impl Sql) -> Result<u64, postgres::Error> {
    c.execute(
        "DELETE FROM invitations
          WHERE expires_at < now() - interval '1 day' OR accepted_at < now() - interval '1 day'",
        &[],
    )
}
