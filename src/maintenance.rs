//! A background thread that deletes expired sessions (ending their streams), old rate-limit
//! events, dead mail tokens and invitations. Every instance runs it; the deletes are idempotent. It also writes
//! the log's summary of refusals (`logging::flood`), at most once per `CONSOLED_LOG_SUMMARY_SECONDS`,
//! and each second the uses of sessions and tokens checked from memory (`identity::seen`). Every
//! `CONSOLED_MEMORY_TRIM_SECONDS` in which no stream opened, it gives malloc's free memory back
//! (`Trim`): what a storm of openings left in the heaps' room ahead is otherwise kept.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::app::App;
use crate::db::{self, devices, health, invitations, mail_tokens, outbox, rate, sessions};
use crate::identity;

const PERIOD: Duration = Duration::from_secs(30);
/// How often the mail queue is counted for `/metrics` (a scrape never waits on the database).
const QUEUE_PERIOD: Duration = Duration::from_secs(10);

pub fn start(app: Arc<App>) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .name("maintenance".into())
        .spawn(move || {
            let mut next = Instant::now();
            let mut next_count = Instant::now();
            let mut next_seen = Instant::now();
            let mut refusals = crate::logging::flood::Summary::new(app.config.log_summary);
            let mut trim = Trim::new(app.config.memory_trim, Instant::now());
            while !app.stopping.load(Ordering::SeqCst) {
                refusals.tick(Instant::now(), || app.metrics.refusals());
                let opened = app.metrics.streams_total.load(Ordering::Relaxed);
                if trim.due(Instant::now(), opened) {
                    crate::os::process::malloc_give_back();
                }
                if Instant::now() >= next {
                    if let Err(e) = sweep(&app) {
                        db::health::warn(&format!("maintenance: {e}"));
                    }
                    next = Instant::now() + PERIOD;
                }
                if Instant::now() >= next_count {
                    count_mail_queue(&app);
                    next_count = Instant::now() + QUEUE_PERIOD;
                }
                if Instant::now() >= next_seen {
                    write_seen(&app);
                    next_seen = Instant::now() + identity::seen::EVERY;
                }
                thread::sleep(Duration::from_millis(200));
            }
            write_seen(&app);
        })
        .expect("spawn maintenance thread")
}

fn sweep(app: &App) -> Result<(), String> {
    let mut c = db::conn(&app.pool).map_err(|e| e.more.log_detail.unwrap_or(e.more.message))?;
    let expired =
        sessions::purge_expired(&mut *c, app.config.session_idle).map_err(|e| health::cause(&e))?;
    let events = rate::purge_old(&mut *c).map_err(|e| health::cause(&e))?;
    let tokens = mail_tokens::purge_dead(&mut *c).map_err(|e| health::cause(&e))?;
    let devices = devices::purge_expired(&mut *c).map_err(|e| health::cause(&e))?;
    let invitations = invitations::purge_dead(&mut *c).map_err(|e| health::cause(&e))?;
    if expired + events + tokens + devices + invitations > 0 {
        log::debug!(
            "maintenance: removed {expired} expired sessions, {events} old rate events, {tokens} dead mail tokens, {devices} expired device cookies, {invitations} dead invitations"
        );
    }
    Ok(())
}

/// Writes the uses noted by checks; on failure they wait for the next second.
fn write_seen(app: &App) {
    if app.seen.is_empty() {
        return;
    }
    let Ok(mut c) = db::conn(&app.pool) else {
        return;
    };
    if let Err(e) = app.seen.flush(&mut *c) {
        health::warn(&format!(
            "noting sessions and tokens as used: {}",
            health::cause(&e)
        ));
    }
}

/// Counts the mail queue into the `/metrics` gauges; on failure they keep their last values.
fn count_mail_queue(app: &App) {
    let Ok(mut c) = db::conn(&app.pool) else {
        return;
    };
    match outbox::counts(&mut *c) {
        Ok((due, total)) => {
            let m = &app.metrics;
            m.mail_queue_due.store(due.max(0) as u64, Ordering::Relaxed);
            m.mail_queue_total
                .store(total.max(0) as u64, Ordering::Relaxed);
        }
        Err(e) => health::warn(&format!("counting the mail queue: {}", health::cause(&e))),
    }
}

/// When a quiet server gives malloc's free memory back: at the end of each turn of `every` in
/// which no stream opened. Openings are what grow the heaps (a storm's connection threads), and
/// while they come the memory freed is soon taken again: trimming then would only make them
/// fault it in anew. Requests alone do not delay it; they allocate little and briefly.
struct Trim {
    every: Duration,
    next: Instant,
    opened: u64,
}

impl Trim {
    fn new(every: Duration, now: Instant) -> Trim {
        Trim {
            every,
            next: now + every,
            opened: 0,
        }
    }

    /// Whether to trim now, given the streams opened so far.
    fn due(&mut self, now: Instant, opened: u64) -> bool {
        if self.every.is_zero() || now < self.next {
            return false;
        }
        let quiet = opened == self.opened;
        self.opened = opened;
        self.next = now + self.every;
        quiet
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TURN: Duration = Duration::from_secs(60);

    #[test]
    fn trims_after_a_turn_without_openings_only() {
        let start = Instant::now();
        let mut trim = Trim::new(TURN, start);
        assert!(!trim.due(start, 0), "not before the first turn ends");
        assert!(trim.due(start + TURN, 0), "a quiet first turn");
        assert!(!trim.due(start + TURN * 3 / 2, 0), "not within a turn");
        assert!(
            !trim.due(start + TURN * 2, 5_000),
            "streams opened in the turn"
        );
        assert!(
            trim.due(start + TURN * 3, 5_000),
            "the turn after was quiet"
        );
        assert!(trim.due(start + TURN * 4, 5_000), "and the next");
    }

    #[test]
    fn zero_never_trims() {
        let start = Instant::now();
        let mut trim = Trim::new(Duration::ZERO, start);
        for turn in 0..5 {
            assert!(!trim.due(start + TURN * turn, 0));
        }
    }
}
