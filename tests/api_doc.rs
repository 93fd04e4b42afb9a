//! docs/API.md, the interface in our words, cannot drift from the code: its endpoint sections are
//! exactly the router's routes and docs/openapi.json's operations; its error-code table is
//! exactly the codes of src/error.rs with their statuses (and openapi's list); every change type
//! and stream event is named; every setting it names exists.
//! No server or database: it reads the documents and the source.

use std::collections::{BTreeMap, BTreeSet};

use consoled::router::{method_name, ROUTES};
use serde_json::Value;

const API: &str = include_str!("../docs/API.md");
const ERRORS_RS: &str = include_str!("../src/error.rs");
/// Where settings are named: the configuration (with its key settings), and the rate limits it
/// reads (`src/limits.rs`).
const CONFIG_RS: &str = concat!(
    include_str!("../src/config/mod.rs"),
    include_str!("../src/config/env.rs"),
    include_str!("../src/config/keys.rs"),
    include_str!("../src/config/oidc.rs"),
    include_str!("../src/limits.rs")
);

/// `CONFIG_RS` without its unit tests.
fn settings_code() -> String {
    [
        include_str!("../src/config/mod.rs"),
        include_str!("../src/config/env.rs"),
        include_str!("../src/config/keys.rs"),
        include_str!("../src/config/oidc.rs"),
        include_str!("../src/limits.rs"),
    ]
    .iter()
    .map(|f| &f[..f.find("#[cfg(test)]").unwrap_or(f.len())])
    .collect()
}

/// `{provider}` in the documents is `*` in the router.
fn pattern(path: &str) -> String {
    path.split('/')
        .map(|seg| if seg.starts_with('{') { "*" } else { seg })
        .collect::<Vec<_>>()
        .join("/")
}

fn openapi() -> Value {
    serde_json::from_str(consoled::ops::OPENAPI).unwrap()
}

/// The text of the `## name` section of API.md.
fn section(name: &str) -> &'static str {
    let head = format!("\n## {name}\n");
    let start = API
        .find(&head)
        .unwrap_or_else(|| panic!("docs/API.md has no section {name:?}"))
        + head.len();
    let end = API[start..].find("\n## ").map_or(API.len(), |i| start + i);
    &API[start..end]
}

/// The rows of the first table in `text`, as cells with surrounding spaces and backticks cut.
fn table_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect()
        })
        .collect()
}

#[test]
fn every_route_has_its_section_and_every_section_is_a_route() {
    let documented: BTreeSet<(String, String)> = section("Endpoints")
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|h| {
            let (method, path) = h.split_once(' ').expect("### METHOD /path");
            (method.to_string(), pattern(path.trim()))
        })
        .collect();
    let routed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| (method_name(r.method).to_string(), r.pattern.to_string()))
        .collect();
    let mut in_openapi = BTreeSet::new();
    for (path, item) in openapi()["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            in_openapi.insert((method.to_uppercase(), pattern(path)));
        }
    }
    let missing: Vec<_> = routed.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&routed).collect();
    assert!(
        missing.is_empty(),
        "routes without a section in docs/API.md: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "sections of docs/API.md that are not routes: {stale:?}"
    );
    assert_eq!(documented, in_openapi, "docs/API.md and docs/openapi.json");
}

/// `code -> status` from src/error.rs: `Code::X => "x"` in `as_str`, `Code::X | ... => 400` in
/// `status`.
fn codes_in_source() -> BTreeMap<String, u16> {
    let body = |f: &str| {
        let start = ERRORS_RS
            .find(f)
            .unwrap_or_else(|| panic!("{f} in error.rs"));
        let end = start + ERRORS_RS[start..].find("\n    }\n").unwrap();
        &ERRORS_RS[start..end]
    };
    let mut names = BTreeMap::new();
    for line in body("pub fn as_str").lines() {
        if let Some((variant, rest)) = line.trim().split_once(" => \"") {
            names.insert(
                variant.to_string(),
                rest.trim_end_matches("\",").to_string(),
            );
        }
    }
    let mut statuses = BTreeMap::new();
    let mut pending = Vec::new();
    let status_fn = body("pub fn status");
    let mut tokens = status_fn
        .split(|c: char| c.is_whitespace() || c == '|' || c == ',')
        .filter(|t| !t.is_empty());
    while let Some(t) = tokens.next() {
        if t.starts_with("Code::") {
            pending.push(t.to_string());
        } else if t == "=>" {
            let status: u16 = tokens.next().unwrap().parse().expect("a status");
            for v in pending.drain(..) {
                statuses.insert(v, status);
            }
        }
    }
    assert!(names.len() >= 18, "parsed {names:?}");
    assert_eq!(
        names.keys().collect::<Vec<_>>(),
        statuses.keys().collect::<Vec<_>>(),
        "every code has a status"
    );
    names
        .into_iter()
        .map(|(variant, code)| (code, statuses[&variant]))
        .collect()
}

