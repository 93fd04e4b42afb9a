//! Table `oauth_states`: sign-in attempts between `/auth/oauth/{p}/start` and its callback.
//! The `state` parameter and the browser-binding cookie are stored only as SHA-256 hashes; a row
//! is deleted when its callback arrives (single use) or once it has expired.

use std::time::Duration;

use super::Sql;

use crate::crypto::token_hash;

/// What `start` remembers for the callback. `state` and `binding` are the plain tokens.
pub struct NewState<'a> {
    pub state: &'a str,
    pub binding: &'a str,
    pub provider: &'a str,
    pub pkce_verifier: &'a str,
    pub nonce: Option<&'a str>,
    pub lifetime: Duration,
}

/// A stored attempt, as the callback finds it.
#[derive(Debug)]
pub struct StoredState {
    pub binding_hash: Vec<u8>,
    pub provider: String,
    pub pkce_verifier: String,
    pub nonce: Option<String>,
    pub expired: bool,
}

pub fn insert(c: &mut impl Sql, s: &NewState) -> Result<(), postgres::Error> {
    c.execute(
        "INSERT INTO oauth_states (state_hash, binding_hash, provider, pkce_verifier, nonce, expires_at)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))",
        &[
            &token_hash(s.state),
            &token_hash(s.binding),
            &s.provider,
            &s.pkce_verifier,
            &s.nonce,
            &s.lifetime.as_secs_f64(),
        ],
    )?;
    Ok(())
}

/// Deletes and returns the attempt of a `state` value: whatever the callback decides next, the
/// state cannot be used again. Of two concurrent callbacks with one state, only one gets the row.
pub fn take(c: &mut impl Sql, state: &str) -> Result<Option<StoredState>, postgres::Error> {
    let row = c.query_opt(
        "DELETE FROM oauth_states WHERE state_hash = $1
         RETURNING binding_hash, provider, pkce_verifier, nonce, expires_at <= now()",
        &[&token_hash(state)],
    )?;
    Ok(row.map(|r| StoredState {
        binding_hash: r.get(0),
        provider: r.get(1),
        pkce_verifier: r.get(2),
        nonce: r.get(3),
        expired: r.get(4),
    }))
}

/// Removes abandoned attempts (a browser that never came back).
pub fn purge_expired(c: &mut impl Sql) -> Result<u64, postgres::Error> {
    c.execute("DELETE FROM oauth_states WHERE expires_at <= now()", &[])
}
