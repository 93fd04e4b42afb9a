//! Warnings at start about settings that parse but cannot mean what the operator wanted: a
//! `CONSOLED_*` variable no setting reads (a typo such as `CONSOLED_WOKRERS` would otherwise be
//! ignored without a word), and a `RUST_LOG` that switches consoled's own log off by accident
//! (`RUST_LOG=verbose` names a module, not a level).
//!
//! The known names are one list, `SETTINGS`, plus the limits' own table (`crate::limits`); a
//! unit test fails when code reads a `CONSOLED_*` name that is in neither. A renamed setting
//! keeps its old name in `SETTINGS` for as long as it is still read.

use std::collections::HashMap;

/// Every `CONSOLED_*` variable read outside `crate::limits`.
pub const SETTINGS: &[&str] = &[
    "CONSOLED_LISTEN",
    "CONSOLED_METRICS_LISTEN",
    "CONSOLED_BASE_URL",
    "CONSOLED_CONSOLE_URL",
    "CONSOLED_COOKIE_SECURE",
    "CONSOLED_SMTP_URL",
    "CONSOLED_MAIL_FROM",
    "CONSOLED_MAIL_DIR",
    "CONSOLED_MAIL_RETRY_SECONDS",
    "CONSOLED_MAIL_SENDER",
    "CONSOLED_MAIL_LOG_LINKS",
    "CONSOLED_GITHUB_CLIENT_ID",
    "CONSOLED_GITHUB_CLIENT_SECRET",
    "CONSOLED_GITHUB_AUTH_URL",
    "CONSOLED_GITHUB_TOKEN_URL",
    "CONSOLED_GITHUB_API_URL",
    "CONSOLED_GOOGLE_CLIENT_ID",
    "CONSOLED_GOOGLE_CLIENT_SECRET",
    "CONSOLED_GOOGLE_AUTH_URL",
    "CONSOLED_GOOGLE_TOKEN_URL",
    "CONSOLED_GOOGLE_USERINFO_URL",
    // Each listed provider N also has `CONSOLED_OIDC_N_<suffix>` (`config::oidc::SUFFIXES`).
    "CONSOLED_OIDC_PROVIDERS",
    "CONSOLED_OIDC_REFRESH_SECONDS",
    "CONSOLED_OAUTH_TIMEOUT_SECONDS",
    "CONSOLED_PING_SECONDS",
    "CONSOLED_STREAM_QUEUE",
    "CONSOLED_STREAM_HISTORY",
    "CONSOLED_STREAM_HISTORY_SECONDS",
    "CONSOLED_SESSION_IDLE_SECONDS",
    "CONSOLED_SESSION_MAX_SECONDS",
    "CONSOLED_MFA_PENDING_SECONDS",
    "CONSOLED_REAUTH_SECONDS",
    "CONSOLED_TOKEN_MAX_LIFETIME_SECONDS",
    "CONSOLED_TOKENS_PER_PROJECT",
    "CONSOLED_DATA_KEY",
    "CONSOLED_DATA_KEY_OLD",
    "CONSOLED_CSRF_KEY",
    "CONSOLED_TRUSTED_PROXIES",
    "CONSOLED_CLIENT_IP_HEADER",
    "CONSOLED_WORKERS",
    "CONSOLED_HASH_THREADS",
    "CONSOLED_HASH_QUEUE",
    "CONSOLED_HASH_MEMORY_KEEP_SECONDS",
    "CONSOLED_MEMORY_TRIM_SECONDS",
    "CONSOLED_DB_POOL",
    "CONSOLED_DATABASE_DIRECT_URL",
    "CONSOLED_DATABASE_PASSWORD",
    "CONSOLED_DB_KEEP_STATEMENTS",
    "CONSOLED_DB_TIMEOUT_SECONDS",
    "CONSOLED_MAX_STREAMS_PER_PRINCIPAL",
    "CONSOLED_MAX_CONNECTIONS",
    "CONSOLED_MAX_STREAMS_PER_INSTANCE",
    "CONSOLED_MAX_STREAMS",
    "CONSOLED_STREAM_STALL_SECONDS",
    "CONSOLED_STREAM_DIRECT",
    "CONSOLED_STREAM_FANOUT_THREADS",
    "CONSOLED_CLIENT_SHARE",
    "CONSOLED_BODY_TIMEOUT_SECONDS",
    "CONSOLED_READ_TIMEOUT_SECONDS",
    "CONSOLED_HEADER_TIMEOUT_SECONDS",
    "CONSOLED_KEEPALIVE_SECONDS",
    "CONSOLED_DEMO",
    "CONSOLED_TEST_PANIC_ROUTE",
    "CONSOLED_SIGNUP",
    "CONSOLED_SIGNUP_DOMAINS",
    // Read by the logger, before the configuration (src/logging.rs).
    "CONSOLED_LOG_FORMAT",
    "CONSOLED_LOG_SUMMARY_SECONDS",
];

