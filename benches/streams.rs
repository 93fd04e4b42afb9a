//! Event-stream load benchmark (issue 3). Against a separate `consoled` process, in one run:
//! 1. commit-to-client latency of one stream (goal p50 < 2 ms),
//! 2. commit-to-client latency fanned out to `FANOUT` streams at `RATE` changes/s (goal p99 < 50 ms),
//! 3. `STREAMS` open streams at once (goal 10,000): server RSS and threads per stream.
//!
//! Latency is measured from just before the committing `SELECT consoled_notify_change(...)` (an
//! autocommit statement) to the moment a client thread has read the event from its socket.
//!
//! Limits: the server needs about two file descriptors and (for the first read-timeout seconds
//! of a stream) two threads per stream, the benchmark one descriptor per stream: raise
//! `ulimit -n` above STREAMS + 1000 and keep `kernel.pid_max` / `kernel.threads-max` above
//! 2 x STREAMS + what else runs. The one API token used gets a raised per-token stream limit
//! (`CONSOLED_MAX_STREAMS_PER_PRINCIPAL`): the limit is not what is measured.
//!
//! Run with `make bench` (release build, private PostgreSQL); `STREAMS=2000 make bench` for less.
//! Where `ulimit -n` cannot be raised past 20,000 (a container), about 9,000 streams is the most
//! one server process can hold: each stream has two descriptors (tiny_http clones the socket).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const FANOUT_SECONDS: u64 = 10;
const SINGLE_CHANGES: u64 = 200;

/// A setting from the environment (for experiments), else the value.
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let fanout_n = setting("FANOUT", 1000) as usize;
    let rate = setting("RATE", 50);
    let database_url = std::env::var("DATABASE_URL").expect("DATABASE_URL (make bench sets it)");
    let streams: usize = std::env::var("STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| default_streams(10_000))
        .max(fanout_n);
    let mut db = postgres::Client::connect(&database_url, postgres::NoTls).expect("database");
    let (project, secret) = setup(&mut db);

    // One token opens every stream: raise the limits that are not what is measured.
    let server = common::Server::start(
        &database_url,
        &[
            (
                "CONSOLED_MAX_STREAMS_PER_PRINCIPAL",
                (streams + 10).to_string(),
            ),
            ("CONSOLED_MAX_CONNECTIONS", (streams + 100).to_string()),
            (
                "CONSOLED_MAX_STREAMS_PER_INSTANCE",
                (streams + 10).to_string(),
            ),
        ],
    );
    let addr = server.addr;
    thread::sleep(Duration::from_secs(1));
    let base = Proc::read(server.pid());
    let clock = Instant::now();

    let single = {
        let t0 = Arc::new(Stamps::new(SINGLE_CHANGES as usize));
        let readers = Readers::start(addr, &secret, 1, &t0, clock);
        emit(&mut db, project, &t0, clock, SINGLE_CHANGES, 20);
        readers.finish()
    };

    let t0 = Arc::new(Stamps::new((rate * FANOUT_SECONDS) as usize));
    let readers = Readers::start(addr, &secret, fanout_n, &t0, clock);
    let cpu_before = (cpu_seconds(server.pid()), cpu_seconds(std::process::id()));
    emit(&mut db, project, &t0, clock, rate * FANOUT_SECONDS, rate);
    let cpu = (
        cpu_seconds(server.pid()) - cpu_before.0,
        cpu_seconds(std::process::id()) - cpu_before.1,
    );
    let fanout = readers.finish_keeping_streams();

    let opened_at = Instant::now();
    let held = open_many(addr, &secret, streams - fanout_n);
    let open_seconds = opened_at.elapsed().as_secs_f64();
    let all = Proc::read(server.pid());
    // Connection threads of idle connections end after the read timeout (10 s by default).
    thread::sleep(Duration::from_secs(12));
    let settled = Proc::read(server.pid());
    let open = held.len() + fanout.streams.len();
    drop(held);
    drop(server);

    println!(
        "| CPU seconds during the fan-out phase: server / clients | {:.1} / {:.1} | |",
        cpu.0, cpu.1
    );
    report(
        (fanout_n, rate),
        streams,
        open,
        open_seconds,
        &single,
        &fanout,
        &base,
        &all,
        &settled,
    );
}

