//! `/metrics` and `/readyz` as an operator's monitoring reads them (issue 23, item 3): every
//! exported family is in the one table of docs/METRICS.md and every family there is exported,
//! with the same type; the process, build, capacity and mail-queue families are there with
//! plausible values; `/readyz` answers within a second whatever the database does.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;

const DOC: &str = include_str!("../docs/METRICS.md");

/// `family -> type` from the `# TYPE` lines.
fn exported(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            (name.to_string(), kind.to_string())
        })
        .collect()
}

/// `family -> type` from the table rows of docs/METRICS.md (`| `name` | type | ...`).
fn documented() -> BTreeMap<String, String> {
    DOC.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| {
            let (name, rest) = l.split_once("` |").unwrap();
            let kind = rest.split('|').next().unwrap().trim();
            (name.to_string(), kind.to_string())
        })
        .collect()
}

/// The value of the first sample line starting with `series` (name and labels).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn every_exported_family_is_documented_and_every_documented_one_exported() {
    let server = TestServer::start();
    let mut c = server.client();
    c.get("/healthz").expect(200);
    let text = String::from_utf8(c.get("/metrics").expect(200).body.clone()).unwrap();
    let exported = exported(&text);
    let documented = documented();
    assert!(
        documented.len() > 30,
        "the table was not read: {documented:?}"
    );
    let missing: Vec<_> = exported
        .keys()
        .filter(|k| !documented.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "exported, not in docs/METRICS.md: {missing:?}"
    );
    let gone: Vec<_> = documented
        .keys()
        .filter(|k| !exported.contains_key(*k))
        .collect();
    assert!(
        gone.is_empty(),
        "in docs/METRICS.md, not exported: {gone:?}"
    );
    for (name, kind) in &exported {
        assert_eq!(&documented[name], kind, "the type of {name}");
    }
    // Every family has its help line too.
    for name in exported.keys() {
        assert!(text.contains(&format!("# HELP {name} ")), "{name}");
    }
}

#[test]
fn process_build_capacity_and_mail_queue_families_say_what_they_measure() {
    let server = TestServer::start();
    let mut c = server.client();
    let text = String::from_utf8(c.get("/metrics").expect(200).body.clone()).unwrap();
    let rss = value(&text, "process_resident_memory_bytes");
    assert!(rss > 1e6 && rss < 1e11, "{rss}");
    let fds = value(&text, "process_open_fds");
    let max_fds = value(&text, "process_max_fds");
    assert!(fds >= 3.0 && fds < max_fds, "{fds} of {max_fds}");
    assert!(value(&text, "process_cpu_seconds_total") > 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value(&text, "process_start_time_seconds");
    // This test process is the server's process.
    assert!(
        started <= now + 1.0 && started > now - 3600.0,
        "{started} vs {now}"
    );
    let version = format!(
        "consoled_build_info{{version=\"{}\",profile=\"",
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&version), "{text}");
    let capacity = &server.app().capacity;
    assert_eq!(
        value(&text, "consoled_connections_max"),
        capacity.max_connections as f64
    );
    assert_eq!(
        value(&text, "consoled_streams_max"),
        capacity.max_streams as f64
    );
    // A queued mail (the sender is off in tests): counted within the gauges' 10 s period.
    c.signup();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = String::from_utf8(c.get("/metrics").body.clone()).unwrap();
        let (due, all) = (
            value(&text, "consoled_mail_queue_due"),
            value(&text, "consoled_mail_queue"),
        );
        assert!(due <= all, "{due} due of {all}");
        if due >= 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "the queued mail was not counted");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `/readyz` against a database that is cut (connections refused) or silent (connections
/// accepted, never answered): 503 within a second each time, then 200 once it is back.
#[test]
fn readyz_answers_within_a_second_whatever_the_database_does() {
    let proxy = DbProxy::start();
    let url = proxy.url();
    let server = TestServer::with(&[("DATABASE_URL", &url)]);
    let mut c = server.client();
    c.get("/readyz").expect(200);
    for (how, go) in [
        ("silent", &DbProxy::stall as &dyn Fn(&DbProxy)),
        ("cut", &DbProxy::cut),
    ] {
        go(&proxy);
        let since = Instant::now();
        let mut answered_503 = 0;
        while since.elapsed() < Duration::from_secs(4) {
            let t = Instant::now();
            let r = c.get("/readyz");
            let took = t.elapsed();
            assert!(
                took < Duration::from_secs(1),
                "{how}: /readyz took {took:?}"
            );
            if r.status == 503 {
                answered_503 += 1;
                assert_eq!(r.code(), "unavailable");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(answered_503 > 10, "{how}: {answered_503} answers were 503");
        proxy.restore();
        let back = Instant::now();
        while c.get("/readyz").status != 200 {
            assert!(
                back.elapsed() < Duration::from_secs(10),
                "{how}: not ready again"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
