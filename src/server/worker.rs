//! The request workers: a fixed pool that takes complete requests from connection threads and
//! answers each (`answer`), so that a handler never waits on a client. A stream request is
//! answered on its connection's own thread instead (`router::runs_on_its_connection`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;

use super::answer::answer;
use super::state::{Handoff, ServerState};

/// Takes requests until the server stops and the queue is empty: a request that was read
/// before the stop is still answered.
pub fn run(state: &ServerState) {
    loop {
        match state.for_workers.recv_timeout(Duration::from_millis(250)) {
            Ok(Handoff { request, outcome }) => outcome.send(answer(state, request)),
            Err(RecvTimeoutError::Timeout) if state.app.stopping.load(Ordering::SeqCst) => return,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
