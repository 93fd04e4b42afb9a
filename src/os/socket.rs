//! A client connection's socket, as the connection, its guard and its stream act on it.
//! tiny_http_fork accepts a connection and keeps its two descriptors (a read half and a write
//! half, `dup`s of one socket) to itself; `os::accept` learns the accepted one (the write half)
//! exactly, as a `ClientSocket`. What socket2 offers goes through it (`SockRef`); the rest is one
//! libc call each. None of them closes a descriptor.

use std::io;
use std::mem::size_of;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use socket2::SockRef;

use super::cvt;

/// The socket of one accepted client connection: the descriptor tiny_http's accept returned,
/// which is its connection's write half.
///
/// **Validity.** tiny_http owns the descriptor: it stays open while tiny_http's connection, or
/// a response writer taken from it, lives, and closes when the last of them goes. So a
/// `ClientSocket` is used only by the connection's owner while it holds one of those
/// (`server::connection`, then its stream, which keeps the writer to its end), or on the owner's
/// behalf while the owner waits with one in hand (the guard acts only while the connection is
/// armed; the stream watcher only until the stream removes the socket, before the writer
/// drops). Then the number cannot have been closed and given to another file. Nothing here closes
/// it. Made only by `os::accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientSocket(RawFd);

impl AsFd for ClientSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is open for as long as this value is used (the rule above).
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

/// What a stream's socket says about its client, read without consuming anything it sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// Connected, nothing sent by the client.
    Quiet,
    /// The client sent bytes (a pipelined request): they wait in the kernel, unread.
    Sent,
    /// The client closed (FIN), reset, or the socket failed.
    Gone,
    /// The kernel gave the connection up: what we sent stayed unacknowledged for the user
    /// time-out (`set_user_timeout`): a client that stopped reading, or vanished.
    TimedOut,
}

/// Offset of `tcpi_bytes_received` in Linux's `struct tcp_info` (since Linux 4.1).
const BYTES_RECEIVED_AT: usize = 128;
/// `TCP_ESTABLISHED` in Linux's `tcp_states.h`.
const TCP_ESTABLISHED: u8 = 1;

impl ClientSocket {
    /// The descriptor `os::accept` saw returned for a new connection.
    pub(super) fn accepted(fd: RawFd) -> ClientSocket {
        ClientSocket(fd)
    }

