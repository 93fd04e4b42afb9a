//! Whether the database answers, as everything that talks to it reports: one `warn` line when an
//! outage starts (with the first cause), one `info` line when it ends (with how long it lasted
//! and how many attempts failed meanwhile), and nothing between. Without this, the pool, the
//! change listener, the mail sender and the maintenance thread each logged every failed attempt
//! (about 3.5 lines a second, none saying which database or why).
//!
//! The state is process-wide: there is one database, and every reporter sees the same outage.

use std::sync::Mutex;
use std::time::Instant;

use crate::locks::Unpoisoned;
use log::kv::Value;
use log::Level;

/// The log target of the outage lines.
pub const TARGET: &str = "consoled::db";

struct Down {
    since: Instant,
    failures: u64,
    /// The latest cause (the first is in the outage's first line).
    last_cause: String,
}

static STATE: Mutex<Option<Down>> = Mutex::new(None);

/// A failed attempt by `who` (`pool`, `listener`, `mail sender`, ...); starts an outage when there
/// is none.
pub fn failed(who: &str, cause: &str) {
    let mut state = STATE.lock().unpoisoned();
    match state.as_mut() {
        Some(down) => {
            down.failures += 1;
            down.last_cause = cause.to_string();
            log::debug!("database still unreachable ({who}): {cause}");
        }
        None => {
            *state = Some(Down {
                since: Instant::now(),
                failures: 1,
                last_cause: cause.to_string(),
            });
            drop(state);
            crate::logging::emit(
                Level::Warn,
                TARGET,
                &format!("database unreachable: {cause}"),
                &[
                    ("event", Value::from("database_down")),
                    ("cause", Value::from(cause)),
                    ("reporter", Value::from(who)),
                ],
            );
        }
    }
}

/// A successful connection or statement: ends the outage, if there is one.
pub fn ok() {
    let mut state = STATE.lock().unpoisoned();
    let Some(down) = state.take() else {
        return;
    };
    drop(state);
    let secs = (down.since.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    crate::logging::emit(
        Level::Info,
        TARGET,
        &format!(
            "database reachable again after {secs} s ({} failed attempts, the last: {})",
            down.failures, down.last_cause
        ),
        &[
            ("event", Value::from("database_up")),
            ("down_seconds", Value::from(secs)),
            ("failed_attempts", Value::from(down.failures)),
            ("last_cause", Value::from(down.last_cause.as_str())),
        ],
    );
}

/// Whether an outage is going on.
pub fn is_down() -> bool {
    STATE.lock().unpoisoned().is_some()
}

/// A PostgreSQL error with its cause: the client's `Display` says only `db error` or `error
/// connecting to server`; the server's message or the socket error is in the source.
pub fn cause(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {} ({})", db.severity(), db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A database error some task met: `warn`, unless an outage is already reported (then `debug`:
/// the outage's two lines say it all).
pub fn warn(message: &str) {
    if is_down() {
        log::debug!("{message}");
    } else {
        log::warn!("{message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_starts_once_counts_its_attempts_and_ends_once() {
        ok();
        assert!(!is_down());
        failed("pool", "connection refused");
        failed("change listener", "connection refused");
        failed("pool", "the last cause");
        assert!(is_down());
        {
            let state = STATE.lock().unwrap();
            let down = state.as_ref().unwrap();
            assert_eq!(down.failures, 3);
            assert_eq!(down.last_cause, "the last cause");
        }
        ok();
        assert!(!is_down());
        ok();
        assert!(!is_down());
    }
}
