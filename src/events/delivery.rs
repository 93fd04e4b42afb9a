//! What the hub hands a stream: a subscriber's end of its stream (`Sub`: the queue, the signals,
//! the hub's direct write), the changes routed and not yet written (`Batch`), and each stream's
//! share of a batch (`per_stream`), which `fanout` writes.

use std::collections::HashMap;
use std::sync::Arc;

use crossbeam_channel::Receiver;

use super::hub::Scope;
use super::stream::{Msg, Signals};

/// A stream as the hub holds it.
pub(super) struct Sub {
    pub(super) scope: Scope,
    /// Changes that may wait in the queue.
    pub(super) capacity: usize,
    pub(super) tx: crossbeam_channel::Sender<Msg>,
    /// The hub's own end of the stream's queue, to empty it when it overflows.
    pub(super) rx: Receiver<Msg>,
    pub(super) signals: Arc<Signals>,
}

impl Sub {
    /// Hands `events` (in order) to the stream, never blocking: written on its connection by
    /// the hub when its thread sleeps with nothing to send, else queued and the thread woken.
    /// When the queue is full, the changes in it are dropped instead (the client reloads
    /// everything after the `resync` it is flagged for) and the newer ones are queued behind
    /// the `resync`. Returns (events handed over, of which found the queue full).
    pub(super) fn deliver(&self, events: &[Msg]) -> (usize, usize) {
        // One thread at a time delivers to a stream (a batch at a time, each stream taken by
        // one thread: `fanout`), so the queue cannot fill between the look and the send.
        // Nothing waits for the stream's thread: the hub may write the events itself, if the
        // thread sleeps (in order: nothing queued can be overtaken).
        if self.tx.is_empty() && events.len() <= self.capacity && self.signals.try_direct(events) {
            return (events.len(), 0);
        }
        let mut full = 0;
        for event in events {
            if self.tx.len() >= self.capacity {
                while self.rx.try_recv().is_ok() {}
                self.signals.flag_resync();
                full += 1;
            }
            let _ = self.tx.send(event.clone());
        }
        self.signals.wake();
        (events.len() - full, full)
    }
}

/// Changes routed (their streams found, in commit order) and not written yet: the listener
/// routes every change it has read before it delivers them (`Hub::deliver`), so that a stream
/// behind by several changes gets them in one write, and a server that fell behind catches up
/// instead of paying a write and a client wake-up per change per stream.
#[derive(Default)]
pub struct Batch {
    pub(super) events: Vec<Msg>,
    /// (stream id, stream, index in `events`) of each delivery, in the order routed.
    pub(super) deliveries: Vec<(u64, Arc<Sub>, u32)>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// Each stream of `batch` with its changes, in order. Streams that get the same changes share
/// one list (with one change, the usual case, all of them).
pub(super) fn per_stream(batch: Batch) -> Vec<(Arc<Sub>, Arc<[Msg]>)> {
    let Batch {
        events,
        mut deliveries,
    } = batch;
    if let [event] = events.as_slice() {
        let all: Arc<[Msg]> = Arc::new([event.clone()]);
        return deliveries
            .into_iter()
            .map(|(_, sub, _)| (sub, all.clone()))
            .collect();
    }
    // A stream's deliveries together, its changes in the order they were routed.
    deliveries.sort_by_key(|(id, _, at)| (*id, *at));
    let mut lists: HashMap<Vec<u32>, Arc<[Msg]>> = HashMap::new();
    let mut out = Vec::new();
    for group in deliveries.chunk_by(|a, b| a.0 == b.0) {
        let at: Vec<u32> = group.iter().map(|(_, _, at)| *at).collect();
        let list = lists
            .entry(at)
            .or_insert_with_key(|at| at.iter().map(|i| events[*i as usize].clone()).collect());
        out.push((group[0].1.clone(), list.clone()));
    }
    out
}
