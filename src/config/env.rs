//! Reading environment variables: set and non-empty, parsed, ranges checked, and every refusal
//! naming the variable, the value and the form expected.

use std::collections::HashMap;
use std::time::Duration;

use super::ConfigError;

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
