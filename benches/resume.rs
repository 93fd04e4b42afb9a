//! A rolling restart with streams that resume (issue 35, item 4). Two instances behind Debian's
//! HAProxy running the shipped `contrib/haproxy.cfg`, `STREAMS` (3,000) `EventSource`-like
//! clients (API tokens, five streams each, over `PROJECTS` projects, from 16 loopback
//! addresses) that send `Last-Event-ID` when they reconnect, changes committed at `RATE` (50) a
//! second round the projects. After `HOLD` seconds, a rolling restart as docs/OPERATIONS.md
//! describes it: instance A is taken out of HAProxy's rotation (the runtime API's `maint`), gets
//! `SIGTERM`, exits and starts again on its port, and is put back (`ready`) once its streams are
//! live on B; `SETTLE` seconds later, B the same; then `TAIL` seconds more. `DRAIN=0` leaves the
//! rotation alone (a plain `SIGTERM` and start): the clients of the instance that stops may then
//! reconnect to its successor, which never heard their last change.
//!
//! Measured, from the clients' side: the share of reconnects answered `ready` with
//! `{"resumed":true}` (goal at least 99 %), the changes lost by streams whose every reconnect
//! resumed (goal 0: each client's project's changes committed after its first `ready`, less
//! those it received), the changes received twice, and for each stop the time from `SIGTERM`
//! until every stream is live again. `CONSOLED_BIN` picks the binary: `benches/resume.sh` runs
//! the code before issue 35 (the baseline, which sends no ids: 0 % resumed) and this tree.
//!
//! Run with `make bench-resume` (`STREAMS=300` for a small run). Each run has a database of its
//! own on the server of `DATABASE_URL`.

#[path = "resume/client.rs"]
mod client;
#[path = "resume/cluster.rs"]
mod cluster;

#[allow(dead_code)] // the nginx half is the tests'
#[path = "../tests/common/proxies.rs"]
mod proxies;

/// What `proxies` needs of the tests' helpers: a directory removed on drop.
mod tempdir {
    pub struct TempDir(pub std::path::PathBuf);

