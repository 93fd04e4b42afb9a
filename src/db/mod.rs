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
pub mod target;
pub mod tls;
pub mod tokens;
pub mod totp;
pub mod users;
pub mod visibility;

use std::time::Duration;

use postgres::Client;
use r2d2_postgres::PostgresConnectionManager;

use crate::config::Config;
use crate::error::ApiError;

pub use sql::{Db, Sql, Tx};
pub use target::Target;

pub type Pool = r2d2::Pool<sql::Manager>;
pub type Conn = r2d2::PooledConnection<sql::Manager>;

/// Connection settings with the timeouts the defaults lack: a dead or half-open database must
/// turn into an error within seconds, never a hang.
pub fn pg_config(config: &Config, application_name: &str) -> Target {
    with_timeouts(&config.database, config, application_name)
}

/// Settings of a session connection to PostgreSQL itself (`CONSOLED_DATABASE_DIRECT_URL`, else
/// `DATABASE_URL`): the listener, migrations, the mail sender, the commands.
pub fn direct_pg_config(config: &Config, application_name: &str) -> Target {
    let target = config.database_direct.as_ref().unwrap_or(&config.database);
    with_timeouts(target, config, application_name)
}

fn with_timeouts(target: &Target, config: &Config, application_name: &str) -> Target {
    let mut target = target.clone();
    let t = config.db_timeout;
    target
        .pg
        .application_name(application_name)
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
    target
}

pub fn pool(config: &Config) -> Pool {
    // Without kept statements (a transaction-mode PgBouncer < 1.21), types come from the
    // direct connection.
    let describer = (!config.db_keep_statements)
        .then(|| direct_pg_config(config, "consoled-describe"))
        .map(|target| std::sync::Arc::new(sql::Describer::new(target)));
    let target = pg_config(config, "consoled");
    let manager = sql::Manager(
        PostgresConnectionManager::new(target.pg, target.tls),
        describer,
    );
    // build_unchecked: the pool must come up (and answer 503) while the database is away.
    r2d2::Pool::builder()
        .max_size(config.db_pool_size)
        .min_idle(Some(1))
        .connection_timeout(config.db_timeout)
        .test_on_check_out(true)
        // Failed connection attempts are reported to `health` (one line per outage).
        .error_handler(Box::new(r2d2::NopErrorHandler))
        .build_unchecked(manager)
}

/// A dedicated connection outside the pool (the change listener, migrations, commands).
pub fn connect(config: &Config, application_name: &str) -> Result<Client, String> {
    try_connect(config, application_name).map_err(|e| e.message)
}

/// `connect`, with the failure explained and marked as worth retrying or not. Direct: to
/// `CONSOLED_DATABASE_DIRECT_URL` when set (never through a transaction-mode PgBouncer).
pub fn try_connect(config: &Config, application_name: &str) -> Result<Client, reach::Unreachable> {
    let target = direct_pg_config(config, application_name);
    target
        .pg
        .connect(target.tls.clone())
        .map_err(|e| reach::explain(&target, &e))
}

/// Whether the server of `client` takes no writes now: a standby, or a primary demoted or
/// fenced (`default_transaction_read_only`) during a failover. One round trip.
pub fn read_only(client: &mut Client) -> Result<bool, postgres::Error> {
    let rows = client.simple_query("SHOW transaction_read_only")?;
    Ok(rows.iter().any(|m| match m {
        postgres::SimpleQueryMessage::Row(row) => row.get(0) == Some("on"),
        _ => false,
    }))
}

/// A pooled connection, or 503 `unavailable`.
pub fn conn(pool: &Pool) -> Result<Conn, ApiError> {
    Ok(pool.get()?)
}
