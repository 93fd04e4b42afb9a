//! `/readyz` within a second whatever the database does. The check (`SELECT 1` on a pooled
//! connection) runs on one prober thread, never on the request's worker: a stopped database
//! fails fast, but a stalled one (or an address that accepts nothing) holds a check for the pool's
//! time-out (`CONSOLED_DB_TIMEOUT_SECONDS`, 3 s by default), longer than most probes wait.
//!
//! A request takes a result younger than `FRESH`; otherwise it asks the prober and waits at most
//! `ANSWER_WITHIN`. A check that is still running after that is a database that does not answer:
//! 503 at once, so that a flood of probes neither queues checks nor holds workers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::db::{self, Pool};
use crate::locks::Unpoisoned;

/// A result this young answers without a new check (probes of several balancers share it).
const FRESH: Duration = Duration::from_millis(500);
/// A failure this young answers at once while the outage lasts (`db::health`), and a new check
/// starts for the next request: during an outage every probe gets its 503 without waiting, and
/// once anything reached the database again the next probe checks afresh.
const FRESH_FAILURE: Duration = Duration::from_secs(2);
/// The longest a request waits for a check.
pub const ANSWER_WITHIN: Duration = Duration::from_millis(900);

/// What the prober and the requests that ask it share.
#[derive(Default)]
struct Probing {
    /// When the last check finished, and what it found.
    last: Option<(Instant, Result<(), String>)>,
    /// When the running check started.
    running: Option<Instant>,
    /// A request is waiting for a check.
    wanted: bool,
}

#[derive(Default)]
pub struct Readiness {
    state: Mutex<Probing>,
    changed: Condvar,
}

impl Readiness {
    /// Ok when the database answered within `ANSWER_WITHIN`; else what went wrong.
    pub fn database_answers(&self) -> Result<(), String> {
        let asked = Instant::now();
        let deadline = asked + ANSWER_WITHIN;
        let mut state = self.state.lock().unpoisoned();
        loop {
            if let Some((at, result)) = &state.last {
                let age = asked.saturating_duration_since(*at);
                if age < FRESH || *at >= asked {
                    return result.clone();
                }
                if result.is_err() && age < FRESH_FAILURE && db::health::is_down() {
                    let result = result.clone();
                    state.wanted = true;
                    self.changed.notify_all();
                    return result;
                }
            }
            if state
                .running
                .is_some_and(|since| since + ANSWER_WITHIN <= asked)
            {
                return Err(not_answering());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(not_answering());
            }
            state.wanted = true;
            self.changed.notify_all();
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unpoisoned()
                .0;
        }
    }

    /// The prober: checks when asked, until `stopping`.
    pub fn start(
        self: &Arc<Self>,
        pool: Pool,
        stopping: Arc<AtomicBool>,
    ) -> std::io::Result<thread::JoinHandle<()>> {
        let me = self.clone();
        thread::Builder::new()
            .name("readyz-prober".into())
            .spawn(move || me.run(&pool, &stopping))
    }

    fn run(&self, pool: &Pool, stopping: &AtomicBool) {
        while !stopping.load(Ordering::SeqCst) {
            {
                let state = self.state.lock().unpoisoned();
                let (mut state, _) = self
                    .changed
                    .wait_timeout_while(state, Duration::from_millis(250), |s| !s.wanted)
                    .unpoisoned();
                if !state.wanted {
                    continue;
                }
                state.wanted = false;
                state.running = Some(Instant::now());
            }
            let result = probe(pool);
            let mut state = self.state.lock().unpoisoned();
            state.running = None;
            state.last = Some((Instant::now(), result));
            self.changed.notify_all();
        }
    }
}

fn not_answering() -> String {
    format!(
        "the database did not answer within {} ms",
        ANSWER_WITHIN.as_millis()
    )
}

fn probe(pool: &Pool) -> Result<(), String> {
    let mut c = db::conn(pool).map_err(|e| e.more.log_detail.unwrap_or(e.more.message))?;
    c.simple_query("SELECT 1")
        .map(|_| ())
        .map_err(|e| db::health::cause(&e))
}
