//! The accept loop: admits each connection and hands it over. It takes a connection from
//! whichever of the address's listening sockets (`listeners`) holds one, through tiny_http, learns
//! its socket exactly (`os::accept`), admits it (a place in this process's capacity, its client's
//! share) and queues it, as a `Connection`, for a thread of its own (`spares`: a waiting one, or
//! one the spawner makes; this loop makes none). Past the capacity (503) or the client's share
//! (429) it refuses instead, with a complete JSON response written without a thread and followed
//! by a clean end (the 503's socket lingers, `linger`; tiny_http shuts the 429's); each kind is
//! logged once per episode, not once per connection. When the server stops, it takes what the
//! kernel has queued, then the listeners close (`take_the_queued`).

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::connection::Connection;
use super::exit;
use super::linger::Lingering;
use super::state::ServerState;
use crate::admission::{ConnectionPlace, Full, Refusal, SharePlace};
use crate::error::ApiError;
use crate::http::client::Client;
use crate::os::poll::wait_readable;
use crate::os::{self, ClientSocket};

/// Stack of a connection thread: tiny_http's head parser, our body reader and, for a stream,
/// the stream loop; none needs much (its use is measured: `tests/stream_cost.rs`).
pub const CONNECTION_STACK: usize = 128 * 1024;

/// How long a full server waits for room before it refuses what waits to be accepted.
const ADMISSION_WAIT: Duration = Duration::from_secs(1);

/// How long a stopping server goes on taking the connections queued in the kernel, at most.
const LAST_TAKE: Duration = Duration::from_secs(1);

/// A condition logged once when it starts, and again only after it has cleared.
#[derive(Default)]
struct LoggedOnce(AtomicBool);

impl LoggedOnce {
    fn set(&self, msg: impl FnOnce() -> String) {
        if !self.0.swap(true, Ordering::Relaxed) {
            log::warn!("{}", msg());
        }
    }

