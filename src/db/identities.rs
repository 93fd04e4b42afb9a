//! Table `external_identities`: links from an identity provider's account (provider, subject)
//! to one of our users.

use super::Sql;

/// The user linked to (provider, subject), if any.
pub fn find_user(
    c: &mut impl Sql,
    provider: &str,
    subject: &str,
) -> Result<Option<i64>, postgres::Error> {
    let row = c.query_opt(
        "SELECT user_id FROM external_identities WHERE provider = $1 AND subject = $2",
        &[&provider, &subject],
    )?;
    Ok(row.map(|r| r.get(0)))
}

/// Links (provider, subject) to a user; `false` when the identity is linked already (a
/// concurrent first sign-in won).
pub fn link(
    c: &mut impl Sql,
    provider: &str,
    subject: &str,
    user_id: i64,
    email: Option<&str>,
) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "INSERT INTO external_identities (provider, subject, user_id, email) VALUES ($1, $2, $3, $4)
         ON CONFLICT (provider, subject) DO NOTHING",
        &[&provider, &subject, &user_id, &email],
    )?;
    Ok(n == 1)
}

/// Records the address the provider reported at the latest sign-in.
pub fn update_email(
    c: &mut impl Sql,
    provider: &str,
    subject: &str,
    email: Option<&str>,
) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE external_identities SET email = $3
          WHERE provider = $1 AND subject = $2 AND email IS DISTINCT FROM $3",
        &[&provider, &subject, &email],
    )?;
    Ok(())
}

/// Removes every link of a user except `keep` (provider, subject); returns how many went.
pub fn delete_for_user(
    c: &mut impl Sql,
    user_id: i64,
    keep: Option<(&str, &str)>,
) -> Result<u64, postgres::Error> {
    let (provider, subject) = keep.unzip();
    c.execute(
        "DELETE FROM external_identities
          WHERE user_id = $1 AND (provider, subject) IS DISTINCT FROM ($2, $3)",
        &[&user_id, &provider, &subject],
    )
}