#[allow(clippy::too_many_arguments)]
fn report(
    (fanout_n, rate): (usize, u64),
    goal: usize,
    open: usize,
    open_seconds: f64,
    single: &Outcome,
    fanout: &Outcome,
    base: &Proc,
    all: &Proc,
    settled: &Proc,
) {
    let per = |a: u64, b: u64| (a.saturating_sub(b)) as f64 / open as f64;
    println!("| measure | value | goal |");
    println!("|---|---|---|");
    println!(
        "| single stream: commit-to-client p50 / p99 ({} changes) | {:.2} / {:.2} ms | p50 < 2 ms |",
        single.samples.len(),
        single.pct(0.50),
        single.pct(0.99)
    );
    println!(
        "| {fanout_n} streams, {rate} changes/s for {FANOUT_SECONDS} s: p50 / p99 | {:.2} / {:.2} ms | p99 < 50 ms |",
        fanout.pct(0.50),
        fanout.pct(0.99)
    );
    println!(
        "| fan-out deliveries received / expected, resyncs | {} / {}, {} | all, 0 |",
        fanout.samples.len(),
        fanout_n as u64 * rate * FANOUT_SECONDS,
        fanout.resyncs
    );
    println!("| streams open at once | {open} (opened in {open_seconds:.1} s) | {goal} |");
    println!(
        "| server RSS: before / with all streams / 12 s later | {:.0} / {:.0} / {:.0} MB | |",
        base.rss_kib as f64 / 1024.0,
        all.rss_kib as f64 / 1024.0,
        settled.rss_kib as f64 / 1024.0
    );
    println!(
        "| RSS per stream (with all / 12 s later) | {:.1} / {:.1} KiB | |",
        per(all.rss_kib, base.rss_kib),
        per(settled.rss_kib, base.rss_kib)
    );
    println!(
        "| threads per stream (with all / 12 s later) | {:.2} / {:.2} | |",
        per(all.threads, base.threads),
        per(settled.threads, base.threads)
    );
    println!(
        "| file descriptors per stream | {:.2} | |",
        per(all.fds, base.fds)
    );
}

/// An organization, a project and an API token of it, straight in the database.
fn setup(db: &mut postgres::Client) -> (i64, String) {
    let org: i64 = db
        .query_one(
            "INSERT INTO organizations (name, kind) VALUES ('bench', 'team') RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    let project = consoled::db::orgs::create_project(db, org, "streams")
        .unwrap()
        .expect("new project");
    let (_, secret) = consoled::db::tokens::create(db, project.id, "bench").unwrap();
    (project.id, secret)
}

/// Emission times, by change sequence number, in nanoseconds since `clock`.
struct Stamps(Vec<AtomicU64>);

impl Stamps {
    fn new(n: usize) -> Stamps {
        Stamps((0..n).map(|_| AtomicU64::new(0)).collect())
    }
}

/// Emits `count` changes at `rate` per second; change id = sequence number.
fn emit(
    db: &mut postgres::Client,
    project: i64,
    t0: &Stamps,
    clock: Instant,
    count: u64,
    rate: u64,
) {
    let start = Instant::now();
    for seq in 0..count {
        let due = start + Duration::from_secs_f64(seq as f64 / rate as f64);
        thread::sleep(due.saturating_duration_since(Instant::now()));
        t0.0[seq as usize].store(clock.elapsed().as_nanos() as u64, Ordering::SeqCst);
        db.execute(
            "SELECT consoled_notify_change('server', $1, 'update', $2, NULL)",
            &[&(seq as i64), &project],
        )
        .unwrap();
    }
    // Let the last deliveries arrive.
    thread::sleep(Duration::from_millis(500));
}

struct Outcome {
    samples: Vec<f64>,
    resyncs: usize,
    streams: Vec<TcpStream>,
}

impl Outcome {
    fn pct(&self, p: f64) -> f64 {
        if self.samples.is_empty() {
            return f64::NAN;
        }
        self.samples[((self.samples.len() as f64 * p) as usize).min(self.samples.len() - 1)]
    }
}

/// Client threads, one per stream, recording the latency of each change they read.
struct Readers {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<(Vec<f64>, usize, TcpStream)>>,
}

impl Readers {
    fn start(
        addr: SocketAddr,
        secret: &str,
        n: usize,
        t0: &Arc<Stamps>,
        clock: Instant,
    ) -> Readers {
        let stop = Arc::new(AtomicBool::new(false));
        let streams = open_many(addr, secret, n);
        let threads = streams
            .into_iter()
            .map(|s| {
                let (stop, t0) = (stop.clone(), t0.clone());
                thread::Builder::new()
                    .stack_size(128 * 1024)
                    .spawn(move || read_changes(s, &stop, &t0, clock))
                    .expect("reader thread")
            })
            .collect();
        Readers { stop, threads }
    }

    fn finish_keeping_streams(self) -> Outcome {
        self.stop.store(true, Ordering::SeqCst);
        let mut out = Outcome {
            samples: Vec::new(),
            resyncs: 0,
            streams: Vec::new(),
        };
        for t in self.threads {
            let (samples, resyncs, stream) = t.join().unwrap();
            out.samples.extend(samples);
            out.resyncs += resyncs;
            out.streams.push(stream);
        }
        out.samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
        out
    }

    fn finish(self) -> Outcome {
        let mut out = self.finish_keeping_streams();
        out.streams.clear();
        out
    }
}

fn read_changes(
    mut s: TcpStream,
    stop: &AtomicBool,
    t0: &Stamps,
    clock: Instant,
) -> (Vec<f64>, usize, TcpStream) {
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut samples = Vec::new();
    let mut resyncs = 0;
    let mut pending = String::new();
    let mut buf = [0u8; 8192];
    while !stop.load(Ordering::SeqCst) {
        let n = match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => continue,
        };
        let now = clock.elapsed().as_nanos() as u64;
        pending.push_str(&String::from_utf8_lossy(&buf[..n]));
        // Each event is one chunk; scanning the text for markers is enough here.
        while let Some(i) = pending.find("\n\n") {
            let block: String = pending.drain(..i + 2).collect();
            if block.contains("event: resync") {
                resyncs += 1;
            }
            if let Some(seq) = change_id(&block) {
                let sent = t0.0[seq].load(Ordering::SeqCst);
                samples.push((now.saturating_sub(sent)) as f64 / 1e6);
            }
        }
    }
    (samples, resyncs, s)
}

