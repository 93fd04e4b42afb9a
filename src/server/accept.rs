//! The accept loop: takes each connection, from whichever of the address's listening sockets
//! (`listeners`) holds one, through tiny_http, learns its socket exactly
//! (`accepted`: the descriptor tiny_http's accept returned on this thread), and queues it for a
//! thread of its own (`spares`: a waiting one, or one the spawner makes; this loop makes none) —
//! unless this process is at its capacity (503) or the client's address holds its share of
//! connections (429). Either refusal is a complete JSON response written
//! without a thread and followed by a clean end (the 503's socket lingers, `linger`; tiny_http
//! shuts the 429's), and each kind is logged once per episode, not once per connection.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::conn;
use super::guard::Guard;
use super::linger::Lingering;
use super::shared::{Incoming, Shared};
use super::{accepted, exit};
use crate::admission::Ticket;
use crate::admission::{Full, Refusal};
use crate::error::ApiError;
use crate::http::client::Client;
use crate::sock;

/// Stack of a connection thread: tiny_http's head parser, our body reader and, for a stream,
/// the stream loop; none needs much.
pub const CONNECTION_STACK: usize = 128 * 1024;

/// How long a full server waits for room before it refuses what waits to be accepted.
const ADMISSION_WAIT: Duration = Duration::from_secs(1);

/// Logs a condition once when it starts, and again only after it has cleared.
#[derive(Default)]
struct Once(AtomicBool);

