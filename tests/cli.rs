//! The command line: start-up errors, migrations from several processes at once, projects.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

fn consoled(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_consoled"))
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run consoled")
}

#[test]
fn without_database_url_it_says_how_to_get_one() {
    let out = Command::new(env!("CARGO_BIN_EXE_consoled"))
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(consoled::failure::EXIT_CONFIG));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("DATABASE_URL") && err.contains("make run"),
        "{err}"
    );
}

/// A refused setting is a configuration error: exit status 78 (`EX_CONFIG`), which
/// `contrib/consoled.service` lists in `RestartPreventExitStatus`, and the message names the
/// variable, the value and the form expected.
#[test]
fn a_bad_setting_is_named_at_start_up() {
    let out = Command::new(env!("CARGO_BIN_EXE_consoled"))
        .env("DATABASE_URL", database_url())
        .env("CONSOLED_WORKERS", "many")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(consoled::failure::EXIT_CONFIG));
    assert_eq!(consoled::failure::EXIT_CONFIG, 78);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CONSOLED_WORKERS=\"many\"") && err.contains("expected a whole number"),
        "{err}"
    );
    let unit = include_str!("../contrib/consoled.service");
    assert!(
        unit.lines().any(|l| l == "RestartPreventExitStatus=78"),
        "the systemd unit must not restart on a configuration error"
    );
}

#[test]
fn concurrent_migrations_apply_each_file_once() {
    let name = format!("consoled_mig_{}", unique().replace('-', "_"));
    let mut admin = db();
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let url = with_database(&database_url(), &name);
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || consoled(&url, &["migrate"]))
        })
        .collect();
    let mut applied = Vec::new();
    for r in runs {
        let out = r.join().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        applied.extend(
            v["applied"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap()),
        );
    }
    applied.sort();
    let expected: Vec<i64> = consoled::db::migrate::MIGRATIONS
        .iter()
        .map(|m| m.0 as i64)
        .collect();
    assert_eq!(
        applied, expected,
        "every migration applied exactly once across the four processes"
    );
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let n: i64 = c
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .unwrap()
        .get(0);
    assert_eq!(n as usize, expected.len());
    drop(c);
    admin
        .batch_execute(&format!("DROP DATABASE {name}"))
        .unwrap();
}

