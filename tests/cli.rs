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
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("DATABASE_URL") && err.contains("make run"),
        "{err}"
    );
}

#[test]
fn a_bad_setting_is_named_at_start_up() {
    let out = Command::new(env!("CARGO_BIN_EXE_consoled"))
        .env("DATABASE_URL", database_url())
        .env("CONSOLED_WORKERS", "many")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("CONSOLED_WORKERS"));
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
