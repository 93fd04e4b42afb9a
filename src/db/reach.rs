//! Reaching the database at start: each way it can fail, named at once with PostgreSQL's own
//! message and what to do about it. A refused user or password and a missing database are
//! configuration errors that waiting cannot mend, so they are not retried; a refused or
//! timed-out connection (a database still starting, a network still coming up) is.

use postgres::error::SqlState;
use postgres::Config as PgConfig;

use crate::failure::Failure;

/// Why a connection failed: the explanation, and whether trying again could help.
#[derive(Debug)]
pub struct Unreachable {
    pub message: String,
    pub retry: bool,
}

impl From<Unreachable> for Failure {
    fn from(u: Unreachable) -> Failure {
        if u.retry {
            Failure::from(u.message)
        } else {
            Failure::config(u.message)
        }
    }
}

/// `host:port` (or the socket folder) that `pg` connects to, for messages (never the password).
fn target(pg: &PgConfig) -> String {
    let host = match pg.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// The explanation of a failed connection to `pg`.
pub fn explain(pg: &PgConfig, e: &postgres::Error) -> Unreachable {
    let user = pg.get_user().unwrap_or("(none)");
    // PostgreSQL's default database is the user's name.
    let name = pg.get_dbname().unwrap_or(user);
    let at = target(pg);
    let Some(db) = e.as_db_error() else {
        // No answer from PostgreSQL itself: refused, unreachable, timed out, TLS.
        let cause = std::error::Error::source(e).map_or(e.to_string(), |s| format!("{e}: {s}"));
        return Unreachable {
            message: format!(
                "cannot reach the database server at {at}: {cause}. Is PostgreSQL running there, and \
                 listening on that address and port (listen_addresses and port in \
                 postgresql.conf)? Is DATABASE_URL's host and port right?"
            ),
            retry: true,
        };
    };
    let said = format!(
        "PostgreSQL says: {} (SQLSTATE {})",
        db.message(),
        db.code().code()
    );
    let (what, retry) = match *db.code() {
        SqlState::INVALID_PASSWORD | SqlState::INVALID_AUTHORIZATION_SPECIFICATION => (
            format!(
                "the database server at {at} refused user {user:?}. {said}. Check the user and \
                 password \
                 in DATABASE_URL, that the role exists and may log in (CREATE ROLE {user} LOGIN \
                 PASSWORD '...'), and pg_hba.conf on the database server"
            ),
            false,
        ),
        SqlState::INVALID_CATALOG_NAME => (
            format!(
                "the database server at {at} has no database {name:?}. {said}. Create it (as a \
                 superuser: CREATE DATABASE \"{name}\" OWNER \"{user}\"; or createdb -O {user} \
                 {name}) or correct the name at the end of DATABASE_URL"
            ),
            false,
        ),
        SqlState::INSUFFICIENT_PRIVILEGE => (
            format!(
                "the database server at {at} refused user {user:?}. {said}. Grant it CONNECT on \
                 database {name:?}"
            ),
            false,
        ),
        SqlState::TOO_MANY_CONNECTIONS => (
            format!(
                "the database server at {at} has no connection left. {said}. Keep instances x \
                 (CONSOLED_DB_POOL + 2) under max_connections (docs/OPERATIONS.md, \"Several \
                 instances\")"
            ),
            true,
        ),
        _ => (
            format!("cannot connect to database {name:?} at {at}. {said}"),
            true,
        ),
    };
    Unreachable {
        message: what,
        retry,
    }
}

/// A failed statement in words: PostgreSQL's own message and code, not only "db error".
pub fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}
