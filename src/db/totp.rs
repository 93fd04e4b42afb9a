//! The second-factor columns of table `users`: `totp_pending` (offered by setup), `totp_secret`
//! (enabled) and `totp_last_step` (the replay defence). Kept apart from `users.rs` because only
//! the second-factor flows touch them.

use super::Sql;

/// A user's TOTP secrets: the enabled one and the one offered by setup, if any.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    pub enabled: Option<Vec<u8>>,
    pub pending: Option<Vec<u8>>,
}

pub fn secrets(c: &mut impl Sql, user_id: i64) -> Result<Secrets, postgres::Error> {
    let row = c.query_opt(
        "SELECT totp_secret, totp_pending FROM users WHERE id = $1",
        &[&user_id],
    )?;
    Ok(row.map_or_else(Secrets::default, |r| Secrets {
        enabled: r.get(0),
        pending: r.get(1),
    }))
}

/// Stores a secret offered by setup; false when the second factor is already enabled.
pub fn offer(c: &mut impl Sql, user_id: i64, secret: &[u8]) -> Result<bool, postgres::Error> {
    let n = c.execute(
        "UPDATE users SET totp_pending = $2 WHERE id = $1 AND totp_secret IS NULL",
        &[&user_id, &secret],
    )?;
    Ok(n == 1)
}

/// Records `step` as accepted if it is later than every step accepted before. The conditional
/// UPDATE is the replay defence: of two transactions claiming one step, the second re-checks the
/// condition after the first commits and claims nothing.
pub fn claim_step(c: &mut impl Sql, user_id: i64, step: u64) -> Result<bool, postgres::Error> {
    let step = step as i64;
    let n = c.execute(
        "UPDATE users SET totp_last_step = $2
          WHERE id = $1 AND (totp_last_step IS NULL OR totp_last_step < $2)",
        &[&user_id, &step],
    )?;
    Ok(n == 1)
}

/// Turns the offered secret into the enabled one, recording the step that confirmed it, and
/// whether the address was unproven then (`totp_unproven`: a factor a stranger may have set up,
/// removed when the address's owner proves it, `remove_unproven`). False when the offer changed
/// meanwhile or the factor is already enabled (a concurrent request won).
pub fn enable(
    c: &mut impl Sql,
    user_id: i64,
    offered: &[u8],
    step: u64,
) -> Result<bool, postgres::Error> {
    let step = step as i64;
    let n = c.execute(
        "UPDATE users SET totp_secret = totp_pending, totp_pending = NULL, totp_last_step = $3,
                          totp_unproven = NOT email_verified, updated_at = now()
          WHERE id = $1 AND totp_secret IS NULL AND totp_pending = $2",
        &[&user_id, &offered, &step],
    )?;
    Ok(n == 1)
}

/// Removes the second factor entirely.
pub fn disable(c: &mut impl Sql, user_id: i64) -> Result<(), postgres::Error> {
    c.execute(
        "UPDATE users SET totp_secret = NULL, totp_pending = NULL, totp_last_step = NULL,
                          totp_unproven = false, updated_at = now()
          WHERE id = $1",
        &[&user_id],
    )?;
    Ok(())
}

/// Removes the second factor if it was enabled while the address was unproven, and any secret
/// offered but not yet confirmed; true when an enabled factor was removed.
pub fn remove_unproven(c: &mut impl Sql, user_id: i64) -> Result<bool, postgres::Error> {
    let removed = c.execute(
        "UPDATE users SET totp_secret = NULL, totp_pending = NULL, totp_last_step = NULL,
                          totp_unproven = false, updated_at = now()
          WHERE id = $1 AND totp_unproven",
        &[&user_id],
    )?;
    c.execute(
        "UPDATE users SET totp_pending = NULL WHERE id = $1 AND totp_pending IS NOT NULL",
        &[&user_id],
    )?;
    Ok(removed == 1)
}
