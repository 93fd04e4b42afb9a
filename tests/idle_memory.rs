//! An idle server's memory (issue 38, item 4): a hash thread's argon2 memory (19 MiB, most of
//! what an idle server held) is taken at its first hash, not at start, and given back after
//! `CONSOLED_HASH_MEMORY_KEEP_SECONDS` without a hash; what streams left free in malloc's heaps
//! is given back after a turn of `CONSOLED_MEMORY_TRIM_SECONDS` without an opening. Read from
//! the real binary's `/proc/<pid>/smaps`: the argon2 blocks are one anonymous mapping of their
//! own (malloc maps a block that large), resident once a hash has written them; a thread arena's
//! heap is an anonymous read-write mapping of another size than the threads' stacks.

mod common;

use std::time::{Duration, Instant};

use common::binary::Spawned;
use common::checks::make_token;
use common::sse::{self, Ev};
use common::{project_of, Client};
use serde_json::json;

/// argon2id's memory at the service's parameters (m=19456 KiB).
const ARGON2_KIB: u64 = 19456;

/// Mappings of this server holding at least the argon2 blocks resident.
fn argon2_resident(server: &Spawned) -> usize {
    let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", server.pid())).unwrap();
    smaps
        .lines()
        .filter_map(|l| l.strip_prefix("Rss:"))
        .filter_map(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .filter(|&kib| kib >= ARGON2_KIB)
        .count()
}

/// KiB resident in malloc's thread arenas: anonymous read-write mappings of at least 1 MiB that
/// are neither a std thread's 2 MiB stack nor argon2 blocks (connection threads' stacks are
/// 128 KiB).
fn arenas_kib(server: &Spawned) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", server.pid())).unwrap();
    let (mut total, mut arena, mut size) = (0, false, 0);
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            arena = fields.get(1) == Some(&"rw-p") && fields.len() == 5;
        } else if fields.first() == Some(&"Size:") {
            size = fields[1].parse::<u64>().unwrap();
        } else if fields.first() == Some(&"Rss:") && arena {
            let rss = fields[1].parse::<u64>().unwrap();
            if size >= 1024 && size != 2048 && rss < ARGON2_KIB {
                total += rss;
            }
        }
    }
    total
}

/// A login for an address no account has: verified against the dummy hash, a full hash's work.
fn hash_once(server: &Spawned) {
    let body = json!({"email": common::unique_email(), "password": "not the password"});
    Client::new(server.addr)
        .post("/auth/login", &body)
        .expect(401);
}

fn start(keep_seconds: &str) -> Spawned {
    Spawned::start(
        env!("CARGO_BIN_EXE_consoled"),
        &[("CONSOLED_HASH_MEMORY_KEEP_SECONDS", keep_seconds)],
    )
}

/// A server that has hashed nothing holds no argon2 memory (its start-up hash gave its own back);
/// the first hash takes it, and it is kept while the keep time has not passed.
#[test]
fn hash_memory_is_taken_at_the_first_hash() {
    let server = start("3600");
    assert_eq!(argon2_resident(&server), 0, "idle, before any hash");
    hash_once(&server);
    assert_eq!(argon2_resident(&server), 1, "kept after a hash");
    hash_once(&server);
    assert_eq!(argon2_resident(&server), 1, "reused, not taken again");
}

