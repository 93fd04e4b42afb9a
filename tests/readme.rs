//! The README's curl session, read from README.md and run as written in bash against the real
//! binary (started as `make run` starts it) and a real database: CSRF cookie and header,
//! signup, session, logout, login, a project and a token from the command line, `curl -N` on
//! /v1/events, `consoled emit`, and the change arriving on the stream.

mod common;

use std::process::Command;

const HEADING: &str = "## A session with curl";

/// The first ```sh block under the heading.
fn session_block() -> String {
    let readme = include_str!("../README.md");
    let section = &readme[readme.find(HEADING).expect("the curl section of README.md")..];
    let start = section.find("```sh\n").expect("a ```sh block") + 6;
    let len = section[start..]
        .find("\n```")
        .expect("the end of the block");
    section[start..start + len].to_string()
}

#[test]
fn the_readme_curl_session_runs_as_written() {
    let curl = Command::new("curl").arg("--version").output();
    assert!(
        curl.is_ok_and(|o| o.status.success()),
        "the README's session needs curl: apt-get install curl"
    );
    let bin = env!("CARGO_BIN_EXE_consoled");
    let server = common::binary::Spawned::start(bin, &[]);
    let script = session_block();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("BASE", &server.url)
        .env("DATABASE_URL", common::database_url())
        .env("CONSOLED", bin)
        .env_remove("RUST_LOG")
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the session failed:\n{stdout}\n{stderr}"
    );

    // The statuses in order: csrf, signup, session, logout, session after logout, login.
    let statuses: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.rsplit_once(" -> ").map(|(_, s)| s))
        .collect();
    assert_eq!(
        statuses,
        ["204", "201", "200", "204", "401", "200"],
        "{stdout}"
    );
    assert!(stdout.contains("\"code\":\"unauthorized\""), "{stdout}");

    let ids = stdout
        .lines()
        .find_map(|l| l.strip_prefix("org "))
        .unwrap_or_else(|| panic!("no org line: {stdout}\n{stderr}"));
    let (org, rest) = ids.split_once(", project ").unwrap();
    let project = rest.split(',').next().unwrap();
    assert!(
        org.parse::<i64>().is_ok() && project.parse::<i64>().is_ok(),
        "{ids}"
    );
    assert!(rest.contains("token csdt_"), "{ids}");

    // The stream: ready first, then the emitted change with the token's project.
    let ready = stdout.find("event: ready\ndata: {}").expect("ready");
    // A change: its event, its id line (`<transaction>-<16 hex digits>`), its data.
    let change = format!(
        "\ndata: {{\"type\":\"server\",\"id\":42,\"op\":\"update\",\"project_id\":{project},\"org_id\":{org}}}"
    );
    let arrived = stdout
        .find(&change)
        .unwrap_or_else(|| panic!("no {change:?} in:\n{stdout}\n{stderr}"));
    let head = stdout[..arrived]
        .rsplit("event: change\nid: ")
        .next()
        .unwrap();
    assert!(
        head.len() > 17 && head.len() < 40 && !head.contains('\n'),
        "no id line before the change in:\n{stdout}"
    );
    assert!(ready < arrived, "{stdout}");
    assert!(stdout.contains("retry: 3000\nevent: ready"), "{stdout}");
}

