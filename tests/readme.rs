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
    assert!(rest.contains("token csd_"), "{ids}");

    // The stream: ready first, then the emitted change with the token's project.
    let ready = stdout.find("event: ready\ndata: {}").expect("ready");
    let change = format!(
        "event: change\ndata: {{\"type\":\"server\",\"id\":42,\"op\":\"update\",\"project_id\":{project},\"org_id\":{org}}}"
    );
    let arrived = stdout
        .find(&change)
        .unwrap_or_else(|| panic!("no {change:?} in:\n{stdout}\n{stderr}"));
    assert!(ready < arrived, "{stdout}");
    assert!(stdout.contains("retry: 3000\nevent: ready"), "{stdout}");
}
