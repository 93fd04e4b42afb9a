//! One epoll instance for every stream socket, and the thread that waits on it: a FIN, a reset,
//! a pipelined request or room to write wakes it, and it pokes the stream whose socket stirred
//! (the stream then looks at its socket itself). It keeps no count of open streams: that is the
//! stream places (`admission::Slots`), which it asks how long to run at shutdown.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use super::signal::{End, Signals};
use crate::admission::Slots;
use crate::sock::Epoll;

pub struct Watcher {
    epoll: Epoll,
    streams: Mutex<HashMap<u64, Arc<Signals>>>,
    next: AtomicU64,
}

impl Watcher {
    /// Starts the thread; it runs until the server stops and no stream holds a place in
    /// `open`.
    pub fn start(stopping: Arc<AtomicBool>, open: Arc<Slots>) -> std::io::Result<Arc<Watcher>> {
        let watcher = Arc::new(Watcher {
            epoll: Epoll::new()?,
            streams: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        });
        let w = watcher.clone();
        thread::Builder::new()
            .name("stream-watch".into())
            .spawn(move || w.watch(&stopping, &open))?;
        Ok(watcher)
    }

    fn watch(&self, stopping: &AtomicBool, open: &Slots) {
        let mut keys = Vec::new();
        while !stopping.load(Ordering::SeqCst) || open.held() > 0 {
            keys.clear();
            if let Err(e) = self.epoll.wait(&mut keys, Duration::from_millis(500)) {
                log::error!("stream watcher: {e}");
                thread::sleep(Duration::from_millis(100));
                continue;
            }
            let streams = self.lock();
            for key in &keys {
                // A key removed meanwhile is gone from the map: its event is dropped.
                if let Some(signals) = streams.get(key) {
                    signals.poke();
                }
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<Signals>>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watches a stream's socket. `None` if epoll refused it (the stream then notices a closed
    /// client only when a send fails).
    pub(super) fn add(&self, fd: RawFd, signals: Arc<Signals>) -> Option<u64> {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(key, signals);
        match self.epoll.add(fd, key) {
            Ok(()) => Some(key),
            Err(e) => {
                log::warn!("cannot watch a stream socket: {e}");
                self.lock().remove(&key);
                None
            }
        }
    }

    /// Stops watching; must be called before the descriptor closes.
    pub(super) fn remove(&self, fd: RawFd, key: u64) {
        self.epoll.remove(fd);
        self.lock().remove(&key);
    }

    /// Ends every stream (shutdown).
    pub fn end_all(&self, why: End) {
        for signals in self.lock().values() {
            signals.end(why);
        }
    }
}
