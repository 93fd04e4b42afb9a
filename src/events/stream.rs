//! The body of one stream, on the connection's own thread: `ready`, then each change as soon as it
//! arrives, `resync` after drops, `: ping` after a quiet interval, until something ends it.
//!
//! The thread sleeps in `park_timeout` and is woken by whoever has news for it: the hub after
//! queueing a change, a revocation or shutdown (`Signals::end`), the socket watcher when the
//! client's socket stirs. It never blocks on the socket: sends are non-blocking, and what the
//! socket does not take waits in the outlet until the watcher says there is room. Waiting with
//! `park` rather than a blocking channel receive matters for fan-out: a blocking receive spins and
//! yields before it sleeps, which cost more CPU than the delivery itself (see docs/events.md).

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use super::hub::Subscription;
use super::signal::End;

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
}

/// The first bytes of every stream: the reconnect delay, then `ready`.
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

pub(super) fn run(sub: &Subscription, timing: Timing, out: &mut dyn Outlet) -> End {
    sub.signals.attach();
    out.queue(READY);
    let mut last_event = Instant::now();
    let mut last_progress = Instant::now();
    let mut resync = false;
    loop {
        if let Some(why) = sub.signals.ended() {
            return why;
        }
        if sub.signals.take_poke() {
            if let Some(why) = out.look() {
                return why;
            }
        }
        if sub.signals.take_dropped() {
            // The hub emptied the overflowing queue: `resync` goes before what it queued since.
            resync = true;
        }
        if out.backlog() == 0 && fill(sub, out, timing.ping, last_event, &mut resync) {
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
        let until = if out.backlog() > 0 {
            last_progress + timing.stall
        } else {
            last_event + timing.ping
        };
        if let Some(wait) = until.checked_duration_since(Instant::now()) {
            // With nothing queued anywhere, the hub may write the next events itself.
            let idle = out.backlog() == 0 && sub.rx.is_empty();
            if idle {
                sub.signals.idle();
            }
            thread::park_timeout(wait);
            if idle {
                // The hub's writes while we slept: its last whole event restarts the ping clock,
                // any byte it got out counts as progress for the stall clock.
                let hub = sub.signals.take_back();
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
    sub: &Subscription,
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
        match sub.rx.try_recv() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::hub::{Hub, Scope};
    use crate::events::signal::{Direct, Sent};
    use crate::events::Change;
    use std::sync::Arc;

    /// An outlet that takes `room` bytes, then nothing.
    struct Fake {
        queued: Vec<u8>,
        sent: Vec<u8>,
        room: usize,
    }

    impl Outlet for Fake {
        fn queue(&mut self, text: &str) {
            self.queued.extend_from_slice(text.as_bytes());
        }
        fn reclaim(&mut self) {}
        fn backlog(&self) -> usize {
            self.queued.len()
        }
        fn send(&mut self) -> io::Result<usize> {
            let n = self.queued.len().min(self.room);
            self.sent.extend(self.queued.drain(..n));
            self.room -= n;
            Ok(n)
        }
        fn look(&self) -> Option<End> {
            None
        }
    }

    fn token_sub(hub: &Arc<Hub>) -> Subscription {
        let scope = Scope::Token {
            token_id: 1,
            project_id: 10,
        };
        hub.subscribe(scope, 4).0
    }

    fn change(id: i64) -> Change {
        Change {
            kind: "server".into(),
            id,
            op: "update".into(),
            project_id: Some(10),
            org_id: None,
        }
    }

    #[test]
    fn a_stream_that_cannot_send_ends_after_the_stall_time() {
        let hub = Arc::new(Hub::new());
        let sub = token_sub(&hub);
        let mut out = Fake {
            queued: Vec::new(),
            sent: Vec::new(),
            room: 5,
        };
        let timing = Timing {
            ping: Duration::from_millis(20),
            stall: Duration::from_millis(300),
            direct: false,
        };
        let t = Instant::now();
        assert_eq!(run(&sub, timing, &mut out), End::Stalled);
        assert!(t.elapsed() >= timing.stall && t.elapsed() < Duration::from_secs(2));
        assert_eq!(out.sent, b"retry");
    }

    #[test]
    fn an_end_signal_wakes_a_waiting_stream_at_once() {
        let hub = Arc::new(Hub::new());
        let sub = token_sub(&hub);
        let signals = sub.signals.clone();
        let runner = std::thread::spawn(move || {
            let mut out = Fake {
                queued: Vec::new(),
                sent: Vec::new(),
                room: usize::MAX,
            };
            let timing = Timing {
                ping: Duration::from_secs(60),
                stall: Duration::from_secs(60),
                direct: false,
            };
            (run(&sub, timing, &mut out), out.sent)
        });
        std::thread::sleep(Duration::from_millis(100));
        hub.route(&change(1));
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        signals.end(End::Revoked);
        let (why, sent) = runner.join().unwrap();
        assert!(t.elapsed() < Duration::from_millis(500));
        assert_eq!(why, End::Revoked);
        let text = String::from_utf8(sent).unwrap();
        assert!(
            text.starts_with(READY) && text.ends_with(&change(1).event()),
            "{text}"
        );
    }

    /// The hub's side of a connection: takes `room` bytes per write, keeps the rest.
    #[derive(Default)]
    struct FakeDirect {
        sent: std::sync::Mutex<Vec<u8>>,
        rest: std::sync::Mutex<Vec<u8>>,
        room: std::sync::atomic::AtomicUsize,
    }

    impl Direct for FakeDirect {
        fn send(&self, text: &str) -> Sent {
            let room = self.room.load(std::sync::atomic::Ordering::SeqCst);
            let n = text.len().min(room);
            self.sent
                .lock()
                .unwrap()
                .extend_from_slice(&text.as_bytes()[..n]);
            self.rest
                .lock()
                .unwrap()
                .extend_from_slice(&text.as_bytes()[n..]);
            match n {
                0 => Sent::Nothing,
                n if n == text.len() => Sent::All,
                _ => Sent::Part,
            }
        }
    }

    /// The thread's outlet on the same connection: what the hub left goes first.
    struct Joint {
        fake: Fake,
        direct: Arc<FakeDirect>,
    }

    impl Outlet for Joint {
        fn queue(&mut self, text: &str) {
            self.fake.queue(text)
        }
        fn reclaim(&mut self) {
            let mut queued = std::mem::take(&mut *self.direct.rest.lock().unwrap());
            queued.append(&mut self.fake.queued);
            self.fake.queued = queued;
        }
        fn backlog(&self) -> usize {
            self.fake.backlog()
        }
        fn send(&mut self) -> io::Result<usize> {
            self.fake.send()
        }
        fn look(&self) -> Option<End> {
            None
        }
    }

    /// A change to a stream whose thread sleeps with nothing to send is written by the hub
    /// itself; when the connection takes only part of it, the rest and every later change go
    /// through the thread, in order.
    #[test]
    fn the_hub_writes_for_an_idle_stream_and_hands_back_what_it_could_not_send() {
        let hub = Arc::new(Hub::new());
        let sub = token_sub(&hub);
        let signals = sub.signals.clone();
        let direct = Arc::new(FakeDirect {
            room: usize::MAX.into(),
            ..FakeDirect::default()
        });
        signals.allow_direct(direct.clone());
        let joint = Joint {
            fake: Fake {
                queued: Vec::new(),
                sent: Vec::new(),
                room: usize::MAX,
            },
            direct: direct.clone(),
        };
        let runner = std::thread::spawn(move || {
            let mut out = joint;
            let timing = Timing {
                ping: Duration::from_secs(60),
                stall: Duration::from_secs(60),
                direct: true,
            };
            (run(&sub, timing, &mut out), out.fake.sent)
        });
        std::thread::sleep(Duration::from_millis(100));
        hub.route(&change(1));
        assert_eq!(
            direct.sent.lock().unwrap().as_slice(),
            change(1).event().as_bytes(),
            "written by the hub"
        );
        // The connection takes 5 bytes of the next change: the thread sends the rest, then the
        // change after it (which went through its queue).
        direct.room.store(5, std::sync::atomic::Ordering::SeqCst);
        hub.route(&change(2));
        hub.route(&change(3));
        std::thread::sleep(Duration::from_millis(100));
        signals.end(End::Revoked);
        let (why, sent) = runner.join().unwrap();
        assert_eq!(why, End::Revoked);
        let (two, three) = (change(2).event(), change(3).event());
        let by_hub = direct.sent.lock().unwrap().clone();
        let by_thread = String::from_utf8(sent).unwrap();
        // Change 3 goes through the thread's queue when it arrives before the thread has sent
        // the rest of change 2; when the thread was already idle again, the hub starts it too
        // (5 bytes) and hands its rest back the same way. Either way every byte is sent once, in
        // order: the hub's part of a change always before the thread's rest of it.
        let hub_first = [change(1).event().as_bytes(), &two.as_bytes()[..5]].concat();
        let queued = (hub_first.clone(), format!("{READY}{}{three}", &two[5..]));
        let direct_again = (
            [hub_first, three.as_bytes()[..5].to_vec()].concat(),
            format!("{READY}{}{}", &two[5..], &three[5..]),
        );
        let got = (by_hub, by_thread);
        assert!(got == queued || got == direct_again, "{got:?}");
    }
}
