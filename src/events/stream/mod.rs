//! One event stream's own machinery, in one place: its socket (`socket`) and the outlet the body
//! writes to (`outlet`), who may write on the socket at each moment, the thread or the hub (`signal`'s
//! `Writer` hand-off), the body (`body`: `ready`, changes, `resync`, pings), the signals that end
//! or wake it (`signal`), how it ends (`socket::run`: the last chunk or a reset, then the
//! socket's shutdown) and the watcher that pokes it when its client's socket stirs (`watcher`).
//! `events::StreamPlan` owns a stream from admission to the end and runs it here.
//!
//! Life of a stream (docs/events.md has the picture): the connection thread read the request
//! and answered it itself (`crate::subscribe` admitted, authenticated and subscribed it; the
//! response head waits to go out with `ready`); the connection then gives tiny_http's read half
//! back (its descriptor closes: one descriptor per stream) and runs the plan on the socket
//! (`server::connection`): registered with the watcher, the body runs until something ends it.
//! A FIN, a reset or a pipelined request wakes the watcher's epoll, which pokes the stream; the
//! stream looks at the socket (`ClientSocket::peer`, which consumes nothing) and ends itself. A
//! request that came in the same packet as the stream's ends it at once (`pipelined`). A second
//! after it started the stream's thread settles (`Outlet::settle`: `os::thread::Role`). The stream's places (`admission`) are free the moment the plan drops, after the end
//! was written.
//!
//! This module imports neither the hub nor anything above it: the hub hands events to a stream
//! through its queue and its `Signals` only.

mod body;
mod outlet;
mod signal;
mod socket;
mod watcher;

#[cfg(test)]
pub(in crate::events) use body::run as run_body;
pub use body::{Msg, Outlet, Timing, PING, READY, RESYNC, SETTLE_AFTER};
pub use signal::{Direct, End, Sent, Signals};
pub use socket::{run, Body, StreamSocket};
pub use watcher::Watcher;
