//! Table `recovery_codes`: single-use second-factor codes, stored only as SHA-256 hashes.

use super::Sql;

/// Replaces every recovery code of a user (used or not) with new ones.
pub fn replace(c: &mut impl Sql, user_id: i64, hashes: &[Vec<u8>]) -> Result<(), postgres::Error> {
    delete_for_user(c, user_id)?;
    c.execute(
        "INSERT INTO recovery_codes (user_id, code_hash) SELECT $1, unnest($2::bytea[])",
        &[&user_id, &hashes],
    )?;
    Ok(())
}

/// Marks an unused code as used; false when there is no such unused code. Atomic: of two
/// concurrent uses of one code, the second finds it used.
pub fn consume(c: &mut impl Sql, user_id: i64, hash: &[u8]) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "UPDATE recovery_codes SET used_at = now()
          WHERE user_id = $1 AND code_hash = $2 AND used_at IS NULL",
        &[&user_id, &hash],
    )?;
    Ok(n == 1)
}

pub fn delete_for_user(c: &mut impl Sql, user_id: i64) -> Result<u64, postgres::Error> {
    c.execute("DELETE FROM recovery_codes WHERE user_id = $1", &[&user_id])
}