impl Once {
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
pub fn run(
    listeners: &[TcpListener],
    guard: &Arc<Guard>,
    queue: Sender<Incoming>,
    shared: &Arc<Shared>,
) {
    let fds: Vec<_> = listeners.iter().map(AsRawFd::as_raw_fd).collect();
    let Ok(tiny) = listeners
        .iter()
        .map(|l| l.try_clone().map(tiny_http::Listener::from))
        .collect::<io::Result<Vec<_>>>()
    else {
        log::error!("cannot clone the listening sockets");
        return;
    };
    let mut door = Door {
        ssl: tiny_http::SslContextWrap::build_ssl_capabilities(None).expect("no TLS configured"),
        guard,
        queue,
        shared,
        full: Once::default(),
        full_since: None,
        lingering: Lingering::default(),
    };
    while !shared.app.stopping.load(Ordering::SeqCst) {
        let wait = if door.lingering.is_empty() {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(50)
        };
        let readable = sock::wait_any_readable(&fds, wait);
        door.lingering.look(&shared.connections);
        let readable = match readable {
            Ok(readable) => readable,
            Err(e) => {
                log::warn!("poll on the listeners: {e}");
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        // One connection from each socket that has one, in turn.
        for (i, _) in readable.iter().enumerate().filter(|(_, r)| **r) {
            door.take_one(&listeners[i], &tiny[i]);
        }
    }
    log::debug!("accept loop stopped");
}

/// The accept loop's state.
struct Door<'a> {
    ssl: tiny_http::SslContextWrap,
    guard: &'a Arc<Guard>,
    queue: Sender<Incoming>,
    shared: &'a Arc<Shared>,
    /// The capacity refusal, logged once per episode.
    full: Once,
    /// Since when descriptors have been short.
    full_since: Option<Instant>,
    /// Refused connections whose answer is still on its way.
    lingering: Lingering,
}

impl Door<'_> {
    /// Takes the next connection waiting on `listener` (`tiny`: tiny_http's view of it): refused
    /// (503) when this process is full, else accepted through tiny_http (`accept_one`).
    fn take_one(&mut self, listener: &TcpListener, tiny: &tiny_http::Listener) {
        let shared = self.shared;
        if let Some(why) = shared.connections.full() {
            // Connections being answered hold a second descriptor until they stream or close:
            // during a burst of stream requests, descriptors come back within moments, and the
            // kernel's backlog holds the newcomers meanwhile. Refuse only when they do not.
            let since = *self.full_since.get_or_insert_with(Instant::now);
            if why == Full::Descriptors && since.elapsed() < ADMISSION_WAIT {
                thread::sleep(Duration::from_millis(5));
                return;
            }
            self.full.set(|| {
                format!(
                    "at capacity ({} connections or {} descriptors): refusing new connections",
                    shared.app.capacity.max_connections, shared.app.capacity.fd_budget
                )
            });
            refuse_next(listener, shared, &mut self.lingering);
            return;
        }
        self.full.clear();
        self.full_since = None;
        accept_one(tiny, &self.ssl, self.guard, &self.queue, shared);
    }
}

/// Accepts one connection ourselves (one descriptor, no thread) and refuses it with 503.
fn refuse_next(listener: &TcpListener, shared: &Shared, lingering: &mut Lingering) {
    match listener.accept() {
        Ok((socket, peer)) => {
            let e = ApiError::from(Refusal::ConnectionsFull);
            let metrics = &shared.app.metrics;
            exit::refuse_raw(metrics, socket.as_raw_fd(), Some(peer), "accept", &e);
            lingering.add(socket, &shared.connections);
            shared
                .app
                .metrics
                .connections_refused
                .fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => accept_failed(&e),
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

fn accept_one(
    tiny: &tiny_http::Listener,
    ssl: &tiny_http::SslContextWrap,
    guard: &Arc<Guard>,
    queue: &Sender<Incoming>,
    shared: &Arc<Shared>,
) {
    let metrics = &shared.app.metrics;
    accepted::clear();
    let client = match tiny_http::Server::accept_connection(tiny, ssl) {
        Ok(Some(client)) => client,
        Ok(None) => return,
        Err(e) => return accept_failed(&e),
    };
    // The descriptor tiny_http's accept just returned on this thread: the connection's write
    // half, which it keeps open as long as the connection lives. A connection whose socket we
    // do not know (never seen: see `accepted::check_linked`) is not served.
    let fd = accepted::take(tiny.as_raw_fd())
        .filter(|&fd| sock::set_read_timeout(fd, shared.app.config.read_timeout).is_ok());
    let Some(fd) = fd else {
        log::warn!("closed an accepted connection whose socket is not known");
        metrics
            .connections_unguarded
            .fetch_add(1, Ordering::Relaxed);
        return;
    };
    let peer = sock::peer_addr(fd).ok();
    let Ok(share) = take_share(peer, shared) else {
        let e = ApiError::from(Refusal::ConnectionShare {
            limit: shared.conn_shares.limit(),
        });
        exit::refuse_raw(metrics, fd, peer, "accept", &e);
        // No lingering needed: when `client` goes, tiny_http shuts both directions before it
        // closes, so the client gets its FIN right after the answer, and a reset for its unread
        // request can only come after that end (a read then still sees a clean end).
        metrics
            .connections_over_share
            .fetch_add(1, Ordering::Relaxed);
        return;
    };
    let _ = sock::set_nodelay(fd);
    let conn = guard.watch(fd, peer);
    let mut place = shared.connections.take();
    let (queue, shared2) = (queue.clone(), shared.clone());
    // Its thread is a waiting one, or one the spawner makes (`spares`): this loop makes none.
    shared.spares.run(Box::new(move || {
        if let Some(start) = conn::serve(client, fd, &conn, &queue, &shared2, &mut place) {
            conn::stream(start, fd, &shared2);
        }
        drop(conn);
        drop(share);
        drop(place);
    }));
}

/// The client's share of connections (an IPv6 client counts by its /64, as for every other
/// count); trusted proxies carry many clients and have none.
fn take_share(peer: Option<SocketAddr>, shared: &Shared) -> Result<Option<Ticket>, ()> {
    let Some(ip) = peer.map(|p| p.ip().to_canonical()) else {
        return Ok(None);
    };
    if shared.app.config.client_source.is_proxy(ip) {
        return Ok(None);
    }
    shared
        .conn_shares
        .take(Client::of(Some(ip)))
        .map(Some)
        .ok_or(())
}