/// Settings renamed for what they limit: (old name, new name). The old name is still read when
/// the new one is unset, with a warning at start.
pub const RENAMED: &[(&str, &str)] = &[
    // Beside CONSOLED_MAX_STREAMS_PER_PRINCIPAL, the bare name did not say what it counts per.
    ("CONSOLED_MAX_STREAMS", "CONSOLED_MAX_STREAMS_PER_INSTANCE"),
];

/// Every name a `CONSOLED_*` variable may have.
pub fn known() -> Vec<&'static str> {
    let limits = crate::limits::Kind::ALL
        .into_iter()
        .filter_map(|k| k.rule().setting);
    SETTINGS.iter().copied().chain(limits).collect()
}

/// What to tell the operator at start, one line each, sorted (no value is repeated: a mistyped
/// secret's name must not print the secret).
pub fn warnings(vars: &HashMap<String, String>) -> Vec<String> {
    let known = known();
    let mut out: Vec<String> = vars
        .keys()
        .filter(|k| k.starts_with("CONSOLED_") && !is_known(k, &known))
        .filter_map(|k| match super::oidc::check_variable(k, vars) {
            Some(Ok(())) => None,
            Some(Err(warning)) => Some(warning),
            None => Some(format!(
                "unknown setting {k} is ignored; the closest known name is {} (every setting: \
                 README, \"Configuration\")",
                closest(k, &known)
            )),
        })
        .collect();
    for (old, new) in RENAMED {
        if vars.contains_key(*old) {
            out.push(if vars.contains_key(*new) {
                format!("setting {old} is ignored: {new}, its new name, is set too")
            } else {
                format!("setting {old} is deprecated: it is now {new} (the old name works for now)")
            });
        }
    }
    out.sort();
    if let Some(spec) = vars.get("RUST_LOG") {
        out.extend(rust_log(spec));
    }
    out
}

/// A known name, or `NAME_FILE` of a known secret setting (`config::secret`).
fn is_known(name: &str, known: &[&str]) -> bool {
    let secret_file = name
        .strip_suffix("_FILE")
        .is_some_and(|setting| known.contains(&setting) && super::secret::is_secret(setting));
    known.contains(&name) || secret_file
}

fn closest<'a>(name: &str, known: &[&'a str]) -> &'a str {
    known
        .iter()
        .min_by_key(|k| distance(name, k))
        .copied()
        .unwrap_or("CONSOLED_LISTEN")
}

/// Edit distance with transpositions (optimal string alignment): `WOKRERS` is one edit from
/// `WORKERS`.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

const LEVELS: &str = "off, error, warn, info, debug, trace";
const EXAMPLE: &str = "e.g. RUST_LOG=info, or RUST_LOG=consoled=debug for more of consoled's own";

