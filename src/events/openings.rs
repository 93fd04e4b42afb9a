//! Stream openings, taken together. Each opening authenticates a token or session and takes a
//! lease (`db::leases::open`, one statement for many). A request that opens a stream hands its
//! credential to this module's threads and waits for its answer; a thread takes every opening
//! waiting at that moment (up to `GROUP`) and runs them as one statement and one commit. While
//! openings keep coming (a group just ran and more wait), it first lets `GATHER` pass, so that
//! a storm's groups are large.
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
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use postgres::error::SqlState;

use crate::oneshot;

use crate::db::leases::{self, Credential, Opened, SessionRules};
use crate::db::{Conn, Pool};
use crate::error::ApiError;

/// Most openings in one statement. A group of 256 runs in about 10 ms on the benchmark machine;
/// larger groups would make the first of them wait longer for little gain.
const GROUP: usize = 256;

/// How long a group gathers while openings keep coming (the previous group just ran and more
/// wait): a storm's openings arrive a few at a time, and groups taken as they came held 19 on
/// average (266 statements for 5,000 streams), each paying the statement's fixed cost.
const GATHER: Duration = Duration::from_millis(4);

/// Threads that run groups. One: the next group gathers while one runs in the database, and the
/// groups are as large as the arrivals make them. Two opened a 5,000-stream storm in the same time
/// (within the machine's noise) in groups half as large, which cost the database more.
const THREADS: usize = 1;

/// What every opening of this process shares.
pub struct OpeningSettings {
    /// This instance's name in `instances` and `stream_leases`.
    pub instance: String,
    pub rules: SessionRules,
    /// Streams per user or API token, on every instance together.
    pub limit: usize,
}

struct Opening {
    credential: Credential,
    answer: oneshot::Sender<Result<Opened, ApiError>>,
}

/// The door to the opening threads; they end when it drops.
pub struct Openings {
    queue: Sender<Opening>,
}

impl Openings {
    pub fn start(pool: Pool, settings: OpeningSettings) -> std::io::Result<Openings> {
        let (queue, waiting) = crossbeam_channel::unbounded();
        let settings = std::sync::Arc::new(settings);
        for i in 0..THREADS {
            let (pool, settings, waiting) = (pool.clone(), settings.clone(), waiting.clone());
            thread::Builder::new()
                .name(format!("stream-open-{i}"))
                .spawn(move || run(&pool, &settings, &waiting))?;
        }
        Ok(Openings { queue })
    }

    /// Authenticates `credential` and takes a lease for it, in a group with the openings that
    /// wait at the same time.
    pub fn open(&self, credential: Credential) -> Result<Opened, ApiError> {
        let (answer, answered) = oneshot::pair();
        let stopped = || ApiError::unavailable("the stream openers have stopped");
        self.queue
            .send(Opening { credential, answer })
            .map_err(|_| stopped())?;
        answered.recv().ok_or_else(stopped)?
    }
}

fn run(pool: &Pool, settings: &OpeningSettings, waiting: &Receiver<Opening>) {
    // Kept while groups follow each other (no check of the connection per group), given back
    // to the pool as soon as no opening waits.
    let mut held: Option<Conn> = None;
    loop {
        let first = match waiting.try_recv() {
            Ok(first) => first,
            Err(_) => {
                held = None;
                match waiting.recv() {
                    Ok(first) => first,
                    Err(_) => return,
                }
            }
        };
        if held.is_some() && waiting.len() < GROUP - 1 {
            // Openings keep coming (a storm): let a few milliseconds' worth gather.
            thread::sleep(GATHER);
        }
        let mut group = vec![first];
        group.extend(waiting.try_iter().take(GROUP - 1));
        let credentials: Vec<&Credential> = group.iter().map(|o| &o.credential).collect();
        match open_group(pool, held.take(), settings, &credentials) {
            Ok((outcomes, c)) => {
                held = Some(c);
                for (opening, opened) in group.into_iter().zip(outcomes) {
                    opening.answer.send(Ok(opened));
                }
            }
            Err(e) => {
                for opening in group {
                    opening.answer.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Opens a group on `held` or a connection from the pool; the connection comes back to be kept
/// unless the statement failed. Errors are mapped as every database error is (`ApiError`).
fn open_group(
    pool: &Pool,
    held: Option<Conn>,
    settings: &OpeningSettings,
    credentials: &[&Credential],
) -> Result<(Vec<Opened>, Conn), ApiError> {
    let mut c = match held {
        Some(c) => c,
        None => pool.get()?,
    };
    let open = |c: &mut Conn| {
        leases::open(
            &mut **c,
            &settings.instance,
            credentials,
            &settings.rules,
            settings.limit,
        )
    };
    let mut opened = open(&mut c);
    // An instance of the previous release (`consoled_open_stream`, during a rolling upgrade)
    // notes a token as used before it takes the token's lock; a group takes its locks first. The
    // two can wait on each other, and PostgreSQL then cancels one of them: that one runs again
    // (its statement was undone as a whole).
    if opened
        .as_ref()
        .is_err_and(|e| e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED))
    {
        opened = open(&mut c);
    }
    // After an error the connection goes back to the pool (which checks it before its next
    // use) instead of being kept here.
    Ok((opened?, c))
}
