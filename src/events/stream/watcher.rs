//! One epoll instance for every stream socket, and the thread that waits on it: a FIN, a reset,
//! a pipelined request or room to write wakes it, and it pokes the stream whose socket stirred
//! (the stream then looks at its socket itself). It keeps no count of open streams: that is the
//! stream places (`admission::StreamPlaces`), which it asks how long to run at shutdown.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};
use std::thread;
use std::time::Duration;

use super::signal::{End, Signals};
use crate::admission::StreamPlaces;
use crate::os::poll::Epoll;
use crate::os::ClientSocket;
use crate::sharded::Sharded;

pub struct Watcher {
    epoll: Epoll,
    /// The watched streams by key, in `SHARDS` maps (by key): thousands of streams starting and
    /// ending at once each lock one, so that they seldom wait for each other or the watcher.
    streams: Sharded<HashMap<u64, Watched>, SHARDS>,
    next: AtomicU64,
}

const SHARDS: usize = 32;

struct Watched {
    socket: ClientSocket,
    signals: Arc<Signals>,
    /// No event was reported yet. A socket is ready to write when it is added, so its first
    /// event comes at once, with nothing new.
    fresh: bool,
}

impl Watcher {
    /// Starts the thread; it runs until the server stops and no stream holds a place in
    /// `open`.
    pub fn start(
        stopping: Arc<AtomicBool>,
        open: Arc<StreamPlaces>,
    ) -> std::io::Result<Arc<Watcher>> {
        let watcher = Arc::new(Watcher {
            epoll: Epoll::new()?,
            streams: Sharded::default(),
            next: AtomicU64::new(1),
        });
        let w = watcher.clone();
        thread::Builder::new()
            .name("stream-watch".into())
            .spawn(move || w.watch(&stopping, &open))?;
        Ok(watcher)
    }

    fn watch(&self, stopping: &AtomicBool, open: &StreamPlaces) {
        let mut keys = Vec::new();
        while !stopping.load(Ordering::SeqCst) || open.held() > 0 {
            keys.clear();
            if let Err(e) = self.epoll.wait(&mut keys, Duration::from_millis(500)) {
                log::error!("stream watcher: {e}");
                thread::sleep(Duration::from_millis(100));
                continue;
            }
            for key in &keys {
                let mut streams = self.lock(*key);
                // A key removed meanwhile is gone from the map: its event is dropped.
                let Some(w) = streams.get_mut(key) else {
                    continue;
                };
                // The first event of a socket at rest is the one its adding caused: the stream
                // is not woken for it (in a reconnect storm that was a thread wake-up per
                // stream). Its socket is open: the stream removes it from the map, under this
                // lock, before its writer goes.
                if std::mem::take(&mut w.fresh) && w.socket.at_rest() {
                    continue;
                }
                w.signals.poke();
            }
        }
    }

    /// The map that holds `key`.
    fn lock(&self, key: u64) -> MutexGuard<'_, HashMap<u64, Watched>> {
        self.streams.part(key)
    }

    /// Watches a stream's socket. `None` if epoll refused it (the stream then notices a closed
    /// client only when a send fails).
    pub(super) fn add(&self, socket: ClientSocket, signals: Arc<Signals>) -> Option<u64> {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock(key).insert(
            key,
            Watched {
                socket,
                signals,
                fresh: true,
            },
        );
        match self.epoll.add(socket.as_fd(), key) {
            Ok(()) => Some(key),
            Err(e) => {
                log::warn!("cannot watch a stream socket: {e}");
                self.lock(key).remove(&key);
                None
            }
        }
    }

    /// Stops watching; must be called before the socket's writer goes.
    pub(super) fn remove(&self, socket: ClientSocket, key: u64) {
        self.epoll.remove(socket.as_fd());
        self.lock(key).remove(&key);
    }

    /// Ends every stream (shutdown).
    pub fn end_all(&self, why: End) {
        for part in self.streams.parts() {
            for w in part.values() {
                w.signals.end(why);
            }
        }
    }
}
