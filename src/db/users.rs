//! Table `users`: accounts and the User resource (docs/API.md, "Bodies").

use super::Sql;
use postgres::Row;
use serde_json::{json, Value};

use crate::http::json::Email;

#[derive(Debug, Clone)]
pub struct User {
    pub id: i64,
    pub email: String,
    pub name: String,
    pub locale: String,
    pub email_verified: bool,
    pub mfa_enabled: bool,
    pub password_hash: Option<String>,
    pub created: String,
    /// Since when the operator has disabled the account (`consoled user disable`), if so.
    pub disabled_at: Option<String>,
}

const COLUMNS: &str = "id, email, name, locale, email_verified, totp_secret IS NOT NULL, \
     password_hash, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), \
     to_char(disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')";

impl User {
    fn from_row(row: &Row) -> User {
        User {
            id: row.get(0),
            email: row.get(1),
            name: row.get(2),
            locale: row.get(3),
            email_verified: row.get(4),
            mfa_enabled: row.get(5),
            password_hash: row.get(6),
            created: row.get(7),
            disabled_at: row.get(8),
        }
    }

    /// The User resource of docs/API.md.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "email": self.email,
            "name": self.name,
            "locale": self.locale,
            "email_verified": self.email_verified,
            "mfa_enabled": self.mfa_enabled,
            "has_password": self.password_hash.is_some(),
            "created": self.created,
        })
    }
}

pub fn find(c: &mut impl Sql, id: i64) -> Result<Option<User>, postgres::Error> {
    let sql = format!("SELECT {COLUMNS} FROM users WHERE id = $1");
    Ok(c.query_opt(&sql, &[&id])?.as_ref().map(User::from_row))
}

pub fn find_by_email(c: &mut impl Sql, email: &Email) -> Result<Option<User>, postgres::Error> {
    let sql = format!("SELECT {COLUMNS} FROM users WHERE email = $1");
    Ok(c.query_opt(&sql, &[&email.as_str()])?
        .as_ref()
        .map(User::from_row))
}

/// Inserts a user; `None` when the address has an account already.
pub fn insert(
    c: &mut impl Sql,
    email: &Email,
    name: &str,
    password_hash: Option<&str>,
    email_verified: bool,
) -> Result<Option<User>, postgres::Error> {
    let sql = format!(
        "INSERT INTO users (email, name, password_hash, email_verified) VALUES ($1, $2, $3, $4)
         ON CONFLICT (email) DO NOTHING RETURNING {COLUMNS}"
    );
    let row = c.query_opt(
        &sql,
        &[&email.as_str(), &name, &password_hash, &email_verified],
    )?;
    Ok(row.as_ref().map(User::from_row))
}

pub fn set_password(c: &mut impl Sql, id: i64, hash: &str) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE users SET password_hash = $2, updated_at = now() WHERE id = $1",
        &[&id, &hash],
    )?;
    Ok(())
}

/// Replaces the password only if it is still `expected` (`None`: the account has none), so that
/// of two concurrent changes that each proved the old password, one wins; false when it was not
/// `expected` any more.
pub fn replace_password(
    c: &mut impl Sql,
    id: i64,
    expected: Option<&str>,
    hash: &str,
) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "UPDATE users SET password_hash = $3, updated_at = now()
          WHERE id = $1 AND password_hash IS NOT DISTINCT FROM $2",
        &[&id, &expected, &hash],
    )?;
    Ok(n == 1)
}

/// Marks the address verified; true when it was not verified before (the address has just
/// been proven).
pub fn mark_verified(c: &mut impl Sql, id: i64) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "UPDATE users SET email_verified = true, updated_at = now() WHERE id = $1 AND NOT email_verified",
        &[&id],
    )?;
    Ok(n == 1)
}

/// Removes the password: the account can then be entered only through its linked identity
/// provider or a password reset.
pub fn clear_password(c: &mut impl Sql, id: i64) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE users SET password_hash = NULL, updated_at = now() WHERE id = $1",
        &[&id],
    )?;
    Ok(())
}

