//! A quiet server sleeps: its request workers and the connection threads waiting for a
//! connection do not wake while no request comes (an idle instance on a shared host costs no CPU
//! for them), and they still end when the server stops. Read from the real binary's
//! `/proc/<pid>/task/*/status`: a thread's voluntary context switches count the times it went to
//! sleep, so a thread asleep the whole time adds none, whatever else the machine runs.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::binary::Spawned;
use common::Client;

/// Voluntary context switches of each thread of `pid` whose name starts with one of `names`.
fn sleeps(pid: u32, names: &[&str]) -> HashMap<String, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let (Ok(comm), Ok(status)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("status")),
        ) else {
            continue;
        };
        let comm = comm.trim_end().to_owned();
        if !names.iter().any(|n| comm.starts_with(n)) {
            continue;
        }
        let switches = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        out.insert(
            task.file_name().to_string_lossy().into_owned(),
            (comm, switches),
        );
    }
    out
}

/// Over a quiet stretch of several seconds, no request worker and no waiting connection thread
/// wakes up: they wait for work without a timer (they used to look every 250 ms and every second
/// whether the server had stopped, about 1,100 wake-ups a second with 32 workers). The server
/// answers as before, and stops at once when asked.
#[test]
fn a_quiet_servers_workers_and_waiting_threads_sleep() {
    let mut server = Spawned::start(env!("CARGO_BIN_EXE_consoled"), &[("CONSOLED_WORKERS", "8")]);
    let mut c = Client::new(server.addr);
    assert_eq!(c.get("/healthz").status, 200);
    drop(c);
    // Let the connection's thread go back to waiting.
    std::thread::sleep(Duration::from_millis(500));
    let names = ["worker-", "conn-spare"];
    let before = sleeps(server.pid(), &names);
    assert!(
        before
            .values()
            .filter(|(n, _)| n.starts_with("worker-"))
            .count()
            == 8
            && before.values().any(|(n, _)| n == "conn-spare"),
        "threads found: {before:?}"
    );
    std::thread::sleep(Duration::from_secs(3));
    let after = sleeps(server.pid(), &names);
    // Per kind of thread: how many woke, and how often in all.
    let mut woke: HashMap<&str, (usize, u64)> = HashMap::new();
    for (tid, (name, was)) in &before {
        let now = after.get(tid).map_or(*was, |(_, n)| *n);
        if now > *was {
            let kind = names.iter().find(|n| name.starts_with(*n)).unwrap();
            let seen = woke.entry(kind).or_default();
            *seen = (seen.0 + 1, seen.1 + now - was);
        }
    }
    assert!(
        woke.is_empty(),
        "in 3 quiet seconds (threads that woke, wake-ups): {woke:?}"
    );
    // Still serving, and ending promptly: SIGTERM ends it within its grace.
    let mut c = Client::new(server.addr);
    assert_eq!(c.get("/healthz").status, 200);
    drop(c);
    assert!(
        server.terminate(Duration::from_secs(10)),
        "the server did not end within 10 s of SIGTERM"
    );
}