fn change_id(block: &str) -> Option<usize> {
    let rest = &block[block.find("\"id\":")? + 5..];
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok()
}

/// Opens `n` token streams with a few threads; each has had its head and `ready` read.
fn open_many(addr: SocketAddr, secret: &str, n: usize) -> Vec<TcpStream> {
    let opened = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let openers = 8.min(n.max(1));
    let threads: Vec<_> = (0..openers)
        .map(|i| {
            let (opened, secret) = (opened.clone(), secret.to_string());
            let count = n / openers + usize::from(i < n % openers);
            thread::spawn(move || {
                for _ in 0..count {
                    let s = open_stream(addr, &secret);
                    opened.lock().unwrap().push(s);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("opening a stream failed");
    }
    Arc::try_unwrap(opened).unwrap().into_inner().unwrap()
}

fn open_stream(addr: SocketAddr, secret: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    let req =
        format!("GET /v1/events HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {secret}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("event: ready\n") {
        let n = s.read(&mut buf).expect("stream head");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        assert!(
            got.starts_with(b"HTTP/1.1 200") || got.len() < 12,
            "refused: {}",
            String::from_utf8_lossy(&got)
        );
    }
    s
}

/// User + system CPU time of a process so far (clock ticks of 10 ms).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Fields 14 and 15 of stat; index 11 and 12 after the name and state.
    (ticks(11) + ticks(12)) / 100.0
}

struct Proc {
    rss_kib: u64,
    threads: u64,
    fds: u64,
}

impl Proc {
    fn read(pid: u32) -> Proc {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
        Proc {
            rss_kib: field("VmRSS:"),
            threads: field("Threads:"),
            fds,
        }
    }
}

/// `goal` streams, or fewer when the open-file limit cannot hold them: the server needs two
/// descriptors per stream (tiny_http clones each socket) plus a few hundred of its own.
fn default_streams(goal: usize) -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let hard: usize = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX);
    let fits = hard.saturating_sub(600) / 2;
    if fits < goal {
        eprintln!("streams: the open-file limit ({hard}) holds {fits} streams, not {goal}");
    }
    goal.min(fits)
}