/// Changes the name and the locale (each when given); the updated user, `None` when it is gone.
pub fn update_profile(
    c: &mut impl Sql,
    id: i64,
    name: Option<&str>,
    locale: Option<&str>,
) -> Result<Option<User>, postgres::Error> {
    let sql = format!(
        "UPDATE users SET name = coalesce($2, name), locale = coalesce($3, locale),
                updated_at = now()
          WHERE id = $1 RETURNING {COLUMNS}"
    );
    let row = c.query_opt(&sql, &[&id, &name, &locale])?;
    Ok(row.as_ref().map(User::from_row))
}

/// Gives the account the address its owner has just proven by following the link mailed to it
/// (so it is verified). False when another account has the address, or the user is gone.
///
/// A second factor enabled before the old address was proven (`totp_unproven`) is no longer a
/// possible stranger's: the one who holds the account, proven by its password or a recent
/// sign-in, has just proven the address the account now has. So the flag goes, and a later
/// reset through that address keeps the factor (`auth::take_over_address`).
pub fn change_email(c: &mut impl Sql, id: i64, email: &str) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "UPDATE users SET email = $2, email_verified = true, totp_unproven = false,
                updated_at = now()
          WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM users WHERE email = $2)",
        &[&id, &email],
    );
    match n {
        Ok(n) => Ok(n == 1),
        // A sign-up took the address between the look and the write.
        Err(e) if e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Disables or enables the account; false when it already was, or the user is gone. The
/// database does the rest (migration 0012, `users_access`): disabling ends every session of
/// the user and the streams of the API tokens the user made; either way every instance drops
/// what it remembers of the user.
pub fn set_disabled(c: &mut impl Sql, id: i64, disabled: bool) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "UPDATE users SET disabled_at = CASE WHEN $2 THEN now() END, updated_at = now()
          WHERE id = $1 AND (disabled_at IS NOT NULL) <> $2",
        &[&id, &disabled],
    )?;
    Ok(n == 1)
}

/// Deletes the user; false when it was gone. The database decides what goes with it
/// (migration 0012, `users_deleting`, and the cascades) and refuses, `restrict_violation`, while
/// the user alone owns a team organization.
pub fn delete(c: &mut impl Sql, id: i64) -> Result<bool, postgres::Error> {
    Ok(c.execute("DELETE FROM users WHERE id = $1", &[&id])? == 1)
}

/// Users whose address contains `part` (any case), by id, at most `limit`.
pub fn search(c: &mut impl Sql, part: &str, limit: i64) -> Result<Vec<User>, postgres::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM users
          WHERE strpos(email, lower($1)) > 0 ORDER BY id LIMIT $2"
    );
    Ok(c.query(&sql, &[&part, &limit])?
        .iter()
        .map(User::from_row)
        .collect())
}

/// The team organizations (not closed) that only this user owns, as (id, name): while there is
/// one, the user cannot be deleted (the same rule as the `users_deleting` trigger, read first so
/// that the answer can name them). Read only.
pub fn teams_owned_alone(c: &mut impl Sql, id: i64) -> Result<Vec<(i64, String)>, postgres::Error> {
    let rows = c.query(
        "SELECT o.id, o.name FROM memberships m JOIN organizations o ON o.id = m.org_id
          WHERE m.user_id = $1 AND m.role = 'owner' AND o.kind = 'team' AND o.status <> 'closed'
            AND NOT EXISTS (SELECT 1 FROM memberships other
                             WHERE other.org_id = o.id AND other.role = 'owner'
                               AND other.user_id <> $1)
          ORDER BY o.id",
        &[&id],
    )?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Tells every instance to drop what it remembers of the user (`u:`), at commit.
pub fn notify_access_changed(c: &mut impl Sql, id: i64) -> Result<(), postgres::Error> {
    c.execute("SELECT consoled_notify_control('u:' || $1::bigint)", &[&id])?;
    Ok(())
}
