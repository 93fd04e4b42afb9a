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

use super::signal::{Direct, End, Signals};

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

/// Before the body runs: the hub may write events itself while the thread sleeps (`direct`,
/// when allowed), and a reason known already (`ended`: the server is stopping, or a request came
/// with the stream's) ends the stream right after its opening.
pub(in crate::events) fn prepare(
    signals: &Signals,
    direct: Option<Arc<dyn Direct>>,
    ended: Option<End>,
) {
    if let Some(direct) = direct {
        signals.allow_direct(direct);
    }
    if let Some(why) = ended {
        signals.end(why);
    }
}

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
    let now = Instant::now();
    let mut body = Running {
        rx,
        signals,
        timing,
        out,
        started: now,
        settled: false,
        last_event: now,
        last_progress: now,
        resync: false,
    };
    loop {
        if let Some(why) = body.look_up() {
            return why;
        }
        match body.write() {
            Err(why) => return why,
            // Sent: there may be more in the channel already.
            Ok(true) => continue,
            Ok(false) => body.sleep(),
        }
    }
}

/// A body while it runs: where it writes, and its clocks.
struct Running<'a> {
    rx: &'a Receiver<Msg>,
    signals: &'a Signals,
    timing: Timing,
    out: &'a mut dyn Outlet,
    started: Instant,
    settled: bool,
    last_event: Instant,
    last_progress: Instant,
    /// Changes were dropped: `resync` goes out before anything queued since.
    resync: bool,
}

impl Running<'_> {
    /// What the signals say: the end, a poke to look at the socket, dropped changes; and the
    /// thread's settling, once, `SETTLE_AFTER` in.
    fn look_up(&mut self) -> Option<End> {
        if let Some(why) = self.signals.ended() {
            return Some(why);
        }
        if !self.settled && self.started.elapsed() >= SETTLE_AFTER {
            self.out.settle();
            self.settled = true;
        }
        if self.signals.take_poke() {
            if let Some(why) = self.out.look() {
                return Some(self.first_due(why));
            }
        }
        if self.signals.take_dropped() {
            // The hub emptied the overflowing queue: `resync` goes before what it queued since.
            self.resync = true;
        }
        None
    }

    /// Queues what is due and sends what is queued, never blocking: `Ok(true)` when all of it
    /// left, `Ok(false)` when there is nothing to send or the socket took only part.
    fn write(&mut self) -> Result<bool, End> {
        let out = &mut *self.out;
        let ping = self.timing.ping;
        if out.backlog() == 0 && fill(self.rx, out, ping, self.last_event, &mut self.resync) {
            self.last_event = Instant::now();
        }
        if out.backlog() == 0 {
            return Ok(false);
        }
        match out.send() {
            // The kernel's time-out of the connection: its bytes waited unacknowledged.
            Err(e) if e.kind() == io::ErrorKind::TimedOut => return Err(End::Stalled),
            Err(_) => return Err(self.first_due(End::ClientGone)),
            Ok(n) if n > 0 => self.last_progress = Instant::now(),
            Ok(_) => {}
        }
        if out.backlog() == 0 {
            return Ok(true);
        }
        if self.stalled() {
            return Err(End::Stalled);
        }
        Ok(false)
    }

    /// Whether queued bytes have waited the stall time without any leaving.
    fn stalled(&self) -> bool {
        self.out.backlog() > 0 && self.last_progress.elapsed() >= self.timing.stall
    }

    /// The reason to end with when the connection is found gone (`found`): `Stalled` if the
    /// stall time had run out first. The kernel gives up on a client that takes nothing only a
    /// second after the stall time (socket.rs), and a thread that wakes late on a busy machine
    /// sees both at once; the stall came first.
    fn first_due(&self, found: End) -> End {
        if found == End::ClientGone && self.stalled() {
            End::Stalled
        } else {
            found
        }
    }

    /// Sleeps until the next ping, the stall deadline or the settling is due, or someone wakes
    /// the thread.
    fn sleep(&mut self) {
        let mut until = if self.out.backlog() > 0 {
            self.last_progress + self.timing.stall
        } else {
            self.last_event + self.timing.ping
        };
        if !self.settled {
            until = until.min(self.started + SETTLE_AFTER);
        }
        let Some(wait) = until.checked_duration_since(Instant::now()) else {
            return;
        };
        // With nothing queued anywhere, the hub may write the next events itself.
        let idle = self.out.backlog() == 0 && self.rx.is_empty();
        if idle {
            self.signals.idle();
        }
        thread::park_timeout(wait);
        if idle {
            // The hub's writes while we slept: its last whole event restarts the ping clock,
            // any byte it got out counts as progress for the stall clock.
            let hub = self.signals.take_back();
            self.last_event = hub
                .event
                .map_or(self.last_event, |t| self.last_event.max(t));
            self.last_progress = hub
                .progress
                .map_or(self.last_progress, |t| self.last_progress.max(t));
            self.out.reclaim();
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
