//! Unit tests of a stream's body (`stream::body`) fed by the hub: the stall clock, an end
//! signal, and the hub's direct writes handed back to the thread. (Here, above both, so that
//! `stream` never imports the hub.)
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::change::Change;
use super::hub::{Hub, Scope, Subscription};
use super::stream::{run_body, Direct, End, Msg, Outlet, Sent, Timing, READY, SETTLE_AFTER};

/// The body of `sub`'s stream on the calling thread.
fn run(sub: &Subscription, timing: Timing, out: &mut dyn Outlet) -> End {
    run_body(&sub.rx, &sub.signals, timing, &[READY.into()], out)
}

/// An outlet that takes `room` bytes, then nothing, and notes when the stream settled.
struct Fake {
    queued: Vec<u8>,
    sent: Vec<u8>,
    room: usize,
    settled: Vec<Instant>,
}

impl Fake {
    fn with_room(room: usize) -> Fake {
        Fake {
            queued: Vec::new(),
            sent: Vec::new(),
            room,
            settled: Vec::new(),
        }
    }
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
    fn settle(&mut self) {
        self.settled.push(Instant::now());
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
        event_id: None,
    }
}

#[test]
fn a_stream_that_cannot_send_ends_after_the_stall_time() {
    let hub = Arc::new(Hub::new());
    let sub = token_sub(&hub);
    let mut out = Fake::with_room(5);
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
        let mut out = Fake::with_room(usize::MAX);
        let timing = Timing {
            ping: Duration::from_secs(60),
            stall: Duration::from_secs(60),
            direct: false,
        };
        (run(&sub, timing, &mut out), out.sent)
    });
    std::thread::sleep(Duration::from_millis(100));
    hub.route(&change(1), &[]);
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

/// An outlet that takes 5 bytes, then nothing; at the stream's settling its thread loses the
/// CPU past its stall deadline, and meanwhile the kernel gives up on the connection (its user
/// timeout, a second after the stall time) and the watcher pokes the stream.
struct LateThread {
    fake: Fake,
    signals: Arc<super::stream::Signals>,
    late: Duration,
    gone: bool,
}

impl Outlet for LateThread {
    fn queue(&mut self, text: &str) {
        self.fake.queue(text)
    }
    fn reclaim(&mut self) {}
    fn backlog(&self) -> usize {
        self.fake.backlog()
    }
    fn send(&mut self) -> io::Result<usize> {
        if self.gone {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.fake.send()
    }
    fn look(&self) -> Option<End> {
        self.gone.then_some(End::ClientGone)
    }
    fn settle(&mut self) {
        std::thread::sleep(self.late);
        self.gone = true;
        self.signals.poke();
    }
}

/// A client that takes nothing ends as `stalled` however late its stream's thread looks: the
/// kernel's own time-out of the connection comes after the stall time, and a thread that wakes
/// after both (a busy machine) finds the stall first. (Seen in a full test run: a stalled
/// client counted as `client_gone`.)
#[test]
fn a_stream_that_wakes_after_its_stall_deadline_and_the_kernels_ends_as_stalled() {
    let hub = Arc::new(Hub::new());
    let sub = token_sub(&hub);
    let timing = Timing {
        ping: Duration::from_secs(60),
        stall: SETTLE_AFTER + Duration::from_millis(200),
        direct: false,
    };
    let mut out = LateThread {
        fake: Fake::with_room(5),
        signals: sub.signals.clone(),
        late: Duration::from_millis(600),
        gone: false,
    };
    assert_eq!(run(&sub, timing, &mut out), End::Stalled);
    assert_eq!(out.fake.sent, b"retry");
}

/// The hub's side of a connection: takes `room` bytes per write, keeps the rest.
#[derive(Default)]
struct FakeDirect {
    sent: std::sync::Mutex<Vec<u8>>,
    rest: std::sync::Mutex<Vec<u8>>,
    room: std::sync::atomic::AtomicUsize,
}

impl Direct for FakeDirect {
    fn send(&self, events: &[Msg]) -> Sent {
        let text = events.concat();
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

/// A stream settles once, `SETTLE_AFTER` after it started, even when nothing else would wake it
/// (an idle stream whose next ping is a minute away).
#[test]
fn an_idle_stream_settles_once_a_second_after_it_started() {
    let hub = Arc::new(Hub::new());
    let sub = token_sub(&hub);
    let signals = sub.signals.clone();
    let started = Instant::now();
    let runner = std::thread::spawn(move || {
        let mut out = Fake::with_room(usize::MAX);
        let timing = Timing {
            ping: Duration::from_secs(60),
            stall: Duration::from_secs(60),
            direct: true,
        };
        run(&sub, timing, &mut out);
        out.settled
    });
    std::thread::sleep(SETTLE_AFTER + Duration::from_millis(800));
    signals.end(End::Revoked);
    let settled = runner.join().unwrap();
    assert_eq!(settled.len(), 1, "settled {} times", settled.len());
    let after = settled[0] - started;
    assert!(
        after >= SETTLE_AFTER && after < SETTLE_AFTER + Duration::from_millis(500),
        "settled {after:?} after the start"
    );
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
        fake: Fake::with_room(usize::MAX),
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
    hub.route(&change(1), &[]);
    assert_eq!(
        direct.sent.lock().unwrap().as_slice(),
        change(1).event().as_bytes(),
        "written by the hub"
    );
    // The connection takes 5 bytes of the next change: the thread sends the rest, then the
    // change after it (which went through its queue).
    direct.room.store(5, std::sync::atomic::Ordering::SeqCst);
    hub.route(&change(2), &[]);
    hub.route(&change(3), &[]);
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

/// `events::stream` stands below the hub and the server: none of its files imports the hub,
/// `events` itself, the server or anything through `super::super` (the hub imports it, and the
/// server runs it), so no import circle can go through it.
#[test]
fn the_stream_module_imports_nothing_above_it() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/events/stream");
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let code = &text[..text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len())];
        for line in code.lines().map(str::trim_start) {
            if !line.starts_with("use ") && !line.starts_with("pub use ") {
                continue;
            }
            for above in [
                "crate::events",
                "crate::server",
                "super::super",
                "hub",
                "crate::app",
            ] {
                assert!(!line.contains(above), "{}: {line}", path.display());
            }
        }
        files += 1;
    }
    assert!(files >= 5, "{files} files read");
}
