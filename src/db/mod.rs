//! The database: connection settings, the r2d2 pool, migrations, and one module per table.

pub mod callers;
pub mod devices;
pub mod health;
pub mod identities;
pub mod invitations;
pub mod leases;
pub mod mail_tokens;
pub mod members;
pub mod migrate;
pub mod oauth_states;
pub mod orgs;
pub mod outbox;
pub mod rate;
pub mod reach;
pub mod recovery_codes;
pub mod sessions;
pub mod sql;
pub mod tokens;
pub mod totp;
pub mod users;
pub mod visibility;

use std::time::Duration;

use postgres::{Client, Config as PgConfig, NoTls};
use r2d2_postgres::PostgresConnectionManager;

use crate::config::Config;
use crate::error::ApiError;

pub use sql::{Db, Sql, Tx};

pub type Pool = r2d2::Pool<sql::Manager>;
pub type Conn = r2d2::PooledConnection<sql::Manager>;

/// Connection settings with the timeouts the defaults lack: a dead or half-open database must
/// turn into an error within seconds, never a hang.
pub fn pg_config(config: &Config, application_name: &str) -> Result<PgConfig, String> {
    with_timeouts(
        &config.database_url,
        "DATABASE_URL",
        config,
        application_name,
    )
}

/// Settings of a session connection to PostgreSQL itself (`CONSOLED_DATABASE_DIRECT_URL`, else
/// `DATABASE_URL`): the listener, migrations, the mail sender, the commands.
pub fn direct_pg_config(config: &Config, application_name: &str) -> Result<PgConfig, String> {
    match &config.database_direct_url {
        Some(url) => with_timeouts(
            url,
            "CONSOLED_DATABASE_DIRECT_URL",
            config,
            application_name,
        ),
        None => pg_config(config, application_name),
    }
}

fn with_timeouts(
    url: &str,
    name: &str,
    config: &Config,
    application_name: &str,
) -> Result<PgConfig, String> {
    let mut pg: PgConfig = url
        .parse()
        .map_err(|e| format!("{name} is not a valid PostgreSQL URL: {e}"))?;
    let t = config.db_timeout;
    pg.application_name(application_name)
        .connect_timeout(t)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(10))
        .keepalives_interval(Duration::from_secs(2))
        .keepalives_retries(3)
        .tcp_user_timeout(t + Duration::from_secs(2))
        // A statement that takes longer than this is a stalled database, not a slow query.
        // Notices (`relation ... already exists, skipping`) are noise for every caller here.
        .options(&format!(
            "-c statement_timeout={} -c client_min_messages=warning",
            (t * 2).as_millis()
        ));
    Ok(pg)
}

pub fn pool(config: &Config) -> Result<Pool, String> {
    // Without kept statements (a transaction-mode PgBouncer < 1.21), types come from the
    // direct connection.
    let describer = (!config.db_keep_statements)
        .then(|| direct_pg_config(config, "consoled-describe"))
        .transpose()?
        .map(|pg| std::sync::Arc::new(sql::Describer::new(pg)));
    let manager = sql::Manager(
        PostgresConnectionManager::new(pg_config(config, "consoled")?, NoTls),
        describer,
    );
    // build_unchecked: the pool must come up (and answer 503) while the database is away.
    Ok(r2d2::Pool::builder()
        .max_size(config.db_pool_size)
        .min_idle(Some(1))
        .connection_timeout(config.db_timeout)
        .test_on_check_out(true)
        // Failed connection attempts are reported to `health` (one line per outage).
        .error_handler(Box::new(r2d2::NopErrorHandler))
        .build_unchecked(manager))
}

/// A dedicated connection outside the pool (the change listener, migrations, commands).
pub fn connect(config: &Config, application_name: &str) -> Result<Client, String> {
    try_connect(config, application_name).map_err(|e| e.message)
}

/// `connect`, with the failure explained and marked as worth retrying or not. Direct: to
/// `CONSOLED_DATABASE_DIRECT_URL` when set (never through a transaction-mode PgBouncer).
pub fn try_connect(config: &Config, application_name: &str) -> Result<Client, reach::Unreachable> {
    let pg = direct_pg_config(config, application_name).map_err(|message| reach::Unreachable {
        message,
        retry: false,
    })?;
    pg.connect(NoTls).map_err(|e| reach::explain(&pg, &e))
}

/// A pooled connection, or 503 `unavailable`.
pub fn conn(pool: &Pool) -> Result<Conn, ApiError> {
    Ok(pool.get()?)
}
