//! Password hashing (argon2id, m=19456 KiB, t=2, p=1) on its own bounded pool, admitted fairly
//! per client address (`fair`).
//!
//! A hash takes ~50 ms of CPU and 19 MiB of memory. Running them on request workers would let a
//! login flood occupy every worker and every megabyte; here at most `threads` hashes run at once
//! and at most `queue` wait. Every endpoint that hashes (login, signup, password reset) names
//! its client (`Client`): the next job is that of the waiting client holding the fewest places
//! (in turn among equals), and while others
//! want a place, one client holds at most its share of the places (threads + queue, divided by
//! the clients holding or asking for one). A newcomer below its share who finds every place
//! taken takes the newest waiting place of the client furthest over its share, and that request
//! is refused (429) instead. That decision is hash admission (`admission::HashGate`); the queue
//! (`fair`) asks it. So a flood from one address delays another client's hash by about
//! the hashes already running, and nothing is refused while there is room.
//!
//! Each hash thread allocates its 19 MiB of argon2 blocks at its first hash and reuses them
//! while hashes keep coming: letting the library allocate per hash left glibc holding several
//! freed 19 MiB chunks per arena (we measured 200 MB resident after 20 logins), so hash memory
//! is at most threads × 19 MiB. A thread that had no hash for `keep`
//! (`CONSOLED_HASH_MEMORY_KEEP_SECONDS`, default 60) gives its 19 MiB back: malloc maps a block
//! that large apart and unmaps it when freed (`os::process::malloc_room_ahead` keeps its mmap
//! threshold at 128 KiB), so a server that is not hashing holds none of it (it was 38 of an idle
//! server's 47.5 MiB, with two threads), and the first hash after a quiet spell faults its
//! memory in again (BENCHMARKS.md, "Idle memory"; `tests/idle_memory.rs`).
//!
//! A password is hashed and compared in its normalised form (`normalise`: Unicode NFC), so that
//! one typed on another keyboard (precomposed or decomposed accents) still matches. Hashes made
//! before normalisation are of the form as typed: `verify` tries that form too when it differs
//! (`Verdict::RightAsTyped`), in the same job and for every account alike.
pub mod fair;
mod form;
mod memory;

pub use form::{normalise, Verdict};
pub use memory::hash_blocking;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{bounded, Sender};

use crate::error::ApiError;
use crate::http::client::Client;
use fair::{FairQueue, Pushed};
use memory::Memory;

enum Work {
    Hash(String),
    /// The forms of a typed password to compare (normalised first, then as typed when it
    /// differs) and the stored hash; `None`: no stored hash (unknown address, or an account
    /// without a password).
    Verify(Vec<String>, Option<String>),
}

enum Done {
    Hashed(Result<String, String>),
    Verified(Verdict),
}

/// A waiting job; its reply is `None` when a fairer claim took its place.
struct HashJob {
    work: Work,
    reply: Sender<Option<Done>>,
}

/// The hash threads' queue and what they count, shared by every `Hasher` handle and the threads.
struct HashQueue {
    queue: FairQueue<HashJob>,
    /// Requests refused because their client held its share (or there was no place at all).
    refused: AtomicU64,
    /// Hashes computed (for /metrics, and for tests that prove a refusal cost none).
    computed: AtomicU64,
}

#[derive(Clone)]
pub struct Hasher {
    shared: Arc<HashQueue>,
}

impl Hasher {
    /// `threads` hash threads, `queue` places to wait; each thread keeps its argon2 memory for
    /// `keep` after its last hash.
    pub fn start(threads: usize, queue: usize, keep: Duration) -> Hasher {
        let shared = Arc::new(HashQueue {
            queue: FairQueue::new(threads, queue),
            refused: AtomicU64::new(0),
            computed: AtomicU64::new(0),
        });
        // A real hash of a random password: a login for an unknown address is verified against
        // it, so that it costs the same as a login for a known address.
        let dummy =
            Arc::new(hash_blocking(&crate::crypto::new_token()).expect("hash a random password"));
        for i in 0..threads {
            let (shared, dummy) = (shared.clone(), dummy.clone());
            thread::Builder::new()
                .name(format!("hash-{i}"))
                .spawn(move || hash_thread(&shared, &dummy, keep))
                .expect("spawn hash thread");
        }
        Hasher { shared }
    }

    /// Jobs waiting for a hash thread.
    pub fn queue_depth(&self) -> usize {
        self.shared.queue.queued()
    }

