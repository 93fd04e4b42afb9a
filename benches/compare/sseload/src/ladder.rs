//! The ladder run against one server: close-to-release, then latency rungs on a growing set of
//! streams, then as many streams as the server holds. Every figure comes from outside the server
//! (HTTP, `/proc`, `/metrics`), so the same code measures both designs.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::client::{self, Readers, Stamps};
use crate::pollers::Pollers;
use crate::procfs::{self, Sample};
use crate::server::{Kind, Server};

/// How the ladder is sized (`--quick` shrinks every rung).
pub struct Plan {
    /// (streams, changes per second, seconds) of each latency rung.
    pub rungs: Vec<(usize, u64, f64)>,
    /// At most this many streams in the "held" rung (the client's own limits).
    pub held_cap: usize,
    /// Streams closed at once for the close-to-release measurement, and how long to wait.
    pub release: (usize, Duration),
    pub pollers: usize,
    /// The rungs run again in each of the other client shapes (`contended`), on a fresh
    /// instance.
    pub contended: Vec<(usize, u64, f64)>,
    pub shapes: Vec<crate::contended::Shape>,
}

#[derive(Serialize, Deserialize, Clone, Default)]
pub struct Rung {
    pub name: String,
    pub streams: usize,
    pub rate: u64,
    pub changes: usize,
    pub expected: u64,
    pub delivered: u64,
    pub resyncs: u64,
    pub lost: u64,
    /// Sorted latencies in microseconds.
    #[serde(skip)]
    pub latencies: Vec<u32>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub server_cpu_s: f64,
    pub client_cpu_s: f64,
    pub wall_s: f64,
    pub cpu_us_per_delivery: f64,
    /// The server while these streams were open, before the changes.
    pub with_streams: Sample,
    /// The client shape, for the rungs of `contended` (empty: the light client's ladder).
    #[serde(default)]
    pub shape: String,
    /// CPU seconds the neighbour processes had during the rung (the neighbour shape).
    #[serde(default)]
    pub neighbours_cpu_s: f64,
}

#[derive(Serialize, Deserialize, Clone, Default)]
pub struct Held {
    pub streams: usize,
    pub stopped_by: String,
    pub open_s: f64,
    pub with_streams: Sample,
    /// A change sent to all of them: deliveries / expected.
    pub delivered: u64,
    pub expected: u64,
    /// Latency of those changes at every stream.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// (streams open, RSS KiB, threads, descriptors) while opening.
    pub curve: Vec<(usize, Sample)>,
}

#[derive(Serialize, Deserialize, Clone, Default)]
pub struct Release {
    pub closed: usize,
    pub wait_s: f64,
    /// Milliseconds from the close to each descriptor the server released.
    pub fd_ms: Vec<f64>,
    /// Milliseconds from the close to each slot `consoled_streams_open` gave back (consoled).
    pub slot_ms: Vec<f64>,
    /// Whether the server had that gauge to read.
    pub slot_gauge: bool,
}

#[derive(Serialize, Deserialize, Clone, Default)]
pub struct Outcome {
    pub server: String,
    pub load_before: String,
    /// CPU the rest of the machine used during this server's run (PostgreSQL included), as a
    /// share of all cores × wall time: how much else competed.
    pub others_share: f64,
    pub idle: Sample,
    pub release: Release,
    pub rungs: Vec<Rung>,
    pub held: Held,
    /// Streams opened at once on a fresh instance (a reconnect storm).
    #[serde(default)]
    pub storm: crate::storm::Storm,
    /// The fan-out rungs in the other client shapes, on a fresh instance (`contended`).
    #[serde(default)]
    pub contended: Vec<Rung>,
}

