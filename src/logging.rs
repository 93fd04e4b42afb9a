//! The process's logger: `env_logger` configured by `RUST_LOG` (default `info`), behind a gate
//! that no `RUST_LOG` can open.
//!
//! Other crates log what passes through them at `debug` and `trace`: the PostgreSQL client
//! prints every statement's parameters (password hashes, TOTP secrets, PKCE verifiers, nonces,
//! token hashes), the HTTP and SMTP clients what they send and receive. Filtering their targets
//! by name would not be enough: a more specific `RUST_LOG` directive (`tokio_postgres::query=trace`)
//! overrides a less specific cap. So the gate is an allow-list checked on every record: below
//! `info`, only this crate's own records pass (they never carry a secret); other crates keep
//! their `info`, `warn` and `error` records, which are about failures, not data.

use log::{Level, Log, Metadata, Record};

/// Installs the logger; call once, first thing in `main`.
pub fn init() {
    let inner =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).build();
    let max = inner.filter();
    if log::set_boxed_logger(Box::new(Gate { inner })).is_ok() {
        log::set_max_level(max);
    }
}

struct Gate {
    inner: env_logger::Logger,
}

impl Log for Gate {
    fn enabled(&self, metadata: &Metadata) -> bool {
        allowed(metadata.target(), metadata.level()) && self.inner.enabled(metadata)
    }

    fn log(&self, record: &Record) {
        if allowed(record.target(), record.level()) {
            self.inner.log(record);
        }
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

/// Whether a record of `target` at `level` may be written at all.
pub fn allowed(target: &str, level: Level) -> bool {
    level <= Level::Info || target == "consoled" || target.starts_with("consoled::")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_crates_stop_at_info_ours_go_to_trace() {
        for target in [
            "tokio_postgres::query",
            "postgres",
            "ureq::unit",
            "lettre",
            "consoledx",
        ] {
            assert!(!allowed(target, Level::Debug), "{target}");
            assert!(!allowed(target, Level::Trace), "{target}");
            assert!(allowed(target, Level::Info), "{target}");
            assert!(allowed(target, Level::Error), "{target}");
        }
        for target in ["consoled", "consoled::server", "consoled::auth::oauth"] {
            assert!(allowed(target, Level::Trace), "{target}");
        }
    }
}
