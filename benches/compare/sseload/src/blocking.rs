//! The heavy client: one blocking thread per stream, each asleep in `read` until its stream
//! sends, as a farm of browsers' or a thread-per-subscriber service's would be. Every delivery
//! wakes a client thread, and those threads want the same two CPUs as the server's: the shape
//! under which a server that leaves scheduling to the kernel shows whether its deliveries keep
//! pace when others want the CPUs too (issue 38).

use std::io::Read;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use crate::client::{scan, Readers, Stamps, Tally};

/// A reader thread's stack: a read buffer and the scan; nothing deep.
const STACK: usize = 64 * 1024;

/// One read takes at most this much: a few events (each about 120 bytes).
const READ: usize = 4096;

pub struct Blocking {
    /// A second handle on each stream, to shut it down (which ends its thread's `read`), and the
    /// thread.
    readers: Mutex<Vec<(TcpStream, thread::JoinHandle<()>)>>,
    stamps: Arc<Stamps>,
    tally: Arc<Tally>,
    open: Arc<AtomicUsize>,
    /// Set before the client closes its own streams: those are not lost.
    closing: Arc<AtomicBool>,
}

impl Blocking {
    pub fn new(stamps: &Arc<Stamps>) -> Blocking {
        Blocking {
            readers: Mutex::new(Vec::new()),
            stamps: stamps.clone(),
            tally: Arc::new(Tally::default()),
            open: Arc::new(AtomicUsize::new(0)),
            closing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Closes every stream and waits for their threads.
    pub fn close_all(self) {
        self.closing.store(true, Ordering::SeqCst);
        let readers = self.readers.into_inner().expect("readers");
        for (s, _) in &readers {
            let _ = s.shutdown(Shutdown::Both);
        }
        for (_, t) in readers {
            let _ = t.join();
        }
    }
}

impl Readers for Blocking {
    fn add(&self, s: TcpStream) {
        let handle = s.try_clone().expect("a second handle on the stream");
        let mut readers = self.readers.lock().expect("readers");
        let index = readers.len();
        let reader = Reader {
            index,
            stamps: self.stamps.clone(),
            tally: self.tally.clone(),
            open: self.open.clone(),
            closing: self.closing.clone(),
        };
        self.open.fetch_add(1, Ordering::SeqCst);
        let thread = thread::Builder::new()
            .name("reader".into())
            .stack_size(STACK)
            .spawn(move || reader.run(s))
            .expect("a reader thread");
        readers.push((handle, thread));
    }

    fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    fn tally(&self) -> &Tally {
        &self.tally
    }
}

/// One stream's thread and where it reports.
struct Reader {
    index: usize,
    stamps: Arc<Stamps>,
    tally: Arc<Tally>,
    open: Arc<AtomicUsize>,
    closing: Arc<AtomicBool>,
}

impl Reader {
    /// Reads until the stream ends: each read stamped as it returns, its complete events
    /// credited.
    fn run(self, mut s: TcpStream) {
        let mut pending = Vec::new();
        let mut got = Vec::new();
        let mut buf = [0u8; READ];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let now = self.stamps.now();
                    pending.extend_from_slice(&buf[..n]);
                    scan(&mut pending, now, &self.stamps, &self.tally, &mut got);
                    self.tally.add(self.index, &mut got);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        if !self.closing.load(Ordering::SeqCst) {
            self.tally.lost.fetch_add(1, Ordering::Relaxed);
        }
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}
