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
}

const COLUMNS: &str = "id, email, name, locale, email_verified, totp_secret IS NOT NULL, \
     password_hash, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')";

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
