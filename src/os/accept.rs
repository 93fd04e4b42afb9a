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
//! it succeeds, records the listening and the new descriptor for the calling thread. The accept
//! loop clears the record, lets tiny_http accept, and takes the record: the new connection's
//! descriptor, with no inference and no scan. `Server::start` proves at start that the
//! definition is the one in use (`check_linked`), and refuses to serve otherwise.

use std::cell::Cell;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, RawFd};

use super::ClientSocket;

thread_local! {
    /// The last successful accept of this thread: (listening descriptor, new descriptor).
    static LAST: Cell<Option<(RawFd, RawFd)>> = const { Cell::new(None) };
}

/// The C library's `accept4`, made by the program: the system call, and a note of its result
/// for the calling thread. It allocates nothing, takes no lock and cannot unwind.
#[no_mangle]
pub extern "C" fn accept4(
    fd: libc::c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    flags: libc::c_int,
) -> libc::c_int {
    // SAFETY: the arguments are passed on unchanged to the kernel, which checks them as it
    // would for glibc's `accept4` (a bad pointer is EFAULT, not undefined behaviour here: the
    // kernel writes only through `addr` and `len`, bounded by `*len`, as the caller asked).
    let rc = unsafe { libc::syscall(libc::SYS_accept4, fd, addr, len, flags) } as libc::c_int;
    if rc >= 0 {
        // `try_with`: during thread exit the slot may be gone; the record is then not needed.
        let _ = LAST.try_with(|last| last.set(Some((fd, rc))));
    }
    rc
}

/// Forgets this thread's last accept (before an accept whose result is wanted).
pub fn clear() {
    LAST.with(|last| last.set(None));
}

/// The socket this thread's last accept returned, if it was an accept on `listener`; the
/// record is consumed. It is the new connection's write half in tiny_http (see `ClientSocket`
/// for how long it stays valid).
pub fn take(listener: &impl AsRawFd) -> Option<ClientSocket> {
    match LAST.with(Cell::take) {
        Some((l, fd)) if l == listener.as_raw_fd() => Some(ClientSocket::accepted(fd)),
        _ => None,
    }
}

/// Proves that accepts of this process go through `accept4` above: a loopback connection,
/// accepted with std, must be recorded with the descriptor std returned.
pub fn check_linked() -> io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let _client = TcpStream::connect(listener.local_addr()?)?;
    clear();
    let (accepted, _) = listener.accept()?;
    if take(&listener).is_some_and(|s| s.as_fd().as_raw_fd() == accepted.as_raw_fd()) {
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

    fn fd(s: Option<ClientSocket>) -> Option<RawFd> {
        s.map(|s| s.as_fd().as_raw_fd())
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
}