pub fn run(
    server: &mut Server,
    plan: &Plan,
    db: &mut postgres::Client,
    project: i64,
    secret: &str,
) -> Outcome {
    let auth = format!("Bearer {secret}");
    thread::sleep(Duration::from_secs(1));
    let began = Instant::now();
    let ours = |pid: u32| procfs::cpu_seconds(pid) + procfs::cpu_seconds(std::process::id());
    let cpu_at_start = (procfs::machine_busy_seconds(), ours(server.pid()));
    // The idle sample comes first: a server that keeps closed streams for a while would
    // otherwise count them as part of "idle".
    let mut out = Outcome {
        server: server.kind.name().to_string(),
        load_before: std::fs::read_to_string("/proc/loadavg").unwrap_or_default(),
        idle: procfs::sample(server.pid()),
        ..Outcome::default()
    };
    eprintln!("{}: release after close", out.server);
    out.release = release(server, &auth, plan.release);

    let stamps = Arc::new(Stamps::new(1_000_000));
    let mut seq = 0usize;
    let pollers = Pollers::start(plan.pollers, &stamps);
    for &(n, rate, secs) in &plan.rungs {
        let opened = open_until(server, &pollers, &auth, n);
        if let Some(why) = opened.1 {
            eprintln!("{}: only {} of {n} streams: {why}", out.server, opened.0);
        }
        let name = if n == 1 {
            "1 stream".to_string()
        } else {
            format!("{n} × {rate}/s")
        };
        eprintln!("{}: {name} for {secs} s", out.server);
        // Memory is sampled (`emit`) of streams as they are held, not as they open: consoled gives
        // back what a stream's opening touched of its thread's stack a second after it started.
        // The held rung below waits the same way.
        thread::sleep(SETTLED);
        let rung = emit(
            server,
            &pollers,
            &stamps,
            db,
            project,
            &mut seq,
            (rate, secs),
        );
        out.rungs.push(Rung { name, ..rung });
    }

    // Never below what the rungs already opened.
    let cap = plan.held_cap.max(pollers.open.load(Ordering::SeqCst));
    eprintln!("{}: opening streams until refused (cap {cap})", out.server);
    let curve = Arc::new(Mutex::new(Vec::new()));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (curve, sampling, open, pid) = (
            curve.clone(),
            sampling.clone(),
            pollers.open.clone(),
            server.pid(),
        );
        thread::spawn(move || {
            while sampling.load(Ordering::SeqCst) {
                let s = procfs::sample(pid);
                curve
                    .lock()
                    .expect("curve")
                    .push((open.load(Ordering::SeqCst), s));
                thread::sleep(Duration::from_millis(250));
            }
        })
    };
    let started = Instant::now();
    let (held, why) = open_until(server, &pollers, &auth, cap);
    let open_s = started.elapsed().as_secs_f64();
    thread::sleep(SETTLED);
    sampling.store(false, Ordering::SeqCst);
    let _ = sampler.join();
    let with_streams = procfs::sample(server.pid());
    eprintln!(
        "{}: holding {held} ({})",
        out.server,
        why.as_deref().unwrap_or("cap")
    );
    let check = emit(server, &pollers, &stamps, db, project, &mut seq, (1, 3.0));
    out.held = Held {
        streams: held,
        stopped_by: why.unwrap_or_else(|| format!("the tool's cap ({cap})")),
        open_s,
        with_streams,
        delivered: check.delivered,
        p50_ms: check.p50_ms,
        p99_ms: check.p99_ms,
        // Every stream opened, not only those still open: a lost stream counts as not reached.
        expected: (held * check.changes) as u64,
        // The rungs' samples first: the memory plot starts at one stream.
        curve: out
            .rungs
            .iter()
            .map(|r| (r.streams, r.with_streams))
            .chain(std::mem::take(&mut *curve.lock().expect("curve")))
            .collect(),
    };
    if let Some(status) = server.exited() {
        out.held.stopped_by = format!("{} — server exited: {status}", out.held.stopped_by);
    }
    let cores = thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let others =
        (procfs::machine_busy_seconds() - cpu_at_start.0) - (ours(server.pid()) - cpu_at_start.1);
    out.others_share = others.max(0.0) / (cores * began.elapsed().as_secs_f64());
    pollers.close_all();
    out
}

/// How long after the last stream opened the server's memory is sampled: past consoled's
/// settling of a stream (one second after it starts).
pub const SETTLED: Duration = Duration::from_secs(2);

/// Opens streams until `readers` hold `target` (or the first refusal or failure). Returns the
/// number opened so far and why it stopped short.
pub fn open_until(
    server: &mut Server,
    readers: &dyn Readers,
    auth: &str,
    target: usize,
) -> (usize, Option<String>) {
    let failed: Mutex<Option<String>> = Mutex::new(None);
    let before = readers.open();
    let claimed = AtomicUsize::new(before);
    let opened = AtomicUsize::new(0);
    let addr = server.addr;
    thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| loop {
                if failed.lock().expect("failed").is_some() {
                    return;
                }
                let i = claimed.fetch_add(1, Ordering::SeqCst);
                if i >= target {
                    return;
                }
                match client::open(addr, i, auth) {
                    Ok(s) => {
                        readers.add(s);
                        opened.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(why) => {
                        failed.lock().expect("failed").get_or_insert(why);
                        return;
                    }
                }
            });
        }
    });
    let mut why = failed.into_inner().expect("failed");
    if let Some(status) = server.exited() {
        why = Some(format!("server exited ({status})"));
    }
    // Counted as opened, not as still open: a server that crashed has closed them all by now.
    (before + opened.into_inner(), why)
}