/// `make run PORT=8081` sets the listen address and the public URL (the Origin check, the
/// OAuth redirect, and the mail links, which follow the base URL) together; without SMTP the
/// mailed links are logged, with SMTP they are not. Read from `make -n` (nothing runs).
#[test]
fn make_run_takes_the_port_in_one_place() {
    let dry_run = |extra: &[(&str, &str)]| {
        let mut make = Command::new("make");
        make.args(["-n", "run", "PORT=8081"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_remove("CONSOLED_LISTEN")
            .env_remove("CONSOLED_BASE_URL")
            .env_remove("CONSOLED_CONSOLE_URL")
            .env_remove("CONSOLED_SMTP_URL");
        for (k, v) in extra {
            make.env(k, v);
        }
        let out = make.output().expect("run make -n");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script = String::from_utf8_lossy(&out.stdout).into_owned();
        // The recipe as the shell would run it, with the variables it sets printed instead of
        // starting the server.
        let script = script.replace(
            "exec target/release/consoled serve",
            "env | grep -E '^CONSOLED_(LISTEN|BASE_URL|CONSOLE_URL|MAIL_LOG_LINKS)=' | sort",
        );
        let script = script
            .lines()
            .filter(|l| !l.contains("cargo build"))
            .collect::<Vec<_>>()
            .join("\n");
        let out = Command::new("bash")
            .args(["-c", &script])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
            .env_remove("CONSOLED_SMTP_URL")
            .envs(extra.iter().copied())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let env = dry_run(&[]);
    assert!(env.contains("CONSOLED_LISTEN=127.0.0.1:8081\n"), "{env}");
    assert!(
        env.contains("CONSOLED_BASE_URL=http://127.0.0.1:8081\n"),
        "{env}"
    );
    assert!(env.contains("CONSOLED_MAIL_LOG_LINKS=true\n"), "{env}");
    // The console URL (the mail links) defaults to the base URL inside the service.
    assert!(!env.contains("CONSOLED_CONSOLE_URL="), "{env}");
    assert!(env.contains("consoled: http://127.0.0.1:8081/"), "{env}");

    let env = dry_run(&[("CONSOLED_SMTP_URL", "smtp://user:hunter2@127.0.0.1:2525")]);
    assert!(env.contains("CONSOLED_MAIL_LOG_LINKS=false\n"), "{env}");
    assert!(!env.contains("hunter2"), "{env}");
}

/// A newcomer reads, in this order: what to install, the two commands, the curl session (run from
/// the repository root) and the demo page; the operator's guide is docs/OPERATIONS.md.
#[test]
fn the_readme_opens_with_what_a_newcomer_needs() {
    let readme = include_str!("../README.md");
    let headings: Vec<&str> = readme.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(
        headings[..4],
        [
            "## Prerequisites",
            "## Two commands",
            "## A session with curl",
            "## The demo page"
        ],
        "{headings:?}"
    );
    let curl = &readme[readme.find(HEADING).unwrap()..];
    assert!(
        curl[..curl.find("```sh").unwrap()].contains("at the root of\nthis repository"),
        "the curl session must say where it runs"
    );
    assert!(readme.contains("`docs/OPERATIONS.md`"));
    let ops = include_str!("../docs/OPERATIONS.md");
    for section in [
        "## Reverse proxy",
        "## Several instances",
        "## systemd",
        "## Upgrading",
        "## Backups",
        "## Command-line tools",
        "## Start-up errors",
        "## Health and metrics",
    ] {
        assert!(ops.contains(&format!("\n{section}\n")), "{section}");
    }
}

/// Every repository path the operator's guide and the contrib examples name exists (nginx.conf
/// once pointed at a docs/OPERATIONS.md that did not).
#[test]
fn the_operators_files_name_only_files_that_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let texts = [
        ("docs/OPERATIONS.md", include_str!("../docs/OPERATIONS.md")),
        ("contrib/nginx.conf", include_str!("../contrib/nginx.conf")),
        (
            "contrib/haproxy.cfg",
            include_str!("../contrib/haproxy.cfg"),
        ),
        (
            "contrib/consoled.env",
            include_str!("../contrib/consoled.env"),
        ),
        (
            "contrib/consoled.service",
            include_str!("../contrib/consoled.service"),
        ),
    ];
    let mut named = 0;
    for (file, text) in texts {
        for word in text.split(|c: char| c.is_whitespace() || "`(),\"'".contains(c)) {
            let word = word.trim_end_matches(['.', ':', ';']);
            let ours = [
                "docs/", "contrib/", "tests/", "src/", "scripts/", "benches/",
            ]
            .iter()
            .any(|d| word.starts_with(d));
            if ours && !word.contains('*') {
                named += 1;
                assert!(
                    root.join(word).exists(),
                    "{file} names {word}, which does not exist"
                );
            }
        }
    }
    assert!(named > 10, "only {named} paths found");
}
