//! The listener: one dedicated PostgreSQL connection per instance (not from the pool) that
//! LISTENs on `consoled_change` and `consoled_control`, decodes each notification once and hands
//! it to the hub. Notifications of both channels arrive in commit order on this one connection,
//! so a membership reload (`u:`) is done before the change that follows it is routed.
//!
//! When the connection is lost (restart, `pg_terminate_backend`, network) it reconnects with
//! backoff and tells every open stream to `resync`: changes may have been missed meanwhile. The
//! history is forgotten as soon as the connection is found lost: no stream resumes across an
//! outage.
//! The checked sessions and tokens (`identity`) are trusted only while it listens, and forget
//! what each notification names.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Notification};

use super::change::Change;
use super::delivery::Batch;
use super::handles::Upkeep;
use super::history::Concerns;
use super::journal::Mark;
use crate::db::visibility;

pub const CHANGE_CHANNEL: &str = "consoled_change";
pub const CONTROL_CHANNEL: &str = "consoled_control";

const POLL: Duration = Duration::from_millis(250);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A connection that lived this long was healthy: the next reconnect starts with a short wait.
const HEALTHY: Duration = Duration::from_secs(5);
/// How often an idle listener asks whether its server still takes writes. A primary demoted or
/// fenced read-only in a failover stays up, and no change is committed (so none announced)
/// there any more: the listener must move to the new primary rather than wait for this one to
/// go away.
const WRITABLE_CHECK: Duration = Duration::from_secs(1);

/// `application_name` of the listening connection (visible in `pg_stat_activity`).
pub fn application_name(instance_id: &str) -> String {
    format!("consoled-listener-{instance_id}")
}

/// Starts the listener and waits (at most `ready_within`) until it listens, so that a stream
/// opened right after start-up misses nothing.
pub fn start(core: Arc<Upkeep>, ready_within: Duration) -> std::io::Result<thread::JoinHandle<()>> {
    let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
    let handle = thread::Builder::new()
        .name("events-listener".into())
        .spawn(move || run(&core, &ready_tx))?;
    if ready_rx.recv_timeout(ready_within).is_err() {
        log::warn!("change listener not connected yet; streams get resync once it is");
    }
    Ok(handle)
}