    /// Requests refused at admission so far (for /metrics).
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }

    /// Hashes computed so far (for /metrics).
    pub fn computed(&self) -> u64 {
        self.shared.computed.load(Ordering::Relaxed)
    }

    /// A cheap early refusal, before a request costs any database work: 429 when `client` would
    /// get no hash place now. (`hash`/`verify` decide again; this look may race.)
    pub fn would_admit(&self, client: Client) -> Result<(), ApiError> {
        if self.shared.queue.has_place(client) {
            return Ok(());
        }
        Err(self.refuse())
    }

    /// Hashes the normalised form of `password`.
    pub fn hash(&self, client: Client, password: &str) -> Result<String, ApiError> {
        let work = Work::Hash(normalise(password).into_owned());
        match self.submit(client, work)? {
            Done::Hashed(r) => r.map_err(ApiError::internal),
            Done::Verified(_) => Err(ApiError::internal("hash thread mixed up a reply")),
        }
    }

    /// Verifies a typed `password` against `stored`: its normalised form, and the form as typed
    /// when that differs (a hash made before normalisation). With `None` the same work is done
    /// against a dummy hash and the answer is `Wrong`.
    pub fn verify(
        &self,
        client: Client,
        password: &str,
        stored: Option<&str>,
    ) -> Result<Verdict, ApiError> {
        let normal = normalise(password);
        let mut forms = vec![normal.to_string()];
        if normal != password {
            forms.push(password.to_string());
        }
        match self.submit(client, Work::Verify(forms, stored.map(str::to_string)))? {
            Done::Verified(verdict) => Ok(verdict),
            Done::Hashed(_) => Err(ApiError::internal("hash thread mixed up a reply")),
        }
    }

    fn submit(&self, client: Client, work: Work) -> Result<Done, ApiError> {
        let (reply, answer) = bounded(1);
        match self.shared.queue.push(client, HashJob { work, reply }) {
            Pushed::Queued => {}
            // Its waiter answers 429 (and counts the refusal).
            Pushed::Displaced(other) => drop(other.reply.send(None)),
            Pushed::Refused(_) => return Err(self.refuse()),
        }
        match answer.recv() {
            Ok(Some(done)) => Ok(done),
            Ok(None) => Err(self.refuse()),
            Err(_) => Err(ApiError::internal("hash thread vanished")),
        }
    }

    fn refuse(&self) -> ApiError {
        self.shared.refused.fetch_add(1, Ordering::Relaxed);
        busy()
    }
}

fn busy() -> ApiError {
    crate::admission::Refusal::HashQueue.into()
}

/// A hash thread: the next job, on memory allocated at the first hash and given back after
/// `keep` without one.
fn hash_thread(shared: &HashQueue, dummy: &str, keep: Duration) {
    let mut memory: Option<Memory> = None;
    loop {
        let next = match memory {
            Some(_) => shared.queue.next_within(keep),
            None => Some(shared.queue.next()),
        };
        let Some((client, job)) = next else {
            memory = None;
            continue;
        };
        let done = run(job.work, dummy, memory.get_or_insert_with(Memory::new));
        shared.computed.fetch_add(1, Ordering::Relaxed);
        let _ = job.reply.send(Some(done));
        shared.queue.finished(client);
    }
}

