//! A background thread that deletes expired sessions (ending their streams), old rate-limit
//! events, dead mail tokens and invitations. Every instance runs it; the deletes are idempotent. It also writes
//! the log's summary of refusals (`logging::flood`), at most once per `CONSOLED_LOG_SUMMARY_SECONDS`,
//! and each second the uses of sessions and tokens checked from memory (`identity::seen`).

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
            while !app.stopping.load(Ordering::SeqCst) {
                refusals.tick(Instant::now(), || app.metrics.refusals());
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
