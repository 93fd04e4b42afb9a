//! What waking a parked thread costs on this machine: the floor under a thread-per-stream
//! fan-out (issue 13, item 6). Every delivery to an idle stream is one `unpark` of its thread, a
//! switch in, and a `park`; the async reference pays none of these. Prints a Markdown table:
//!
//! 1. ping-pong: two threads wake each other in turn (caches warm), on two CPUs and on one;
//! 2. fan-out: one thread wakes 1,000 parked threads, 200 rounds, each woken thread counts and
//!    parks again (what the hub does for one change to 1,000 streams), with and without
//!    `SCHED_BATCH` (what consoled's stream threads use), on two CPUs and pinned to one.
//!
//! CPU is the whole process's (user + system) divided by the wake-ups. Run: `cargo bench --bench
//! wake` (no database needed).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

#[path = "threads/cpu.rs"]
mod cpu;
use cpu::{cpu_seconds, pin_to_cpu0};

const PING_PONGS: u64 = 100_000;
const FAN_THREADS: usize = 1000;
const FAN_ROUNDS: u64 = 200;

fn batch_scheduling() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a valid sched_param for the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
}

/// CPU µs per wake-up of two threads waking each other in turn.
fn ping_pong() -> f64 {
    let turn = Arc::new(AtomicU64::new(0));
    let main = thread::current();
    let t = turn.clone();
    let other = thread::spawn(move || {
        for i in 0..PING_PONGS {
            while t.load(Ordering::Acquire) != 2 * i + 1 {
                thread::park();
            }
            t.store(2 * i + 2, Ordering::Release);
            main.unpark();
        }
    });
    let peer = other.thread().clone();
    let before = cpu_seconds();
    for i in 0..PING_PONGS {
        turn.store(2 * i + 1, Ordering::Release);
        peer.unpark();
        while turn.load(Ordering::Acquire) != 2 * i + 2 {
            thread::park();
        }
    }
    let used = cpu_seconds() - before;
    other.join().unwrap();
    used * 1e6 / (2 * PING_PONGS) as f64
}

/// CPU µs per wake-up of one thread waking `FAN_THREADS` parked threads, `FAN_ROUNDS` times.
fn fan_out(batch: bool) -> f64 {
    let round = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..FAN_THREADS)
        .map(|_| {
            let (round, done) = (round.clone(), done.clone());
            thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    if batch {
                        batch_scheduling();
                    }
                    let mut seen = 0;
                    loop {
                        match round.load(Ordering::Acquire) {
                            u64::MAX => return,
                            r if r != seen => {
                                seen = r;
                                done.fetch_add(1, Ordering::AcqRel);
                            }
                            _ => {}
                        }
                        thread::park_timeout(Duration::from_secs(5));
                    }
                })
                .expect("spawn")
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    let handles: Vec<_> = threads.iter().map(|t| t.thread().clone()).collect();
    let before = cpu_seconds();
    for r in 1..=FAN_ROUNDS {
        round.store(r, Ordering::Release);
        for h in &handles {
            h.unpark();
        }
        while done.load(Ordering::Acquire) < FAN_THREADS * r as usize {
            thread::sleep(Duration::from_micros(200));
        }
        // Let every thread park again, as between two changes.
        thread::sleep(Duration::from_millis(5));
    }
    let used = cpu_seconds() - before;
    round.store(u64::MAX, Ordering::Release);
    handles.iter().for_each(|h| h.unpark());
    threads.into_iter().for_each(|t| t.join().unwrap());
    used * 1e6 / (FAN_THREADS as u64 * FAN_ROUNDS) as f64
}

fn main() {
    // Each case in its own process, so that pinning one does not pin the next.
    if let Some(case) = std::env::args().nth(1).filter(|a| a.starts_with("case=")) {
        let case = &case[5..];
        if case.ends_with("-one-cpu") {
            pin_to_cpu0();
        }
        let us = match case.trim_end_matches("-one-cpu") {
            "ping-pong" => ping_pong(),
            "fan-out" => fan_out(false),
            "fan-out-batch" => fan_out(true),
            other => panic!("unknown case {other}"),
        };
        println!("{us:.2}");
        return;
    }
    let me = std::env::current_exe().expect("own path");
    let run = |case: &str| -> String {
        let out = std::process::Command::new(&me)
            .arg(format!("case={case}"))
            .output()
            .expect("run a case");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    println!("| CPU µs per wake-up (wake + switch in + park) | two CPUs | pinned to one CPU |");
    println!("|---|---|---|");
    for (label, case) in [
        ("ping-pong, 2 threads (warm)", "ping-pong"),
        ("fan-out, 1 → 1,000 threads", "fan-out"),
        ("fan-out, 1 → 1,000 threads, SCHED_BATCH", "fan-out-batch"),
    ] {
        println!(
            "| {label} | {} | {} |",
            run(case),
            run(&format!("{case}-one-cpu"))
        );
    }
}
