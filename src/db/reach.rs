//! Reaching the database at start: each way it can fail, named at once with PostgreSQL's own
//! message and what to do about it. A refused user or password and a missing database are
//! configuration errors that waiting cannot mend, so they are not retried; a refused or
//! timed-out connection (a database still starting, a network still coming up) is.

use std::error::Error as _;

use postgres::error::SqlState;
use postgres::Config as PgConfig;

use super::tls::Mode;
use super::Target;
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

/// `host:port` (or the socket folder) that `pg` connects to, for messages (never the password);
/// every host of a multi-host string, comma-separated.
fn target(pg: &PgConfig) -> String {
    let ports = pg.get_ports();
    let hosts: Vec<String> = pg
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let host = match host {
                postgres::config::Host::Tcp(h) => h.clone(),
                #[cfg(unix)]
                postgres::config::Host::Unix(p) => p.display().to_string(),
            };
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            format!("{host}:{port}")
        })
        .collect();
    if hosts.is_empty() {
        "localhost:5432".into()
    } else {
        hosts.join(",")
    }
}

/// The explanation of a failed connection to `target`.
pub fn explain(target_: &Target, e: &postgres::Error) -> Unreachable {
    let pg = &target_.pg;
    let user = pg.get_user().unwrap_or("(none)");
    // PostgreSQL's default database is the user's name.
    let name = pg.get_dbname().unwrap_or(user);
    let at = target(pg);
    if let Some(message) = tls_failure(target_.mode, &at, e) {
        return Unreachable {
            message,
            retry: false,
        };
    }
    let Some(db) = e.as_db_error() else {
        // No answer from PostgreSQL itself: refused, unreachable, timed out, no writable host.
        let cause = std::error::Error::source(e).map_or(e.to_string(), |s| format!("{e}: {s}"));
        if cause.contains("database does not allow writes") {
            return Unreachable {
                message: format!(
                    "no database server at {at} accepts writes now (target_session_attrs=\
                     read-write): {cause}. A failover may be under way; otherwise every host \
                     listed is a standby or read-only"
                ),
                retry: true,
            };
        }
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
        SqlState::INVALID_AUTHORIZATION_SPECIFICATION if db.message().contains("no encryption") => {
            (
                format!(
                    "the database server at {at} refused a connection without TLS. {said}. Its \
                 pg_hba.conf admits this user only over TLS (hostssl): set sslmode=verify-full \
                 (with sslrootcert) in DATABASE_URL, not sslmode={}",
                    target_.mode.as_str()
                ),
                false,
            )
        }
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

/// A connection that failed for TLS, explained: the server offers none while it is required,
/// its certificate is signed by no CA in `sslrootcert`, or issued for another name. None of
/// these is mended by waiting.
fn tls_failure(mode: Mode, at: &str, e: &postgres::Error) -> Option<String> {
    let mut chain: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
    let mut next = e.source();
    while let Some(s) = next {
        chain.push(s);
        next = s.source();
    }
    let text: Vec<String> = chain.iter().map(|s| s.to_string()).collect();
    if text
        .iter()
        .any(|t| t.contains("server does not support TLS"))
    {
        return Some(format!(
            "the database server at {at} does not offer TLS, and sslmode={} requires it. Turn \
             TLS on there (ssl = on, ssl_cert_file and ssl_key_file in postgresql.conf), or \
             connect to a server that has it",
            mode.as_str()
        ));
    }
    if let Some(t) = text
        .iter()
        .find(|t| t.contains("needs a host name") || t.contains("no hostname provided"))
    {
        return Some(format!("cannot connect to {at} with TLS: {t}"));
    }
    let rustls = chain.iter().find_map(|s| {
        let io = s.downcast_ref::<std::io::Error>()?;
        io.get_ref()?.downcast_ref::<rustls::Error>()
    })?;
    use rustls::CertificateError as C;
    let why = match rustls {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => format!(
            "its certificate is not signed by a CA in sslrootcert (sslmode={}): give the CA that \
             signed the server's certificate in sslrootcert",
            mode.as_str()
        ),
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => {
            format!(
                "its certificate is not issued for the host name connected to ({rustls}; \
                 sslmode=verify-full checks it): connect by a name the certificate carries, or \
                 give the server a certificate for this name"
            )
        }
        other => format!("the TLS handshake failed: {other}"),
    };
    Some(format!(
        "cannot connect to the database server at {at} over TLS: {why}"
    ))
}

/// A failed statement in words: PostgreSQL's own message and code, not only "db error".
pub fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}
