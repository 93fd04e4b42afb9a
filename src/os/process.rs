//! Settings of the whole process, made once at start: the allocator's thread caches turned off
//! (the process keeping its name) and its room ahead (first things in `main`), the sizes of the
//! descriptor table and of the futex hash (when the server starts); and the allocator's free
//! memory given back when the server is quiet (`malloc_give_back`).

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

/// glibc's tunable for how many freed blocks of each size a thread keeps for itself (its
/// "tcache", 7 by default), and the value the server runs with.
const THREAD_CACHE: &str = "glibc.malloc.tcache_count";
const NO_THREAD_CACHE: &str = "glibc.malloc.tcache_count=0";

/// The `GLIBC_TUNABLES` value that turns thread caches off, made from the one the process was
/// given; `None` when that one already says how many blocks a thread keeps (the operator's
/// choice, or this process after `exec_without_thread_caches`), which is then left alone.
pub fn tunables_without_thread_caches(given: Option<&str>) -> Option<String> {
    match given {
        Some(v) if v.split(':').any(|t| t.starts_with(THREAD_CACHE)) => None,
        Some(v) if !v.is_empty() => Some(format!("{v}:{NO_THREAD_CACHE}")),
        _ => Some(NO_THREAD_CACHE.to_owned()),
    }
}

/// Runs this program again, in place (same process, arguments and environment), with glibc's
/// per-thread caches of freed blocks turned off, unless `GLIBC_TUNABLES` already sets them;
/// returns `Ok` if it does, the error if the `exec` failed (for a warning: the server then runs
/// with the caches).
///
/// Why: every connection thread keeps up to 7 freed blocks of each small size its request's
/// handling freed, and a stream's thread lives on for hours without allocating again, so those
/// blocks stay resident and unused: about 3 KiB per held stream (5,000 held: 30 instead of 46 MiB
/// of malloc's memory; BENCHMARKS.md). Without the caches a freed block goes back to its arena,
/// where any thread reuses it; CPU per storm opening and per delivery measured the same within
/// the noise. glibc reads its tunables only when a program starts, hence the `exec`; call it
/// first, before any thread runs.
pub fn exec_without_thread_caches() -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    let given = std::env::var("GLIBC_TUNABLES").ok();
    let Some(tunables) = tunables_without_thread_caches(given.as_deref()) else {
        return Ok(());
    };
    let mut args = std::env::args_os();
    let name = args.next().unwrap_or_default();
    // This very file; where /proc is not mounted (a bare chroot), the name it was started by.
    let exe = std::path::Path::new("/proc/self/exe");
    let mut again = std::process::Command::new(if exe.exists() { exe.as_os_str() } else { &name });
    again.arg0(&name);
    Err(again.args(args).env("GLIBC_TUNABLES", tunables).exec())
}

/// Names the process after the program it was started as (the file name of its first argument;
/// the kernel keeps 15 bytes), as `ps`, `top`, `pgrep` and `pkill` show and find it. Run again
/// through `/proc/self/exe` (`exec_without_thread_caches`), the kernel names it `exe`. Call it
/// on the main thread: its name is the process's.
pub fn name_after_program() {
    use std::os::unix::ffi::OsStrExt;
    let Some(first) = std::env::args_os().next() else {
        return;
    };
    let Some(file) = std::path::Path::new(&first).file_name() else {
        return;
    };
    if let Ok(name) = std::ffi::CString::new(file.as_bytes()) {
        super::thread::name(&name);
    }
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

/// `prctl(PR_FUTEX_HASH, …)` (Linux 6.16): the process's own futex hash, its slots set or read.
const PR_FUTEX_HASH: libc::c_int = 78;
const PR_FUTEX_HASH_SET_SLOTS: libc::c_ulong = 1;
const PR_FUTEX_HASH_GET_SLOTS: libc::c_ulong = 2;

/// Most futex hash slots asked for (64 bytes of kernel memory each: 512 KiB).
const MOST_FUTEX_SLOTS: usize = 8192;

/// Gives this process a futex hash of about one slot per four of `threads` (a power of two, at
/// least 16, at most `MOST_FUTEX_SLOTS`); the slots it now has.
///
/// Every thread that waits (a connection thread for its stream's opening or its next event, a
/// spare for its connection) waits on a futex, and the kernel finds a futex's waiters in a hash
/// slot, walking the slot's list. Since Linux 6.16 a process has a hash of its own, sized when it
/// starts threads by its CPUs, not its threads: 16 slots on two CPUs. With 5,000 streams, each
/// wake-up walked a list of hundreds of sleeping threads; in a reconnect storm the openings
/// thread spent most of its time inside `futex_wake` (BENCHMARKS.md, issue 38 item 3). The
/// kernel keeps a size set here (it no longer resizes the hash as threads come). Fails on
/// kernels without the call (`EINVAL`), whose one hash for the whole system is sized by CPUs too
/// but larger (256 slots per CPU).
pub fn size_futex_hash(threads: usize) -> io::Result<usize> {
    let slots = (threads / 4)
        .next_power_of_two()
        .clamp(16, MOST_FUTEX_SLOTS);
    // SAFETY: prctl with PR_FUTEX_HASH reads only its integer arguments.
    cvt(unsafe { libc::prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS, slots, 0, 0) })?;
    futex_hash_slots()
}

/// Slots of this process's own futex hash (0: it uses the system's).
pub fn futex_hash_slots() -> io::Result<usize> {
    // SAFETY: as above; GET_SLOTS returns the count.
    let slots = cvt(unsafe { libc::prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0, 0, 0) })?;
    Ok(slots as usize)
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

    /// The thread caches are turned off beside whatever else the operator tuned, and a value
    /// that already says how many blocks a thread keeps is left as it is (no second `exec`).
    #[test]
    fn thread_caches_are_turned_off_unless_the_operator_chose() {
        let off = "glibc.malloc.tcache_count=0";
        assert_eq!(tunables_without_thread_caches(None).as_deref(), Some(off));
        assert_eq!(
            tunables_without_thread_caches(Some("")).as_deref(),
            Some(off)
        );
        assert_eq!(
            tunables_without_thread_caches(Some("glibc.malloc.arena_max=2")).as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0")
        );
        for chosen in [
            off,
            "glibc.malloc.tcache_count=7",
            "a=1:glibc.malloc.tcache_count=3",
        ] {
            assert_eq!(
                tunables_without_thread_caches(Some(chosen)),
                None,
                "{chosen}"
            );
        }
    }

    /// The hash gets a slot per four threads asked for, and keeps it while threads come and go
    /// (the kernel would otherwise size it by CPUs: 16 slots on two).
    #[test]
    fn the_futex_hash_is_sized_for_the_threads_and_kept() {
        if futex_hash_slots().is_err() {
            eprintln!("skipped: this kernel has no per-process futex hash (Linux < 6.16)");
            return;
        }
        assert_eq!(size_futex_hash(20_000).unwrap(), MOST_FUTEX_SLOTS);
        assert_eq!(size_futex_hash(5_000).unwrap(), 2048);
        let threads: Vec<_> = (0..64)
            .map(|_| {
                std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(20)))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(futex_hash_slots().unwrap(), 2048);
        assert_eq!(size_futex_hash(10).unwrap(), 16);
    }
}
