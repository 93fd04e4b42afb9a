//! Reading environment variables: set and non-empty, parsed, ranges checked, and every refusal
//! naming the variable, the value and the form expected. Also the forms of their own: public
//! URLs, the trusted proxies' addresses and ranges, and DATABASE_URL.

use std::collections::HashMap;
use std::time::Duration;

use super::{redact_url, ConfigError};

pub(super) struct Env(pub(super) HashMap<String, String>);

impl Env {
    /// A set, non-empty variable.
    pub(super) fn get(&self, name: &str) -> Option<String> {
        self.0.get(name).filter(|v| !v.trim().is_empty()).cloned()
    }

    pub(super) fn parse<T: std::str::FromStr>(
        &self,
        name: &str,
        default: T,
    ) -> Result<T, ConfigError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| invalid(name, &v, form::<T>())),
        }
    }

    /// The name to read of a renamed setting (`checks::RENAMED`): the new one, unless only the
    /// old one is set.
    pub(super) fn renamed<'a>(&self, new: &'a str, old: &'a str) -> &'a str {
        if self.get(new).is_none() && self.get(old).is_some() {
            old
        } else {
            new
        }
    }

    /// A number, or `None` when unset.
    pub(super) fn optional<T: std::str::FromStr>(
        &self,
        name: &str,
    ) -> Result<Option<T>, ConfigError> {
        self.get(name)
            .map(|v| v.trim().parse().map_err(|_| invalid(name, &v, form::<T>())))
            .transpose()
    }

    /// Seconds within `range`, checked before the conversion (`Duration::from_secs_f64` panics
    /// on negative or infinite input).
    pub(super) fn seconds(
        &self,
        name: &str,
        default: f64,
        range: std::ops::RangeInclusive<f64>,
    ) -> Result<Duration, ConfigError> {
        let secs: f64 = self.parse(name, default)?;
        if !range.contains(&secs) {
            let value = self.get(name).unwrap_or_default();
            return Err(invalid(
                name,
                &value,
                &format!("seconds from {} to {}", range.start(), range.end()),
            ));
        }
        Ok(Duration::from_secs_f64(secs))
    }

    pub(super) fn bool(&self, name: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(name).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) if ["1", "true", "yes", "on"].contains(&v.as_str()) => Ok(true),
            Some(v) if ["0", "false", "no", "off"].contains(&v.as_str()) => Ok(false),
            Some(v) => Err(invalid(
                name,
                &v,
                "true or false (also 1/0, yes/no, on/off)",
            )),
        }
    }
}

/// The one shape of every refused value: the variable, the value, and the form expected.
pub(super) fn invalid(name: &str, value: &str, expected: &str) -> ConfigError {
    ConfigError(format!(
        "{name}={value:?} is not valid: expected {expected}"
    ))
}

/// The form of a value of type `T`, in words.
fn form<T>() -> &'static str {
    match std::any::type_name::<T>() {
        "usize" | "u32" | "u64" | "i64" => "a whole number such as 16",
        "f64" => "a number such as 0.25",
        "core::net::socket_addr::SocketAddr" | "std::net::SocketAddr" => {
            "an address and port such as 127.0.0.1:8080 or [::1]:8080"
        }
        _ => "a value of the form README, \"Configuration\", gives",
    }
}

pub(super) fn url_var(env: &Env, name: &str, default: &str) -> Result<String, ConfigError> {
    let value = env.get(name).unwrap_or_else(|| default.to_string());
    if !(value.starts_with("http://") || value.starts_with("https://")) {
        return Err(invalid(
            name,
            &value,
            "an http:// or https:// URL such as https://console.example.com",
        ));
    }
    Ok(value.trim_end_matches('/').to_string())
}

/// Comma-separated addresses and ranges: `127.0.0.1, 10.0.0.0/8, 2001:db8::/32`.
pub(super) fn parse_nets(list: &str) -> Result<Vec<crate::http::net::Net>, ConfigError> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse().map_err(|e: crate::http::net::BadNet| {
                invalid(
                    "CONSOLED_TRUSTED_PROXIES",
                    list,
                    &format!(
                        "comma-separated IP addresses or CIDR ranges such as \
                         127.0.0.1,10.0.0.0/8,fd00::/8 ({s:?}: {})",
                        e.0
                    ),
                )
            })
        })
        .collect()
}

/// A connection string (`DATABASE_URL`, `CONSOLED_DATABASE_DIRECT_URL`) read into its target,
/// before any attempt to connect (a typo would otherwise be retried as if the database were
/// away; a TLS file missing would be found only at the first connection). The value is shown
/// with its password hidden, or not at all when it may hold one unmarked.
pub(super) fn database_target(
    name: &str,
    url: &str,
    password: Option<&str>,
) -> Result<crate::db::Target, ConfigError> {
    let refused = match crate::db::Target::parse(url, password) {
        Ok(target) => return Ok(target),
        Err(refused) => refused,
    };
    let shown = if url.contains("://") {
        format!("{name}={:?}", redact_url(url))
    } else if url.to_ascii_lowercase().contains("password") {
        format!("{name} (value not shown: it may hold a password)")
    } else {
        format!("{name}={url:?}")
    };
    Err(ConfigError(match refused {
        crate::db::target::Refused::Form(e) => format!(
            "{shown} is not valid: expected a PostgreSQL URL such as \
             postgres://user:password@127.0.0.1:5432/consoled ({e})"
        ),
        crate::db::target::Refused::Tls(e) => format!("{shown}: {e}"),
    }))
}
