//! What the binary says at start when its settings or its database are wrong: named at once,
//! with PostgreSQL's own message and what to do, and the exit status a systemd unit can act on
//! (78 for a configuration error, which is not retried and not restarted).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const EXIT_CONFIG: i32 = consoled::failure::EXIT_CONFIG;

fn serve(url: &str) -> (Output, Duration) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_consoled"))
        .arg("serve")
        .env("DATABASE_URL", url)
        .env("CONSOLED_LISTEN", "127.0.0.1:0")
        .env_remove("RUST_LOG")
        .output()
        .expect("run consoled");
    (out, started.elapsed())
}

/// DATABASE_URL with another `user[:password]`.
fn with_user(userinfo: &str) -> String {
    let url = database_url();
    let start = url.find("://").expect("a URL") + 3;
    let end = url[start..].find('@').map_or(start, |i| start + i + 1);
    format!("{}{userinfo}@{}", &url[..start], &url[end..])
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A configuration error: named at once (well inside the 30 s the database is waited for), and
/// exit status 78.
#[track_caller]
fn refused_at_once(url: &str, parts: &[&str]) -> String {
    let (out, took) = serve(url);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(EXIT_CONFIG), "{err}");
    assert!(took < Duration::from_secs(5), "took {took:?}: {err}");
    for p in parts {
        assert!(err.contains(p), "{p:?} missing from: {err}");
    }
    err
}

#[test]
fn an_invalid_database_url_is_not_retried() {
    refused_at_once(
        "not a url",
        &["DATABASE_URL=\"not a url\"", "expected a PostgreSQL URL"],
    );
    let err = refused_at_once(
        "postgres://u:hunter2@127.0.0.1:notaport/db",
        &["DATABASE_URL=", "expected a PostgreSQL URL"],
    );
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn a_missing_database_is_named_with_what_to_do() {
    let url = with_database(&database_url(), "consoled_no_such_database");
    refused_at_once(
        &url,
        &[
            "database \"consoled_no_such_database\" does not exist",
            "SQLSTATE 3D000",
            "CREATE DATABASE \"consoled_no_such_database\"",
        ],
    );
}

#[test]
fn an_unknown_role_is_named_and_not_retried() {
    let url = with_user("consoled_no_such_role");
    refused_at_once(
        &url,
        &[
            "role \"consoled_no_such_role\" does not exist",
            "Check the user and password in DATABASE_URL",
        ],
    );
}

/// `scripts/pg.sh` makes the role `consoled_password` give its password (every other role is
/// trusted on the test cluster).
#[test]
fn a_wrong_password_is_named_and_not_retried() {
    let mut admin = db();
    admin
        .batch_execute(
            "DO $$ BEGIN CREATE ROLE consoled_password LOGIN;
             EXCEPTION WHEN duplicate_object THEN NULL; END $$;
             ALTER ROLE consoled_password PASSWORD 'right-password'",
        )
        .unwrap();
    let url = with_user("consoled_password:wrong-pw-7xq");
    if postgres::Client::connect(&url, postgres::NoTls).is_ok() {
        println!(
            "SKIPPED: this database server lets consoled_password in without its password \
             (scripts/pg.sh's clusters do not)"
        );
        return;
    }
    let err = refused_at_once(
        &url,
        &[
            "password authentication failed for user \"consoled_password\"",
            "SQLSTATE 28P01",
            "Check the user and password in DATABASE_URL",
        ],
    );
    assert!(
        !err.contains("wrong-pw-7xq"),
        "the password was printed: {err}"
    );
}

/// A database that refuses connections may be starting: retried, but named on the first attempt.
#[test]
fn a_refused_connection_is_named_at_once_and_retried() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/consoled");
    let mut child = Command::new(env!("CARGO_BIN_EXE_consoled"))
        .arg("serve")
        .env("DATABASE_URL", &url)
        .env("CONSOLED_LISTEN", "127.0.0.1:0")
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let pipe = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(3))
        .expect("a line at once");
    assert!(
        first.contains(&format!(
            "cannot reach the database server at 127.0.0.1:{port}"
        )) && first.contains("Connection refused")
            && first.contains("Is PostgreSQL running there")
            && first.contains("retrying"),
        "{first}"
    );
    // Retried quietly: the same failure is not logged again every second.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(child.try_wait().unwrap().is_none(), "it gave up at once");
    let more: Vec<String> = rx.try_iter().collect();
    assert!(more.is_empty(), "{more:?}");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn unknown_settings_and_an_unusable_rust_log_are_named_at_start() {
    // With RUST_LOG off by accident, the warnings are still written (stderr, not the log).
    let out = Command::new(env!("CARGO_BIN_EXE_consoled"))
        .arg("migrate")
        .env("DATABASE_URL", database_url())
        .env("CONSOLED_WOKRERS", "4")
        .env("CONSOLED_MAX_STREAMS", "100")
        .env("CONSOLED_TRUSTED_PROXIES", "127.0.0.0/8, ::1/128, fd00::/8")
        .env("RUST_LOG", "verbose")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("unknown setting CONSOLED_WOKRERS is ignored; the closest known name is CONSOLED_WORKERS"),
        "{err}"
    );
    // A renamed setting still works and names its new name.
    assert!(
        err.contains(
            "setting CONSOLED_MAX_STREAMS is deprecated: it is now CONSOLED_MAX_STREAMS_PER_INSTANCE"
        ),
        "{err}"
    );
    assert!(
        err.contains("RUST_LOG=\"verbose\"") && err.contains("\"verbose\" is not a level"),
        "{err}"
    );

    // The server, at the default level: the warning is a log line.
    let server = binary::Spawned::start(
        env!("CARGO_BIN_EXE_consoled"),
        &[("CONSOLED_HASH_QUEUEE", "8")],
    );
    let line = server.wait_log(&["CONSOLED_HASH_QUEUEE"], Duration::from_secs(5));
    assert!(
        line.contains("WARN") && line.contains("CONSOLED_HASH_QUEUE "),
        "{line}"
    );
}

/// The mail settings are configuration too: checked before the database is waited for.
#[test]
fn bad_mail_settings_are_configuration_errors_named_before_the_database() {
    let away = "postgres://postgres@127.0.0.1:1/consoled";
    for (name, value, form) in [
        (
            "CONSOLED_SMTP_URL",
            "smtp://u:pw-3kq@[bad",
            "expected smtp:// or smtps://",
        ),
        (
            "CONSOLED_MAIL_FROM",
            "not an address",
            "expected a mail address",
        ),
    ] {
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_consoled"))
            .arg("serve")
            .env("DATABASE_URL", away)
            .env("CONSOLED_LISTEN", "127.0.0.1:0")
            .env(name, value)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(EXIT_CONFIG), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5), "{err}");
        assert!(err.contains(name) && err.contains(form), "{err}");
        assert!(!err.contains("pw-3kq"), "the password was printed: {err}");
    }
}
