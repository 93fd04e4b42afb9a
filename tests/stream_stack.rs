//! A stream thread's stack, measured (issue 34, item 4). A connection thread has 128 KiB of stack
//! (`server::accept::CONNECTION_STACK`); a stream runs on its connection's thread for hours, and
//! holds every stack page it touched until it settles and gives back the pages below its loop
//! (`os::thread::Role::SettledStream`). What keeps that small is code shape (the stream runs
//! from the bottom of the thread's job, not under the request loop's frames; nothing large on
//! the stack): this test holds it. A binary of its own: it reads this process's threads.
//!
//! How: a thread asleep in a system call shows its stack pointer in
//! `/proc/self/task/<tid>/syscall`; the resident size of the mapping that holds it
//! (`/proc/self/smaps`) is what the thread's stack holds in memory: a fresh stack page is not
//! resident until touched.

mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;

/// Most stack a connection thread may have touched by the time its stream is open: everything
/// a connection does before (tiny_http's parser, our head screen, body reader, the stream's
/// opening and the router), in a debug build, which this test runs. Measured 28 KiB (three
/// runs); the budget leaves room to grow, and the 128 KiB stack as much again for an overflow.
const OPENED_BUDGET_KIB: usize = 48;

/// Most stack a settled stream's thread may hold while it streams: its loop and the sends of
/// pings. Measured 12 KiB in a debug build (three runs; 8 KiB in release, docs/events.md); a
/// 16 KiB array on the loop's stack, tried once, took it to 44 KiB and failed this test.
const SETTLED_BUDGET_KIB: usize = 16;

const T: Duration = Duration::from_secs(10);

/// Threads of this process serving a connection (`conn`; `conn-spare` waits for one).
fn serving() -> HashSet<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| {
            let t = t.ok()?;
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            (comm.trim() == "conn").then(|| t.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

/// The stack pointer of thread `tid` while it sleeps in a system call.
fn stack_pointer(tid: &str) -> usize {
    let t = Instant::now();
    loop {
        let syscall = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).unwrap();
        let fields: Vec<&str> = syscall.split_whitespace().collect();
        // "nr arg1 .. arg6 sp pc" while in a system call; "running" otherwise.
        if fields.len() == 9 {
            return usize::from_str_radix(fields[7].trim_start_matches("0x"), 16).unwrap();
        }
        assert!(t.elapsed() < T, "thread {tid} never slept: {syscall}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Resident KiB of the mapping that holds `addr`, from `/proc/self/smaps`.
fn resident_kib_around(addr: usize) -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_once(' ').and_then(|(r, _)| r.split_once('-'));
        if let Some((lo, hi)) = range {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = lo <= addr && addr < hi;
                continue;
            }
        }
        if let Some(kib) = line.strip_prefix("Rss:").filter(|_| inside) {
            return kib.trim().trim_end_matches(" kB").trim().parse().unwrap();
        }
    }
    panic!("no mapping holds {addr:#x}");
}

/// What thread `tid`'s stack holds in memory now.
fn stack_kib(tid: &str) -> usize {
    resident_kib_around(stack_pointer(tid))
}

/// Opens a stream on a raw socket and reads until `want` has arrived.
fn stream_until(addr: SocketAddr, cookie: &str, want: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let req = format!("GET /v1/events HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    read_until(&mut s, want);
    s
}

fn read_until(s: &mut TcpStream, want: &str) {
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&got).contains(want) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_stream_thread_stays_within_its_stack_budget() {
    let server = TestServer::with(&[("CONSOLED_PING_SECONDS", "0.3")]);
    let cookie = {
        let mut client = server.client();
        client.signup();
        format!("svc_session={}", client.cookies["svc_session"])
    };
    // The sign-up's connections are gone.
    let t = Instant::now();
    while !serving().is_empty() && t.elapsed() < T {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stream = stream_until(server.addr, &cookie, "event: ready");
    let threads = serving();
    assert_eq!(
        threads.len(),
        1,
        "one thread serves the stream: {threads:?}"
    );
    let tid = threads.iter().next().unwrap().clone();
    let opened = stack_kib(&tid);
    // Settled (a second after it started), then a few pings sent by the thread itself.
    std::thread::sleep(Duration::from_millis(1500));
    read_until(&mut stream, ": ping");
    read_until(&mut stream, ": ping");
    let settled = stack_kib(&tid);
    println!("stream thread stack: {opened} KiB when opened, {settled} KiB settled");
    assert!(
        opened <= OPENED_BUDGET_KIB,
        "{opened} KiB of stack touched by the time the stream opened (budget {OPENED_BUDGET_KIB})"
    );
    assert!(
        settled <= SETTLED_BUDGET_KIB,
        "a settled stream holds {settled} KiB of stack (budget {SETTLED_BUDGET_KIB})"
    );
}
