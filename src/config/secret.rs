//! Secret settings from three places: the variable itself (`NAME`), a file it names
//! (`NAME_FILE`, as the Docker and Kubernetes convention has it), or a systemd credential
//! (`$CREDENTIALS_DIRECTORY/NAME`, what `LoadCredential=NAME:/path` gives, or
//! `$CREDENTIALS_DIRECTORY/consoled_NAME`, what the packaged unit's
//! `LoadCredential=consoled:/etc/consoled/credentials` gives for a file `NAME` in that folder).
//! One function, `Env::secret`, reads any setting this way; more than one place set is an error
//! naming the setting, so that an operator never wonders which of two values is in force.
//!
//! Errors name the setting and the file, never the value: a value that cannot be read or parsed
//! may still be most of a secret.

use std::path::{Path, PathBuf};

use super::env::Env;
use super::ConfigError;

/// The secret settings: each may also come from `NAME_FILE` or a credential named `NAME`.
/// Besides these, any setting whose name ends in `_CLIENT_SECRET` or `_PASSWORD` is one (identity
/// providers added later get the same three ways without touching this list).
pub const SECRETS: &[&str] = &[
    "DATABASE_URL",
    "CONSOLED_DATABASE_DIRECT_URL",
    "CONSOLED_DATABASE_PASSWORD",
    "CONSOLED_SMTP_URL",
    "CONSOLED_GITHUB_CLIENT_SECRET",
    "CONSOLED_GOOGLE_CLIENT_SECRET",
    "CONSOLED_DATA_KEY",
    "CONSOLED_DATA_KEY_OLD",
    "CONSOLED_CSRF_KEY",
];

/// The variable systemd sets to the folder of the unit's credentials.
pub const CREDENTIALS_DIRECTORY: &str = "CREDENTIALS_DIRECTORY";

/// systemd names the credentials loaded from a folder `ID_FILE`; the packaged unit's ID.
pub const CREDENTIAL_PREFIX: &str = "consoled_";

/// Whether `name` is a secret setting (and so `NAME_FILE` a known variable).
pub fn is_secret(name: &str) -> bool {
    SECRETS.contains(&name) || name.ends_with("_CLIENT_SECRET") || name.ends_with("_PASSWORD")
}

/// Where a secret was found, for the error that names two places.
fn place(name: &str, source: &Source) -> String {
    match source {
        Source::Variable => name.to_string(),
        Source::File(path) => format!("{name}_FILE ({})", path.display()),
        Source::Credential(path) => format!("the systemd credential {name} ({})", path.display()),
    }
}

enum Source {
    Variable,
    File(PathBuf),
    Credential(PathBuf),
}

impl Env {
    /// A secret setting: `name`, else the file `name_FILE` names, else the credential `name`;
    /// `None` when none is set. Two of them set is an error, as is a file that cannot be read or
    /// is empty. A file's trailing line break is not part of the value.
    pub(super) fn secret(&self, name: &str) -> Result<Option<String>, ConfigError> {
        debug_assert!(is_secret(name), "{name} is not in config::secret::SECRETS");
        let mut found = Vec::new();
        if self.get(name).is_some() {
            found.push(Source::Variable);
        }
        if let Some(path) = self.get(&format!("{name}_FILE")) {
            found.push(Source::File(PathBuf::from(path.trim())));
        }
        if let Some(dir) = self.get(CREDENTIALS_DIRECTORY) {
            for file in [name.to_string(), format!("{CREDENTIAL_PREFIX}{name}")] {
                let path = Path::new(dir.trim()).join(file);
                if path.exists() {
                    found.push(Source::Credential(path));
                }
            }
        }
        match found.as_slice() {
            [] => Ok(None),
            [Source::Variable] => Ok(self.get(name)),
            [Source::File(path) | Source::Credential(path)] => read(name, path).map(Some),
            [first, second, ..] => Err(ConfigError(format!(
                "{name} is set in two places, {} and {}: give it in one only",
                place(name, first),
                place(name, second)
            ))),
        }
    }
}

/// The contents of a secret's file, without the trailing line break an editor adds.
fn read(name: &str, path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError(format!(
            "{name}: cannot read {}: {e} (the file must be readable by the user consoled runs as)",
            path.display()
        ))
    })?;
    let value = text.trim_end_matches(['\n', '\r']);
    if value.trim().is_empty() {
        return Err(ConfigError(format!(
            "{name}: {} is empty; it must hold the value itself",
            path.display()
        )));
    }
    Ok(value.to_string())
}
