//! The lease keeper thread: renews this instance's one row in `instances` (liveness per instance,
//! never a row per stream), restores its leases if it had lapsed, forgets instances that died,
//! deletes the rows of streams that ended, and ends the streams of sessions and API tokens that
//! expired. Stream threads hand it their work through the lease book's channel (`leases`).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;

use super::handles::Upkeep;
use super::leases::{KeeperJob, Watched};
use crate::db::leases::HEARTBEAT;
use crate::db::{self, leases, sessions};

/// How long to wait before re-checking a session when the database could not say.
const RECHECK_AFTER_ERROR: Duration = Duration::from_secs(5);

pub fn start_keeper(core: Arc<Upkeep>) -> std::io::Result<thread::JoinHandle<()>> {
    thread::Builder::new()
        .name("events-keeper".into())
        .spawn(move || Keeper::new(core).run())
}

struct Keeper {
    core: Arc<Upkeep>,
    next_heartbeat: Instant,
    /// Deadlines of sessions and tokens in order, and the deadline of each one watched.
    due: BTreeSet<(Instant, Watched)>,
    watched: HashMap<Watched, Instant>,
    /// Releases that failed (database away), retried at each heartbeat.
    unreleased: Vec<i64>,
}

impl Keeper {
    fn new(core: Arc<Upkeep>) -> Keeper {
        Keeper {
            core,
            // The first heartbeat registers the instance at once.
            next_heartbeat: Instant::now(),
            due: BTreeSet::new(),
            watched: HashMap::new(),
            unreleased: Vec::new(),
        }
    }

    fn run(mut self) {
        if let Err(e) = self.with_db(leases::forget_orphans) {
            log::warn!("stream leases of no instance not deleted: {e}");
        }
        let inbox = self.core.hub.leases.inbox.clone();
        while !self.core.stopping.load(Ordering::SeqCst) {
            let mut wake = self
                .next_heartbeat
                .min(Instant::now() + Duration::from_millis(250));
            if let Some((at, _)) = self.due.first() {
                wake = wake.min(*at);
            }
            match inbox.recv_deadline(wake) {
                Ok(job) => {
                    let mut jobs = vec![job];
                    jobs.extend(inbox.try_iter());
                    self.take(jobs);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if Instant::now() >= self.next_heartbeat {
                self.heartbeat();
            }
            self.check_due();
        }
        self.release_all();
    }

    fn take(&mut self, jobs: Vec<KeeperJob>) {
        let mut released = Vec::new();
        for job in jobs {
            match job {
                KeeperJob::Release(id) => released.push(id),
                KeeperJob::Watch { whose, deadline } => self.watch(whose, deadline),
            }
        }
        self.release(released);
    }

    fn watch(&mut self, whose: Watched, deadline: Instant) {
        if let Some(old) = self.watched.insert(whose, deadline) {
            self.due.remove(&(old, whose));
        }
        self.due.insert((deadline, whose));
    }

    /// Deletes released rows; on failure they are kept and tried again at the next heartbeat.
    fn release(&mut self, mut ids: Vec<i64>) {
        ids.append(&mut self.unreleased);
        if ids.is_empty() {
            return;
        }
        if let Err(e) = self.with_db(|c| leases::release(c, &ids)) {
            db::health::warn(&format!("stream leases not released yet: {e}"));
            self.unreleased = ids;
        }
    }

    /// Renews this instance's row (one row, however many streams), restores its leases if it
    /// had lapsed meanwhile, and forgets instances that died.
    fn heartbeat(&mut self) {
        self.next_heartbeat = Instant::now() + HEARTBEAT;
        self.release(Vec::new());
        let instance = self.core.hub.leases.instance_id.clone();
        let renewed = self.with_db(|c| {
            if !leases::heartbeat(c, &instance)? {
                let live = self.core.hub.leases.live();
                if !live.is_empty() {
                    let n = leases::restore(c, &instance, &live)?;
                    log::info!("instance had lapsed: {n} of its stream leases restored");
                }
            }
            leases::forget_dead(c)
        });
        match renewed {
            Ok(0) => {}
            Ok(n) => log::info!("{n} stream leases of instances that died deleted"),
            Err(e) => db::health::warn(&format!("instance heartbeat failed: {e}")),
        }
    }

    /// Ends what is due: an expired token's streams at once (its expiry is fixed), a session's
    /// after reading its end again (event-stream pings are not activity, but the user's other
    /// requests are, so the session may live longer than it looked at connect).
    fn check_due(&mut self) {
        let now = Instant::now();
        while let Some(&(at, whose)) = self.due.first() {
            if at > now {
                return;
            }
            self.due.remove(&(at, whose));
            self.watched.remove(&whose);
            match whose {
                Watched::Session(id) => self.check_session(id, now),
                Watched::Token(id) => {
                    let n = self.core.hub.end_token(id);
                    log::info!("API token expired: {n} event streams ended");
                }
            }
        }
    }

    fn check_session(&mut self, session_id: i64, now: Instant) {
        if !self.core.hub.has_session(session_id) {
            return;
        }
        let idle = self.core.session_idle;
        match self.with_db(|c| sessions::remaining(c, session_id, idle)) {
            Ok(Some(secs)) => {
                let wait = Duration::from_secs_f64(secs.max(1.0));
                self.watch(Watched::Session(session_id), now + wait);
            }
            Ok(None) => {
                let n = self.core.hub.end_session(session_id);
                log::info!("session expired: {n} event streams ended");
            }
            Err(e) => {
                db::health::warn(&format!("cannot check a session: {e}"));
                self.watch(Watched::Session(session_id), now + RECHECK_AFTER_ERROR);
            }
        }
    }

    fn release_all(&self) {
        let instance = self.core.hub.leases.instance_id.clone();
        if let Err(e) = self.with_db(|c| leases::release_instance(c, &instance)) {
            db::health::warn(&format!("stream leases left to lapse: {e}"));
        }
    }

    fn with_db<T>(
        &self,
        f: impl FnOnce(&mut db::Db) -> Result<T, postgres::Error>,
    ) -> Result<T, String> {
        let mut c = db::conn(&self.core.pool).map_err(|e| e.more.message.clone())?;
        f(&mut c).map_err(|e| db::health::cause(&e))
    }
}