    impl TempDir {
        pub fn new() -> TempDir {
            static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let name = format!("consoled-resume-{}-{n}", std::process::id());
            let p = std::env::temp_dir().join(name);
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use client::{Answer, Record, Shared};
use cluster::{Database, Haproxy, Instance};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Streams per API token (the per-token limit is 10: a reconnect may meet its old lease).
const PER_TOKEN: usize = 5;

/// A change the emitter committed: its project's index and when the statement started.
struct Emitted {
    project: usize,
    began: Instant,
}

fn main() {
    let streams = setting("STREAMS", 3000) as usize;
    let projects = setting("PROJECTS", 30) as usize;
    let rate = setting("RATE", 50);
    let (hold, settle, tail) = (
        Duration::from_secs(setting("HOLD", 10)),
        Duration::from_secs(setting("SETTLE", 20)),
        Duration::from_secs(setting("TAIL", 10)),
    );
    let bin = std::env::var("CONSOLED_BIN").unwrap_or_else(|_| "target/release/consoled".into());
    let label = std::env::var("LABEL").unwrap_or_else(|_| bin.clone());
    let admin = std::env::var("DATABASE_URL").expect("DATABASE_URL (make bench-resume sets it)");
    let db = Database::create(
        &admin,
        if label.contains("before") {
            "base"
        } else {
            "new"
        },
    );
    let logs = tempdir::TempDir::new();
    let ports = [cluster::free_port(), cluster::free_port()];
    let log = |i: usize| logs.0.join(format!("instance-{i}.log"));
    let mut instances: Vec<Instance> = (0..2)
        .map(|i| Instance::start(&bin, &db.url, ports[i], &log(i)))
        .collect();
    let upstreams: Vec<_> = instances.iter().map(|i| i.addr).collect();
    let proxy = Haproxy::start(&upstreams);
    let (project_ids, org, tokens) = setup(&db.url, projects, streams.div_ceil(PER_TOKEN));
    let tokens: Vec<String> = (0..streams)
        .map(|i| tokens[i / PER_TOKEN].clone())
        .collect();
    let project_of = |stream: usize| (stream / PER_TOKEN) % projects;

    let shared = Arc::new(Shared {
        proxy: proxy.addr,
        stop: AtomicBool::new(false),
        live: AtomicUsize::new(0),
    });
    let opened = Instant::now();
    let clients = client::start(tokens, shared.clone());
    wait_live(&shared, streams, Duration::from_secs(120)).expect("every stream opens");
    eprintln!("{streams} streams live in {:?}", opened.elapsed());

    let emitted = Arc::new(Mutex::new(Vec::new()));
    let emitting = Arc::new(AtomicBool::new(true));
    let emitter = {
        let (url, ids, emitted, on) = (
            db.url.clone(),
            project_ids.clone(),
            emitted.clone(),
            emitting.clone(),
        );
        thread::spawn(move || emit(&url, &ids, org, rate, &emitted, &on))
    };
    thread::sleep(hold);
    let drain = setting("DRAIN", 1) == 1;
    let mut back = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        if drain {
            proxy.set_state(i + 1, "maint");
        }
        let stopped = Instant::now();
        instances[i].stop();
        instances[i] = Instance::start(&bin, &db.url, *port, &log(i));
        let live = wait_live(&shared, streams, Duration::from_secs(120));
        back.push(live.map(|_| stopped.elapsed()));
        eprintln!(
            "instance {i} restarted; every stream live again after {:?}",
            back[i]
        );
        if drain {
            proxy.set_state(i + 1, "ready");
        }
        thread::sleep(if i == 0 { settle } else { tail });
    }
    emitting.store(false, Ordering::SeqCst);
    emitter.join().expect("the emitter");
    thread::sleep(Duration::from_secs(3)); // the last deliveries
    shared.stop.store(true, Ordering::SeqCst);
    let records: Vec<Record> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    drop(proxy);
    drop(instances);
    let emitted = emitted.lock().unwrap();
    report(&label, &records, &emitted, &project_of, &back);
}

/// Polls until `n` streams are live; how long it took, or `None` past `limit`.
fn wait_live(shared: &Shared, n: usize, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while shared.live.load(Ordering::SeqCst) < n {
        if start.elapsed() > limit {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
    Some(start.elapsed())
}

/// A team organization with `projects` projects and `tokens` API tokens spread over them:
/// (project ids, organization id, token secrets).
fn setup(url: &str, projects: usize, tokens: usize) -> (Vec<i64>, i64, Vec<String>) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).expect("the run's database");
    let org: i64 = c
        .query_one(
            "INSERT INTO organizations (name, kind) VALUES ('bench', 'team') RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    let ids: Vec<i64> = (0..projects)
        .map(|i| {
            c.query_one(
                "INSERT INTO projects (org_id, name) VALUES ($1, $2) RETURNING id",
                &[&org, &format!("p{i}")],
            )
            .unwrap()
            .get(0)
        })
        .collect();
    let secrets = (0..tokens)
        .map(|i| {
            consoled::db::tokens::create(&mut c, ids[i % projects], &format!("t{i}"))
                .unwrap()
                .1
        })
        .collect();
    (ids, org, secrets)
}

/// Commits `rate` changes a second, round the projects, while `on`; the change's `id` is its
/// sequence number.
fn emit(url: &str, ids: &[i64], org: i64, rate: u64, out: &Mutex<Vec<Emitted>>, on: &AtomicBool) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).expect("the run's database");
    let every = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now();
    let mut seq: u64 = 0;
    while on.load(Ordering::SeqCst) {
        let due = start + every * seq as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        let project = seq as usize % ids.len();
        let began = Instant::now();
        c.execute(
            "SELECT consoled_notify_change('server', $1, 'update', $2, $3)",
            &[&(seq as i64), &ids[project], &org],
        )
        .expect("a change");
        out.lock().unwrap().push(Emitted { project, began });
        seq += 1;
    }
}

fn report(
    label: &str,
    records: &[Record],
    emitted: &[Emitted],
    project_of: &dyn Fn(usize) -> usize,
    back: &[Option<Duration>],
) {
    let answers = |a: Answer| -> usize {
        let of = |r: &Record| r.reconnects.iter().filter(|c| c.answer == a).count();
        records.iter().map(of).sum()
    };
    let (resumed, ready) = (answers(Answer::Resumed), answers(Answer::Ready));
    // Changes not received, by streams whose every reconnect resumed (the goal: none) and by
    // the others (which reloaded instead: what a reload had to make up for).
    let (mut lost, mut missed) = (0, 0);
    let mut resumed_streams = 0;
    let mut duplicates = 0;
    for (i, r) in records.iter().enumerate() {
        let got: HashSet<u64> = r.received.iter().copied().collect();
        duplicates += r.received.len() - got.len();
        let Some(first) = r.first_ready else {
            continue;
        };
        let not_received = emitted
            .iter()
            .enumerate()
            .filter(|(seq, e)| {
                e.project == project_of(i) && e.began > first && !got.contains(&(*seq as u64))
            })
            .count();
        let resumed = |c: &client::Reconnect| c.answer == Answer::Resumed;
        if r.failures == 0 && r.reconnects.iter().all(resumed) {
            resumed_streams += 1;
            lost += not_received;
        } else {
            missed += not_received;
        }
    }
    let mut away: Vec<Duration> = records
        .iter()
        .flat_map(|r| r.reconnects.iter().map(|c| c.ready - c.dropped))
        .collect();
    away.sort();
    let at = |q: f64| away.get(((away.len() as f64 * q) as usize).min(away.len().max(1) - 1));
    let away = match (at(0.5), away.last()) {
        (Some(p50), Some(max)) => format!("{:.1} / {:.1} s", p50.as_secs_f64(), max.as_secs_f64()),
        _ => "-".into(),
    };
    let sum = |f: fn(&Record) -> u32| records.iter().map(f).sum::<u32>();
    let received: usize = records.iter().map(|r| r.received.len()).sum();
    eprintln!("{received} changes received by all streams together");
    let share = 100.0 * resumed as f64 / (resumed + ready).max(1) as f64;
    let secs =
        |d: &Option<Duration>| d.map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64()));
    if std::env::var("HEADER").map_or(true, |v| v != "0") {
        println!(
            "| code | streams | changes | reconnects | resumed | plain `ready` | share resumed | \
             lost by resumed streams (streams) | missed by reloaded streams | duplicates | \
             away p50 / max | \
             live again after A's stop | after B's stop | non-200 | refused | resync |"
        );
        println!(
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
    }
    println!(
        "| {label} | {} | {} | {} | {resumed} | {ready} | {share:.1} % | {lost} ({resumed_streams}) | \
         {missed} | {duplicates} | {away} | {} | {} | {} | {} | {} |",
        records.len(),
        emitted.len(),
        resumed + ready,
        secs(&back[0]),
        secs(&back[1]),
        sum(|r| r.failures),
        sum(|r| r.refusals),
        sum(|r| r.resyncs),
    );
}