/// With no keep time a hash thread gives its memory back once no hash waits, and hashes again
/// on fresh memory.
#[test]
fn hash_memory_is_given_back_after_the_keep_time() {
    let server = start("0");
    for _ in 0..2 {
        hash_once(&server);
        let deadline = Instant::now() + Duration::from_secs(30);
        while argon2_resident(&server) > 0 {
            assert!(Instant::now() < deadline, "argon2 memory still held");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Streams opened and closed leave their memory free in malloc's heaps (up to 4 MiB at each
/// heap's top, `M_TOP_PAD`); a turn without openings gives it back. Not all of it: what is
/// still used, and free pieces smaller than a page between used ones, stay. Measured in this
/// debug build: 496 -> 4,412 KiB with the streams, 4,420 KiB 30 s after without the trim
/// (`CONSOLED_MEMORY_TRIM_SECONDS=0`); 624 -> 4,512 -> 2,952 KiB with it. So a quarter of what
/// the streams added, given back, tells the two apart.
#[test]
fn a_quiet_server_gives_back_what_streams_left() {
    // 900: without malloc's thread caches 400 streams took only 1.4 to 2 MiB in this build.
    let (server, fresh, streams) = holding_streams(900, &[("CONSOLED_MEMORY_TRIM_SECONDS", "1")]);
    let held = arenas_kib(&server);
    assert!(
        held > fresh + 2048,
        "900 streams took {fresh} -> {held} KiB: too little to see it given back"
    );
    drop(streams);
    let deadline = Instant::now() + Duration::from_secs(30);
    while arenas_kib(&server) > fresh + (held - fresh) * 3 / 4 {
        assert!(
            Instant::now() < deadline,
            "arenas {fresh} KiB fresh, {held} KiB with the streams, {} KiB 30 s after",
            arenas_kib(&server)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A server started with `extra` (beside room for 1,000 streams of one token), its arenas' KiB
/// before any stream, and `n` streams open on it.
fn holding_streams(n: usize, extra: &[(&str, &str)]) -> (Spawned, u64, Vec<sse::Sse>) {
    let mut env = vec![
        ("CONSOLED_MAX_STREAMS_PER_PRINCIPAL", "1000"),
        ("CONSOLED_CLIENT_SHARE", "1"),
    ];
    env.extend_from_slice(extra);
    let server = Spawned::start(env!("CARGO_BIN_EXE_consoled"), &env);
    let mut c = Client::new(server.addr);
    let (_, state) = c.signup();
    let (_, secret) = make_token(&mut c, project_of(&state), "read");
    let auth = format!("Bearer {secret}");
    let fresh = arenas_kib(&server);
    let streams = (0..n)
        .map(|_| {
            let mut s = sse::open(server.addr, &[("Authorization", &auth)]);
            assert_eq!(s.next(Duration::from_secs(10)), Ev::Ready);
            s
        })
        .collect();
    (server, fresh, streams)
}

/// KiB malloc's arenas grew by while 400 streams are held on a server started with `extra`.
fn arenas_for_400_streams(extra: &[(&str, &str)]) -> u64 {
    let (server, fresh, _streams) = holding_streams(400, extra);
    arenas_kib(&server) - fresh
}

/// A held stream's thread keeps none of the blocks its request's handling freed: the server
/// runs with malloc's per-thread caches off (`os::process::exec_without_thread_caches`), unless
/// the operator's `GLIBC_TUNABLES` says otherwise; with the caches, as glibc has them by
/// default, each thread kept its own and the heap held more per stream.
#[test]
fn held_streams_keep_no_freed_blocks_of_their_own() {
    let without = arenas_for_400_streams(&[]);
    let with = arenas_for_400_streams(&[("GLIBC_TUNABLES", "glibc.malloc.tcache_count=7")]);
    eprintln!("arenas for 400 held streams: {without} KiB without thread caches, {with} KiB with");
    assert!(
        without * 10 < with * 9,
        "{without} KiB without thread caches, {with} KiB with: not less"
    );
}

/// The server started again in place without malloc's thread caches is still named after its
/// program, so that `pgrep consoled`, `pkill`, `top` and `ps` find it as before: a program run
/// as `/proc/self/exe` is otherwise named `exe` by the kernel.
#[test]
fn the_server_started_again_keeps_its_name() {
    let program = std::path::Path::new(env!("CARGO_BIN_EXE_consoled"));
    let name = program.file_name().unwrap().to_string_lossy().into_owned();
    for extra in [
        &[][..],
        &[("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0")][..],
    ] {
        let server = Spawned::start(env!("CARGO_BIN_EXE_consoled"), extra);
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", server.pid())).unwrap();
        assert_eq!(
            comm.trim_end(),
            name,
            "the process's name, started with {extra:?}"
        );
    }
}
