//! Password hashing (argon2id, m=19456 KiB, t=2, p=1) on its own bounded pool.
//!
//! A hash takes ~50 ms of CPU and 19 MiB of memory. Running them on request workers would let a
//! login flood occupy every worker and every megabyte; here at most `threads` hashes run at once
//! and at most `queue` wait. Past that a login is refused at once (429) instead of waiting.
//!
//! Each hash thread allocates its 19 MiB of argon2 blocks once and reuses them: letting the
//! library allocate per hash left glibc holding several freed 19 MiB chunks per arena (we measured
//! 200 MB resident after 20 logins), so hash memory is now exactly threads × 19 MiB.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use argon2::password_hash::phc::{Output, ParamsString, PasswordHash, Salt};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use crossbeam_channel::{bounded, Sender, TrySendError};

use crate::error::ApiError;

enum Job {
    Hash(String, Sender<Result<String, String>>),
    /// `None`: no stored hash (unknown address, or an account without a password).
    Verify(String, Option<String>, Sender<bool>),
}

#[derive(Clone)]
pub struct Hasher {
    jobs: Sender<Job>,
    depth: Arc<AtomicUsize>,
}

impl Hasher {
    pub fn start(threads: usize, queue: usize) -> Hasher {
        let (tx, rx) = bounded::<Job>(queue);
        let depth = Arc::new(AtomicUsize::new(0));
        // A real hash of a random password: a login for an unknown address is verified against
        // it, so that it costs the same as a login for a known address.
        let dummy =
            Arc::new(hash_blocking(&crate::crypto::new_token()).expect("hash a random password"));
        for i in 0..threads {
            let (rx, depth, dummy) = (rx.clone(), depth.clone(), dummy.clone());
            thread::Builder::new()
                .name(format!("hash-{i}"))
                .spawn(move || {
                    let mut memory = Memory::new();
                    for job in rx {
                        depth.fetch_sub(1, Ordering::Relaxed);
                        run(job, &dummy, &mut memory);
                    }
                })
                .expect("spawn hash thread");
        }
        Hasher { jobs: tx, depth }
    }

    /// Jobs waiting for a hash thread.
    pub fn queue_depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// A cheap early refusal: when the queue is full, a login flood is answered 429 before it
    /// costs any database work. (`submit` still enforces the bound; this check may race.)
    pub fn admit(&self) -> Result<(), ApiError> {
        if self.jobs.is_full() {
            return Err(busy());
        }
        Ok(())
    }

    pub fn hash(&self, password: &str) -> Result<String, ApiError> {
        let (tx, rx) = bounded(1);
        self.submit(Job::Hash(password.to_string(), tx))?;
        rx.recv()
            .map_err(|_| ApiError::internal("hash thread vanished"))?
            .map_err(ApiError::internal)
    }

    /// Verifies `password` against `stored`; with `None` the same work is done against a dummy
    /// hash and the answer is false.
    pub fn verify(&self, password: &str, stored: Option<&str>) -> Result<bool, ApiError> {
        let (tx, rx) = bounded(1);
        self.submit(Job::Verify(
            password.to_string(),
            stored.map(str::to_string),
            tx,
        ))?;
        rx.recv()
            .map_err(|_| ApiError::internal("hash thread vanished"))
    }

    fn submit(&self, job: Job) -> Result<(), ApiError> {
        self.depth.fetch_add(1, Ordering::Relaxed);
        let refused = match self.jobs.try_send(job) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(_)) => busy(),
            Err(TrySendError::Disconnected(_)) => ApiError::internal("hash pool stopped"),
        };
        self.depth.fetch_sub(1, Ordering::Relaxed);
        Err(refused)
    }
}

fn busy() -> ApiError {
    ApiError::rate_limited(1).message("Too many sign-ins at once; try again in a second.")
}

fn run(job: Job, dummy: &str, memory: &mut Memory) {
    match job {
        Job::Hash(password, reply) => {
            let _ = reply.send(memory.hash(&password));
        }
        Job::Verify(password, Some(stored), reply) => {
            let _ = reply.send(memory.verify(&password, &stored));
        }
        Job::Verify(password, None, reply) => {
            memory.verify(&password, dummy);
            let _ = reply.send(false);
        }
    }
}

/// The argon2 working memory of one hash thread, for the service's parameters (argon2id v19,
/// m=19456 KiB, t=2, p=1: `Params::default()`).
struct Memory {
    blocks: Vec<Block>,
}

impl Memory {
    fn new() -> Memory {
        Memory {
            blocks: vec![Block::default(); Params::default().block_count()],
        }
    }

    fn hash(&mut self, password: &str) -> Result<String, String> {
        let salt = crate::crypto::random_bytes::<16>();
        let mut out = [0u8; Params::DEFAULT_OUTPUT_LEN];
        Argon2::default()
            .hash_password_into_with_memory(password.as_bytes(), &salt, &mut out, &mut self.blocks)
            .map_err(|e| format!("argon2: {e}"))?;
        let phc = PasswordHash {
            algorithm: Algorithm::Argon2id.ident(),
            version: Some(Version::V0x13.into()),
            params: ParamsString::try_from(&Params::default()).map_err(|e| e.to_string())?,
            salt: Some(Salt::new(&salt).map_err(|e| e.to_string())?),
            hash: Some(Output::new(&out).map_err(|e| e.to_string())?),
        };
        Ok(phc.to_string())
    }

    /// False for a wrong password and for anything that is not an argon2 PHC string.
    fn verify(&mut self, password: &str, phc: &str) -> bool {
        let Ok(parsed) = PasswordHash::new(phc) else {
            return false;
        };
        let (Some(salt), Some(expected)) = (&parsed.salt, &parsed.hash) else {
            return false;
        };
        let Ok(algorithm) = Algorithm::try_from(parsed.algorithm.as_str()) else {
            return false;
        };
        let Ok(params) = Params::try_from(&parsed) else {
            return false;
        };
        let version = parsed
            .version
            .and_then(|v| Version::try_from(v).ok())
            .unwrap_or_default();
        let mut out = vec![0u8; expected.len()];
        let argon = Argon2::new(algorithm, version, params.clone());
        let computed = if params.block_count() == self.blocks.len() {
            argon.hash_password_into_with_memory(
                password.as_bytes(),
                salt,
                &mut out,
                &mut self.blocks,
            )
        } else {
            // A hash made with other parameters (an older or newer setting): its own memory.
            argon.hash_password_into(password.as_bytes(), salt, &mut out)
        };
        computed.is_ok() && crate::crypto::constant_time_eq(&out, expected.as_bytes())
    }
}

/// Hashes on the calling thread with memory of its own; for start-up and the benchmark baseline.
pub fn hash_blocking(password: &str) -> Result<String, String> {
    Memory::new().hash(password)
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::password_hash::PasswordVerifier;

    #[test]
    fn hash_and_verify() {
        let h = Hasher::start(1, 4);
        let stored = h.hash("correct horse battery").unwrap();
        assert!(
            stored.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{stored}"
        );
        assert!(h.verify("correct horse battery", Some(&stored)).unwrap());
        assert!(!h.verify("wrong password!", Some(&stored)).unwrap());
        assert!(!h.verify("anything at all", None).unwrap());
        assert!(!h
            .verify("anything at all", Some("not a phc string"))
            .unwrap());
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
        let h = Hasher::start(1, 1);
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let h = h.clone();
                thread::spawn(move || h.hash("some password here").map(|_| ()))
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
}
