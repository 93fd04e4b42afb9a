//! Reading environment variables: set and non-empty, parsed, ranges checked, errors named.

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
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| ConfigError(format!("{name}: cannot parse {v:?}"))),
        }
    }

    /// A number, or `None` when unset.
    pub(super) fn optional<T: std::str::FromStr>(
        &self,
        name: &str,
    ) -> Result<Option<T>, ConfigError> {
        self.get(name)
            .map(|v| {
                v.trim()
                    .parse()
                    .map_err(|_| ConfigError(format!("{name}: cannot parse {v:?}")))
            })
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
            return Err(ConfigError(format!(
                "{name} must be between {} and {}",
                range.start(),
                range.end()
            )));
        }
        Ok(Duration::from_secs_f64(secs))
    }

    pub(super) fn bool(&self, name: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(name).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) if ["1", "true", "yes", "on"].contains(&v.as_str()) => Ok(true),
            Some(v) if ["0", "false", "no", "off"].contains(&v.as_str()) => Ok(false),
            Some(v) => Err(ConfigError(format!(
                "{name}: expected true or false, got {v:?}"
            ))),
        }
    }
}
