//! Connection threads: how they are started (without a signal stack), named, scheduled for
//! the role they take, and how a stream's thread gives back the stack it no longer uses.

use std::cell::Cell;
use std::io;

use super::cvt;

thread_local! {
    /// Whether this thread took a role (a reused connection thread must not carry it to the next
    /// connection: `server::spares`).
    static CHANGED: Cell<bool> = const { Cell::new(false) };
}

/// A connection thread's work.
pub type Job = Box<dyn FnOnce() + Send>;

/// Starts a thread of `stack` bytes that runs `job` and ends (detached: nobody joins it).
///
/// Not `std::thread`: Rust's runtime gives each thread it starts a signal stack of its own (an
/// `mmap`, an `mprotect` for its guard page, and an `munmap` when the thread ends), only so that
/// a stack overflow is reported in words before the process aborts. Each of those calls takes
/// the process's memory-map lock for writing, which every page fault of every thread also needs:
/// when 5,000 clients reconnect at once, the connection threads started for them queued on that
/// lock (about 4 ms per thread start), and the accept loop behind them. Without it a thread that
/// overflows its stack still ends the process, by `SIGSEGV` and without the message. A panic in
/// `job` is reported by the panic hook, as on any thread, and ends only this thread.
pub fn spawn(stack: usize, job: Job) -> io::Result<()> {
    extern "C" fn start(arg: *mut libc::c_void) -> *mut libc::c_void {
        // SAFETY: `arg` is the box `spawn` leaked for this thread, taken back exactly once.
        let job = unsafe { Box::from_raw(arg.cast::<Job>()) };
        // An unwinding panic must not cross into the C caller; the hook has reported it.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(*job));
        std::ptr::null_mut()
    }
    let arg = Box::into_raw(Box::new(job));
    // SAFETY: the attribute is initialised before use and destroyed once; pthread_create gets a
    // valid attribute, an `extern "C"` start routine and `arg`, which the new thread owns from
    // then on (or, if no thread was made, this function takes back and drops).
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        let mut rc = libc::pthread_attr_init(&mut attr);
        if rc == 0 {
            rc = libc::pthread_attr_setstacksize(&mut attr, stack);
            if rc == 0 {
                rc = libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
            }
            if rc == 0 {
                let mut thread: libc::pthread_t = 0;
                rc = libc::pthread_create(&mut thread, &attr, start, arg.cast());
            }
            libc::pthread_attr_destroy(&mut attr);
        }
        if rc != 0 {
            drop(Box::from_raw(arg));
            return Err(io::Error::from_raw_os_error(rc));
        }
    }
    Ok(())
}

/// Names the calling thread, as `ps -L` and `/proc/<pid>/task/<tid>/comm` show it (at most 15
/// bytes): a spare connection thread is `conn-spare` while it waits, `conn` while it serves.
pub fn name(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of which it copies at most 16 bytes;
    // `name` is one and lives for the call.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

/// What a connection thread may become, beyond how every thread starts. A thread that took a
/// role keeps it: it serves no other connection after this one (`unchanged`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Answers a refused flood: the lowest priority (nice 19), so that under contention it gets
    /// only the CPU no other thread wants. An unprivileged thread cannot raise it again.
    RefusingFlood,
    /// Runs a stream that has settled (`events::stream`, a second after it started): batch
    /// scheduling, so that woken by the hub it waits for the hub to finish its fan-out instead
    /// of preempting it (the woken threads then run back to back, without an interrupt each;
    /// measured: p99 and CPU per delivery both lower at 1,000 streams x 50 changes/s), and the
    /// stack pages the request's handling touched given back (`trim_stack`).
    SettledStream,
}

