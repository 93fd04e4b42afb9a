//! The command line's token list and its refusal to migrate: `token list` shows each token of a
//! project without its secret, and only `serve` and `migrate` apply migrations.

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

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `token list` shows name, id, creation, last use and revocation of each token of a project,
/// never a secret; the id is what `token revoke` takes.
#[test]
fn token_list_shows_each_token_without_its_secret() {
    let server = TestServer::start();
    let (_, state) = server.client().signup();
    let org = state["organizations"][0]["id"]
        .as_i64()
        .unwrap()
        .to_string();
    let run = |args: &[&str]| {
        let out = consoled(&database_url(), args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let project = run(&["project", "create", "--org", &org, "--name", "listed"])["id"]
        .as_i64()
        .unwrap()
        .to_string();
    let ci = run(&["token", "create", "--project", &project, "--name", "ci"]);
    let deploy = run(&["token", "create", "--project", &project, "--name", "deploy"]);
    // The ci token is used once (a stream), the deploy token revoked.
    let secret = ci["token"].as_str().unwrap();
    let stream = common::sse::open(
        server.addr,
        &[("Authorization", &format!("Bearer {secret}"))],
    );
    assert_eq!(stream.status, 200);
    drop(stream);
    let deploy_id = deploy["id"].as_i64().unwrap().to_string();
    run(&["token", "revoke", "--id", &deploy_id]);

    let out = consoled(&database_url(), &["token", "list", "--project", &project]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    for secret in [secret, deploy["token"].as_str().unwrap()] {
        assert!(
            !printed.contains(&secret[4..]),
            "a secret was printed: {printed}"
        );
    }
    let list: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(list["project_id"].to_string(), project);
    let tokens = list["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 2, "{printed}");
    let (first, second) = (&tokens[0], &tokens[1]);
    assert_eq!(first["id"], ci["id"]);
    assert_eq!(first["name"], "ci");
    assert!(first["last_used_at"].is_string(), "{printed}");
    assert!(first["revoked_at"].is_null(), "{printed}");
    assert_eq!(second["name"], "deploy");
    assert!(second["last_used_at"].is_null(), "{printed}");
    assert!(second["revoked_at"].is_string(), "{printed}");
    for t in tokens {
        let created = t["created_at"].as_str().unwrap();
        assert!(created.len() == 20 && created.ends_with('Z'), "{created}");
        let mut keys: Vec<&str> = t.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "created_at",
                "created_by",
                "expires_at",
                "id",
                "last_used_at",
                "name",
                "revoked_at",
                "scope"
            ]
        );
        // The command line's: no maker, no expiry, and everything allowed, as before.
        assert_eq!(
            (&t["created_by"], &t["expires_at"]),
            (&Value::Null, &Value::Null)
        );
        assert_eq!(t["scope"], "read_write");
    }
    let missing = consoled(
        &database_url(),
        &["token", "list", "--project", "999999999"],
    );
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("does not exist"));
}

/// `token create` takes a scope and an expiry (issue 31); a scope it does not know, or an expiry
/// that is not a positive number of seconds, is refused before the database is asked.
#[test]
fn token_create_takes_a_scope_and_an_expiry() {
    let server = TestServer::start();
    let (_, state) = server.client().signup();
    let project = project_of(&state).to_string();
    let out = consoled(
        &database_url(),
        &[
            "token",
            "create",
            "--project",
            &project,
            "--scope",
            "read",
            "--expires-in",
            "60",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].clone();
    let out = consoled(&database_url(), &["token", "list", "--project", &project]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let made = list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap()
        .clone();
    assert_eq!(made["scope"], "read");
    assert!(
        made["expires_at"].as_str().unwrap().ends_with('Z'),
        "{made}"
    );
    for (flag, value, says) in [
        ("--scope", "write", "--scope is read or read_write"),
        (
            "--expires-in",
            "0",
            "--expires-in is a whole number of seconds",
        ),
        (
            "--expires-in",
            "soon",
            "--expires-in is a whole number of seconds",
        ),
    ] {
        let out = consoled(
            &database_url(),
            &["token", "create", "--project", &project, flag, value],
        );
        assert!(!out.status.success());
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
    }
}

/// Only `serve` and `migrate` apply migrations: a new binary's `token create` during a rolling
/// upgrade must not migrate production. The other commands refuse an out-of-date schema.
#[test]
fn only_serve_and_migrate_apply_migrations() {
    let name = format!("consoled_schema_{}", unique().replace('-', "_"));
    db().batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let url = with_database(&database_url(), &name);
    let commands: [&[&str]; 5] = [
        &["project", "create", "--org", "1", "--name", "x"],
        &["token", "create", "--project", "1"],
        &["token", "list", "--project", "1"],
        &["token", "revoke", "--id", "1"],
        &["emit", "--type", "server", "--id", "1", "--op", "update"],
    ];
    let tables = || -> i64 {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .unwrap()
        .get(0)
    };
    for args in commands {
        let out = consoled(&url, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains("run `consoled migrate`"), "{args:?}: {err}");
        assert_eq!(tables(), 0, "{args:?} changed the schema");
    }
    let out = consoled(&url, &["migrate"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = consoled(&url, &["token", "list", "--project", "1"]);
    assert!(
        text(&out.stderr).contains("project 1 does not exist"),
        "{}",
        text(&out.stderr)
    );
    db().batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .unwrap();
}
