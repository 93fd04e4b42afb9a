//! An idle server's memory (issue 38, item 4): a hash thread's argon2 memory (19 MiB, most of
//! what an idle server held) is taken at its first hash, not at start, and given back after
//! `CONSOLED_HASH_MEMORY_KEEP_SECONDS` without a hash. Read from the real binary's
//! `/proc/<pid>/smaps`: the blocks are one anonymous mapping of their own (malloc maps a block
//! that large), resident once a hash has written them.

mod common;

use std::time::{Duration, Instant};

use common::binary::Spawned;
use common::Client;
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
