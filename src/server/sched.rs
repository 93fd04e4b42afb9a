//! How the server's own threads are scheduled and named: the two calls to the kernel's scheduler
//! and the one that names a thread (with `sock.rs` and `accepted.rs`, the only unsafe code of the
//! crate).

use std::cell::Cell;
use std::io;

thread_local! {
    /// Whether this thread's scheduling was changed (a reused connection thread must not carry
    /// it to the next connection: `spares`).
    static CHANGED: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is scheduled as every thread starts.
pub fn is_default() -> bool {
    !CHANGED.with(Cell::get)
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Marks the calling thread as a batch thread (`SCHED_BATCH`): when it is woken, it does not
/// preempt the thread that woke it.
pub fn batch_scheduling() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    CHANGED.with(|c| c.set(true));
    // SAFETY: a valid sched_param for pid 0 (the calling thread).
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) })?;
    Ok(())
}

/// Names the calling thread, as `ps -L` and `/proc/<pid>/task/<tid>/comm` show it (at most 15
/// bytes): a spare connection thread is `conn-spare` while it waits, `conn` while it serves.
pub fn name_thread(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of which it copies at most 16 bytes;
    // `name` is one and lives for the call.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

/// Gives the calling thread the lowest priority (nice 19): under contention it gets only the
/// CPU no other thread wants. An unprivileged thread cannot raise it again.
pub fn lowest_priority() -> io::Result<()> {
    // On Linux the nice value is a thread's, and `who` 0 is the calling thread (the kernel's
    // `current`), not the whole process.
    CHANGED.with(|c| c.set(true));
    // SAFETY: setpriority takes no pointers; it only reads its three integers.
    check(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) })?;
    Ok(())
}