    fn sock(&self) -> SockRef<'_> {
        SockRef::from(self)
    }

    /// Aborts the connection when sent data stays unacknowledged this long (a client that
    /// vanished: no ACKs), instead of after the kernel's default of about 15 minutes.
    pub fn set_user_timeout(&self, d: Duration) -> io::Result<()> {
        self.sock().set_tcp_user_timeout(Some(d))
    }

    /// Caps the kernel's send buffer of the socket (it then stops growing it on its own).
    pub fn set_send_buffer(&self, bytes: usize) -> io::Result<()> {
        self.sock().set_send_buffer_size(bytes)
    }

    /// The address of the other end.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock()
            .peer_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("not an IP socket"))
    }

    /// Shuts one or both directions down (the descriptor stays open); a blocked read on the
    /// socket, tiny_http's included, returns at once.
    pub fn shutdown(&self, how: Shutdown) {
        let _ = self.sock().shutdown(how);
    }

    /// Aborts the connection without closing the descriptor (`connect` to `AF_UNSPEC`, which
    /// disconnects a TCP socket): queued data is dropped, the peer gets a reset, and every later
    /// read or write on any descriptor of the socket fails. Unlike `shutdown`, this also stops a
    /// reader that the peer keeps feeding.
    pub fn abort(&self) -> io::Result<()> {
        let addr = libc::sockaddr {
            sa_family: libc::AF_UNSPEC as libc::sa_family_t,
            sa_data: [0; 14],
        };
        let len = size_of::<libc::sockaddr>() as libc::socklen_t;
        // SAFETY: a valid sockaddr of family AF_UNSPEC and its size; the kernel only reads it.
        cvt(unsafe { libc::connect(self.0, &addr, len) })?;
        Ok(())
    }

    /// Receives into `buf`, waiting as the read time-out allows.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        receive(self.as_fd(), buf, 0)
    }

    /// Looks at what is queued without taking it: it stays for the next reader.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        receive(self.as_fd(), buf, libc::MSG_PEEK)
    }

    /// Writes what the socket buffer takes at once, never blocking and never raising SIGPIPE.
    pub fn send_now(&self, bytes: &[u8]) -> io::Result<usize> {
        send_now(self.as_fd(), bytes)
    }

    /// As `send_now`, with `Ok(0)` when the socket buffer is full.
    pub fn send_some(&self, bytes: &[u8]) -> io::Result<usize> {
        match self.send_now(bytes) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            other => other,
        }
    }

    /// Bytes queued in the kernel and not read yet.
    pub fn queued(&self) -> io::Result<usize> {
        Ok(ioctl_int(self.as_fd(), libc::FIONREAD)?.max(0) as usize)
    }

    /// Bytes taken off the socket so far (by tiny_http's reads): received by the kernel minus
    /// those still queued. The two counts are read until no byte arrived between them (a segment
    /// landing in between would make the difference short by its length).
    pub fn consumed(&self) -> io::Result<u64> {
        let mut before = self.received()?;
        for _ in 0..8 {
            let queued = self.queued()?;
            let after = self.received()?;
            if after == before {
                return Ok(after.saturating_sub(queued as u64));
            }
            before = after;
        }
        Err(io::Error::other(
            "bytes kept arriving while they were counted",
        ))
    }

    /// Whether more than `bytes` were taken off the socket (`consumed() > bytes`). When the
    /// kernel has received no more than `bytes` (a request alone on its connection, as a stream's
    /// usually is) nothing can have been taken past them: one call instead of `consumed`'s three.
    pub fn consumed_past(&self, bytes: u64) -> io::Result<bool> {
        if self.received()? <= bytes {
            return Ok(false);
        }
        Ok(self.consumed()? > bytes)
    }

    /// Bytes the kernel has received on the socket so far.
    fn received(&self) -> io::Result<u64> {
        let mut info = [0u64; 32];
        let len = tcp_info(self.as_fd(), &mut info)?;
        if len < BYTES_RECEIVED_AT + 8 {
            return Err(io::Error::other(
                "this kernel's tcp_info has no byte counts",
            ));
        }
        Ok(info[BYTES_RECEIVED_AT / 8])
    }

    /// Waits until more than `have` bytes are queued (or the socket is shut, or fails), at most
    /// `timeout`: `poll` with the receive low-water mark one byte past `have`, which is then put
    /// back to one byte (what every read expects). Whether the wait ended before the time-out.
    pub fn wait_for_more(&self, have: usize, timeout: Duration) -> bool {
        let mark = libc::c_int::try_from(have + 1).unwrap_or(libc::c_int::MAX);
        if set_rcvlowat(self.as_fd(), mark).is_err() {
            return false;
        }
        let woke = super::poll::wait_readable(&[self.as_fd()], timeout).is_ok_and(|ready| ready[0]);
        let _ = set_rcvlowat(self.as_fd(), 1);
        woke
    }

    /// Looks at the connection: its TCP state (a FIN moves it to `CLOSE_WAIT`, a reset to
    /// `CLOSE`) and the bytes waiting to be read. After tiny_http's read half is gone
    /// (`shutdown(SHUT_RD)`), `poll` reports "read hang-up" at once for every socket, so only
    /// these two tell a client's close from a pipelined request.
    pub fn peer(&self) -> Peer {
        let mut info = [0u8; 8];
        if tcp_info(self.as_fd(), &mut info).is_err() {
            return Peer::Gone;
        }
        if info[0] != TCP_ESTABLISHED {
            return self.why_closed();
        }
        match self.queued() {
            Ok(n) if n > 0 => Peer::Sent,
            Ok(_) => Peer::Quiet,
            Err(_) => Peer::Gone,
        }
    }

    /// Why a connection no longer established ended: the kernel's time-out, or the client.
    /// (Reads, and so clears, the socket's pending error: the connection is over either way.)
    fn why_closed(&self) -> Peer {
        match self.sock().take_error() {
            Ok(Some(e)) if e.raw_os_error() == Some(libc::ETIMEDOUT) => Peer::TimedOut,
            _ => Peer::Gone,
        }
    }

    /// Whether the socket has nothing to tell its stream: the client is connected and quiet,
    /// and nothing written waits in the kernel (so no write waits for room).
    pub fn at_rest(&self) -> bool {
        self.peer() == Peer::Quiet
            && ioctl_int(self.as_fd(), libc::TIOCOUTQ).is_ok_and(|unsent| unsent == 0)
    }
}

/// Writes what the socket buffer of `fd` takes at once, never blocking and never raising
/// SIGPIPE (for a refusal written on a socket we accepted ourselves, too).
pub fn send_now(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<usize> {
    SockRef::from(&fd).send_with_flags(bytes, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
}

/// `recv` into an initialised buffer (socket2 wants one it may leave uninitialised).
fn receive(fd: BorrowedFd<'_>, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: `buf` is a valid, writable buffer of its length for the call's duration.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Linux's `struct tcp_info` (or its first `size_of::<T>()` bytes) into `value`; how many bytes
/// the kernel wrote.
fn tcp_info<T: Copy>(fd: BorrowedFd<'_>, value: &mut T) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    let (level, name) = (libc::IPPROTO_TCP, libc::TCP_INFO);
    let out = (value as *mut T).cast();
    // SAFETY: `value` is a valid, writable T and `len` its size; the kernel writes at most
    // `len` bytes of plain integers into it.
    cvt(unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, out, &mut len) })?;
    Ok(len as usize)
}

/// `SO_RCVLOWAT` (socket2 has no call for it).
fn set_rcvlowat(fd: BorrowedFd<'_>, bytes: libc::c_int) -> io::Result<()> {
    let (level, name) = (libc::SOL_SOCKET, libc::SO_RCVLOWAT);
    let value = (&bytes as *const libc::c_int).cast();
    let len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: passes one int and its size; the kernel only reads it.
    cvt(unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, value, len) })?;
    Ok(())
}

/// An `ioctl` that reads one int (`FIONREAD`: bytes to read; `TIOCOUTQ`: bytes not yet
/// acknowledged by the peer).
fn ioctl_int(fd: BorrowedFd<'_>, request: libc::Ioctl) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    // SAFETY: these requests write one int, into `value`.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), request, &mut value) })?;
    Ok(value)
}

#[cfg(test)]
#[path = "socket_tests.rs"]
mod tests;