#[test]
fn project_create_prints_the_project() {
    let server = TestServer::start();
    let (_, state) = server.client().signup();
    let org = state["organizations"][0]["id"].as_i64().unwrap();
    let create = || {
        let org = org.to_string();
        consoled(
            &database_url(),
            &["project", "create", "--org", &org, "--name", "web"],
        )
    };
    let out = create();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["org_id"], org);
    assert_eq!(v["name"], "web");
    assert!(v["id"].as_i64().unwrap() > 0);
    let again = create();
    assert_eq!(again.status.code(), Some(1), "duplicate name refused");
    let missing = consoled(
        &database_url(),
        &["project", "create", "--org", "999999999", "--name", "x"],
    );
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));
    let usage = consoled(&database_url(), &["project", "frobnicate"]);
    assert_eq!(usage.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("usage"));
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_consoled"))
        .env("DATABASE_URL", database_url())
        .env("CONSOLED_LISTEN", format!("127.0.0.1:{port}"))
        .env(
            "CONSOLED_MAIL_DIR",
            std::env::temp_dir().join("consoled-sigterm-mail"),
        )
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let start = std::time::Instant::now();
    loop {
        if std::net::TcpStream::connect(addr).is_ok() {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Client::new(addr).get("/healthz").expect(200);
    let t = std::time::Instant::now();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
}

/// The binary with no DATABASE_URL and no RUST_LOG (the default log level).
fn bare(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_consoled"))
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("RUST_LOG")
        .output()
        .expect("run consoled")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn commands_print_no_postgresql_notices_at_the_default_log_level() {
    // The second run finds schema_migrations there already (`CREATE TABLE IF NOT EXISTS`).
    for _ in 0..2 {
        let out = Command::new(env!("CARGO_BIN_EXE_consoled"))
            .arg("migrate")
            .env("DATABASE_URL", database_url())
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(!err.contains("NOTICE"), "{err}");
        assert!(!err.contains("already exists"), "{err}");
    }
}

/// The interface's list of change types.
const TYPES: [&str; 22] = [
    "server",
    "volume",
    "floating_ip",
    "elastic_ip",
    "primary_ip",
    "network",
    "nat_gateway",
    "firewall",
    "load_balancer",
    "image",
    "placement_group",
    "ssh_key",
    "action",
    "stack",
    "api_token",
    "project",
    "ticket",
    "wallet",
    "organization",
    "membership",
    "incident",
    "user",
];

#[test]
fn an_unknown_type_or_op_lists_the_allowed_values_before_touching_the_database() {
    let out = bare(&["emit", "--type", "org", "--id", "1", "--op", "update"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("unknown type \"org\""), "{err}");
    for t in TYPES {
        assert!(err.contains(t), "{t} missing from: {err}");
    }
    assert!(err.contains("did you mean organization"), "{err}");

    let out = bare(&["emit", "--type", "server", "--id", "1", "--op", "upsert"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("unknown op \"upsert\"") && err.contains("insert, update, delete"),
        "{err}"
    );
}

#[test]
fn every_type_is_accepted_by_emit() {
    // Only serve and migrate apply migrations; this binary's database may be fresh.
    let out = consoled(&database_url(), &["migrate"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for t in TYPES {
        let out = consoled(
            &database_url(),
            &["emit", "--type", t, "--id", "7", "--op", "insert"],
        );
        assert!(out.status.success(), "{t}: {}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["type"], t);
    }
}

#[test]
fn a_misspelt_option_is_refused_not_ignored() {
    let out = bare(&[
        "emit", "--type", "server", "--id", "1", "--op", "update", "--projct", "3",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("--projct") && err.contains("--project"),
        "{err}"
    );
    let out = bare(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("token create"),
        "the commands are listed"
    );
}

/// Each command with the options its help must describe.
const COMMANDS: [(&[&str], &[&str]); 7] = [
    (&["serve"], &[]),
    (&["migrate"], &[]),
    (&["project", "create"], &["--org", "--name"]),
    (&["token", "create"], &["--project", "--name"]),
    (&["token", "list"], &["--project"]),
    (&["token", "revoke"], &["--id"]),
    (&["emit"], &["--type", "--id", "--op", "--project", "--org"]),
];

#[test]
fn help_is_complete_and_needs_no_database() {
    for flag in ["--help", "-h", "help"] {
        let out = bare(&[flag]);
        assert!(out.status.success(), "{flag}: {}", text(&out.stderr));
        let help = text(&out.stdout);
        for (words, options) in COMMANDS {
            assert!(help.contains(&words.join(" ")), "{flag}: {words:?}");
            for o in options {
                assert!(help.contains(o), "{flag}: {o}");
            }
        }
        assert!(
            help.contains("DATABASE_URL") && help.contains("RUST_LOG"),
            "{help}"
        );
    }
    for (words, options) in COMMANDS {
        let mut asked: Vec<&str> = words.to_vec();
        asked.push("--help");
        let mut topic = vec!["help"];
        topic.extend_from_slice(words);
        for args in [asked, topic] {
            let out = bare(&args);
            assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
            let help = text(&out.stdout);
            assert!(help.starts_with("usage: consoled "), "{args:?}: {help}");
            for o in options {
                assert!(help.contains(o), "{args:?}: {o} missing from {help}");
            }
        }
    }
    let emit = text(&bare(&["emit", "--help"]).stdout);
    for t in TYPES.iter().chain(&["insert", "update", "delete"]) {
        assert!(emit.contains(t), "{t}");
    }
}

#[test]
fn version_needs_no_database() {
    for args in [&["--version"][..], &["-V"], &["serve", "--version"]] {
        let out = bare(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            format!("consoled {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}