fn run(work: Work, dummy: &str, memory: &mut Memory) -> Done {
    match work {
        Work::Hash(password) => Done::Hashed(memory.hash(&password)),
        Work::Verify(forms, stored) => {
            // Every form is compared, whatever the first gave, so that the work depends only on
            // what was typed.
            let against = stored.as_deref().unwrap_or(dummy);
            let matched: Vec<bool> = forms.iter().map(|f| memory.verify(f, against)).collect();
            Done::Verified(match (stored, matched.as_slice()) {
                (None, _) => Verdict::Wrong,
                (Some(_), [true, ..]) => Verdict::Right,
                (Some(_), [_, true]) => Verdict::RightAsTyped,
                _ => Verdict::Wrong,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::password_hash::phc::PasswordHash;
    use argon2::password_hash::PasswordVerifier;
    use argon2::{Argon2, Params};

    const KEEP: Duration = Duration::from_secs(60);

    fn client(ip: &str) -> Client {
        Client::of(Some(ip.parse().unwrap()))
    }

    #[test]
    fn hash_and_verify() {
        let h = Hasher::start(1, 4, KEEP);
        let c = client("10.0.0.1");
        let stored = h.hash(c, "correct horse battery").unwrap();
        assert!(
            stored.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{stored}"
        );
        let verify = |p: &str, stored: Option<&str>| h.verify(c, p, stored).unwrap();
        assert_eq!(
            verify("correct horse battery", Some(&stored)),
            Verdict::Right
        );
        assert_eq!(verify("wrong password!", Some(&stored)), Verdict::Wrong);
        assert_eq!(verify("anything at all", None), Verdict::Wrong);
        assert_eq!(
            verify("anything at all", Some("not a phc string")),
            Verdict::Wrong
        );
    }

    /// A thread that gave its memory back (no keep time) hashes and verifies on fresh memory.
    #[test]
    fn hashes_after_the_memory_was_given_back() {
        let h = Hasher::start(1, 4, Duration::ZERO);
        let c = client("10.0.0.2");
        for _ in 0..2 {
            let stored = h.hash(c, "correct horse battery").unwrap();
            let verify = |p: &str| h.verify(c, p, Some(&stored)).unwrap();
            assert_eq!(verify("correct horse battery"), Verdict::Right);
            assert_eq!(verify("wrong password!"), Verdict::Wrong);
        }
    }

    /// A password is hashed normalised and found however it is typed; a hash of an
    /// un-normalised form (made before normalisation) is found as typed only.
    #[test]
    fn passwords_compare_in_their_normalised_form() {
        let (decomposed, composed) = ("cafe\u{301} au lait", "caf\u{e9} au lait");
        assert_eq!(normalise(decomposed), composed);
        let h = Hasher::start(1, 4, KEEP);
        let c = client("10.0.0.3");
        let stored = h.hash(c, decomposed).unwrap();
        assert_eq!(
            h.verify(c, composed, Some(&stored)).unwrap(),
            Verdict::Right
        );
        assert_eq!(
            h.verify(c, decomposed, Some(&stored)).unwrap(),
            Verdict::Right
        );
        let legacy = hash_blocking(decomposed).unwrap();
        assert_eq!(
            h.verify(c, decomposed, Some(&legacy)).unwrap(),
            Verdict::RightAsTyped
        );
        assert_eq!(
            h.verify(c, composed, Some(&legacy)).unwrap(),
            Verdict::Wrong
        );
    }

    #[test]
    fn hashes_of_the_library_and_of_other_parameters_verify() {
        use argon2::password_hash::PasswordHasher;
        let salt = [7u8; 16];
        let library = Argon2::default()
            .hash_password_with_salt(b"library made", &salt)
            .unwrap()
            .to_string();
        let mut memory = Memory::new();
        assert!(memory.verify("library made", &library));
        assert!(!memory.verify("library made!", &library));
        let cheap = Argon2::from(Params::new(1024, 1, 1, None).unwrap())
            .hash_password_with_salt(b"cheap", &salt)
            .unwrap()
            .to_string();
        assert!(memory.verify("cheap", &cheap));
        let ours = memory.hash("ours").unwrap();
        assert!(Argon2::default()
            .verify_password(b"ours", &PasswordHash::new(&ours).unwrap())
            .is_ok());
    }

    #[test]
    fn full_queue_is_refused_not_queued() {
        let h = Hasher::start(1, 1, KEEP);
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let h = h.clone();
                thread::spawn(move || h.hash(client("10.0.0.1"), "some password here").map(|_| ()))
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|t| t.join().unwrap()).collect();
        let refused = results
            .iter()
            .filter(|r| {
                r.as_ref()
                    .is_err_and(|e| e.code == crate::error::Code::RateLimited)
            })
            .count();
        assert!(
            refused >= 1,
            "8 concurrent hashes on 1 thread + queue 1 must refuse some"
        );
        assert!(results.iter().any(|r| r.is_ok()));
    }

    /// One client keeps every place taken; another client is still admitted, and served
    /// before the first client's backlog.
    #[test]
    fn a_client_below_its_share_takes_a_place_from_a_hog() {
        let h = Hasher::start(1, 4, KEEP);
        let hog: Vec<_> = (0..12)
            .map(|_| {
                let h = h.clone();
                thread::spawn(move || h.hash(client("10.0.0.1"), "hog password").map(|_| ()))
            })
            .collect();
        // Let the hog fill every waiting place.
        while h.queue_depth() < 4 {
            thread::sleep(std::time::Duration::from_millis(1));
        }
        h.hash(client("10.0.0.2"), "victim password")
            .expect("a client below its share is admitted into a full pool");
        // Every hog request is answered: hashed, or refused with 429 (a displaced waiter too).
        for t in hog {
            if let Err(e) = t.join().unwrap() {
                assert_eq!(e.code, crate::error::Code::RateLimited);
            }
        }
        assert!(h.refused() >= 1);
    }
}