fn run(core: &Upkeep, ready: &crossbeam_channel::Sender<()>) {
    let mut backoff = FIRST_BACKOFF;
    let mut connected_once = false;
    while !core.stopping.load(Ordering::SeqCst) {
        let started = Instant::now();
        let target = &core.listen_db;
        let connected = target
            .pg
            .connect(target.tls.clone())
            .map_err(|e| crate::db::health::cause(&e));
        match connected {
            Ok(mut client) => {
                crate::db::health::ok();
                if connected_once {
                    core.metrics
                        .listener_reconnects
                        .fetch_add(1, Ordering::Relaxed);
                }
                connected_once = true;
                match listen(core, &mut client, ready) {
                    Ok(()) => return,
                    // One line per outage (`db::health`), not one per attempt.
                    Err(e) => crate::db::health::failed("change listener", &e),
                }
            }
            Err(e) => crate::db::health::failed("change listener", &e),
        }
        // News may be missed until it listens again: checks go to the database meanwhile, and
        // no stream resumes (a gap with an outage in it cannot be covered).
        core.checked.distrust();
        core.hub.forget_history();
        if started.elapsed() >= HEALTHY {
            backoff = FIRST_BACKOFF;
        }
        sleep_unless_stopping(core, backoff);
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

fn sleep_unless_stopping(core: &Upkeep, total: Duration) {
    let end = Instant::now() + total;
    while !core.stopping.load(Ordering::SeqCst) && Instant::now() < end {
        thread::sleep((end - Instant::now()).min(POLL));
    }
}

/// Listens until the process stops (`Ok`) or the connection fails (`Err`).
fn listen(
    core: &Upkeep,
    client: &mut Client,
    ready: &crossbeam_channel::Sender<()>,
) -> Result<(), String> {
    writable(client)?;
    client
        .batch_execute(&format!(
            "LISTEN {CHANGE_CHANNEL}; LISTEN {CONTROL_CHANNEL}"
        ))
        .map_err(|e| crate::db::health::cause(&e))?;
    // Streams being opened while nobody listened read their principal again.
    core.hub.journal.record(Mark::Reset);
    let mut concerns = Concerns::default();
    refresh(core, client).map_err(|e| crate::db::health::cause(&e))?;
    core.checked.trust();
    let streams = core.hub.resync_all();
    if streams > 0 {
        log::info!("change listener connected: {streams} streams told to resync");
    }
    let _ = ready.try_send(());
    let mut checked = Instant::now();
    while !core.stopping.load(Ordering::SeqCst) {
        let first = client.notifications().timeout_iter(POLL).next();
        let batch = match first {
            Ok(Some(n)) => {
                // Take what is already buffered too, then release the borrow for lookups.
                let mut batch = vec![n];
                let mut more = client.notifications();
                let mut it = more.iter();
                while let Ok(Some(n)) = it.next() {
                    batch.push(n);
                }
                batch
            }
            Err(e) => return Err(crate::db::health::cause(&e)),
            Ok(None) if client.is_closed() => return Err("connection closed".into()),
            Ok(None) if checked.elapsed() >= WRITABLE_CHECK => {
                writable(client)?;
                checked = Instant::now();
                continue;
            }
            Ok(None) => continue,
        };
        handle_all(core, client, &mut concerns, &batch)
            .map_err(|e| crate::db::health::cause(&e))?;
    }
    Ok(())
}

/// `Err` when the server takes no writes (a standby, or a primary demoted or fenced): changes
/// are committed, and announced, elsewhere.
fn writable(client: &mut Client) -> Result<(), String> {
    if crate::db::read_only(client).map_err(|e| crate::db::health::cause(&e))? {
        return Err(
            "the database server is read-only now (a standby, or a primary demoted or \
                    fenced in a failover): listening elsewhere"
                .into(),
        );
    }
    Ok(())
}

/// Brings the hub up to date with what happened while nobody listened: memberships, ended
/// sessions, revoked tokens.
fn refresh(core: &Upkeep, client: &mut Client) -> Result<(), postgres::Error> {
    let users = core.hub.begin_reload_all();
    if !users.is_empty() {
        let ids: Vec<i64> = users.iter().map(|(u, _)| *u).collect();
        let mut orgs = visibility::orgs_of(client, &ids)?;
        for (user, version) in users {
            core.hub
                .set_orgs(user, &orgs.remove(&user).unwrap_or_default(), version);
        }
    }
    let (sessions, tokens) = core.hub.principals();
    let live = visibility::live_sessions(client, &sessions)?;
    for id in sessions {
        match live.get(&id) {
            None => core.hub.end_session(id),
            // Its token may have been replaced meanwhile.
            Some(current) => core.hub.end_session_tokens(id, |tag| tag != *current),
        };
    }
    let live = visibility::live_tokens(client, &tokens)?;
    for id in tokens.iter().filter(|id| !live.contains(id)) {
        core.hub.end_token(*id);
    }
    Ok(())
}

/// Handles notifications in the order they were committed. Changes that follow each other are
/// routed one by one and written together (`hub::Batch`): a stream gets the changes read in one
/// go in one write. Whatever else comes (a revocation, a reload) is handled after the changes
/// before it were written.
fn handle_all(
    core: &Upkeep,
    client: &mut Client,
    concerns: &mut Concerns,
    notifications: &[Notification],
) -> Result<(), postgres::Error> {
    let mut routed = Batch::default();
    for n in notifications {
        let handled = match n.channel() {
            CHANGE_CHANNEL => change(core, client, concerns, n.payload(), &mut routed),
            CONTROL_CHANNEL => {
                deliver(core, std::mem::take(&mut routed));
                control(core, client, concerns, n.payload())
            }
            other => {
                log::warn!("notification on unexpected channel {other}");
                Ok(())
            }
        };
        if let Err(e) = handled {
            // The changes routed before still go out; the reconnection that follows tells
            // every stream to resync for whatever came after.
            deliver(core, routed);
            return Err(e);
        }
    }
    deliver(core, routed);
    Ok(())
}

fn deliver(core: &Upkeep, routed: Batch) {
    if routed.is_empty() {
        return;
    }
    let routed = core.hub.deliver(routed);
    if routed.dropped > 0 {
        core.metrics
            .changes_dropped
            .fetch_add(routed.dropped as u64, Ordering::Relaxed);
    }
}

fn change(
    core: &Upkeep,
    client: &mut Client,
    concerns: &mut Concerns,
    payload: &str,
    routed: &mut Batch,
) -> Result<(), postgres::Error> {
    core.metrics
        .changes_received
        .fetch_add(1, Ordering::Relaxed);
    let change: Change = match serde_json::from_str(payload) {
        Ok(c) => c,
        Err(e) => {
            log::warn!("ignored a malformed change notification: {e}");
            return Ok(());
        }
    };
    // A project's own announcement names its organization now: the cached project ->
    // organization lookup follows a move before any later change of the project is routed.
    if let (true, Some(project), Some(org)) =
        (change.kind == "project", change.project_id, change.org_id)
    {
        if change.op == "delete" {
            core.hub.forget_project(project);
        } else {
            core.hub.remember_project(project, org);
        }
    }
    core.checked
        .heard_change(&change.kind, change.id, &change.op);
    if let Some(project) = core.hub.unknown_project(&change) {
        if let Some(org) = visibility::org_of_project(client, project)? {
            core.hub.remember_project(project, org);
        }
    }
    core.hub
        .route_into(&change, concerns.change(change.id()), routed);
    Ok(())
}

/// `s:<session id>`, `t:<token id>`: end those streams. `r:<session id>:<tag>`: the session's
/// token was replaced; end the streams opened with the old one (`tag`, 16 hex digits).
/// `u:<user id>`: the user's memberships changed; reload them before routing the change that
/// follows. Each is also forgotten by the checked credentials (`identity`).
fn control(
    core: &Upkeep,
    client: &mut Client,
    concerns: &mut Concerns,
    payload: &str,
) -> Result<(), postgres::Error> {
    let (kind, rest) = payload.split_once(':').unwrap_or((payload, ""));
    let (id, tag) = rest.split_once(':').unwrap_or((rest, ""));
    let Ok(id) = id.parse::<i64>() else {
        log::warn!("ignored a malformed control notification");
        return Ok(());
    };
    match kind {
        "s" => {
            core.hub.journal.record(Mark::Session(id));
            core.checked.forget_session(id);
            core.hub.end_session(id);
        }
        "r" => {
            // The old token stops passing checks at once, whatever its tag says.
            core.checked.forget_session(id);
            let Ok(tag) = u64::from_str_radix(tag, 16) else {
                log::warn!("ignored a malformed control notification");
                return Ok(());
            };
            core.hub.journal.record(Mark::Session(id));
            core.hub.end_session_tokens(id, |t| t == tag);
        }
        "t" => {
            core.hub.journal.record(Mark::Token(id));
            core.checked.forget_token(id);
            core.hub.end_token(id);
        }
        "u" => {
            core.hub.journal.record(Mark::User(id));
            concerns.user(id);
            core.checked.forget_user(id);
            if let Some(version) = core.hub.begin_reload(id) {
                let orgs = visibility::orgs_of(client, &[id])?.remove(&id);
                core.hub.set_orgs(id, &orgs.unwrap_or_default(), version);
            }
        }
        _ => log::warn!("ignored a control notification of unknown kind"),
    }
    Ok(())
}
