//! The HTTP server: a tiny_http listener, one thread per connection, a fixed pool of request
//! workers, and event streams that run on their connection's own thread.
//!
//! We run the accept loop ourselves (tiny_http_fork exposes `accept_connection`): it admits each
//! connection and hands it over (`accept`). A connection's whole life is one value on its own
//! thread (`connection::Connection`): heads parsed by tiny_http and screened ahead of it
//! (`ahead`), refusals from the head, bodies read here (`body`), complete requests answered by
//! the workers (`worker`, through `answer`), which dispatch and respond; a stream request is
//! answered on its connection's thread instead, and the stream then runs there
//! (`events::stream` owns it: socket, outlet, hand-off and end), woken by the hub, by revocation
//! or shutdown, and by the socket watcher when the client closes or sends again.
//!
//! Defences against tiny_http's known defects live here (see docs/HARDENING.md):
//! - socket timeouts: SO_RCVTIMEO/SO_SNDTIMEO set on the listener are inherited by every accepted
//!   socket, so every single read or write of tiny_http ends after `read_timeout`;
//! - the connection guard (`guard`): a deadline and a 16 KiB limit for each request head, the
//!   idle keep-alive time-out, and a bound on draining a refused body;
//! - capacity (`crate::capacity`) and fair shares: past them a connection is refused with a
//!   complete JSON answer and no thread (`accept`);
//! - bodies are read on the connection thread under a deadline and a size limit (64 KiB), so a
//!   worker never waits on a client.
//!
//! System calls are the operating-system layer's (`crate::os`); nothing here is `unsafe`.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;

use crate::admission::{Connections, Shares};
use crate::app::App;
use crate::events::{End, Watcher};
use crate::os;

mod accept;
mod ahead;
mod answer;
mod body;
mod connection;
mod exit;
mod guard;
mod head;
mod linger;
mod listeners;
mod spares;
mod state;
mod wire;
mod worker;

use guard::{Deadlines, Guard};
use state::{ForWorkers, ServerState};

/// A refused body is drained (so that the client can read our answer) at most this long.
const DRAIN: Duration = Duration::from_secs(5);

/// A running server; stops on `shutdown` or drop.
pub struct Server {
    pub addr: SocketAddr,
    workers: Vec<JoinHandle<()>>,
    state: Arc<ServerState>,
}

pub use accept::CONNECTION_STACK;
pub use listeners::bind;

impl Server {
    pub fn start(app: Arc<App>, listener: TcpListener) -> io::Result<Server> {
        let addr = listener.local_addr()?;
        // Every descriptor the capacity allows, in the table from the start: growing it later
        // stalls the thread that opens the next one.
        let capacity = &app.capacity;
        let slots =
            (2 * capacity.max_connections).min(capacity.fd_budget) + crate::capacity::RESERVED_FDS;
        if let Err(e) = os::process::reserve_descriptors(listener.as_fd(), slots) {
            log::debug!("descriptor table not grown to {slots}: {e}");
        }
        // A futex hash slot per few threads this process may run (`os::process`): each thread
        // that waits, waits on a futex.
        let threads = capacity.max_connections + crate::capacity::MAX_IDLE_THREADS;
        match os::process::size_futex_hash(threads) {
            Ok(slots) => log::debug!("futex hash: {slots} slots"),
            Err(e) => log::debug!("futex hash left as the kernel sized it: {e}"),
        }
        // Queues in the kernel for every connection this process can hold (`listeners`).
        let count = listeners::count_for(capacity.max_connections);
        let listeners = listeners::group(listener, count, app.config.read_timeout)?;
        // Without our `accept4` the accept loop could not know a connection's socket.
        os::accept::check_linked()?;
        let guard = Guard::new(Deadlines {
            head: app.config.header_timeout,
            keep_alive: app.config.keep_alive,
            drain: DRAIN,
        });
        guard.spawn(app.stopping.clone(), app.metrics.clone())?;
        let state = Arc::new(ServerState::new(app.clone(), guard)?);
        let accept_state = state.clone();
        thread::Builder::new()
            .name("accept".into())
            .spawn(move || accept::run(&listeners, &accept_state))?;
        let workers = (0..app.config.workers)
            .map(|i| {
                let state = state.clone();
                thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .spawn(move || worker::run(&state))
            })
            .collect::<io::Result<Vec<_>>>()?;
        log::info!("listening on http://{addr} with {} workers", workers.len());
        Ok(Server {
            addr,
            workers,
            state,
        })
    }

    /// Open client connections.
    pub fn connections(&self) -> usize {
        self.state.connections.open()
    }

    /// Accepted connections still waiting for their thread (the spawner makes one per
    /// connection no waiting thread takes, in the order they were accepted).
    pub fn waiting_for_a_thread(&self) -> usize {
        self.state.spares.queued()
    }

    /// Stops taking connections (what the kernel had queued is taken first), answers every
    /// request already sent on one, ends open streams, and waits (bounded) for all of it.
    pub fn shutdown(mut self, grace: Duration) {
        self.stop(grace);
    }

    fn stop(&mut self, grace: Duration) {
        self.state.app.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees `stopping`, takes what is queued and closes the
        // listeners.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        let deadline = Instant::now() + grace;
        // Streams end at once (they need no worker); one that starts later sees `stopping`.
        self.state.watcher.end_all(End::Shutdown);
        // The workers answer what the connections still send, and end once nothing can: each is
        // told so (they wait for work without a timer).
        while !self.state.no_more_requests() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        if self.state.no_more_requests() {
            for _ in 0..self.workers.len() {
                let _ = self
                    .state
                    .to_workers
                    .send_deadline(ForWorkers::End, deadline);
            }
        }
        for w in self.workers.drain(..) {
            join_until(w, deadline);
        }
        self.state.watcher.end_all(End::Shutdown);
        // Open streams are counted in one place, their places (`admission::StreamPlaces`); a
        // stream gives its place back after its last chunk is written.
        while self.state.app.stream_places.held() > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl ServerState {
    fn new(app: Arc<App>, guard: Arc<Guard>) -> io::Result<ServerState> {
        let (to_workers, for_workers) = bounded(app.config.workers * 4);
        let capacity = &app.capacity;
        let accept_ended = Arc::new(AtomicBool::new(false));
        Ok(ServerState {
            to_workers,
            for_workers,
            connections: Connections::new(capacity.max_connections, capacity.fd_budget),
            connection_shares: Shares::new(capacity.max_connections, app.config.client_share),
            guard,
            watcher: Watcher::start(app.stopping.clone(), app.stream_places.clone())?,
            spares: spares::Spares::start(accept_ended.clone(), accept::CONNECTION_STACK)?,
            accept_ended,
            app,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            self.stop(Duration::from_secs(5));
        }
    }
}

fn join_until(handle: JoinHandle<()>, deadline: Instant) {
    while !handle.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    if handle.is_finished() {
        let _ = handle.join();
    }
}