/// Commits changes at `rate` for `secs` and gathers what every open stream received.
pub fn emit(
    server: &Server,
    readers: &dyn Readers,
    stamps: &Stamps,
    db: &mut postgres::Client,
    project: i64,
    seq: &mut usize,
    (rate, secs): (u64, f64),
) -> Rung {
    let streams = readers.open();
    let tally = readers.tally();
    let with_streams = procfs::sample(server.pid());
    let count = ((rate as f64 * secs).round() as usize).max(1);
    let first = *seq;
    let stmt = db
        .prepare("SELECT consoled_notify_change('server', $1, 'update', $2, NULL)")
        .expect("prepare");
    drop(tally.take());
    let resyncs0 = tally.resyncs.load(Ordering::SeqCst);
    let lost0 = tally.lost.load(Ordering::SeqCst);
    let cpu0 = (
        procfs::cpu_seconds(server.pid()),
        procfs::cpu_seconds(std::process::id()),
    );
    let start = Instant::now();
    for k in 0..count {
        let due = start + Duration::from_secs_f64(k as f64 / rate as f64);
        thread::sleep(due.saturating_duration_since(Instant::now()));
        let id = first + k;
        assert!(id < stamps.len(), "more changes than stamps");
        stamps.stamp(id);
        // Autocommit: the notification leaves when this statement's transaction commits.
        db.execute(&stmt, &[&(id as i64), &project])
            .expect("consoled_notify_change");
    }
    *seq = first + count;
    let expected = (streams * count) as u64;
    // Let the last deliveries arrive (at most 30 s: a server that fell behind under contention
    // still delivers, late, and its lateness is what is measured).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut quiet_since = Instant::now();
    let mut last_len = 0;
    loop {
        thread::sleep(Duration::from_millis(50));
        let len = tally.len();
        if len != last_len {
            last_len = len;
            quiet_since = Instant::now();
        }
        let done = len as u64 >= expected;
        if done || Instant::now() > deadline || quiet_since.elapsed() > Duration::from_secs(2) {
            break;
        }
    }
    let wall_s = start.elapsed().as_secs_f64();
    let cpu = (
        procfs::cpu_seconds(server.pid()) - cpu0.0,
        procfs::cpu_seconds(std::process::id()) - cpu0.1,
    );
    let got = tally.take();
    let mut latencies: Vec<u32> = got
        .iter()
        .filter(|(s, _)| (first..first + count).contains(&(*s as usize)))
        .map(|(_, us)| *us)
        .collect();
    latencies.sort_unstable();
    let delivered = latencies.len() as u64;
    // Over what was expected: a delivery that never came counts as later than any that did
    // (NaN when the percentile falls among them), so a server that falls behind cannot look
    // faster for what it did not deliver in time.
    let pct = |p: f64| {
        let at = ((expected as f64 * p) as usize).min((expected as usize).saturating_sub(1));
        latencies.get(at).map_or(f64::NAN, |us| *us as f64 / 1000.0)
    };
    Rung {
        name: String::new(),
        streams,
        rate,
        changes: count,
        expected,
        delivered,
        resyncs: tally.resyncs.load(Ordering::SeqCst) - resyncs0,
        lost: tally.lost.load(Ordering::SeqCst) - lost0,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        max_ms: latencies.last().map_or(f64::NAN, |us| *us as f64 / 1000.0),
        server_cpu_s: cpu.0,
        client_cpu_s: cpu.1,
        wall_s,
        cpu_us_per_delivery: cpu.0 * 1e6 / delivered.max(1) as f64,
        with_streams,
        latencies,
        shape: String::new(),
        neighbours_cpu_s: 0.0,
    }
}

/// Opens `n` streams, closes them all at once, and times the server giving back descriptors
/// (both servers) and stream slots (`consoled_streams_open`, consoled only).
fn release(server: &Server, auth: &str, (n, wait): (usize, Duration)) -> Release {
    let gauge = |s: &Server| match s.kind {
        Kind::Consoled | Kind::ConsoledIndirect => procfs::gauge(s.addr, "consoled_streams_open"),
        Kind::AsyncRef => None,
    };
    let fds_idle = procfs::fds(server.pid());
    let streams: Vec<TcpStream> = (0..n)
        .filter_map(|i| client::open(server.addr, i, auth).ok())
        .collect();
    thread::sleep(Duration::from_millis(300));
    let fds0 = procfs::fds(server.pid());
    let slots0 = gauge(server);
    let closed = streams.len();
    // A stream is released when all of its descriptors are (consoled used two per stream).
    // Rounded: a database connection opened on the way must not count as part of a stream.
    let per_stream = (fds0.saturating_sub(fds_idle) as f64 / closed.max(1) as f64)
        .round()
        .max(1.0);
    let t0 = Instant::now();
    drop(streams);
    let mut out = Release {
        closed,
        wait_s: wait.as_secs_f64(),
        slot_gauge: slots0.is_some(),
        ..Release::default()
    };
    let mut last_gauge = Instant::now() - Duration::from_secs(1);
    while t0.elapsed() < wait
        && (out.fd_ms.len() < closed || slots0.is_some() && out.slot_ms.len() < closed)
    {
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        let gone = (fds0.saturating_sub(procfs::fds(server.pid())) as f64 / per_stream) as usize;
        while out.fd_ms.len() < gone.min(closed) {
            out.fd_ms.push(ms);
        }
        // The gauge costs an HTTP request: read it every 10 ms.
        if let (Some(before), true) = (slots0, last_gauge.elapsed() >= Duration::from_millis(10)) {
            last_gauge = Instant::now();
            if let Some(now) = gauge(server) {
                let freed = (before - now).max(0.0) as usize;
                while out.slot_ms.len() < freed.min(closed) {
                    out.slot_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
                }
            }
        }
        thread::sleep(Duration::from_millis(1));
    }
    out
}
