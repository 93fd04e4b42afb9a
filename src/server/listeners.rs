//! The listening sockets: one bound by `bind` (as an operator or a test asks for it), and more on
//! the same address at start (`group`), so that a reconnect storm fits in the kernel's queues.
//!
//! The kernel holds connections that wait to be accepted in a queue per listening socket, of at
//! most `net.core.somaxconn` (4,096 by default). A connection that finds it full has its
//! handshake dropped, and the client sends it again only after a second. When 5,000 clients
//! reconnect at once (an instance crashed) the queue filled whenever the accept loop lost the CPU
//! for a few tens of milliseconds, and the whole storm took a second longer (BENCHMARKS.md,
//! "Storm"). With `SO_REUSEPORT` several sockets share the address and the kernel spreads the
//! connections over their queues (by a hash of each connection's addresses): n sockets hold n
//! queues. The accept loop takes from all of them; there are enough for the connections this
//! process can hold, at most `MAX`.
//!
//! The first socket is bound *before* it allows the port to be shared, so that a second process
//! asking for the same port still fails with "address in use" instead of quietly sharing it. Only
//! sockets of the same user can join the group.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use socket2::{Domain, SockRef, Socket, Type};

/// The queue asked for each socket; the kernel caps it at `net.core.somaxconn`.
const BACKLOG: i32 = 4096;

/// Most listening sockets on the address.
const MAX: usize = 8;

fn socket_for(addr: SocketAddr, read_timeout: Duration) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // `[::]` serves IPv4 too, whatever the system's `bindv6only` default.
        socket.set_only_v6(false)?;
    }
    socket.set_write_timeout(Some(Duration::from_secs(10)))?;
    inherited(&SockRef::from(&socket), read_timeout)?;
    Ok(socket)
}

/// The options every accepted socket takes from its listener (Linux copies them into each new
/// connection; `tests::accepted_sockets_inherit_the_options`), so that the accept loop sets
/// none per connection: the read time-out (every read of tiny_http ends after it), and
/// TCP_NODELAY (each answer and event leaves at once instead of waiting for the client's
/// possibly delayed acknowledgement of the previous one). Set again on the listener the server
/// is started with (`group`), which may have been bound elsewhere. (The write time-out of ten
/// seconds is `socket_for`'s: a client that stops reading cannot hold a writer longer.)
fn inherited(socket: &SockRef<'_>, read_timeout: Duration) -> io::Result<()> {
    socket.set_read_timeout(Some(read_timeout))?;
    socket.set_nodelay(true)
}

/// The listening socket, with the options its accepted sockets inherit (Linux copies the
/// time-outs into each connection): `read_timeout` is the one the server will be started with.
pub fn bind(addr: SocketAddr, read_timeout: Duration) -> io::Result<TcpListener> {
    let socket = socket_for(addr, read_timeout)?;
    // Bound exclusively, then shared: a port another process listens on is refused here.
    socket.bind(&addr.into())?;
    socket.set_reuse_port(true)?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// How many sockets `connections` need so that all of them can wait in the kernel's queues at
/// once (a queue holds the smaller of `BACKLOG` and `net.core.somaxconn`).
pub fn count_for(connections: usize) -> usize {
    let somaxconn = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(BACKLOG as usize);
    let queue = somaxconn.clamp(1, BACKLOG as usize);
    connections.div_ceil(queue).clamp(1, MAX)
}

/// `first` and `count - 1` more sockets on its address, each with the options its connections
/// inherit (`inherited`: a listener whose options cannot be set is refused). A socket that
/// cannot be added is logged and left out: the server still serves, with smaller queues.
pub fn group(
    first: TcpListener,
    count: usize,
    read_timeout: Duration,
) -> io::Result<Vec<TcpListener>> {
    inherited(&SockRef::from(&first), read_timeout)?;
    let addr = match first.local_addr() {
        Ok(addr) => addr,
        Err(_) => return Ok(vec![first]),
    };
    let mut all = vec![first];
    while all.len() < count {
        let more = socket_for(addr, read_timeout).and_then(|s| {
            s.set_reuse_port(true)?;
            s.bind(&addr.into())?;
            s.listen(BACKLOG)?;
            Ok(s)
        });
        match more {
            Ok(s) => all.push(s.into()),
            Err(e) => {
                log::warn!(
                    "cannot add a listening socket on {addr} ({} of {count}): {e}",
                    all.len() + 1
                );
                break;
            }
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    /// What lets the accept loop set nothing per connection: on this kernel an accepted socket
    /// has its listener's read time-out and TCP_NODELAY, for a listener of `bind` and for one
    /// bound elsewhere and given to `group`.
    #[test]
    fn accepted_sockets_inherit_the_options() {
        let timeout = Duration::from_millis(1500);
        let bound = bind("127.0.0.1:0".parse().unwrap(), timeout).unwrap();
        let elsewhere = TcpListener::bind("127.0.0.1:0").unwrap();
        // One socket each: with several, the kernel chooses which one a connection goes to.
        for first in [bound, elsewhere] {
            let listener = group(first, 1, timeout).unwrap().remove(0);
            let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (accepted, _) = listener.accept().unwrap();
            assert_eq!(accepted.read_timeout().unwrap(), Some(timeout));
            assert!(accepted.nodelay().unwrap());
        }
    }
}
