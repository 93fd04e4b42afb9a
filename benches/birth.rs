//! What giving a connection a thread of its own costs on this machine: the part of a reconnect
//! storm's opening that a thread-per-connection server pays and an async one does not (issue 38,
//! item 3). Prints a Markdown table:
//!
//! 1. born: 5,000 threads started one after another, as the spawner starts them
//!    (`os::thread::spawn`, the connection stack), each then waiting, as a held stream's does;
//! 2. woken: 5,000 threads made beforehand and waiting on one queue, as the spares wait
//!    (`server::spares`: a mutex and a condition variable, one wake-up per job queued), handed
//!    5,000 jobs one after another, each thread then waiting again, as a held stream's does;
//! 3. the memory each waiting thread keeps resident (the price of making them beforehand).
//!
//! CPU is the whole process's (user + system) from the first start or job to the last thread
//! running, divided by the threads, on two CPUs and pinned to one. Each case runs in a process of
//! its own. Run: `cargo bench --bench birth` (no database needed).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use consoled::os::thread::spawn;
use consoled::server::CONNECTION_STACK;

#[path = "threads/cpu.rs"]
mod cpu;
use cpu::{cpu_seconds, pin_to_cpu0};

const THREADS: usize = 5000;

/// Resident KiB of this process.
fn resident_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

/// Where every thread waits once it runs, as a held stream's thread waits for its next event,
/// until the case ends; counts the threads that got there and the threads that ended.
#[derive(Default)]
struct Hold {
    over: Mutex<bool>,
    bell: Condvar,
    running: AtomicUsize,
    ended: AtomicUsize,
}

impl Hold {
    fn wait(&self) {
        self.running.fetch_add(1, Ordering::AcqRel);
        let mut over = self.over.lock().unwrap();
        while !*over {
            over = self.bell.wait(over).unwrap();
        }
        drop(over);
        self.ended.fetch_add(1, Ordering::AcqRel);
    }

    fn until_running(&self, n: usize) {
        while self.running.load(Ordering::Acquire) < n {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn end(&self, n: usize) {
        *self.over.lock().unwrap() = true;
        self.bell.notify_all();
        while self.ended.load(Ordering::Acquire) < n {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// CPU µs per thread started and running.
fn born() -> f64 {
    let hold = Arc::new(Hold::default());
    let before = cpu_seconds();
    for _ in 0..THREADS {
        let hold = hold.clone();
        spawn(CONNECTION_STACK, Box::new(move || hold.wait())).expect("start a thread");
    }
    hold.until_running(THREADS);
    let used = cpu_seconds() - before;
    hold.end(THREADS);
    used * 1e6 / THREADS as f64
}

/// Threads waiting for jobs, as the spares wait.
#[derive(Default)]
struct Queue {
    jobs: Mutex<VecDeque<usize>>,
    work: Condvar,
}

/// Makes `THREADS` threads that each take one job from the queue and then hold; returns once
/// every one waits on the queue, with the resident KiB they added.
fn waiting(queue: &Arc<Queue>, hold: &Arc<Hold>, asleep: &Arc<AtomicUsize>) -> u64 {
    let fresh = resident_kib();
    for _ in 0..THREADS {
        let (queue, hold, asleep) = (queue.clone(), hold.clone(), asleep.clone());
        spawn(
            CONNECTION_STACK,
            Box::new(move || {
                let mut jobs = queue.jobs.lock().unwrap();
                asleep.fetch_add(1, Ordering::AcqRel);
                while jobs.pop_front().is_none() {
                    jobs = queue.work.wait(jobs).unwrap();
                }
                drop(jobs);
                hold.wait();
            }),
        )
        .expect("start a thread");
    }
    while asleep.load(Ordering::Acquire) < THREADS {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Let the last ones reach their wait.
    std::thread::sleep(Duration::from_millis(200));
    resident_kib() - fresh
}

/// CPU µs per job handed to a waiting thread, until it runs; and resident KiB per waiting thread.
fn woken() -> (f64, f64) {
    let (queue, hold) = (Arc::new(Queue::default()), Arc::new(Hold::default()));
    let added = waiting(&queue, &hold, &Arc::new(AtomicUsize::new(0)));
    let before = cpu_seconds();
    for job in 0..THREADS {
        queue.jobs.lock().unwrap().push_back(job);
        queue.work.notify_one();
    }
    hold.until_running(THREADS);
    let used = cpu_seconds() - before;
    hold.end(THREADS);
    (used * 1e6 / THREADS as f64, added as f64 / THREADS as f64)
}

fn main() {
    // Each case in its own process, so that pinning one does not pin the next and each starts
    // with a fresh heap and no threads.
    if let Some(case) = std::env::args().nth(1).filter(|a| a.starts_with("case=")) {
        let case = &case[5..];
        if case.ends_with("-one-cpu") {
            pin_to_cpu0();
        }
        match case.trim_end_matches("-one-cpu") {
            "born" => println!("{:.1}", born()),
            "woken" => {
                let (us, kib) = woken();
                println!("{us:.1} {kib:.1}");
            }
            other => panic!("unknown case {other}"),
        }
        return;
    }
    let me = std::env::current_exe().expect("own path");
    let run = |case: &str| -> Vec<String> {
        let out = std::process::Command::new(&me)
            .arg(format!("case={case}"))
            .output()
            .expect("run a case");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace().map(str::to_owned).collect()
    };
    let (born2, born1) = (run("born"), run("born-one-cpu"));
    let (woken2, woken1) = (run("woken"), run("woken-one-cpu"));
    let columns = "CPU µs, two CPUs | CPU µs, pinned to one CPU";
    println!("| a thread for each of {THREADS} connections | {columns} |");
    println!("|---|---|---|");
    println!(
        "| born for it ({} KiB stack) | {} | {} |",
        CONNECTION_STACK / 1024,
        born2[0],
        born1[0]
    );
    println!(
        "| woken from those waiting on one queue | {} | {} |",
        woken2[0], woken1[0]
    );
    println!();
    println!(
        "Resident KiB kept by each thread waiting for a connection: {}",
        woken2[1]
    );
}