/// Problems of a `RUST_LOG` value, read as env_logger reads it (`[target][=level],...[/text]`):
/// parts it would ignore, and a value under which no record of consoled's own is written
/// although nothing says `off`.
pub fn rust_log(spec: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut parts = spec.split('/');
    let directives_text = parts.next().unwrap_or("");
    parts.next();
    if parts.next().is_some() {
        return vec![format!(
            "RUST_LOG={spec:?} has more than one '/' and is ignored whole: consoled writes only \
             errors; {EXAMPLE}"
        )];
    }
    // (target, level); a missing level is every level.
    let mut directives: Vec<(Option<&str>, log::LevelFilter)> = Vec::new();
    let mut bare_words = Vec::new();
    for d in directives_text
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        let mut halves = d.split('=');
        match (halves.next(), halves.next().map(str::trim), halves.next()) {
            (Some(word), None, None) => match word.parse() {
                Ok(level) => directives.push((None, level)),
                Err(_) => {
                    bare_words.push(word);
                    directives.push((Some(word), log::LevelFilter::max()));
                }
            },
            (Some(target), Some(""), None) => {
                directives.push((Some(target), log::LevelFilter::max()))
            }
            (Some(target), Some(level), None) => match level.parse() {
                Ok(level) => directives.push((Some(target), level)),
                Err(_) => problems.push(format!(
                    "RUST_LOG: {level:?} in {d:?} is not a level ({LEVELS}); that part is ignored"
                )),
            },
            _ => problems.push(format!(
                "RUST_LOG: {d:?} is not TARGET=LEVEL; that part is ignored"
            )),
        }
    }
    // With no usable part, env_logger writes errors only.
    let nothing_usable = directives.is_empty();
    // env_logger's rule: the longest target that prefixes the record's, else the bare level.
    let ours = directives
        .iter()
        .filter(|(t, _)| t.is_none_or(|t| "consoled::x".starts_with(t)))
        .max_by_key(|(t, _)| t.map_or(0, str::len))
        .map(|(_, level)| *level);
    if ours.is_none() || nothing_usable {
        let why = if bare_words.is_empty() {
            "no part of it is a level or names consoled".to_string()
        } else {
            format!(
                "{} not a level ({LEVELS}) but the name of a module to log",
                bare_words
                    .iter()
                    .map(|w| format!("{w:?} is"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        problems.push(format!(
            "RUST_LOG={spec:?} turns consoled's own log off (errors only at best): {why}; {EXAMPLE}"
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_setting_is_named_with_the_closest_known_name() {
        let vars: HashMap<String, String> = [
            ("CONSOLED_WOKRERS", "4"),
            ("CONSOLED_TRUSTED_PROXY", "10.0.0.1"),
            ("CONSOLED_LOGIN_FAILURES_PER_CLIENTS", "5"),
            ("CONSOLED_WORKERS", "4"),
            ("CONSOLED_GITHUB_CLIENT_SECRT", "s3cret-value"),
            ("OTHER_THING", "x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let w = warnings(&vars);
        assert_eq!(w.len(), 4, "{w:#?}");
        let line = |name: &str| w.iter().find(|l| l.contains(name)).unwrap().clone();
        assert!(line("CONSOLED_WOKRERS").contains("closest known name is CONSOLED_WORKERS"));
        assert!(line("CONSOLED_TRUSTED_PROXY ").contains("is CONSOLED_TRUSTED_PROXIES"));
        assert!(line("CLIENTS").contains("is CONSOLED_LOGIN_FAILURES_PER_CLIENT "));
        assert!(line("SECRT").contains("is CONSOLED_GITHUB_CLIENT_SECRET "));
        assert!(!w.concat().contains("s3cret-value"), "a value was printed");
    }

    #[test]
    fn provider_settings_are_known_only_for_listed_providers() {
        let vars: HashMap<String, String> = [
            ("CONSOLED_OIDC_PROVIDERS", "corp"),
            ("CONSOLED_OIDC_CORP_ISSUER", "https://sso.example.com"),
            ("CONSOLED_OIDC_CORP_CLIENT_SECRET", "s3cret-value"),
            ("CONSOLED_OIDC_KEYCLOAK_ISSUER", "https://kc.example.com"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let w = warnings(&vars);
        assert_eq!(w.len(), 1, "{w:#?}");
        assert!(
            w[0].contains("CONSOLED_OIDC_KEYCLOAK_ISSUER is ignored"),
            "{w:?}"
        );
        assert!(w[0].contains("named keycloak"), "{w:?}");
    }

    #[test]
    fn a_renamed_setting_is_named_with_its_new_name() {
        let vars = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let w = warnings(&vars(&[("CONSOLED_MAX_STREAMS", "5")]));
        assert_eq!(
            w,
            ["setting CONSOLED_MAX_STREAMS is deprecated: it is now \
              CONSOLED_MAX_STREAMS_PER_INSTANCE (the old name works for now)"]
        );
        let both = [
            ("CONSOLED_MAX_STREAMS", "5"),
            ("CONSOLED_MAX_STREAMS_PER_INSTANCE", "6"),
        ];
        assert_eq!(
            warnings(&vars(&both)),
            ["setting CONSOLED_MAX_STREAMS is ignored: CONSOLED_MAX_STREAMS_PER_INSTANCE, its new \
              name, is set too"]
        );
        assert!(warnings(&vars(&[("CONSOLED_MAX_STREAMS_PER_INSTANCE", "6")])).is_empty());
    }

    #[test]
    fn every_name_the_code_reads_is_known() {
        let known = known();
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut files = vec![std::path::PathBuf::from(src)];
        let mut read = 0;
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            // Unit tests in files of their own (`tests.rs`, `oidc_tests.rs`) read no setting.
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let tests_only = name.ends_with("tests.rs");
            if path.extension().is_none_or(|e| e != "rs") || name == "checks.rs" || tests_only {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
            // A whole string literal that is a setting's name, as `env.get("CONSOLED_X")` has.
            for name in code.split('"').skip(1).step_by(2).filter(|s| {
                s.starts_with("CONSOLED_")
                    && s.len() > 9
                    && s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
            }) {
                read += 1;
                assert!(
                    is_known(name, &known),
                    "{} reads {name}, missing from config::checks::SETTINGS",
                    path.display()
                );
            }
        }
        assert!(read > 20, "found only {read} names");
        for name in known {
            assert!(
                name.starts_with("CONSOLED_"),
                "{name} is not a CONSOLED_ name"
            );
        }
    }

    #[test]
    fn edit_distance() {
        assert_eq!(distance("WOKRERS", "WORKERS"), 1);
        assert_eq!(distance("abc", "abc"), 0);
        assert_eq!(distance("", "ab"), 2);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn unusable_rust_log_values_are_named() {
        for fine in [
            "info",
            "warn",
            "debug",
            "trace",
            "INFO",
            "off",
            "consoled=off",
            "consoled=debug",
            "info,postgres=warn",
            "error,consoled=info",
            "error",
            "consoled",
            "consoled::server=trace,info",
            "info/login",
        ] {
            assert!(rust_log(fine).is_empty(), "{fine}: {:?}", rust_log(fine));
        }
        let verbose = rust_log("verbose");
        assert_eq!(verbose.len(), 1, "{verbose:?}");
        assert!(
            verbose[0].contains("\"verbose\" is not a level")
                && verbose[0].contains("RUST_LOG=info"),
            "{verbose:?}"
        );
        let bad_level = rust_log("consoled=loud");
        assert!(bad_level
            .iter()
            .any(|p| p.contains("\"loud\" in \"consoled=loud\" is not a level")));
        assert!(bad_level
            .iter()
            .any(|p| p.contains("turns consoled's own log off")));
        assert_eq!(rust_log("postgres=debug").len(), 1);
        assert_eq!(rust_log("consoled=loud,info").len(), 1, "only the bad part");
        assert_eq!(rust_log("a/b/c").len(), 1);
    }
}
