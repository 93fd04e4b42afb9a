//! Waiting on sockets: `poll` for a few (the accept loop's listening sockets, a head arriving in
//! pieces), and an edge-triggered epoll for many (every stream's socket, `events::stream`'s
//! watcher).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::cvt;

fn millis(timeout: Duration) -> libc::c_int {
    timeout.as_millis().min(libc::c_int::MAX as u128) as libc::c_int
}

/// Waits until one of `fds` is readable (for a listener: a connection waits), at most
/// `timeout`; says which are, in the order of `fds`. A signal ends the wait early, with none.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let count = polls.len() as libc::nfds_t;
    // SAFETY: `polls` is a valid, writable array of `count` pollfds for the call.
    match cvt(unsafe { libc::poll(polls.as_mut_ptr(), count, millis(timeout)) }) {
        Ok(_) => Ok(polls.iter().map(|p| p.revents != 0).collect()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(vec![false; fds.len()]),
        Err(e) => Err(e),
    }
}

/// An epoll instance that reports, edge-triggered, every wake-up of the sockets added to it
/// (data, a FIN or reset, room to write), each tagged with the caller's key.
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; the descriptor epoll_create1 returns is new and owned by the
        // value made from it here, which closes it on drop.
        Ok(Epoll(unsafe {
            OwnedFd::from_raw_fd(cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?)
        }))
    }

    /// Watches `fd` under `key` until `remove`; the caller keeps `fd` open until then.
    pub fn add(&self, fd: BorrowedFd<'_>, key: u64) -> io::Result<()> {
        let events = libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET;
        self.control(libc::EPOLL_CTL_ADD, fd, events as u32, key)
    }

    pub fn remove(&self, fd: BorrowedFd<'_>) {
        // Old kernels want a non-null event for DEL.
        let _ = self.control(libc::EPOLL_CTL_DEL, fd, 0, 0);
    }

    fn control(
        &self,
        op: libc::c_int,
        fd: BorrowedFd<'_>,
        events: u32,
        key: u64,
    ) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: key };
        let (epoll, fd) = (self.0.as_raw_fd(), fd.as_raw_fd());
        // SAFETY: a valid epoll_event, which the kernel copies.
        cvt(unsafe { libc::epoll_ctl(epoll, op, fd, &mut ev) })?;
        Ok(())
    }

    /// Waits at most `timeout` and appends the keys of the sockets that woke.
    pub fn wait(&self, keys: &mut Vec<u64>, timeout: Duration) -> io::Result<()> {
        const ROOM: usize = 256;
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; ROOM];
        let epoll = self.0.as_raw_fd();
        // SAFETY: `evs` has room for the number of events passed.
        let n = unsafe {
            libc::epoll_wait(
                epoll,
                evs.as_mut_ptr(),
                ROOM as libc::c_int,
                millis(timeout),
            )
        };
        let n = match cvt(n) {
            Ok(n) => n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        keys.extend(evs[..n].iter().map(|e| e.u64));
        Ok(())
    }
}
