//! The hostile scenario of the login benchmark (issue 14): one address floods POST /auth/login
//! with wrong passwords for random accounts while eight users sign in from eight other addresses.
//! The server trusts no proxy, so the socket's source address is the client address: the flood
//! binds its sockets to 127.0.0.1, victim i to 127.0.0.(2 + i).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::{Conn, CSRF, PASSWORD};

mod flood;

/// Keep-alive connections of the flood, all driven by one thread (`flood`); each sends its next
/// request as soon as it has the answer to the last or at its share of the target rate,
/// whichever is later (no pause for a 429: the flood ignores Retry-After).
const FLOOD_CONNECTIONS: usize = 64;
/// The flood's target rate (requests/s, all connections); `BENCH_FLOOD_RPS` overrides it, `0`
/// sends as fast as the machine allows. Paced so that the figures describe a flood of the size
/// the goal names, not one that takes every cycle of a small machine from the server.
const FLOOD_RPS: u64 = 6000;
pub const VICTIMS: usize = 8;
/// Pause between two sign-ins of one victim: eight victims then ask for about a third of what
/// two hash threads can do, so their latency is the flood's doing, not their own queue.
const VICTIM_PAUSE: Duration = Duration::from_millis(250);

pub struct Outcome {
    pub target_rps: u64,
    pub seconds: f64,
    pub flood_requests: u64,
    pub flood_401: u64,
    pub flood_429: u64,
    pub victim_ok: u64,
    pub victim_total: u64,
    pub victim_p50_ms: f64,
    pub victim_p99_ms: f64,
    pub victim_max_ms: f64,
    /// Hashes the server computed during the phase (its /metrics), per second.
    pub hashes_per_s: f64,
    pub refusals_by_budget: u64,
    pub refusals_by_admission: u64,
    /// Sign-ins/s of the clients that honour Retry-After, or hashes/s of the bench's own argon2
    /// threads (when the phase has them).
    pub honest_logins_per_s: f64,
    pub argon2_only: bool,
    /// The argon2 ceiling next to this phase (set by the caller).
    pub ceiling: f64,
}

/// The address of the clients that honour Retry-After (not the flood's).
pub const HONEST_IP: [u8; 4] = [127, 0, 0, 50];
/// Clients that sign in back to back and wait as long as a 429's Retry-After says.
pub const HONEST_CLIENTS: usize = 16;

/// Who signs in during the flood.
pub enum Others<'a> {
    /// One user per address 127.0.0.2…, each signing in every `VICTIM_PAUSE`.
    Victims(&'a [String]),
    /// `HONEST_CLIENTS` clients of this account from `HONEST_IP`, as fast as they are let.
    Honest(&'a str),
    /// No sign-ins: the bench's own argon2 threads (as for the ceiling) hash during the flood,
    /// to show what this machine leaves for hashing while it carries the flood at all.
    Argon2(usize),
}

/// Forgets the flood address's failed sign-ins of earlier runs, so each run starts the same.
fn forget_flooder(database_url: &str) {
    let key = consoled::limits::Bucket::LoginClient(consoled::http::client::Client::of(Some(
        [127, 0, 0, 1].into(),
    )))
    .key();
    let mut db = postgres::Client::connect(database_url, postgres::NoTls).expect("database");
    db.execute("DELETE FROM rate_events WHERE bucket = $1", &[&key])
        .expect("forget the flood's failures");
}

/// Puts the calling thread in `SCHED_IDLE`.
fn idle_scheduling() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a valid sched_param for the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
}

pub fn victim_ip(i: usize) -> IpAddr {
    IpAddr::from([127, 0, 0, 2 + i as u8])
}