    fn clear(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Takes connections from every socket of `listeners` (all on one address: `listeners`) until
/// the server stops.
pub fn run(listeners: &[TcpListener], state: &Arc<ServerState>) {
    let Ok(tiny) = listeners
        .iter()
        .map(|l| l.try_clone().map(tiny_http::Listener::from))
        .collect::<io::Result<Vec<_>>>()
    else {
        log::error!("cannot clone the listening sockets");
        state.accept_has_ended();
        return;
    };
    let mut accepting = AcceptLoop {
        ssl: tiny_http::SslContextWrap::build_ssl_capabilities(None).expect("no TLS configured"),
        state,
        full: LoggedOnce::default(),
        full_since: None,
        lingering: Lingering::default(),
    };
    let fds: Vec<_> = listeners.iter().map(AsFd::as_fd).collect();
    while !state.app.stopping.load(Ordering::SeqCst) {
        let wait = if accepting.lingering.is_empty() {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(50)
        };
        let readable = wait_readable(&fds, wait);
        accepting.lingering.look(&state.connections);
        match readable {
            // One connection from each socket that has one, in turn.
            Ok(readable) => (0..listeners.len())
                .filter(|i| readable[*i])
                .for_each(|i| accepting.take_one(&listeners[i], &tiny[i])),
            Err(e) => {
                log::warn!("poll on the listeners: {e}");
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
    accepting.take_the_queued(listeners, &tiny, &fds);
    // The listeners close when the caller drops them, right after this: a connect from then on
    // is refused, and a load balancer sends it to another instance.
    state.accept_has_ended();
    log::debug!("accept loop stopped");
}

/// The accept loop's state.
struct AcceptLoop<'a> {
    ssl: tiny_http::SslContextWrap,
    state: &'a Arc<ServerState>,
    /// The capacity refusal, logged once per episode.
    full: LoggedOnce,
    /// Since when descriptors have been short.
    full_since: Option<Instant>,
    /// Refused connections whose answer is still on its way.
    lingering: Lingering,
}

impl AcceptLoop<'_> {
    /// The server stops: takes the connections the kernel has queued, and serves them. Each
    /// completed its handshake, so its client (a load balancer) counts its request as sent to
    /// this instance, and will not send it elsewhere; closing the listeners with them queued
    /// would reset them. Until the queues are empty, or for at most `LAST_TAKE` under a flood.
    fn take_the_queued(
        &mut self,
        listeners: &[TcpListener],
        tiny: &[tiny_http::Listener],
        fds: &[BorrowedFd<'_>],
    ) {
        let until = Instant::now() + LAST_TAKE;
        while Instant::now() < until {
            let Ok(readable) = wait_readable(fds, Duration::ZERO) else {
                return;
            };
            if !readable.contains(&true) {
                return;
            }
            (0..listeners.len())
                .filter(|i| readable[*i])
                .for_each(|i| self.take_one(&listeners[i], &tiny[i]));
        }
    }

    /// Takes the next connection waiting on `listener` (`tiny`: tiny_http's view of it):
    /// admitted to this process's capacity and accepted through tiny_http (`accept_one`), or
    /// refused (503) when the process is full.
    fn take_one(&mut self, listener: &TcpListener, tiny: &tiny_http::Listener) {
        let why = match self.state.connections.admit() {
            Ok(place) => {
                self.full.clear();
                self.full_since = None;
                return self.accept_one(tiny, place);
            }
            Err(why) => why,
        };
        // Connections being answered hold a second descriptor until they stream or close:
        // during a burst of stream requests, descriptors come back within moments, and the
        // kernel's backlog holds the newcomers meanwhile. Refuse only when they do not.
        let since = *self.full_since.get_or_insert_with(Instant::now);
        if why == Full::Descriptors && since.elapsed() < ADMISSION_WAIT {
            thread::sleep(Duration::from_millis(5));
            return;
        }
        let capacity = &self.state.app.capacity;
        self.full.set(|| {
            format!(
                "at capacity ({} connections or {} descriptors): refusing new connections",
                capacity.max_connections, capacity.fd_budget
            )
        });
        self.refuse_next(listener);
    }

    /// Accepts one connection ourselves (one descriptor, no thread) and refuses it with 503.
    fn refuse_next(&mut self, listener: &TcpListener) {
        let state = self.state;
        match listener.accept() {
            Ok((socket, peer)) => {
                let e = ApiError::from(Refusal::ConnectionsFull);
                let metrics = &state.app.metrics;
                exit::refuse_raw(metrics, socket.as_fd(), Some(peer), "accept", &e);
                self.lingering.add(socket, &state.connections);
                metrics.connections_refused.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => accept_failed(&e),
        }
    }

    /// Accepts one connection through tiny_http, with the `place` it was admitted to, and hands
    /// it over to a thread of its own, unless its client holds its share.
    fn accept_one(&mut self, tiny: &tiny_http::Listener, place: ConnectionPlace) {
        os::accept::clear();
        let parser = match tiny_http::Server::accept_connection(tiny, &self.ssl) {
            Ok(Some(parser)) => parser,
            Ok(None) => return,
            Err(e) => return accept_failed(&e),
        };
        let Some((socket, peer)) = self.socket_of(tiny) else {
            return;
        };
        let Some(share) = self.share_of(peer, socket) else {
            return;
        };
        // TCP_NODELAY and the read time-out came with the socket, from its listener
        // (`listeners`): no call here.
        let admitted = (place, share);
        let connection = Connection::new(parser, socket, peer, admitted, Arc::clone(self.state));
        // Its thread is a waiting one, or one the spawner makes (`spares`): this loop makes none.
        self.state.spares.run(connection.into_job());
    }

    /// The socket tiny_http's accept just returned on this thread (the connection's write half,
    /// which it keeps open as long as the connection lives) and its peer, as the accept gave it.
    /// A connection whose socket we do not know (never seen: see `os::accept::check_linked`) is
    /// closed, and counted.
    fn socket_of(&self, tiny: &tiny_http::Listener) -> Option<(ClientSocket, Option<SocketAddr>)> {
        let socket = os::accept::take(tiny);
        if socket.is_none() {
            log::warn!("closed an accepted connection whose socket is not known");
            let metrics = &self.state.app.metrics;
            metrics
                .connections_unguarded
                .fetch_add(1, Ordering::Relaxed);
        }
        socket
    }

    /// The client's share of connections (an IPv6 client counts by its /64, as for every other
    /// count; trusted proxies carry many clients and have none), or its refusal (429), written
    /// on `socket`.
    fn share_of(
        &self,
        peer: Option<SocketAddr>,
        socket: ClientSocket,
    ) -> Option<Option<SharePlace>> {
        let state = self.state;
        let Some(ip) = peer.map(|p| p.ip().to_canonical()) else {
            return Some(None);
        };
        if state.app.config.client_source.is_proxy(ip) {
            return Some(None);
        }
        if let Some(share) = state.connection_shares.admit(Client::of(Some(ip))) {
            return Some(Some(share));
        }
        let limit = state.connection_shares.limit();
        let e = ApiError::from(Refusal::ConnectionShare { limit });
        let metrics = &state.app.metrics;
        exit::refuse_raw(metrics, socket.as_fd(), peer, "accept", &e);
        // No lingering needed: when tiny_http's connection goes, it shuts both directions before
        // it closes, so the client gets its FIN right after the answer, and a reset for its
        // unread request can only come after that end (a read then still sees a clean end).
        metrics
            .connections_over_share
            .fetch_add(1, Ordering::Relaxed);
        None
    }
}

fn accept_failed(e: &io::Error) {
    // The listener's read timeout makes accept() time out: a tick, not an error.
    if !matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        // EMFILE and friends: back off instead of spinning or giving up.
        log::warn!("accept: {e}");
        thread::sleep(Duration::from_millis(50));
    }
}
