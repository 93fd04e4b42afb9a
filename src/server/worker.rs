//! The request workers: a fixed pool that takes complete requests from connection threads and
//! answers each (`answer`), so that a handler never waits on a client. A stream request is
//! answered on its connection's own thread instead (`router::runs_on_its_connection`).

use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;

use super::answer::answer;
use super::state::{ForWorkers, Handoff, ServerState};

/// How long a worker waits for work before it looks for itself whether the server has stopped.
/// Only a fallback: the server's stop tells each worker to end (`ForWorkers::End`) once nothing
/// can send a request, so a quiet server's workers sleep (looking every 250 ms, with the
/// channel's spin-and-yield after each look, each woke 36 times a second).
const QUIET: Duration = Duration::from_secs(60);

/// Takes requests until the server has stopped and no connection is left that could send one:
/// every request sent on a connection the server took, before or after the stop, is answered.
pub fn run(state: &ServerState) {
    loop {
        match state.for_workers.recv_timeout(QUIET) {
            Ok(ForWorkers::Request(Handoff { request, outcome })) => {
                outcome.send(answer(state, request))
            }
            Ok(ForWorkers::End) | Err(RecvTimeoutError::Disconnected) => return,
            // Connections end soon after a stop: resting ones at once (`guard`), the others
            // after their request, within its deadlines.
            Err(RecvTimeoutError::Timeout) if state.no_more_requests() => return,
            Err(RecvTimeoutError::Timeout) => continue,
        }
    }
}