pub fn run(addr: SocketAddr, database_url: &str, others: Others, duration: Duration) -> Outcome {
    forget_flooder(database_url);
    let argon2_only = matches!(others, Others::Argon2(_));
    let flooder: IpAddr = [127, 0, 0, 1].into();
    let before = metrics(addr);
    let stop = Arc::new(AtomicBool::new(false));
    let counts: flood::Counts = Arc::new(Default::default());
    let rps: u64 = std::env::var("BENCH_FLOOD_RPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FLOOD_RPS);
    let interval =
        (rps > 0).then(|| Duration::from_secs_f64(FLOOD_CONNECTIONS as f64 / rps as f64));
    // BENCH_FLOOD_IDLE=1: the flood's threads run as SCHED_IDLE, a stand-in for an attacker on
    // another machine (they get only CPU nobody else wants here).
    let idle_flood = std::env::var("BENCH_FLOOD_IDLE").is_ok_and(|v| v == "1");
    let flood = {
        let (stop, counts) = (stop.clone(), counts.clone());
        thread::spawn(move || {
            if idle_flood {
                idle_scheduling();
            }
            flood::run(addr, flooder, FLOOD_CONNECTIONS, interval, &stop, &counts);
        })
    };
    // The flood first, so that the victims arrive in the middle of it.
    thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let start_counts: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let victims: &[String] = match others {
        Others::Victims(v) => v,
        Others::Honest(_) | Others::Argon2(_) => &[],
    };
    let honest_ok = Arc::new(AtomicU64::new(0));
    let honest: Vec<_> = match others {
        Others::Honest(email) => (0..HONEST_CLIENTS)
            .map(|_| {
                let (stop, ok) = (stop.clone(), honest_ok.clone());
                let body = format!(r#"{{"email":"{email}","password":"{PASSWORD}"}}"#);
                thread::spawn(move || {
                    let mut conn = Conn::open_from(addr, Some(HONEST_IP.into()));
                    while !stop.load(Ordering::Relaxed) {
                        let (status, headers) = conn.post("/auth/login", &CSRF, None, &body);
                        match status {
                            200 => drop(ok.fetch_add(1, Ordering::Relaxed)),
                            429 => thread::sleep(Duration::from_secs(super::retry_after(&headers))),
                            s => panic!("an honest login answered {s}"),
                        }
                    }
                })
            })
            .collect(),
        Others::Argon2(threads) => (0..threads)
            .map(|_| {
                let (stop, ok) = (stop.clone(), honest_ok.clone());
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        consoled::hashing::hash_blocking(PASSWORD).expect("a hash");
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect(),
        Others::Victims(_) => Vec::new(),
    };
    let honest_start = honest_ok.load(Ordering::Relaxed);
    let victim_threads: Vec<_> = victims
        .iter()
        .enumerate()
        .map(|(i, email)| {
            let (stop, email) = (stop.clone(), email.clone());
            thread::spawn(move || {
                let body = format!(r#"{{"email":"{email}","password":"{PASSWORD}"}}"#);
                let mut conn = Conn::open_from(addr, Some(victim_ip(i)));
                let mut samples = Vec::new();
                let mut ok = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let (status, _) = conn.post("/auth/login", &CSRF, None, &body);
                    samples.push(t.elapsed());
                    ok += u64::from(status == 200);
                    thread::sleep(VICTIM_PAUSE);
                }
                (ok, samples)
            })
        })
        .collect();
    while started.elapsed() < duration {
        thread::sleep(Duration::from_millis(50));
    }
    let end_counts: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let honest_logins = honest_ok.load(Ordering::Relaxed) - honest_start;
    let seconds = started.elapsed().as_secs_f64();
    let after = metrics(addr);
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    let mut victim_ok = 0;
    for t in victim_threads {
        let (ok, s) = t.join().unwrap();
        victim_ok += ok;
        samples.extend(s);
    }
    for t in honest.into_iter().chain([flood]) {
        t.join().unwrap();
    }
    samples.sort();
    let pct = |p: f64| {
        let i = ((samples.len() as f64 * p) as usize).min(samples.len().max(1) - 1);
        samples.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    let delta = |i: usize| end_counts[i] - start_counts[i];
    let metric_delta = |name: &str| after.get(name) - before.get(name);
    Outcome {
        target_rps: rps,
        seconds,
        flood_requests: delta(0) + delta(1) + delta(2),
        flood_401: delta(0),
        flood_429: delta(1),
        victim_ok,
        victim_total: samples.len() as u64,
        victim_p50_ms: pct(0.50),
        victim_p99_ms: pct(0.99),
        victim_max_ms: pct(1.0),
        hashes_per_s: metric_delta("consoled_hashes_total") as f64 / seconds,
        refusals_by_budget: metric_delta("consoled_signins_refused_total"),
        refusals_by_admission: metric_delta("consoled_hashes_refused_total"),
        honest_logins_per_s: honest_logins as f64 / seconds,
        argon2_only,
        ceiling: f64::NAN,
    }
}

/// The server's counters (`GET /metrics`), from an address of its own.
pub struct Counters(Vec<(String, u64)>);

impl Counters {
    fn get(&self, name: &str) -> u64 {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }
}

pub fn metrics(addr: SocketAddr) -> Counters {
    let mut conn = Conn::open_from(addr, Some([127, 0, 0, 100].into()));
    let text = conn.get_text("/metrics");
    Counters(
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (name, value) = l.rsplit_once(' ')?;
                Some((name.to_string(), value.parse().ok()?))
            })
            .collect(),
    )
}

/// The phases side by side; "–" where a measure does not apply to a phase.
pub fn print_table(phases: &[(&str, &Outcome)]) {
    let names: Vec<&str> = phases.iter().map(|(n, _)| *n).collect();
    println!(
        "| one address floods POST /auth/login | {} | goal |",
        names.join(" | ")
    );
    println!("|---|{}---|", "---|".repeat(phases.len()));
    let row = |label: &str, goal: &str, f: &dyn Fn(&Outcome) -> Option<String>| {
        let cells: Vec<String> = phases
            .iter()
            .map(|(_, o)| f(o).unwrap_or_else(|| "–".into()))
            .collect();
        println!("| {label} | {} | {goal} |", cells.join(" | "));
    };
    let victims = |o: &Outcome| o.victim_total > 0;
    row(
        "flood requests/s from 127.0.0.1 (target)",
        ">= 5000",
        &|o| {
            Some(format!(
                "{:.0} ({})",
                o.flood_requests as f64 / o.seconds,
                o.target_rps
            ))
        },
    );
    row("flood answers 401 / 429 / other", "", &|o| {
        let other = o.flood_requests - o.flood_401 - o.flood_429;
        Some(format!("{} / {} / {other}", o.flood_401, o.flood_429))
    });
    row("refusals: failure budget / hash admission", "", &|o| {
        Some(format!(
            "{} / {}",
            o.refusals_by_budget, o.refusals_by_admission
        ))
    });
    row("victim sign-ins that succeeded", ">= 99 %", &|o| {
        let share = 100.0 * o.victim_ok as f64 / o.victim_total.max(1) as f64;
        victims(o).then(|| format!("{} of {} ({share:.2} %)", o.victim_ok, o.victim_total))
    });
    row("victim sign-in p50 / p99 / max", "p99 < 1000 ms", &|o| {
        victims(o).then(|| {
            format!(
                "{:.0} / {:.0} / {:.0} ms",
                o.victim_p50_ms, o.victim_p99_ms, o.victim_max_ms
            )
        })
    });
    row(
        "Retry-After clients' sign-ins/s (÷ ceiling)",
        ">= 0.9",
        &|o| {
            (!victims(o) && !o.argon2_only).then(|| {
                let rate = o.honest_logins_per_s;
                format!("{rate:.1} ({:.2})", rate / o.ceiling)
            })
        },
    );
    row(
        "the bench's own argon2 threads' hashes/s during the flood (÷ ceiling)",
        "",
        &|o| {
            o.argon2_only.then(|| {
                let rate = o.honest_logins_per_s;
                format!("{rate:.1} ({:.2})", rate / o.ceiling)
            })
        },
    );
    row(
        "argon2 ceiling next to the phase (mean of before and after)",
        "",
        &|o| Some(format!("{:.1}", o.ceiling)),
    );
    row("server hashes/s during the phase (÷ ceiling)", "", &|o| {
        Some(format!(
            "{:.1} ({:.2})",
            o.hashes_per_s,
            o.hashes_per_s / o.ceiling
        ))
    });
}
