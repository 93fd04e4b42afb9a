//! This instance's connections against its capacity: how many are open (a thread each) and the
//! descriptors they, and the refusals still lingering, hold. A `ConnectionPlace` is one admitted
//! connection; dropping it gives back its thread's place and its descriptors.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Which limit one more connection would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// As many connections (threads) as the process may hold.
    Connections,
    /// Not two more descriptors; connections being answered hold two until they stream.
    Descriptors,
}

pub struct Connections {
    max: usize,
    fd_budget: usize,
    open: AtomicUsize,
    fds: AtomicUsize,
}

/// One admitted connection: its place, and the descriptors it holds (two; one once it streams,
/// when tiny_http's read half has gone).
pub struct ConnectionPlace {
    of: Arc<Connections>,
    fds: usize,
}

impl Connections {
    pub fn new(max: usize, fd_budget: usize) -> Arc<Connections> {
        Arc::new(Connections {
            max,
            fd_budget,
            open: AtomicUsize::new(0),
            fds: AtomicUsize::new(0),
        })
    }

    /// A place for one more connection, or the limit it would pass.
    pub fn admit(self: &Arc<Self>) -> Result<ConnectionPlace, Full> {
        match self.full() {
            Some(full) => Err(full),
            None => Ok(self.take()),
        }
    }

    /// The limit one more connection would pass, if any. Only the accept loop admits, so what
    /// it sees here can only have shrunk when it takes the place.
    fn full(&self) -> Option<Full> {
        if self.open.load(Ordering::SeqCst) >= self.max {
            Some(Full::Connections)
        } else if self.fds.load(Ordering::SeqCst) + 2 > self.fd_budget {
            Some(Full::Descriptors)
        } else {
            None
        }
    }

    fn take(self: &Arc<Self>) -> ConnectionPlace {
        self.open.fetch_add(1, Ordering::SeqCst);
        self.fds.fetch_add(2, Ordering::SeqCst);
        ConnectionPlace {
            of: self.clone(),
            fds: 2,
        }
    }

    /// Descriptors held outside any connection (refusals lingering) come and go.
    pub fn hold_fds(&self, n: usize) {
        self.fds.fetch_add(n, Ordering::SeqCst);
    }

    pub fn release_fds(&self, n: usize) {
        self.fds.fetch_sub(n, Ordering::SeqCst);
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

impl ConnectionPlace {
    /// The connection became a stream: tiny_http's read half, and its descriptor, are gone.
    pub fn streaming(&mut self) {
        if self.fds == 2 {
            self.fds = 1;
            self.of.release_fds(1);
        }
    }
}

impl Drop for ConnectionPlace {
    fn drop(&mut self) {
        self.of.release_fds(self.fds);
        self.of.open.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_and_descriptors_come_back() {
        let c = Connections::new(2, 5);
        let mut a = c.admit().unwrap();
        let b = c.admit().unwrap();
        assert_eq!(c.admit().err(), Some(Full::Connections));
        drop(b);
        // One open (2 descriptors) and a lingering refusal (2 more): 4 + 2 > 5.
        c.hold_fds(2);
        assert_eq!(c.admit().err(), Some(Full::Descriptors));
        a.streaming();
        a.streaming();
        assert!(c.admit().is_ok(), "a stream holds one descriptor");
        c.release_fds(2);
        drop(a);
        assert_eq!((c.open(), c.fds.load(Ordering::SeqCst)), (0, 0));
    }
}
