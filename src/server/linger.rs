//! Connections refused at capacity, closed gently. A refusal is written at once, then our side
//! is shut (the client reads the answer and then the end), and what the client still sends is
//! read and dropped until it closes or `LINGER` passes. Closing with the client's request unread
//! would send a reset instead, which can destroy the answer before the client has read it (the
//! "lingering close" of RFC 9112, section 9.6). No thread: the accept loop looks at these sockets
//! between accepts.

use crate::admission::Connections;
use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// How long a refused connection may stay open for the client to finish sending and close.
const LINGER: Duration = Duration::from_secs(2);
/// Refused connections kept at once; past it the oldest is closed (after a last read).
const MAX_LINGERING: usize = 256;
/// At most this much is read from one socket per look.
const READ_PER_LOOK: usize = 64 * 1024;

#[derive(Default)]
pub struct Lingering {
    sockets: VecDeque<(TcpStream, Instant)>,
}

impl Lingering {
    /// Takes a connection whose answer was written. `fds` counts the descriptor while it is held.
    pub fn add(&mut self, socket: TcpStream, fds: &Connections) {
        let _ = socket.shutdown(Shutdown::Write);
        if socket.set_nonblocking(true).is_err() {
            return;
        }
        if self.sockets.len() >= MAX_LINGERING {
            if let Some((mut oldest, _)) = self.sockets.pop_front() {
                drain(&mut oldest);
                fds.release_fds(1);
            }
        }
        fds.hold_fds(1);
        self.sockets.push_back((socket, Instant::now() + LINGER));
    }

    /// Reads what each socket holds; closes those whose client closed or whose time is up.
    pub fn look(&mut self, fds: &Connections) {
        let now = Instant::now();
        let before = self.sockets.len();
        self.sockets
            .retain_mut(|(socket, until)| drain(socket) && *until > now);
        fds.release_fds(before - self.sockets.len());
    }

    pub fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }
}

/// Reads and drops what the socket holds now; false once the client has closed (or the socket
/// failed), i.e. when closing it sends no reset.
fn drain(socket: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    let mut read = 0;
    while read < READ_PER_LOOK {
        match socket.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => read += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}
