//! The light client: a few epoll threads read every open stream, so that the client leaves the
//! CPUs to the servers (the shape of issue 13's figures, and of the held rung's 20,000 streams).

use std::io::Read;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread;

use crate::client::{scan, Readers, Stamps, Tally};

pub struct Pollers {
    epolls: Vec<RawFd>,
    inbox: Vec<Sender<TcpStream>>,
    threads: Vec<thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    next: AtomicUsize,
    tally: Arc<Tally>,
    pub open: Arc<AtomicUsize>,
}

impl Pollers {
    pub fn start(n: usize, stamps: &Arc<Stamps>) -> Pollers {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let open = Arc::new(AtomicUsize::new(0));
        let (mut epolls, mut inbox, mut threads) = (vec![], vec![], vec![]);
        for i in 0..n {
            // SAFETY: creates a new descriptor, checked below.
            let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            assert!(ep >= 0, "epoll_create1");
            let (tx, rx) = channel();
            let (stop, tally, open, stamps) =
                (stop.clone(), tally.clone(), open.clone(), stamps.clone());
            let poller = Poller {
                ep,
                index: i,
                stop,
                tally,
                open,
                stamps,
            };
            threads.push(
                thread::Builder::new()
                    .name(format!("poller-{i}"))
                    .spawn(move || poller.run(&rx))
                    .expect("poller thread"),
            );
            epolls.push(ep);
            inbox.push(tx);
        }
        Pollers {
            epolls,
            inbox,
            threads,
            stop,
            next: AtomicUsize::new(0),
            tally,
            open,
        }
    }

    /// Closes every stream and ends the pollers.
    pub fn close_all(self) {
        self.stop.store(true, Ordering::SeqCst);
        drop(self.inbox);
        for t in self.threads {
            let _ = t.join();
        }
        for ep in self.epolls {
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(ep) };
        }
    }
}

impl Readers for Pollers {
    fn add(&self, s: TcpStream) {
        s.set_nonblocking(true).expect("non-blocking");
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.epolls.len();
        let fd = s.as_raw_fd();
        // The poller drains its inbox before it handles events, so it owns the stream by the
        // time an event for it can arrive.
        self.inbox[i].send(s).expect("poller alive");
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: fd as u64,
        };
        // SAFETY: both descriptors are open; `ev` is a valid event.
        let rc = unsafe { libc::epoll_ctl(self.epolls[i], libc::EPOLL_CTL_ADD, fd, &mut ev) };
        assert_eq!(rc, 0, "epoll_ctl");
        self.open.fetch_add(1, Ordering::SeqCst);
    }

    fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    fn tally(&self) -> &Tally {
        &self.tally
    }
}

/// One poller thread's own: its epoll set and where it reports.
struct Poller {
    ep: RawFd,
    index: usize,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    open: Arc<AtomicUsize>,
    stamps: Arc<Stamps>,
}

impl Poller {
    fn run(&self, inbox: &Receiver<TcpStream>) {
        let mut conns: Vec<Option<(TcpStream, Vec<u8>)>> = Vec::new();
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 512];
        let mut buf = vec![0u8; 64 * 1024];
        let mut got: Vec<(u32, u32)> = Vec::new();
        while !self.stop.load(Ordering::SeqCst) {
            // SAFETY: `events` has room for its length.
            let n =
                unsafe { libc::epoll_wait(self.ep, events.as_mut_ptr(), events.len() as i32, 20) };
            let now = self.stamps.now();
            while let Ok(s) = inbox.try_recv() {
                let fd = s.as_raw_fd() as usize;
                if conns.len() <= fd {
                    conns.resize_with(fd + 1, || None);
                }
                conns[fd] = Some((s, Vec::new()));
            }
            for ev in events.iter().take(n.max(0) as usize) {
                let fd = ev.u64 as usize;
                let Some((s, pending)) = conns.get_mut(fd).and_then(Option::as_mut) else {
                    continue;
                };
                let closed = loop {
                    match s.read(&mut buf) {
                        Ok(0) => break true,
                        Ok(k) => pending.extend_from_slice(&buf[..k]),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(_) => break true,
                    }
                };
                scan(pending, now, &self.stamps, &self.tally, &mut got);
                if closed {
                    self.tally.lost.fetch_add(1, Ordering::Relaxed);
                    self.open.fetch_sub(1, Ordering::SeqCst);
                    conns[fd] = None;
                }
            }
            self.tally.add(self.index, &mut got);
        }
    }
}
