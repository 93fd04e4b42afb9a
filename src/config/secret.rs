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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::{checks, keys, Config};

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A folder of files for the secret tests, removed on drop.
    struct Files(std::path::PathBuf);

    impl Files {
        fn new(tag: &str) -> Files {
            let dir =
                std::env::temp_dir().join(format!("consoled-secret-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Files(dir)
        }

        fn write(&self, name: &str, text: &str) -> String {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        }
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn secrets_come_from_a_variable_a_file_or_a_systemd_credential() {
        let files = Files::new("sources");
        let url = "postgres://consoled:pw-in-file@db.internal/consoled";
        let url_file = files.write("db-url", &format!("{url}\n"));
        let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let creds = Files::new("credentials");
        creds.write("CONSOLED_DATA_KEY", key);
        // As the packaged unit loads /etc/consoled/credentials/CONSOLED_GITHUB_CLIENT_SECRET.
        creds.write("consoled_CONSOLED_GITHUB_CLIENT_SECRET", "gh-secret\r\n");
        let c = Config::from_vars(vars(&[
            ("DATABASE_URL_FILE", &url_file),
            ("CREDENTIALS_DIRECTORY", &creds.0.display().to_string()),
            ("CONSOLED_GITHUB_CLIENT_ID", "id"),
        ]))
        .unwrap();
        assert_eq!(
            c.database_url, url,
            "the file's line break is not the value's"
        );
        assert_eq!(c.keys.data, Some(keys::parse("k", key).unwrap()));
        assert_eq!(c.github.unwrap().client_secret, "gh-secret");
        // The database password alone, for a URL that carries none.
        let pw = files.write("db-password", "s3cret\n");
        let c = Config::from_vars(vars(&[
            ("DATABASE_URL", "postgres://consoled@db.internal/consoled"),
            ("CONSOLED_DATABASE_PASSWORD_FILE", &pw),
        ]))
        .unwrap();
        assert_eq!(c.database.pg.get_password(), Some(&b"s3cret"[..]));
    }

    #[test]
    fn a_secret_in_two_places_is_refused_naming_the_setting_never_the_value() {
        let files = Files::new("twice");
        let smtp = files.write("smtp", "smtps://u:smtp-pass@mail.example:465");
        let creds = Files::new("twice-credentials");
        creds.write("DATABASE_URL", "postgres://u:cred-pass@h/db");
        let db = ("DATABASE_URL", "postgres://u:var-pass@h/db");
        let cases: [&[(&str, &str)]; 3] = [
            &[
                db,
                ("CONSOLED_SMTP_URL", "smtp://x:var-smtp@h:25"),
                ("CONSOLED_SMTP_URL_FILE", &smtp),
            ],
            &[
                db,
                ("CREDENTIALS_DIRECTORY", &creds.0.display().to_string()),
            ],
            &[
                ("DATABASE_URL_FILE", &smtp),
                ("CREDENTIALS_DIRECTORY", &creds.0.display().to_string()),
            ],
        ];
        for case in cases {
            let err = Config::from_vars(vars(case)).unwrap_err().0;
            assert!(err.contains("is set in two places"), "{err}");
            assert!(err.contains("URL"), "{err}");
            for secret in ["pass", "smtp-pass", "var-smtp", "cred-pass"] {
                assert!(!err.contains(secret), "{err}");
            }
        }
        let missing = Config::from_vars(vars(&[("DATABASE_URL_FILE", "/nonexistent/db-url")]))
            .unwrap_err()
            .0;
        assert!(
            missing.contains("DATABASE_URL: cannot read /nonexistent/db-url"),
            "{missing}"
        );
        let empty = files.write("empty", "\n");
        let err = Config::from_vars(vars(&[db, ("CONSOLED_CSRF_KEY_FILE", &empty)]))
            .unwrap_err()
            .0;
        assert!(
            err.contains("CONSOLED_CSRF_KEY") && err.contains("is empty"),
            "{err}"
        );
        let bad_key = files.write("bad-key", "not-a-key-but-secret\n");
        let err = Config::from_vars(vars(&[db, ("CONSOLED_DATA_KEY_FILE", &bad_key)]))
            .unwrap_err()
            .0;
        assert!(
            err.contains("CONSOLED_DATA_KEY") && !err.contains("not-a-key"),
            "{err}"
        );
    }

    #[test]
    fn file_forms_are_known_settings_only_for_secrets() {
        let set = |names: &[&str]| -> HashMap<String, String> {
            names
                .iter()
                .map(|n| (n.to_string(), "x".to_string()))
                .collect()
        };
        let w = checks::warnings(&set(&[
            "CONSOLED_SMTP_URL_FILE",
            "CONSOLED_DATA_KEY_FILE",
            "CONSOLED_GOOGLE_CLIENT_SECRET_FILE",
            "CONSOLED_DATABASE_PASSWORD_FILE",
        ]));
        assert!(w.is_empty(), "{w:?}");
        // Built, so that the check of names the code reads does not take it for a setting.
        let not_a_secret = format!("{}_FILE", "CONSOLED_WORKERS");
        let w = checks::warnings(&set(&[&not_a_secret]));
        assert_eq!(w.len(), 1, "{w:?}");
    }
}
