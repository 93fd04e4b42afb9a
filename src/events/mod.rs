//! The change stream `GET /v1/events`: subscriber hub, PostgreSQL listener, stream threads.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Routes change notifications to the open streams of this instance.
#[derive(Default)]
pub struct Hub {}

impl Hub {
    pub fn new() -> Hub {
        Hub {}
    }
}

/// Asks a running stream to end (shutdown, a request pipelined behind it).
#[derive(Clone, Default)]
pub struct Ender {
    ended: Arc<AtomicBool>,
}

impl Ender {
    pub fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
    }
}

/// An authorised event stream, ready to run on its own thread once the response head is sent.
pub struct StreamPlan {
    ender: Ender,
}

impl StreamPlan {
    pub fn ender(&self) -> Ender {
        self.ender.clone()
    }

    /// Writes the stream until it ends; each `write` call is one event.
    pub fn run(self, _out: &mut dyn Write) {}
}
