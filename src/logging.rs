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
//!
//! Lines are readable text, or one JSON object each with `CONSOLED_LOG_FORMAT=json` (`format`).
//! What an operator reads: one access line per answered request (`access`), the security events
//! (`security`), and summaries instead of a line per refusal or per failed database attempt
//! (`flood`, `crate::db::health`).

pub mod access;
pub mod flood;
mod format;
pub mod security;

use std::io::Write;

use log::kv::Value;
use log::{Level, Log, Metadata, Record};

pub use format::Format;

/// Installs the logger; call once, first thing in `main`. Fails on an unknown
/// `CONSOLED_LOG_FORMAT`.
pub fn init() -> Result<(), String> {
    let format = Format::parse(std::env::var("CONSOLED_LOG_FORMAT").ok().as_deref())?;
    let inner = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format(move |buf, record| {
            let ts = match format {
                Format::Text => buf.timestamp_seconds().to_string(),
                Format::Json => buf.timestamp_millis().to_string(),
            };
            writeln!(buf, "{}", format.line(&ts, record))
        })
        .build();
    let max = inner.filter();
    if log::set_boxed_logger(Box::new(Gate { inner })).is_ok() {
        log::set_max_level(max);
    }
    Ok(())
}

/// Logs `msg` with structured `fields` (a list built at run time, which the `log!` macros cannot
/// take).
pub fn emit(level: Level, target: &str, msg: &str, fields: &[(&str, Value)]) {
    let metadata = Metadata::builder().level(level).target(target).build();
    if level > log::max_level() || !log::logger().enabled(&metadata) {
        return;
    }
    log::logger().log(
        &Record::builder()
            .metadata(metadata)
            .args(format_args!("{msg}"))
            .key_values(&fields)
            .build(),
    );
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
