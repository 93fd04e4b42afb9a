//! The key settings: `CONSOLED_DATA_KEY` (seals TOTP secrets; the CSRF key is derived from it),
//! `CONSOLED_DATA_KEY_OLD` (keys that may still open secrets sealed before a rotation) and
//! `CONSOLED_CSRF_KEY` (signs CSRF tokens; when unset, derived from the data key, else kept in
//! the database). Each is 32 random bytes in base64; anything else stops the process, naming
//! the variable but never echoing its value.

use std::fmt;

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;

use super::env::Env;
use super::ConfigError;

/// A 32-byte secret from the environment. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key32(pub [u8; 32]);

impl fmt::Debug for Key32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Clone, Debug, Default)]
pub struct KeySettings {
    /// The current data key: new TOTP secrets are sealed with it.
    pub data: Option<Key32>,
    /// Earlier data keys, for opening only (`consoled keys rotate` re-seals under `data`).
    pub data_old: Vec<Key32>,
    pub csrf: Option<Key32>,
}

/// How to make a key, for the error messages.
pub const KEY_HELP: &str =
    "32 random bytes in base64 (`consoled keys generate` or `openssl rand -base64 32`)";

pub(super) fn read(env: &Env) -> Result<KeySettings, ConfigError> {
    let one = |name: &str| env.secret(name)?.map(|v| parse(name, &v)).transpose();
    let data_old = env
        .secret("CONSOLED_DATA_KEY_OLD")?
        .unwrap_or_default()
        .split([',', ' '])
        .filter(|s| !s.trim().is_empty())
        .map(|s| parse("CONSOLED_DATA_KEY_OLD", s))
        .collect::<Result<Vec<_>, _>>()?;
    let settings = KeySettings {
        data: one("CONSOLED_DATA_KEY")?,
        data_old,
        csrf: one("CONSOLED_CSRF_KEY")?,
    };
    if !settings.data_old.is_empty() && settings.data.is_none() {
        return Err(ConfigError(
            "CONSOLED_DATA_KEY_OLD is set but CONSOLED_DATA_KEY is not: the old keys only open \
             secrets, new ones are sealed with CONSOLED_DATA_KEY"
                .into(),
        ));
    }
    Ok(settings)
}

/// Standard or URL-safe base64, padded or not, decoding to exactly 32 bytes.
pub fn parse(name: &str, value: &str) -> Result<Key32, ConfigError> {
    let lenient =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let value = value.trim();
    let bytes = GeneralPurpose::new(&base64::alphabet::STANDARD, lenient)
        .decode(value)
        .or_else(|_| GeneralPurpose::new(&base64::alphabet::URL_SAFE, lenient).decode(value))
        .map_err(|_| ConfigError(format!("{name} is not base64; it must be {KEY_HELP}")))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map(Key32)
        .map_err(|_| {
            ConfigError(format!(
                "{name} decodes to {} bytes; it must be {KEY_HELP}",
                bytes.len()
            ))
        })
}