#[test]
fn the_error_table_is_exactly_the_codes_of_the_code() {
    let documented: BTreeMap<String, u16> = table_rows(section("Error codes"))
        .into_iter()
        .map(|row| (row[1].clone(), row[0].parse().expect("a status")))
        .collect();
    assert_eq!(
        documented,
        codes_in_source(),
        "docs/API.md's error table and src/error.rs"
    );
    let doc = openapi();
    let in_openapi: BTreeSet<String> = doc["components"]["schemas"]["Error"]["properties"]["error"]
        ["properties"]["code"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        documented.keys().cloned().collect::<BTreeSet<_>>(),
        in_openapi,
        "docs/API.md's error table and docs/openapi.json's error codes"
    );
}

#[test]
fn every_change_type_cookie_and_event_is_described() {
    let stream = section("The change stream");
    for t in consoled::cli::CHANGE_TYPES {
        assert!(stream.contains(&format!("`{t}`")), "change type {t}");
    }
    let doc = openapi();
    let types = doc["components"]["schemas"]["ChangeNotification"]["properties"]["type"]["enum"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(types.len(), consoled::cli::CHANGE_TYPES.len());
    for event in ["ready", "change", "resync", ": ping", "retry: 3000"] {
        assert!(stream.contains(&format!("`{event}`")), "event {event}");
    }
    let cookies = section("Cookies");
    for cookie in ["svc_csrf", "svc_session", "svc_oauth"] {
        assert!(cookies.contains(&format!("`{cookie}`")), "cookie {cookie}");
    }
    for value in [
        "oauth_denied",
        "oauth_failed",
        "email_unverified",
        "not_allowed",
        "sso_required",
        "provider_unavailable",
    ] {
        assert!(
            section("Sign-in redirect errors").contains(value),
            "{value}"
        );
    }
}

#[test]
fn every_setting_named_exists_and_the_settings_table_is_real() {
    let mut known: BTreeSet<String> = CONFIG_RS
        .split('"')
        .filter(|s| {
            s.starts_with("CONSOLED_") && s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        })
        .map(str::to_string)
        .collect();
    // The provider settings are composed: `CONSOLED_{GITHUB,GOOGLE}_<suffix>`.
    assert!(CONFIG_RS.contains("format!(\"CONSOLED_{name}_CLIENT_SECRET\")"));
    for provider in ["GITHUB", "GOOGLE"] {
        for suffix in ["CLIENT_ID", "CLIENT_SECRET", "AUTH_URL", "TOKEN_URL"] {
            known.insert(format!("CONSOLED_{provider}_{suffix}"));
        }
    }
    known.insert("CONSOLED_GITHUB_API_URL".into());
    known.insert("CONSOLED_GOOGLE_USERINFO_URL".into());
    // Each OpenID Connect provider N has `CONSOLED_OIDC_N_<suffix>`, written with N in the docs.
    for suffix in consoled::config::oidc::SUFFIXES {
        known.insert(consoled::config::oidc::variable("n", suffix));
    }
    let settings = table_rows(section("Settings"));
    assert!(settings.len() > 10);
    let named: BTreeSet<String> = API
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("CONSOLED_"))
        .map(str::to_string)
        .collect();
    let unknown: Vec<_> = named.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "docs/API.md names settings that do not exist: {unknown:?}"
    );
}

/// Every text file of the project, walked from the manifest directory (what a clone holds;
/// build output, clusters, mail and virtualenvs left out).
fn project_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            let skip = [
                "target",
                ".git",
                ".pg",
                "mail",
                ".venv-conformance",
                ".schemathesis",
                // tests/oidc's npm packages (scripts/oidc-deps.sh), not ours.
                "node_modules",
            ];
            if !skip.contains(&name.as_str()) && !name.starts_with("out") {
                project_files(&path, out);
            }
        } else {
            out.push(path);
        }
    }
}

#[test]
fn the_repository_refers_to_nothing_outside_it() {
    // Built here so that this file does not match itself.
    let parent = format!("{}/shared", "..");
    let folders = ["spec", "notes", "peers"].map(|f| format!("shared/{f}/"));
    let mut files = Vec::new();
    project_files(std::path::Path::new(env!("CARGO_MANIFEST_DIR")), &mut files);
    assert!(files.len() > 50, "{files:?}");
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // not text
        };
        assert!(
            !text.contains(&parent),
            "{} refers to {parent}",
            file.display()
        );
        for folder in &folders {
            assert!(
                !text.contains(folder),
                "{} refers to {folder}",
                file.display()
            );
        }
    }
}

#[test]
fn the_readme_configuration_table_lists_every_setting() {
    let readme = include_str!("../README.md");
    let table = &readme[readme.find("## Configuration").unwrap()..];
    let table = &table[..table.find("\n## ").unwrap()];
    let code = settings_code();
    for var in code.split('"').filter(|s| {
        s.starts_with("CONSOLED_") && s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
    }) {
        assert!(
            table.contains(&format!("`{var}`")),
            "{var} missing from README's Configuration"
        );
    }
}
