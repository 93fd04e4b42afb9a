//! Settings of the whole process, made once at start: the allocator's room ahead (first thing in
//! `main`) and the size of the descriptor table (when the server starts); and the allocator's
//! free memory given back when the server is quiet (`malloc_give_back`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::cvt;

/// Room glibc's malloc maps ahead when it makes a heap (`M_TOP_PAD`; its default is 128 KiB).
const HEAP_AHEAD: libc::c_int = 4 << 20;

/// Asks malloc to make each heap with `HEAP_AHEAD` of room (the main one grows by it too). A
/// thread arena's heap is mapped ahead but made usable a little at a time, each time with an
/// `mprotect` that takes the memory-map lock for writing, which a storm's thread starts and page
/// faults also need: with 4 MiB ahead, 5,000 streams opened at once allocate without growing
/// any heap, and the storm took 12 % less time (A/B, 6 storms each). The room is address space
/// until it is used; what is freed at a heap's top is kept up to that much. Call it first, before
/// any thread runs.
pub fn malloc_room_ahead() {
    // SAFETY: mallopt takes two integers and changes only malloc's own parameters.
    unsafe { libc::mallopt(libc::M_TOP_PAD, HEAP_AHEAD) };
}

/// Gives back to the system the memory malloc holds free: what is free at the top of each heap
/// (kept up to `HEAP_AHEAD` after a storm: 45 MiB over 15 arenas once 5,000 streams had opened
/// and closed, BENCHMARKS.md "Idle memory") and the free pages inside them. It walks each arena
/// under that arena's lock, so it is for a quiet server (`maintenance`). A heap grown again
/// within its old size needs no `mprotect` (malloc remembers how far it was made usable), only
/// page faults.
pub fn malloc_give_back() {
    // SAFETY: malloc_trim takes an integer and changes only malloc's own state, under its locks.
    unsafe { libc::malloc_trim(0) };
}

/// Grows this process's descriptor table to hold at least `slots` descriptors at once, by
/// duplicating `fd` to the number `slots - 1` and closing the copy (the table never shrinks).
/// The kernel otherwise doubles the table when it fills, and each doubling waits for an RCU
/// grace period (milliseconds on a busy machine) in whichever thread opens the next descriptor:
/// during a reconnect storm that was the accept loop, up to 80 ms per storm, while the kernel's
/// listen queue overflowed. Fails when `slots` exceeds the open-file limit.
pub fn reserve_descriptors(fd: BorrowedFd<'_>, slots: usize) -> io::Result<()> {
    let top = libc::c_int::try_from(slots.saturating_sub(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: fcntl takes no pointers here; F_DUPFD_CLOEXEC returns a new descriptor (the
    // lowest free one at or above `top`), which the OwnedFd made of it owns alone and closes.
    let copy = unsafe {
        OwnedFd::from_raw_fd(cvt(libc::fcntl(
            fd.as_raw_fd(),
            libc::F_DUPFD_CLOEXEC,
            top,
        ))?)
    };
    drop(copy);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::os::fd::AsFd;

    /// The descriptor table holds the slots asked for (`FDSize` in /proc), the reservation leaves
    /// no descriptor open, and more than the open-file limit is refused.
    #[test]
    fn reserving_descriptors_grows_the_table_once() {
        let fd_size = || {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("FDSize:")).unwrap();
            line["FDSize:".len()..].trim().parse::<usize>().unwrap()
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let (limit, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
        let want = (limit as usize).min(4096);
        reserve_descriptors(listener.as_fd(), want).unwrap();
        assert!(fd_size() >= want, "FDSize {} < {want}", fd_size());
        let left = std::path::Path::new("/proc/self/fd").join((want - 1).to_string());
        assert!(!left.exists(), "the reservation left its descriptor open");
        assert!(reserve_descriptors(listener.as_fd(), limit as usize + 1).is_err());
    }
}
