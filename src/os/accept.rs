//! Which descriptor an `accept` just returned, told exactly to the thread that accepted.
//!
//! tiny_http_fork accepts connections itself and never hands us the socket (docs/HARDENING.md,
//! "Knowing a connection's socket"): `Server::accept_connection` returns its connection, whose
//! type is private, and nothing public of 0.12.17 (`ClientConnection`, `Request`, its writer and
//! reader boxes, `util::RefinedTcpStream`) exposes a descriptor or an `AsFd`. This crate
//! therefore defines the C function `accept4`:
//! std's `TcpListener::accept` (which tiny_http calls) and every other accept of the process
//! bind to it at link time, because std is linked statically and a symbol defined in the program
//! comes before the C library's. It makes the same system call glibc's `accept4` makes and, when
//! it succeeds, records the listening and the new descriptor, and the peer's address the kernel
//! wrote, for the calling thread. The accept loop clears the record, lets tiny_http accept, and
//! takes the record: the new connection's descriptor and its peer, with no inference, no scan and
//! no `getpeername`. `Server::start` proves at start that the
//! definition is the one in use (`check_linked`), and refuses to serve otherwise.

use std::cell::Cell;
use std::io;
use std::net::{
    Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener, TcpStream,
};
use std::os::fd::{AsFd, AsRawFd, RawFd};

use super::ClientSocket;

thread_local! {
    /// The last successful accept of this thread: listening descriptor, new descriptor, peer.
    static LAST: Cell<Option<Accepted>> = const { Cell::new(None) };
}

#[derive(Clone, Copy)]
struct Accepted {
    listener: RawFd,
    fd: RawFd,
    peer: Option<SocketAddr>,
}

/// The C library's `accept4`, made by the program: the system call, and a note of its result
/// for the calling thread, with the peer's address when the caller asked for it (std always
/// does). It allocates nothing, takes no lock and cannot unwind.
#[no_mangle]
pub extern "C" fn accept4(
    fd: libc::c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    flags: libc::c_int,
) -> libc::c_int {
    // The room the caller gave for the address (the kernel writes the full length back).
    // SAFETY: `len` is null or points to the caller's length, as for glibc's `accept4`.
    let room = if len.is_null() { 0 } else { unsafe { *len } };
    // SAFETY: the arguments are passed on unchanged to the kernel, which checks them as it
    // would for glibc's `accept4` (a bad pointer is EFAULT, not undefined behaviour here: the
    // kernel writes only through `addr` and `len`, bounded by `*len`, as the caller asked).
    let rc = unsafe { libc::syscall(libc::SYS_accept4, fd, addr, len, flags) } as libc::c_int;
    if rc >= 0 {
        // SAFETY: the kernel succeeded, so where the caller passed an address it wrote a
        // `sockaddr` there, at most `room` bytes of it, and its full length into `*len`.
        let peer = unsafe { peer_of(addr, len, room) };
        let record = Accepted {
            listener: fd,
            fd: rc,
            peer,
        };
        // `try_with`: during thread exit the slot may be gone; the record is then not needed.
        let _ = LAST.try_with(|last| last.set(Some(record)));
    }
    rc
}

/// The IP address and port an accept wrote into `addr`, if all of it fitted in `room`.
///
/// # Safety
/// `addr` and `len` are null, or as a successful `accept4` left them with `room` bytes at
/// `addr`: `*len` the full size of the address, of which the kernel wrote at most `room` bytes.
unsafe fn peer_of(
    addr: *const libc::sockaddr,
    len: *const libc::socklen_t,
    room: libc::socklen_t,
) -> Option<SocketAddr> {
    if addr.is_null() || len.is_null() || *len > room {
        return None;
    }
    let len = *len as usize;
    if len < size_of::<libc::sa_family_t>() {
        return None;
    }
    match libc::c_int::from((*addr).sa_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            let a = addr.cast::<libc::sockaddr_in>().read_unaligned();
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddrV4::new(ip, u16::from_be(a.sin_port)).into())
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            let a = addr.cast::<libc::sockaddr_in6>().read_unaligned();
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            let port = u16::from_be(a.sin6_port);
            Some(SocketAddrV6::new(ip, port, a.sin6_flowinfo, a.sin6_scope_id).into())
        }
        _ => None,
    }
}

/// Forgets this thread's last accept (before an accept whose result is wanted).
pub fn clear() {
    LAST.with(|last| last.set(None));
}

/// The socket this thread's last accept returned, if it was an accept on `listener`, and its
/// peer's address as the accept gave it; the record is consumed. The socket is the new
/// connection's write half in tiny_http (see `ClientSocket` for how long it stays valid).
pub fn take(listener: &impl AsRawFd) -> Option<(ClientSocket, Option<SocketAddr>)> {
    match LAST.with(Cell::take) {
        Some(a) if a.listener == listener.as_raw_fd() => {
            Some((ClientSocket::accepted(a.fd), a.peer))
        }
        _ => None,
    }
}

/// Proves that accepts of this process go through `accept4` above: a loopback connection,
/// accepted with std, must be recorded with the descriptor std returned.
pub fn check_linked() -> io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let _client = TcpStream::connect(listener.local_addr()?)?;
    clear();
    let (accepted, peer) = listener.accept()?;
    let recorded = take(&listener);
    if recorded
        .is_some_and(|(s, p)| s.as_fd().as_raw_fd() == accepted.as_raw_fd() && p == Some(peer))
    {
        Ok(())
    } else {
        Err(io::Error::other(
            "accepts do not go through consoled's accept4 (a linking problem): \
             connections could not be told apart, so the server does not start",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd(s: Option<(ClientSocket, Option<SocketAddr>)>) -> Option<RawFd> {
        s.map(|(s, _)| s.as_fd().as_raw_fd())
    }

    #[test]
    fn the_accepting_thread_learns_the_exact_descriptor() {
        check_linked().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let _a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _b = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        clear();
        let (s, _) = listener.accept().unwrap();
        // Another thread's accept leaves this thread's record alone.
        let o = std::thread::scope(|t| {
            t.spawn(|| {
                let (s, _) = other.accept().unwrap();
                (fd(take(&other)), s)
            })
            .join()
            .unwrap()
        });
        assert_eq!(o.0, Some(o.1.as_raw_fd()));
        // An accept on another listener is not taken for one on this listener.
        assert_eq!(take(&other), None);
        clear();
        let (s2, _) = {
            let _c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            listener.accept().unwrap()
        };
        assert_ne!(s.as_raw_fd(), s2.as_raw_fd());
        assert_eq!(fd(take(&listener)), Some(s2.as_raw_fd()));
        assert_eq!(take(&listener), None, "consumed");
    }

    #[test]
    fn the_peer_is_the_address_the_kernel_gave_the_accept() {
        for any in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = TcpListener::bind(any) else {
                continue; // no IPv6 loopback here
            };
            let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            clear();
            let (s, peer) = listener.accept().unwrap();
            let (socket, recorded) = take(&listener).unwrap();
            assert_eq!(socket.as_fd().as_raw_fd(), s.as_raw_fd());
            assert_eq!(recorded, Some(peer));
            assert_eq!(recorded, Some(client.local_addr().unwrap()));
            assert_eq!(recorded, socket.peer_addr().ok());
        }
    }
}