impl Role {
    /// Takes the role on the calling thread.
    pub fn adopt(self) -> io::Result<()> {
        CHANGED.with(|c| c.set(true));
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: setpriority reads three integers (on Linux the nice value is a thread's, and
        // `who` 0 is the calling thread, not the process); sched_setscheduler reads a valid
        // sched_param for pid 0, the calling thread.
        let scheduled = cvt(unsafe {
            match self {
                Role::RefusingFlood => libc::setpriority(libc::PRIO_PROCESS, 0, 19),
                Role::SettledStream => libc::sched_setscheduler(0, libc::SCHED_BATCH, &param),
            }
        });
        if self == Role::SettledStream {
            trim_stack();
        }
        scheduled.map(|_| ())
    }
}

/// Whether the calling thread took no role: it is scheduled as every thread starts.
pub fn unchanged() -> bool {
    !CHANGED.with(Cell::get)
}

/// Below this function's frame, this much of the stack is left alone: the x86-64 red zone (128
/// bytes) and the return address of the `madvise` call, which is a bare system call. The page
/// that holds it is kept whole.
const TRIM_MARGIN: usize = 512;

/// Gives back to the kernel the pages of the calling thread's stack that lie below the caller's
/// frame: what earlier, deeper calls touched and nothing uses any more. A stream's thread calls
/// it once the stream has settled (`events::stream`, `Outlet::settle`), and then holds (resident)
/// only the stack it uses while it streams, not the deepest the request's handling reached. A
/// page touched again later comes back zeroed, as a fresh stack page does.
#[inline(never)]
fn trim_stack() {
    // The address of a local: this frame's place on the stack.
    let local = 0u8;
    let here = std::hint::black_box(&local) as *const u8 as usize;
    // SAFETY: the attribute is initialised by pthread_getattr_np before it is read and
    // destroyed once; pthread_attr_getstack writes the two out-parameters. The range given to
    // madvise lies inside this thread's own stack (from its lowest usable address, above the
    // guard page, to `TRIM_MARGIN` below this frame), holds no live data, and MADV_DONTNEED on
    // private anonymous memory only makes those pages read as zero when next touched.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return;
        }
        let mut low: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let got = libc::pthread_attr_getstack(&attr, &mut low, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        let (low, high) = (low as usize, low as usize + size);
        let page = usize::try_from(libc::sysconf(libc::_SC_PAGESIZE)).unwrap_or(4096);
        if got != 0 || here <= low || here > high {
            return;
        }
        let start = (low + page - 1) & !(page - 1);
        let end = here.saturating_sub(TRIM_MARGIN) & !(page - 1);
        if end > start {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident KiB of the mapping that holds `addr` (the calling thread's stack, for a local's
    /// address), from `/proc/self/smaps`.
    fn resident_kib_around(addr: usize) -> usize {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = lo <= addr && addr < hi;
                        continue;
                    }
                }
            }
            if inside {
                if let Some(kib) = line.strip_prefix("Rss:") {
                    return kib.trim().trim_end_matches(" kB").trim().parse().unwrap();
                }
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    /// Touches about `kib` KiB of stack below the caller.
    #[inline(never)]
    fn go_deep(kib: usize) -> u8 {
        let mut page = [0u8; 1024];
        page[std::hint::black_box(7)] = 1;
        let below = if kib > 1 { go_deep(kib - 1) } else { 0 };
        std::hint::black_box(&page)[7] + below
    }

    /// A thread that once went deep holds that stack until it gives it back; after
    /// `trim_stack` it holds about what it uses from here up.
    #[test]
    fn trimming_gives_back_the_stack_below_the_caller() {
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let local = 0u8;
                let here = std::hint::black_box(&local) as *const u8 as usize;
                assert_eq!(go_deep(96), 96);
                let deep = resident_kib_around(here);
                trim_stack();
                let after = resident_kib_around(here);
                assert!(deep >= 96, "the deep calls touched {deep} KiB");
                assert!(after <= 24, "{after} KiB still resident after the trim");
                // The stack still works, as deep as before.
                assert_eq!(go_deep(96), 96);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// A thread of `spawn` runs its job with the stack asked for and no signal stack, parks and
    /// is unparked as any thread (a stream sleeps so), and a panic ends only that thread.
    #[test]
    fn spawned_threads_run_their_job_without_a_signal_stack() {
        let (tx, rx) = std::sync::mpsc::channel();
        spawn(
            256 * 1024,
            Box::new(move || {
                let mut old: libc::stack_t = no_stack();
                // SAFETY: a null new stack only reads the current one into `old`.
                let rc = unsafe { libc::sigaltstack(std::ptr::null(), &mut old) };
                // Deep enough to need more than a default-sized small stack's first pages.
                let deep = std::hint::black_box([1u8; 100 * 1024]);
                tx.send((rc, old.ss_flags, deep[99 * 1024], std::thread::current()))
                    .unwrap();
                std::thread::park();
                tx.send((0, 0, 0, std::thread::current())).unwrap();
            }),
        )
        .unwrap();
        let (rc, flags, deep, thread) = rx.recv().unwrap();
        assert_eq!(
            (rc, flags & libc::SS_DISABLE, deep),
            (0, libc::SS_DISABLE, 1)
        );
        thread.unpark();
        assert!(rx.recv_timeout(std::time::Duration::from_secs(5)).is_ok());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        spawn(
            128 * 1024,
            Box::new(move || {
                let _tx = tx;
                panic!("a job's panic (expected by this test)");
            }),
        )
        .unwrap();
        // The sender went with the panicking thread; this process is still here.
        assert!(rx.recv_timeout(std::time::Duration::from_secs(5)).is_err());
    }

    fn no_stack() -> libc::stack_t {
        libc::stack_t {
            ss_sp: std::ptr::null_mut(),
            ss_flags: 0,
            ss_size: 0,
        }
    }
}
