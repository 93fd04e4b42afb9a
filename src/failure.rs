//! Why the process cannot start, or a command cannot run, and the exit status that says which
//! kind of failure it is: a configuration error (`EXIT_CONFIG`, which no restart can mend, so
//! `contrib/consoled.service` does not restart on it) or anything else (1).

use std::fmt;

/// Exit status of a configuration error: a setting refused, `DATABASE_URL` not a PostgreSQL
/// URL, the database refusing the user or password, or no such database. 78 is `EX_CONFIG` of
/// sysexits.h.
pub const EXIT_CONFIG: i32 = 78;

/// A failure with its exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    pub exit_code: i32,
}

impl Failure {
    /// A configuration error: fix the settings, then start again.
    pub fn config(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            exit_code: EXIT_CONFIG,
        }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure {
            message,
            exit_code: 1,
        }
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::from(message.to_string())
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}
