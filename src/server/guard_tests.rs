//! Unit tests of `guard`.
use super::*;

const DEADLINES: Deadlines = Deadlines {
    head: Duration::from_secs(20),
    keep_alive: Duration::from_secs(5),
    drain: Duration::from_secs(5),
};

fn seen(phase: Phase, waited: u64, consumed: u64, in_flight: usize) -> Seen {
    Seen {
        phase,
        waited: Duration::from_secs(waited),
        in_flight,
        consumed: Some(consumed),
        queued: false,
        stopped: None,
    }
}

const FIRST: Phase = Phase::Head { first: true };
const NEXT: Phase = Phase::Head { first: false };

#[test]
fn a_head_gets_its_deadline_and_an_answer_when_nothing_else_is_written() {
    assert_eq!(decide(seen(FIRST, 19, 10, 0), &DEADLINES), Action::Wait);
    assert_eq!(
        decide(seen(FIRST, 20, 10, 0), &DEADLINES),
        Action::Answer(Code::RequestTimeout)
    );
    // A response is being written: tiny_http ends the connection after it.
    assert_eq!(
        decide(seen(NEXT, 20, 10, 1), &DEADLINES),
        Action::StopReading
    );
    // A connection that never sent a byte is closed without a word.
    assert_eq!(decide(seen(FIRST, 19, 0, 0), &DEADLINES), Action::Wait);
    assert_eq!(decide(seen(FIRST, 20, 0, 0), &DEADLINES), Action::Close);
}

#[test]
fn an_oversized_head_is_refused_at_once_but_read_ahead_is_allowed() {
    let limit = MAX_HEAD as u64;
    assert_eq!(
        decide(seen(FIRST, 0, limit + 1024, 0), &DEADLINES),
        Action::Wait
    );
    assert_eq!(
        decide(seen(FIRST, 0, limit + 1025, 0), &DEADLINES),
        Action::Answer(Code::HeaderTooLarge)
    );
    assert_eq!(
        decide(seen(NEXT, 0, limit + 1025, 1), &DEADLINES),
        Action::StopReading
    );
}

#[test]
fn keep_alive_closes_idle_connections_but_never_one_awaiting_its_response() {
    assert_eq!(decide(seen(NEXT, 4, 0, 0), &DEADLINES), Action::Wait);
    assert_eq!(decide(seen(NEXT, 5, 0, 0), &DEADLINES), Action::Close);
    // A slow handler: the client waits for us, not we for it, however long.
    assert_eq!(decide(seen(NEXT, 6, 0, 1), &DEADLINES), Action::Wait);
    assert_eq!(decide(seen(NEXT, 600, 0, 1), &DEADLINES), Action::Wait);
    // The first request gets the head deadline, not the keep-alive one.
    assert_eq!(decide(seen(FIRST, 6, 0, 0), &DEADLINES), Action::Wait);
}

#[test]
fn stopping_closes_resting_connections_at_once() {
    let mut s = seen(NEXT, 0, 0, 0);
    s.stopped = Some(Duration::ZERO);
    assert_eq!(decide(s, &DEADLINES), Action::Close);
    s.in_flight = 1;
    assert_eq!(
        decide(s, &DEADLINES),
        Action::Wait,
        "its answer is still coming"
    );
}

/// A request on its way when the server stops is waited for (and answered): a new connection's
/// first byte, and the rest of a head begun; for `LAST_HEADS` at most.
#[test]
fn stopping_waits_a_while_for_the_heads_on_their_way() {
    for (phase, consumed) in [(FIRST, 0), (FIRST, 10), (NEXT, 10)] {
        let mut s = seen(phase, 1, consumed, 0);
        s.stopped = Some(LAST_HEADS - TICK);
        assert_eq!(decide(s, &DEADLINES), Action::Wait, "{phase:?} {consumed}");
        s.stopped = Some(LAST_HEADS);
        let over = if consumed == 0 {
            Action::Close
        } else {
            Action::Answer(Code::RequestTimeout)
        };
        assert_eq!(decide(s, &DEADLINES), over, "{phase:?} {consumed}");
    }
}

#[test]
fn a_drain_is_bounded() {
    assert_eq!(
        decide(seen(Phase::Drain, 4, 0, 0), &DEADLINES),
        Action::Wait
    );
    assert_eq!(
        decide(seen(Phase::Drain, 5, 1 << 40, 0), &DEADLINES),
        Action::StopReading
    );
}

/// A head being read ahead of the parser (`ahead`) waits in the kernel, not yet taken: the
/// client has started, and a slow one is answered 408 at the deadline, not closed unanswered.
#[test]
fn bytes_waiting_unread_count_as_a_started_head() {
    let mut s = seen(FIRST, 20, 0, 0);
    assert_eq!(decide(s, &DEADLINES), Action::Close);
    s.queued = true;
    assert_eq!(decide(s, &DEADLINES), Action::Answer(Code::RequestTimeout));
}
