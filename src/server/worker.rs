//! The request workers: a fixed pool that takes complete requests from connection threads and
//! answers each (`answer`), so that a handler never waits on a client. A stream request is
//! answered on its connection's own thread instead (`router::runs_on_its_connection`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::{select, RecvTimeoutError};

use super::answer::answer;
use super::state::{Handoff, ServerState};

/// How often a worker looks whether the last connection has ended, once the accept loop has.
const ENDING: Duration = Duration::from_millis(250);

/// Takes requests until the server has stopped and no connection is left that could send one:
/// every request sent on a connection the server took, before or after the stop, is answered.
///
/// While the accept loop runs a worker waits for a request or for the loop's end, with no
/// timer: a quiet server's workers sleep (looking every 250 ms whether the server had stopped,
/// with the channel's spin-and-yield, each woke 36 times a second).
pub fn run(state: &ServerState) {
    loop {
        select! {
            recv(state.for_workers) -> handoff => match handoff {
                Ok(handoff) => serve(state, handoff),
                Err(_) => return,
            },
            // Closed: the accept loop has ended.
            recv(state.accept_end) -> _ => break,
        }
    }
    loop {
        match state.for_workers.recv_timeout(ENDING) {
            Ok(handoff) => serve(state, handoff),
            Err(RecvTimeoutError::Timeout) if no_more_requests(state) => return,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn serve(state: &ServerState, Handoff { request, outcome }: Handoff) {
    outcome.send(answer(state, request));
}

/// The listeners are closed and every connection has ended, so nothing can be queued again.
/// Connections end soon after a stop: resting ones at once (`guard`), the others after their
/// request, within its deadlines.
fn no_more_requests(state: &ServerState) -> bool {
    state.accept_ended.load(Ordering::SeqCst) && state.connections.open() == 0
}
