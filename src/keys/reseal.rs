//! What the keys need from the database: at start, sealing the TOTP secrets still stored as they
//! are and choosing the CSRF key; for `consoled keys rotate`, sealing every secret under the
//! current data key.

use postgres::Client;

use super::{is_sealed, DataKeys};
use crate::config::Config;

/// Rows read per query; each row is re-sealed with its own conditional UPDATE.
const BATCH: i64 = 500;

/// Which stored secrets are stale, for a pass to re-seal.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    /// Those stored before sealing (at start, with a key configured).
    Unsealed,
    /// Every one not sealed under the current key (`consoled keys rotate`).
    NotCurrent,
}

#[derive(Debug, Default)]
pub struct Report {
    pub resealed: u64,
    /// Already in the wanted form.
    pub kept: u64,
    /// (user id, why) of each secret that could not be opened.
    pub unreadable: Vec<(i64, String)>,
}

/// Seals the `stale` secrets under the current key. Each UPDATE is conditional on the value
/// read, so a concurrent setup, enable or disable wins and its value is left as it wrote it (a
/// value written by this release is sealed under the current key already).
pub fn run(c: &mut Client, keys: &DataKeys, stale: Stale) -> Result<Report, postgres::Error> {
    let mut report = Report::default();
    if keys.current_id().is_none() {
        return Ok(report);
    }
    let mut after = 0i64;
    loop {
        let rows = c.query(
            "SELECT id, totp_secret, totp_pending FROM users
              WHERE id > $1 AND (totp_secret IS NOT NULL OR totp_pending IS NOT NULL)
              ORDER BY id LIMIT $2",
            &[&after, &BATCH],
        )?;
        let Some(last) = rows.last() else {
            return Ok(report);
        };
        after = last.get(0);
        for row in &rows {
            let id: i64 = row.get(0);
            for (i, column) in [(1, "totp_secret"), (2, "totp_pending")] {
                let Some(stored) = row.get::<_, Option<Vec<u8>>>(i) else {
                    continue;
                };
                let wanted = match stale {
                    Stale::Unsealed => !is_sealed(&stored),
                    Stale::NotCurrent => !keys.is_current(&stored),
                };
                if !wanted {
                    report.kept += 1;
                    continue;
                }
                match keys.open_totp(id, &stored) {
                    Ok(secret) => {
                        let sealed = keys.seal_totp(id, &secret);
                        report.resealed += c.execute(
                            &format!(
                                "UPDATE users SET {column} = $3 WHERE id = $1 AND {column} = $2"
                            ),
                            &[&id, &stored, &sealed],
                        )?;
                    }
                    Err(e) => report.unreadable.push((id, e.to_string())),
                }
            }
        }
    }
}

/// The keys of a starting instance: warns without a data key, seals the secrets stored before
/// sealing, and settles the CSRF key. Returns the data keys and the CSRF key.
pub fn prepare(config: &Config) -> Result<(DataKeys, [u8; 32]), String> {
    let keys = DataKeys::from_settings(&config.keys);
    let mut c = crate::db::connect(config, "consoled-keys")?;
    let db = |e: postgres::Error| format!("preparing the data keys: {e}");
    match keys.current_id() {
        None => {
            log::warn!(
                "CONSOLED_DATA_KEY is not set: TOTP secrets are stored readable, and a copy of \
                 the database lets its holder compute every user's codes (docs/OPERATIONS.md, \"Sealed TOTP \
                 secrets\")"
            );
            let sealed: i64 = c
                .query_one(
                    "SELECT count(*) FROM users WHERE length(totp_secret) > 20
                        AND substring(totp_secret FROM 1 FOR 1) = '\\x01'::bytea",
                    &[],
                )
                .map_err(db)?
                .get(0);
            if sealed > 0 {
                log::error!(
                    "{sealed} TOTP secret(s) are sealed but CONSOLED_DATA_KEY is not set: those \
                     users can sign in only with a recovery code until the key is restored"
                );
            }
        }
        Some(id) => {
            let report = run(&mut c, &keys, Stale::Unsealed).map_err(db)?;
            log::info!(
                "data key {id}: sealed {} TOTP secret(s) stored before sealing",
                report.resealed
            );
            for (user_id, why) in report.unreadable.iter().take(10) {
                log::error!("the TOTP secret of user_id={user_id} {why}");
            }
        }
    }
    let csrf = match (&config.keys.csrf, keys.derived_csrf_key()) {
        (Some(key), _) => key.0,
        (None, Some(derived)) => derived,
        (None, None) => shared_csrf_key(&mut c).map_err(db)?,
    };
    Ok((keys, csrf))
}

/// The CSRF key kept in the database when none is configured: the first instance to start
/// stores a random one and every instance uses it, so a token from one instance passes another.
fn shared_csrf_key(c: &mut Client) -> Result<[u8; 32], postgres::Error> {
    let fresh = crate::crypto::random_bytes::<32>().to_vec();
    c.execute(
        "INSERT INTO server_keys (name, key) VALUES ('csrf', $1) ON CONFLICT (name) DO NOTHING",
        &[&fresh],
    )?;
    let key: Vec<u8> = c
        .query_one("SELECT key FROM server_keys WHERE name = 'csrf'", &[])?
        .get(0);
    Ok(key.try_into().unwrap_or_else(|_| {
        log::error!("server_keys.csrf is not 32 bytes; using a random key for this process");
        crate::crypto::random_bytes::<32>()
    }))
}
