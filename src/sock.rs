//! The few socket calls we make on descriptors that tiny_http owns. tiny_http_fork accepts a
//! connection and keeps its two descriptors (a read half and a write half, `dup`s of one socket)
//! to itself; the accept loop learns the accepted one (the write half) exactly (`accepted`), and
//! the guard and the stream act on the socket through these calls. Each function is one libc
//! call on a descriptor number, and none of them closes or takes ownership of one it was given.

use std::io;
use std::mem::size_of;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::RawFd;
use std::time::Duration;

use socket2::SockAddr;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn getsockopt<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &mut T,
) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a valid, writable T and `len` is its size; the kernel writes at most
    // `len` bytes. A closed or foreign descriptor only makes the call fail.
    check(unsafe { libc::getsockopt(fd, level, name, (value as *mut T).cast(), &mut len) })?;
    Ok(len as usize)
}

fn timeval(d: Duration) -> libc::timeval {
    libc::timeval {
        tv_sec: d.as_secs() as libc::time_t,
        tv_usec: d.subsec_micros() as libc::suseconds_t,
    }
}

pub fn set_read_timeout(fd: RawFd, d: Duration) -> io::Result<()> {
    let tv = timeval(d);
    // SAFETY: passes a valid timeval and its size.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Waits until `fd` is readable (for a listener: a connection is waiting), at most `timeout`.
pub fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd.
    match check(unsafe { libc::poll(&mut p, 1, ms) }) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// Waits until one of `fds` is readable (for listeners: a connection waits on one), at most
/// `timeout`; says which are, in the order of `fds`.
pub fn wait_any_readable(fds: &[RawFd], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `polls` is a valid, writable array of `polls.len()` pollfds for the call.
    match check(unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, ms) }) {
        Ok(_) => Ok(polls.iter().map(|p| p.revents != 0).collect()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(vec![false; fds.len()]),
        Err(e) => Err(e),
    }
}

/// Waits until more than `have` bytes are queued to be read on `fd` (or the socket is shut, or
/// fails), at most `timeout`: `poll` with the socket's low-water mark one byte past `have`, which
/// is then put back to one byte (what every read expects). Whether the wait ended before the
/// time-out.
pub fn wait_for_more(fd: RawFd, have: usize, timeout: Duration) -> bool {
    let mark = libc::c_int::try_from(have + 1).unwrap_or(libc::c_int::MAX);
    if set_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, mark).is_err() {
        return false;
    }
    let woke = wait_readable(fd, timeout).unwrap_or(false);
    let _ = set_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, 1);
    woke
}

/// Bytes queued on `fd` and not read yet.
pub fn queued(fd: RawFd) -> io::Result<usize> {
    Ok(ioctl_int(fd, libc::FIONREAD)?.max(0) as usize)
}

/// Offset of `tcpi_bytes_received` in Linux's `struct tcp_info` (since Linux 4.1).
const BYTES_RECEIVED_AT: usize = 128;

/// Bytes that tiny_http has taken off the socket so far: received by the kernel minus those
/// still queued in it. The two counts are read until no byte arrived between them (a segment
/// landing in between would make the difference short by its length).
pub fn consumed(fd: RawFd) -> io::Result<u64> {
    let mut before = received(fd)?;
    for _ in 0..8 {
        let queued = queued(fd)?;
        let after = received(fd)?;
        if after == before {
            return Ok(after.saturating_sub(queued as u64));
        }
        before = after;
    }
    Err(io::Error::other(
        "bytes kept arriving while they were counted",
    ))
}

/// Bytes the kernel has received on the socket so far.
fn received(fd: RawFd) -> io::Result<u64> {
    let mut info = [0u64; 32];
    let len = getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut info)?;
    if len < BYTES_RECEIVED_AT + 8 {
        return Err(io::Error::other(
            "this kernel's tcp_info has no byte counts",
        ));
    }
    Ok(info[BYTES_RECEIVED_AT / 8])
}

pub fn shutdown(fd: RawFd, how: Shutdown) {
    let how = match how {
        Shutdown::Read => libc::SHUT_RD,
        Shutdown::Write => libc::SHUT_WR,
        Shutdown::Both => libc::SHUT_RDWR,
    };
    // SAFETY: shutdown takes no pointers; the caller guarantees the descriptor is the
    // connection's (see `guard`). It does not close the descriptor.
    unsafe { libc::shutdown(fd, how) };
}

/// Aborts the connection without closing the descriptor (`connect` to `AF_UNSPEC`, which
/// disconnects a TCP socket): queued data is dropped, the peer gets a reset, and every later
/// read or write on any descriptor of the socket fails. Unlike `shutdown`, this also stops a
/// reader that the peer keeps feeding.
pub fn abort(fd: RawFd) -> io::Result<()> {
    let addr = libc::sockaddr {
        sa_family: libc::AF_UNSPEC as libc::sa_family_t,
        sa_data: [0; 14],
    };
    // SAFETY: a valid sockaddr of family AF_UNSPEC and its size; the kernel only reads it.
    check(unsafe { libc::connect(fd, &addr, size_of::<libc::sockaddr>() as libc::socklen_t) })?;
    Ok(())
}

