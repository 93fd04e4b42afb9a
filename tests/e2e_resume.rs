//! The demo page in a real browser (Debian's headless chromium) across a server restart (issue
//! 35, item 5): two instances behind the shipped `contrib/haproxy.cfg`; the page signs up and
//! lists a change; the instance holding its stream stops (`SIGTERM`, as in a rolling restart) and
//! starts again; a change made while the page was away arrives; and the page kept what it showed
//! (a plain `ready` would have emptied its list of changes and reloaded): its `EventSource` sent
//! `Last-Event-ID`, the other instance resumed it.
//!
//! Ignored by `make test`, as tests/e2e.rs: `make e2e` installs chromium and HAProxy when
//! missing (as root) and runs it. The screenshot is kept at target/e2e/resume.png
//! (target/e2e/failure.png when a step fails).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::binary::Spawned;
use common::proxies::{self, Proxy};
use common::webdriver::{self, Browser};

const BIN: &str = env!("CARGO_BIN_EXE_consoled");
const STEP: Duration = Duration::from_secs(20);

fn emit(id: i64, project: i64, org: i64) {
    let out = Command::new(BIN)
        .args(["emit", "--type", "server", "--id", &id.to_string(), "--op"])
        .args(["update", "--project", &project.to_string()])
        .args(["--org", &org.to_string()])
        .env("DATABASE_URL", common::database_url())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run consoled emit");
    assert!(
        out.status.success(),
        "consoled emit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The resource ids in the page's list of changes, newest first.
fn listed(b: &Browser) -> Vec<String> {
    b.text("#changes")
        .lines()
        .filter_map(|row| row.split_whitespace().nth(2).map(str::to_string))
        .collect()
}

/// `consoled_streams_open` of one instance, asked directly.
fn streams_open(instance: &Spawned) -> u64 {
    let r = common::raw_request(instance.addr, "GET", "/metrics", &[], b"");
    String::from_utf8_lossy(&r.body)
        .lines()
        .find_map(|l| l.strip_prefix("consoled_streams_open "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

#[test]
#[ignore = "needs chromium, chromedriver and HAProxy; run by `make e2e`"]
fn the_page_keeps_its_state_across_a_restart_and_shows_what_changed_meanwhile() {
    assert!(
        webdriver::available(),
        "chromium or chromedriver is missing: run scripts/e2e-deps.sh (as root) or `make e2e`"
    );
    let haproxy = proxies::find("haproxy")
        .expect("HAProxy is missing: run scripts/cluster-deps.sh (as root) or `make e2e`");
    let ports = [webdriver::free_port(), webdriver::free_port()];
    let upstreams = ports.map(|p| format!("127.0.0.1:{p}").parse().unwrap());
    // The console front end is the demo page, which consoled serves (`CONSOLED_DEMO`): the
    // first instance serves it.
    let proxy = Proxy::haproxy_for(&haproxy, &upstreams, Some(upstreams[0]));
    let url = format!("http://{}", proxy.addr);
    let start = |port: u16| Spawned::start_on(BIN, port, &[("CONSOLED_BASE_URL", &url)]);
    let mut instances = ports.map(&start);
    // Its first checks ran before the instances started (inter 5 s, rise 2).
    proxy.wait_all_up(Duration::from_secs(30));

    let browser = Browser::start();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        restart_flow(&browser, &proxy, &url, &mut instances, &start)
    }));
    let shot = if outcome.is_ok() {
        "resume.png"
    } else {
        "failure.png"
    };
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/e2e")
        .join(shot);
    browser.screenshot(&path);
    eprintln!("e2e: screenshot in {}", path.display());
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn restart_flow(
    b: &Browser,
    proxy: &Proxy,
    url: &str,
    instances: &mut [Spawned; 2],
    start: &dyn Fn(u16) -> Spawned,
) {
    let email = common::unique_email();
    b.goto(&format!("{url}/"));
    b.wait("the signup form", STEP, |b| b.displayed("#signup-form"));
    b.type_into("#signup-email", &email);
    b.type_into("#signup-name", "Resume User");
    b.type_into("#signup-password", common::PASSWORD);
    b.click("#signup-submit");
    b.wait("the stream's ready", STEP, |b| {
        b.text("#stream-status").starts_with("ready: reloaded at ")
    });
    let org: i64 = b.text("#orgs tr td").parse().expect("an organization id");
    let project: i64 = common::db()
        .query_one("SELECT id FROM projects WHERE org_id = $1", &[&org])
        .unwrap()
        .get(0);
    let base = 700_000 + i64::from(std::process::id() % 100_000) * 10;
    emit(base, project, org);
    b.wait("the first change listed", STEP, |b| {
        listed(b).first() == Some(&base.to_string())
    });

    // A rolling restart of the instance holding the page's stream (docs/OPERATIONS.md): out
    // of HAProxy's rotation, stopped; a change is made while the page is away (its EventSource
    // waits 3 s before it reconnects); started again, and back in the rotation once the page
    // is live on the other instance.
    let holder = (0..2)
        .find(|i| streams_open(&instances[*i]) == 1)
        .expect("one instance holds the page's stream");
    let port = instances[holder].addr.port();
    let server = format!("consoled{}", holder + 1);
    proxy.set_server_state(&server, "maint");
    let stopped = instances[holder].terminate(Duration::from_secs(15));
    assert!(stopped, "a clean stop");
    emit(base + 1, project, org);
    instances[holder] = start(port);
    let resumed = b.try_wait(STEP, |b| {
        b.text("#stream-status").starts_with("resumed at ")
    });
    assert!(
        resumed,
        "not resumed: the page says {:?}",
        b.text("#stream-status")
    );
    proxy.set_server_state(&server, "ready");
    b.wait("the change made while away", STEP, |b| {
        listed(b).first() == Some(&(base + 1).to_string())
    });
    // Kept, not reloaded: a plain `ready` empties the list.
    assert_eq!(
        listed(b)[..2],
        [(base + 1).to_string(), base.to_string()],
        "{}",
        b.text("#changes")
    );
    assert!(b.text("#who").contains(&email), "still signed in");
}
