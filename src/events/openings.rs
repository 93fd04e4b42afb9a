//! Stream openings, taken together. Each opening authenticates a token or session and takes a
//! lease (`db::leases::open`, one statement for many). A request that opens a stream hands its
//! credential to this module's threads and waits for its answer; a thread takes every opening
//! waiting at that moment (up to `GROUP`) and runs them as one statement and one commit.
//!
//! Why: after an instance crashes, its clients reconnect to the survivors within a second. One
//! statement per stream cost the database a process wake-up, a plan and a commit each, and the
//! database was the largest share of the survivor's CPU while 5,000 streams opened. In a group
//! the cost per stream falls to a few index look-ups and an inserted row
//! (BENCHMARKS.md, "Storm"). A lone opening waits for nothing: a thread that is idle takes it at
//! once, so it costs what it cost before, plus one hand-over between threads.
//!
//! Round trips per opening stay at most two (the pool's check and the statement), shared by the
//! group. The per-principal limit still holds across instances: the statement takes each
//! holder's advisory lock (in one order, so two groups cannot wait on each other) before it
//! counts.

use std::thread;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::db::leases::{self, Credential, Opened, SessionRules};
use crate::db::Pool;
use crate::error::{is_connectivity, ApiError};

/// Most openings in one statement. A group of 256 runs in about 10 ms on the benchmark machine;
/// larger groups would make the first of them wait longer for little gain.
const GROUP: usize = 256;

/// Threads that run groups. Two: one group runs in the database while the next gathers; more
/// would only split the same arrivals into smaller groups.
const THREADS: usize = 2;

/// What every opening of this process shares.
pub struct Terms {
    /// This instance's name in `instances` and `stream_leases`.
    pub instance: String,
    pub rules: SessionRules,
    /// Streams per user or API token, on every instance together.
    pub limit: usize,
}

struct Opening {
    credential: Credential,
    answer: Sender<Result<Opened, ApiError>>,
}

/// The door to the opening threads; they end when it drops.
pub struct Openings {
    queue: Sender<Opening>,
}

impl Openings {
    pub fn start(pool: Pool, terms: Terms) -> std::io::Result<Openings> {
        let (queue, waiting) = crossbeam_channel::unbounded();
        let terms = std::sync::Arc::new(terms);
        for i in 0..THREADS {
            let (pool, terms, waiting) = (pool.clone(), terms.clone(), waiting.clone());
            thread::Builder::new()
                .name(format!("stream-open-{i}"))
                .spawn(move || run(&pool, &terms, &waiting))?;
        }
        Ok(Openings { queue })
    }

    /// Authenticates `credential` and takes a lease for it, in a group with the openings that
    /// wait at the same time.
    pub fn open(&self, credential: Credential) -> Result<Opened, ApiError> {
        let (answer, answered) = bounded(1);
        let stopped = || ApiError::unavailable("the stream openers have stopped");
        self.queue
            .send(Opening { credential, answer })
            .map_err(|_| stopped())?;
        answered.recv().map_err(|_| stopped())?
    }
}

fn run(pool: &Pool, terms: &Terms, waiting: &Receiver<Opening>) {
    while let Ok(first) = waiting.recv() {
        let mut group = vec![first];
        group.extend(waiting.try_iter().take(GROUP - 1));
        let credentials: Vec<&Credential> = group.iter().map(|o| &o.credential).collect();
        let r = open_group(pool, terms, &credentials);
        match r {
            Ok(outcomes) => {
                for (opening, opened) in group.into_iter().zip(outcomes) {
                    let _ = opening.answer.send(Ok(opened));
                }
            }
            Err(failure) => {
                for opening in group {
                    let _ = opening.answer.send(Err(failure.to_error()));
                }
            }
        }
    }
}

/// Why a group failed, for each of its openings.
enum Failure {
    /// The database is away (503).
    Away(String),
    /// A defect (500).
    Defect(String),
}

impl Failure {
    fn to_error(&self) -> ApiError {
        match self {
            Failure::Away(detail) => ApiError::unavailable(detail.clone()),
            Failure::Defect(detail) => ApiError::internal(detail.clone()),
        }
    }
}

fn open_group(
    pool: &Pool,
    terms: &Terms,
    credentials: &[&Credential],
) -> Result<Vec<Opened>, Failure> {
    let mut c = pool
        .get()
        .map_err(|e| Failure::Away(format!("database pool: {e}")))?;
    let opened = leases::open(
        &mut *c,
        &terms.instance,
        credentials,
        &terms.rules,
        terms.limit,
    );
    opened.map_err(|e| {
        let detail = format!("database: {e}");
        if is_connectivity(&e) {
            Failure::Away(detail)
        } else {
            Failure::Defect(detail)
        }
    })
}