/// Receives into `buf`, waiting as the socket's read time-out allows; with `peek`, the bytes
/// stay queued for the next reader.
pub fn recv(fd: RawFd, buf: &mut [u8], peek: bool) -> io::Result<usize> {
    let flags = if peek { libc::MSG_PEEK } else { 0 };
    // SAFETY: `buf` is a valid, writable buffer of its length for the call's duration.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Writes what the socket buffer takes at once, never blocking and never raising SIGPIPE.
pub fn send_now(fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: `bytes` is a valid buffer of its length.
    let n = unsafe {
        libc::send(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Grows this process's descriptor table to hold at least `slots` descriptors at once, by
/// duplicating `fd` to the number `slots - 1` and closing the copy (the table never shrinks).
/// The kernel otherwise doubles the table when it fills, and each doubling waits for an RCU
/// grace period (milliseconds on a busy machine) in whichever thread opens the next descriptor:
/// during a reconnect storm that was the accept loop, up to 80 ms per storm, while the kernel's
/// listen queue overflowed. Fails when `slots` exceeds the open-file limit.
pub fn reserve_descriptors(fd: RawFd, slots: usize) -> io::Result<()> {
    let top = libc::c_int::try_from(slots.saturating_sub(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: fcntl takes no pointers here; F_DUPFD_CLOEXEC returns a new descriptor (the
    // lowest free one at or above `top`) that this function alone owns and closes.
    let copy = check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, top) })?;
    // SAFETY: `copy` was just made here and nothing else knows it.
    unsafe { libc::close(copy) };
    Ok(())
}

/// What a stream's socket says about its client, read without consuming anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// Connected, nothing sent by the client.
    Quiet,
    /// The client sent bytes (a pipelined request): they wait in the kernel, unread.
    Sent,
    /// The client closed (FIN), reset, or the socket failed.
    Gone,
}

/// `TCP_ESTABLISHED` in Linux's `tcp_states.h`.
const TCP_ESTABLISHED: u8 = 1;

/// Looks at a connection: its TCP state (a FIN moves it to `CLOSE_WAIT`, a reset to `CLOSE`)
/// and the bytes waiting to be read. After tiny_http's read half is gone (`shutdown(SHUT_RD)`),
/// `poll` reports "read hang-up" at once for every socket, so only these two tell a client's
/// close from a pipelined request.
pub fn peer(fd: RawFd) -> Peer {
    let mut info = [0u8; 8];
    if getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut info).is_err()
        || info[0] != TCP_ESTABLISHED
    {
        return Peer::Gone;
    }
    match queued(fd) {
        Ok(n) if n > 0 => Peer::Sent,
        Ok(_) => Peer::Quiet,
        Err(_) => Peer::Gone,
    }
}

/// Whether a stream's socket has nothing to tell its stream: the client is connected and quiet,
/// and nothing written waits in the kernel (so no write waits for room).
pub fn at_rest(fd: RawFd) -> bool {
    peer(fd) == Peer::Quiet && ioctl_int(fd, libc::TIOCOUTQ).is_ok_and(|n| n == 0)
}

/// An `ioctl` that reads one int (`FIONREAD`: bytes to read; `TIOCOUTQ`: bytes not yet
/// acknowledged by the peer).
fn ioctl_int(fd: RawFd, request: libc::Ioctl) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    // SAFETY: these requests write one int.
    check(unsafe { libc::ioctl(fd, request, &mut value) })?;
    Ok(value)
}

/// Sends without blocking and without SIGPIPE; `Ok(0)` when the socket buffer is full.
pub fn send_some(fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
    match send_now(fd, bytes) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        other => other,
    }
}

fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: passes one int and its size.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Turns Nagle's algorithm off: each event leaves at once instead of waiting for the client's
/// (possibly delayed) acknowledgement of the previous one.
pub fn set_nodelay(fd: RawFd) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
}

/// Aborts the connection when sent data stays unacknowledged this long (a client that vanished:
/// no ACKs), instead of after the kernel's default of about 15 minutes of retransmissions.
pub fn set_user_timeout(fd: RawFd, d: Duration) -> io::Result<()> {
    let ms = d.as_millis().min(i32::MAX as u128) as libc::c_int;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms)
}

/// Caps the kernel's send buffer of a socket (it then stops growing it on its own).
pub fn set_send_buffer(fd: RawFd, bytes: usize) -> io::Result<()> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_SNDBUF,
        bytes.min(i32::MAX as usize) as libc::c_int,
    )
}

/// The address of the other end of a connection.
pub fn peer_addr(fd: RawFd) -> io::Result<SocketAddr> {
    // SAFETY: socket2 hands us storage and its length for getpeername to fill.
    let ((), addr) = unsafe {
        SockAddr::try_init(|storage, len| {
            check(libc::getpeername(fd, storage.cast(), len)).map(|_| ())
        })
    }?;
    addr.as_socket()
        .ok_or_else(|| io::Error::other("not an IP socket"))
}

/// An epoll instance that reports, edge-triggered, every wake-up of the sockets added to it
/// (data, a FIN or reset, room to write), each tagged with the caller's key.
pub struct Epoll(RawFd);

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; the new descriptor is owned by the returned value.
        Ok(Epoll(check(unsafe {
            libc::epoll_create1(libc::EPOLL_CLOEXEC)
        })?))
    }

    /// Watches `fd` under `key` until `remove`; the caller keeps `fd` open until then.
    pub fn add(&self, fd: RawFd, key: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: key,
        };
        // SAFETY: a valid epoll_event; the kernel copies it.
        check(unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(())
    }

    pub fn remove(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `add` (old kernels want a non-null event for DEL).
        unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Waits at most `timeout` and appends the keys of the sockets that woke.
    pub fn wait(&self, keys: &mut Vec<u64>, timeout: Duration) -> io::Result<()> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 256];
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `evs` has room for the number of events we pass.
        let n = match check(unsafe { libc::epoll_wait(self.0, evs.as_mut_ptr(), 256, ms) }) {
            Ok(n) => n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        keys.extend(evs[..n].iter().map(|e| e.u64));
        Ok(())
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this value owns.
        unsafe { libc::close(self.0) };
    }
}

#[cfg(test)]
#[path = "sock_tests.rs"]
mod tests;
