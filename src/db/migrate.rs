//! Numbered SQL migrations, compiled into the binary and applied in order under an advisory lock,
//! so that several instances may start at once.

use postgres::Client;

/// (version, name, SQL). A test checks that this list matches the files in `migrations/`.
/// Versions increase; a gap is allowed (migrations written in parallel are renumbered at merge).
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "0001_init.sql",
        include_str!("../../migrations/0001_init.sql"),
    ),
    (
        2,
        "0002_takeover_defences.sql",
        include_str!("../../migrations/0002_takeover_defences.sql"),
    ),
    (
        3,
        "0003_device_cookies.sql",
        include_str!("../../migrations/0003_device_cookies.sql"),
    ),
    (
        4,
        "0004_instance_liveness.sql",
        include_str!("../../migrations/0004_instance_liveness.sql"),
    ),
    (
        5,
        "0005_own_sessions.sql",
        include_str!("../../migrations/0005_own_sessions.sql"),
    ),
    (
        6,
        "0006_server_keys.sql",
        include_str!("../../migrations/0006_server_keys.sql"),
    ),
    (
        7,
        "0007_open_streams_together.sql",
        include_str!("../../migrations/0007_open_streams_together.sql"),
    ),
    (
        8,
        "0008_open_streams_counts.sql",
        include_str!("../../migrations/0008_open_streams_counts.sql"),
    ),
    (
        9,
        "0009_attack_defences.sql",
        include_str!("../../migrations/0009_attack_defences.sql"),
    ),
    (
        10,
        "0010_user_made_api_tokens.sql",
        include_str!("../../migrations/0010_user_made_api_tokens.sql"),
    ),
    (
        11,
        "0011_teams.sql",
        include_str!("../../migrations/0011_teams.sql"),
    ),
    (
        12,
        "0012_account_life.sql",
        include_str!("../../migrations/0012_account_life.sql"),
    ),
    (
        13,
        "0013_oidc_identities.sql",
        include_str!("../../migrations/0013_oidc_identities.sql"),
    ),
    (
        15,
        "0015_event_ids.sql",
        include_str!("../../migrations/0015_event_ids.sql"),
    ),
    (
        16,
        "0016_open_streams_lean.sql",
        include_str!("../../migrations/0016_open_streams_lean.sql"),
    ),
];

/// An arbitrary constant naming our lock in `pg_advisory_lock`.
const LOCK_KEY: i64 = 0x636f_6e73_6f6c_6564; // "consoled"

/// Applies pending migrations; returns the versions applied now.
pub fn run(client: &mut Client) -> Result<Vec<i32>, postgres::Error> {
    client.execute("SELECT pg_advisory_lock($1)", &[&LOCK_KEY])?;
    let result = apply_pending(client);
    let unlock = client.execute("SELECT pg_advisory_unlock($1)", &[&LOCK_KEY]);
    let applied = result?;
    unlock?;
    Ok(applied)
}

/// The versions of this binary not yet applied to the database (all of them on an empty one).
/// Reads only: commands other than `serve` and `migrate` refuse to run while this is not empty.
pub fn pending(client: &mut Client) -> Result<Vec<i32>, postgres::Error> {
    let exists: bool = client
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])?
        .get(0);
    let applied: Vec<i32> = if exists {
        client
            .query("SELECT version FROM schema_migrations", &[])?
            .iter()
            .map(|r| r.get(0))
            .collect()
    } else {
        Vec::new()
    };
    Ok(MIGRATIONS
        .iter()
        .map(|m| m.0)
        .filter(|v| !applied.contains(v))
        .collect())
}

fn apply_pending(client: &mut Client) -> Result<Vec<i32>, postgres::Error> {
    client.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version integer PRIMARY KEY,
             name text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now())",
    )?;
    let mut applied = Vec::new();
    for &(version, name, sql) in MIGRATIONS {
        let done = client
            .query_opt(
                "SELECT 1 FROM schema_migrations WHERE version = $1",
                &[&version],
            )?
            .is_some();
        if done {
            continue;
        }
        let mut tx = client.transaction()?;
        tx.batch_execute(sql)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            &[&version, &name],
        )?;
        tx.commit()?;
        log::info!("applied migration {name}");
        applied.push(version);
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_migration_file_is_listed_in_order() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<String> = MIGRATIONS.iter().map(|m| m.1.to_string()).collect();
        assert_eq!(files, listed);
        assert_eq!(MIGRATIONS[0].0, 1);
        for pair in MIGRATIONS.windows(2) {
            assert!(pair[0].0 < pair[1].0, "versions increase");
        }
        for m in MIGRATIONS {
            assert!(m.1.starts_with(&format!("{:04}_", m.0)));
        }
    }
}
