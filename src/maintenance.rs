//! A background thread that deletes expired sessions (ending their streams), old rate-limit
//! events and dead mail tokens. Every instance runs it; the deletes are idempotent.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::app::App;
use crate::db::{self, devices, mail_tokens, rate, sessions};

const PERIOD: Duration = Duration::from_secs(30);

pub fn start(app: Arc<App>) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .name("maintenance".into())
        .spawn(move || {
            let mut next = Instant::now();
            while !app.stopping.load(Ordering::SeqCst) {
                if Instant::now() >= next {
                    if let Err(e) = sweep(&app) {
                        log::warn!("maintenance: {e}");
                    }
                    next = Instant::now() + PERIOD;
                }
                thread::sleep(Duration::from_millis(200));
            }
        })
        .expect("spawn maintenance thread")
}

fn sweep(app: &App) -> Result<(), String> {
    let mut c = db::conn(&app.pool).map_err(|e| format!("{:?}", e.more.log_detail))?;
    let expired =
        sessions::purge_expired(&mut *c, app.config.session_idle).map_err(|e| e.to_string())?;
    let events = rate::purge_old(&mut *c).map_err(|e| e.to_string())?;
    let tokens = mail_tokens::purge_dead(&mut *c).map_err(|e| e.to_string())?;
    let devices = devices::purge_expired(&mut *c).map_err(|e| e.to_string())?;
    if expired + events + tokens + devices > 0 {
        log::debug!(
            "maintenance: removed {expired} expired sessions, {events} old rate events, {tokens} dead mail tokens, {devices} expired device cookies"
        );
    }
    Ok(())
}
