//! The request workers: a fixed pool that takes complete requests from connection threads and
//! answers each (`answer`), so that a handler never waits on a client. A stream request is
//! answered on its connection's own thread instead (`router::runs_on_its_connection`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;

use super::answer::answer;
use super::state::{Handoff, ServerState};

/// Takes requests until the server has stopped and no connection is left that could send one:
/// every request sent on a connection the server took, before or after the stop, is answered.
pub fn run(state: &ServerState) {
    loop {
        match state.for_workers.recv_timeout(Duration::from_millis(250)) {
            Ok(Handoff { request, outcome }) => outcome.send(answer(state, request)),
            Err(RecvTimeoutError::Timeout) if no_more_requests(state) => return,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// The listeners are closed and every connection has ended, so nothing can be queued again.
/// Connections end soon after a stop: resting ones at once (`guard`), the others after their
/// request, within its deadlines.
fn no_more_requests(state: &ServerState) -> bool {
    state.accept_ended.load(Ordering::SeqCst) && state.connections.open() == 0
}
