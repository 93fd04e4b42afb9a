//! The body of one stream, on the connection's own thread: its opening (`ready`, or what it was
//! given), then each change as soon as it arrives, `resync` after drops, `: ping` after a quiet
//! interval, until something ends it.
//!
//! The thread sleeps in `park_timeout` and is woken by whoever has news for it: the hub after
//! queueing a change, a revocation or shutdown (`Signals::end`), the socket watcher when the
//! client's socket stirs. It never blocks on the socket: sends are non-blocking, and what the
//! socket does not take waits in the outlet until the watcher says there is room. Waiting with
//! `park` rather than a blocking channel receive matters for fan-out: a blocking receive spins and
//! yields before it sleeps, which cost more CPU than the delivery itself (see docs/events.md).

use std::io;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::signal::{End, Signals};

/// What a stream thread receives: a formatted `change` event, shared by every stream that gets it.
pub type Msg = Arc<str>;

/// The connection a stream writes to, as the HTTP layer offers it.
pub trait Outlet {
    /// Adds one event to what waits to be sent (the HTTP layer frames it).
    fn queue(&mut self, text: &str);
    /// Bytes queued and not yet sent.
    fn backlog(&self) -> usize;
    /// Sends what is queued without blocking; returns how many bytes left now. An error means
    /// the connection is gone.
    fn send(&mut self) -> io::Result<usize>;
    /// Looks at the client side after a poke: `Some` when the client closed the connection or
    /// sent another request. Never consumes anything.
    fn look(&self) -> Option<End>;
    /// Takes what a direct write of the hub left unsent (`Direct`) in front of the queue.
    fn reclaim(&mut self);
    /// Called once, when the stream has run for `SETTLE_AFTER`: housekeeping of the stream's
    /// thread that can wait until a burst of openings is over.
    fn settle(&mut self) {}
}

/// How long after its start a stream settles (`Outlet::settle`): past a reconnect storm, which
/// opens thousands of streams within a second on a fresh instance.
pub const SETTLE_AFTER: Duration = Duration::from_secs(1);

/// The first bytes of a stream that does not resume: the reconnect delay, then `ready`.
pub const READY: &str = "retry: 3000\nevent: ready\ndata: {}\n\n";
pub const RESYNC: &str = "event: resync\ndata: {}\n\n";
pub const PING: &str = ": ping\n\n";

/// The clock of a stream.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// A `: ping` after this long without an event.
    pub ping: Duration,
    /// A stream whose queued bytes could not be sent for this long is ended.
    pub stall: Duration,
    /// The hub may write an event itself while the stream's thread sleeps with nothing to send.
    pub direct: bool,
}

/// At most this much is queued in the outlet before it is sent (the rest stays in the channel,
/// which is what overflows into `resync` for a slow reader).
const BATCH: usize = 16 * 1024;

/// Runs the body on `rx` (the stream's queue) and `signals` until something ends it, first
/// sending `opening` (`READY`, or a resumed stream's `ready` and the changes it missed); says why.
pub(in crate::events) fn run(
    rx: &Receiver<Msg>,
    signals: &Signals,
    timing: Timing,
    opening: &[Msg],
    out: &mut dyn Outlet,
) -> End {
    signals.attach();
    for event in opening {
        out.queue(event);
    }
    let started = Instant::now();
    let mut settled = false;
    let mut last_event = Instant::now();
    let mut last_progress = Instant::now();
    let mut resync = false;
    loop {
        if let Some(why) = signals.ended() {
            return why;
        }
        if !settled && started.elapsed() >= SETTLE_AFTER {
            out.settle();
            settled = true;
        }
        if signals.take_poke() {
            if let Some(why) = out.look() {
                return why;
            }
        }
        if signals.take_dropped() {
            // The hub emptied the overflowing queue: `resync` goes before what it queued since.
            resync = true;
        }
        if out.backlog() == 0 && fill(rx, out, timing.ping, last_event, &mut resync) {
            last_event = Instant::now();
        }
        if out.backlog() > 0 {
            match out.send() {
                Err(_) => return End::ClientGone,
                Ok(n) if n > 0 => last_progress = Instant::now(),
                Ok(_) => {}
            }
            if out.backlog() > 0 && last_progress.elapsed() >= timing.stall {
                return End::Stalled;
            }
            if out.backlog() == 0 {
                // Sent: there may be more in the channel already.
                continue;
            }
        }
        let mut until = if out.backlog() > 0 {
            last_progress + timing.stall
        } else {
            last_event + timing.ping
        };
        if !settled {
            until = until.min(started + SETTLE_AFTER);
        }
        if let Some(wait) = until.checked_duration_since(Instant::now()) {
            // With nothing queued anywhere, the hub may write the next events itself.
            let idle = out.backlog() == 0 && rx.is_empty();
            if idle {
                signals.idle();
            }
            thread::park_timeout(wait);
            if idle {
                // The hub's writes while we slept: its last whole event restarts the ping clock,
                // any byte it got out counts as progress for the stall clock.
                let hub = signals.take_back();
                last_event = hub.event.map_or(last_event, |t| last_event.max(t));
                last_progress = hub.progress.map_or(last_progress, |t| last_progress.max(t));
                out.reclaim();
            }
        }
    }
}

/// Queues what is due: `resync` after drops, then queued changes, else a ping when the quiet
/// interval is over. Returns whether anything was queued.
fn fill(
    rx: &Receiver<Msg>,
    out: &mut dyn Outlet,
    ping: Duration,
    last_event: Instant,
    resync: &mut bool,
) -> bool {
    let mut any = std::mem::take(resync);
    if any {
        out.queue(RESYNC);
    }
    while out.backlog() < BATCH {
        match rx.try_recv() {
            Ok(event) => {
                out.queue(&event);
                any = true;
            }
            Err(_) => break,
        }
    }
    if !any && last_event.elapsed() >= ping {
        out.queue(PING);
        any = true;
    }
    any
}
