//! What the accept loop, connection threads and workers share (`ServerState`), and the hand-off
//! of a request from its connection's thread to a worker and back (`Handoff`, `Outcome`). A leaf
//! of the server: it imports none of the modules that use it, so that none of them imports
//! another that imports it back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::guard::Guard;

use crate::admission::{Connections, Shares};
use crate::app::App;
use crate::error::ApiError;
use crate::events::{StreamPlan, Watcher};
use crate::http::Request;

/// State shared by the accept loop, connection threads and workers.
pub struct ServerState {
    pub(super) app: Arc<App>,
    /// Complete requests on their way to a worker, and the workers' end of that queue.
    pub(super) to_workers: Sender<ForWorkers>,
    pub(super) for_workers: Receiver<ForWorkers>,
    /// Open client connections (each has one thread) and the descriptors they hold.
    pub(super) connections: Arc<Connections>,
    /// Connections held per client.
    pub(super) connection_shares: Arc<Shares>,
    /// Deadlines and limits of every connection's heads.
    pub(super) guard: Arc<Guard>,
    /// Pokes streams whose socket stirred (`events::stream`).
    pub(super) watcher: Arc<Watcher>,
    /// Connection threads waiting for a connection.
    pub(super) spares: super::spares::Spares,
    /// The accept loop has ended and its listeners are closed: no connection comes any more.
    pub(super) accept_ended: Arc<AtomicBool>,
}

impl ServerState {
    /// The accept loop has ended (its listeners close next): no connection comes any more. Says
    /// so to the connection threads waiting for a connection, which wait without looking at the
    /// clock while the server runs, and end now.
    pub(super) fn accept_has_ended(&self) {
        self.accept_ended.store(true, Ordering::SeqCst);
        self.spares.wake_all();
    }

    /// The accept loop has ended and every connection has too: nothing can send a request any
    /// more.
    pub(super) fn no_more_requests(&self) -> bool {
        self.accept_ended.load(Ordering::SeqCst) && self.connections.open() == 0
    }
}

/// What the request workers are handed. A request goes by value, as it did before the end had a
/// variant of its own (boxed, it would cost an allocation per request).
#[allow(clippy::large_enum_variant)]
pub enum ForWorkers {
    /// A request to answer.
    Request(Handoff),
    /// Nothing can send a request any more (`ServerState::no_more_requests`): end. Sent once per
    /// worker by the server's stop, so each worker takes exactly one.
    End,
}

/// A request whose head and body have both arrived, ready to be answered (`answer`).
pub struct CompleteRequest {
    /// tiny_http's request: where the response goes.
    pub parsed: tiny_http::Request,
    /// The request as the application reads it (or why it cannot be read).
    pub request: Result<Request, ApiError>,
    /// When the request had fully arrived.
    pub started: Instant,
}

/// A complete request handed to a worker.
pub struct Handoff {
    pub request: CompleteRequest,
    /// Where the worker says what became of the request.
    pub outcome: crate::oneshot::Sender<Outcome>,
}

/// What became of a request.
pub enum Outcome {
    /// Answered: the connection may carry the next request.
    Answered,
    /// An event stream: run it (its head goes out with its first event).
    Stream(Box<ReadyStream>),
}

/// A stream whose response head is ready to go, to run on its connection's thread.
pub struct ReadyStream {
    pub plan: StreamPlan,
    /// The response head, sent with the stream's first event (one write, not two).
    pub head: Vec<u8>,
    /// tiny_http's writer: kept (it keeps the descriptor open) until the stream ends.
    pub writer: Box<dyn std::io::Write + Send>,
    /// HTTP/1.1: each event is one chunk. HTTP/1.0: the body ends with the connection.
    pub chunked: bool,
}
