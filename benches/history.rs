//! What the change history costs in memory (issue 35, item 3): an instance keeps the changes it
//! heard lately (`events::history`) for streams that resume, `CONSOLED_STREAM_HISTORY` of them
//! (20,000 by default). This fills a history as the hub does, with changes shaped as the
//! database sends them (an id line, five fields, a session's organization), and measures the
//! bytes it holds two ways: the heap bytes its allocations asked for (a counting allocator:
//! exact, without the allocator's own overhead) and the process's resident memory (what the
//! operator sees, with that overhead). Also how long a replay's look-up and walk take at that
//! size, which a resuming stream's opening pays under the history's lock.
//!
//! `cargo bench --bench history` (or `make bench BENCH=history`); `HISTORY=n` for another size.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use consoled::events::history::{History, Limits, Reach, View};
use consoled::events::Change;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// The `n`-th change as the listener hears it: a server of one of 1,000 projects, ids of the
/// size a busy cluster's transactions and rows have.
fn change(n: usize) -> (Change, Reach) {
    let project = 1_000_000 + (n % 1000) as i64;
    let org = 500_000 + (n % 1000) as i64;
    let change = Change {
        kind: "server".into(),
        id: 90_000_000 + n as i64,
        op: "update".into(),
        project_id: Some(project),
        org_id: Some(org),
        event_id: Some(format!("{}-{:016x}", 4_000_000_000u64 + n as u64, n * 7919)),
    };
    let reach = Reach {
        project: Some(project),
        org: Some(org),
        ..Reach::default()
    };
    (change, reach)
}

fn main() {
    let n: usize = std::env::var("HISTORY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(Limits::default().changes);
    let limits = Limits {
        changes: n,
        age: Duration::from_secs(300),
    };
    let heard: Vec<(Change, Reach)> = (0..n).map(change).collect();
    let (heap_before, rss_before) = (LIVE.load(Ordering::Relaxed), rss_bytes());
    let mut history = History::new(limits);
    let now = Instant::now();
    for (change, reach) in &heard {
        history.record(change.id(), change.event().into(), reach.clone(), now);
    }
    let heap = LIVE.load(Ordering::Relaxed) - heap_before;
    let rss = rss_bytes().saturating_sub(rss_before);
    assert_eq!(history.len(), n);

    // A stream that missed the last 250 changes (5 s at 50 a second), of one project.
    let after = heard[n - 251].0.id().unwrap().to_string();
    let rounds = 2000;
    let started = Instant::now();
    for i in 0..rounds {
        let view = View::Project(1_000_000 + (i % 1000) as i64);
        let missed = history.replay(&after, view, 256, now);
        assert!(missed.is_some());
    }
    let replay = started.elapsed() / rounds as u32;
    // One that missed all of them: the whole history walked under its lock.
    let oldest = heard[0].0.id().unwrap().to_string();
    let started = Instant::now();
    for i in 0..20 {
        let view = View::Project(1_000_000 + i);
        assert!(history.replay(&oldest, view, 256, now).is_some());
    }
    let whole = started.elapsed() / 20;

    println!(
        "| changes kept | heap bytes | per change | resident bytes | per change \
         | a replay of the last 250 | a replay of all |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {n} | {heap} | {} | {rss} | {} | {:.1} µs | {:.0} µs |",
        heap / n as isize,
        rss / n,
        replay.as_secs_f64() * 1e6,
        whole.as_secs_f64() * 1e6
    );
}
