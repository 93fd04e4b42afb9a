//! The body of one stream, on its own small-stack thread: `ready`, then each change as soon as it
//! arrives, `resync` after drops, `: ping` after a quiet interval. Each event is one write and
//! one flush (one HTTP chunk), so it reaches the client at once. Any write error ends the stream:
//! a client that went away is noticed at the next write, at the latest the next ping.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;

use super::hub::{Msg, Subscription};
use super::{PING, READY, RESYNC};

pub(super) fn run(sub: &Subscription, ping: Duration, out: &mut dyn Write) {
    if send(out, READY).is_err() {
        return;
    }
    let mut last_write = Instant::now();
    loop {
        let msg = match sub.rx.recv_deadline(last_write + ping) {
            Ok(msg) => Some(msg),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if sub.flags.ended.load(Ordering::SeqCst) {
            return;
        }
        let text: &str = if sub.flags.dropped.swap(false, Ordering::SeqCst) {
            // The client reloads everything after `resync`; what is queued is older than that.
            for _ in 0..sub.rx.len() {
                let _ = sub.rx.try_recv();
            }
            RESYNC
        } else {
            match &msg {
                Some(Msg::Event(event)) => event,
                Some(Msg::Wake) => continue,
                None => PING,
            }
        };
        if send(out, text).is_err() {
            return;
        }
        last_write = Instant::now();
    }
}

fn send(out: &mut dyn Write, text: &str) -> std::io::Result<()> {
    out.write_all(text.as_bytes())?;
    out.flush()
}
