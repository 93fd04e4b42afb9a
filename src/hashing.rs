//! Password hashing (argon2id, m=19456 KiB, t=2, p=1) on its own bounded pool.
//!
//! A hash takes ~50 ms of CPU and 19 MiB of memory. Running them on request workers would let a
//! login flood occupy every worker and every megabyte; here at most `threads` hashes run at once
//! and at most `queue` wait. Past that a login is refused at once (429) instead of waiting.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::Argon2;
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
            Arc::new(hash_now(&crate::crypto::new_token()).expect("hash a random password"));
        for i in 0..threads {
            let (rx, depth, dummy) = (rx.clone(), depth.clone(), dummy.clone());
            thread::Builder::new()
                .name(format!("hash-{i}"))
                .spawn(move || {
                    for job in rx {
                        depth.fetch_sub(1, Ordering::Relaxed);
                        run(job, &dummy);
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
            Err(TrySendError::Full(_)) => ApiError::rate_limited(1)
                .message("Too many sign-ins at once; try again in a second."),
            Err(TrySendError::Disconnected(_)) => ApiError::internal("hash pool stopped"),
        };
        self.depth.fetch_sub(1, Ordering::Relaxed);
        Err(refused)
    }
}

fn run(job: Job, dummy: &str) {
    match job {
        Job::Hash(password, reply) => {
            let _ = reply.send(hash_now(&password));
        }
        Job::Verify(password, Some(stored), reply) => {
            let _ = reply.send(verify_now(&password, &stored));
        }
        Job::Verify(password, None, reply) => {
            verify_now(&password, dummy);
            let _ = reply.send(false);
        }
    }
}

fn hash_now(password: &str) -> Result<String, String> {
    let salt = crate::crypto::random_bytes::<16>();
    Argon2::default()
        .hash_password_with_salt(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| format!("argon2: {e}"))
}

fn verify_now(password: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// Hashes on the calling thread; for the benchmark's raw-rate baseline.
pub fn hash_blocking(password: &str) -> Result<String, String> {
    hash_now(password)
}

#[cfg(test)]
mod tests {
    use super::*;

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
