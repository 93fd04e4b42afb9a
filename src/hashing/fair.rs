//! The fair queue in front of the hash threads: at most `threads` items run and `queue` wait;
//! the next item is the waiting client's that holds the fewest places (running or waiting; ties
//! in turn), so a client with one request in goes before a flood's backlog. Whether a client
//! gets a place at all, and whose it takes when every waiting place is taken, is hash admission
//! (`admission::HashGate`), asked under this queue's lock.

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::admission::{HashGate, HashPlace};
use crate::http::client::Client;
use crate::locks::Unpoisoned;

/// The waiting items and the places each client holds.
struct Queues<T> {
    /// Waiting items per client, and the clients with waiting items in turn order.
    waiting: HashMap<Client, VecDeque<T>>,
    order: VecDeque<Client>,
    /// Places (waiting or running) per client.
    held: HashMap<Client, usize>,
    queued: usize,
}

pub struct FairQueue<T> {
    state: Mutex<Queues<T>>,
    ready: Condvar,
    gate: HashGate,
}

/// What `push` did.
pub enum Pushed<T> {
    /// Queued in a free place.
    Queued,
    /// Queued in the place of this item of another client, which must be told it lost it.
    Displaced(T),
    /// No place for this client: the item comes back.
    Refused(T),
}

impl<T> FairQueue<T> {
    pub fn new(threads: usize, queue: usize) -> FairQueue<T> {
        FairQueue {
            state: Mutex::new(Queues {
                waiting: HashMap::new(),
                order: VecDeque::new(),
                held: HashMap::new(),
                queued: 0,
            }),
            ready: Condvar::new(),
            gate: HashGate { threads, queue },
        }
    }

    /// Items waiting.
    pub fn queued(&self) -> usize {
        self.state.lock().unpoisoned().queued
    }

    /// Whether `client` would get a place now (a cheap look before costly work; may race).
    pub fn has_place(&self, client: Client) -> bool {
        self.place(&self.state.lock().unpoisoned(), client).is_ok()
    }

    fn place(&self, s: &Queues<T>, client: Client) -> Result<HashPlace, crate::admission::Refusal> {
        self.gate
            .admit(client, s.queued, &s.held, |c| s.waiting.contains_key(c))
    }

    pub fn push(&self, client: Client, item: T) -> Pushed<T> {
        let mut s = self.state.lock().unpoisoned();
        let displaced = match self.place(&s, client) {
            Ok(HashPlace::Free) => None,
            Ok(HashPlace::From(hog)) => Some(s.take_newest(hog)),
            Err(_) => return Pushed::Refused(item),
        };
        s.push(client, item);
        drop(s);
        self.ready.notify_one();
        displaced.map_or(Pushed::Queued, Pushed::Displaced)
    }

    /// The next item: of the waiting clients, the one holding the fewest places (in turn among
    /// equals); blocks while there is none. The caller calls `finished` with the client when
    /// the item's work is done.
    pub fn next(&self) -> (Client, T) {
        let mut s = self.state.lock().unpoisoned();
        loop {
            if let Some(next) = s.take() {
                return next;
            }
            s = self.ready.wait(s).unpoisoned();
        }
    }

    /// `next`, waiting at most `wait`: `None` when nothing came meanwhile.
    pub fn next_within(&self, wait: Duration) -> Option<(Client, T)> {
        let until = Instant::now() + wait;
        let mut s = self.state.lock().unpoisoned();
        loop {
            if let Some(next) = s.take() {
                return Some(next);
            }
            let left = until.checked_duration_since(Instant::now())?;
            s = self.ready.wait_timeout(s, left).unpoisoned().0;
        }
    }

    pub fn finished(&self, client: Client) {
        self.state.lock().unpoisoned().release(client);
    }
}

impl<T> Queues<T> {
    /// The waiting item of the client holding the fewest places (in turn among equals).
    fn take(&mut self) -> Option<(Client, T)> {
        let least = (0..self.order.len()).min_by_key(|&i| self.held.get(&self.order[i]).copied());
        let client = least.and_then(|i| self.order.remove(i))?;
        let queue = self.waiting.get_mut(&client).expect("ordered clients wait");
        let item = queue.pop_front().expect("no empty queues are kept");
        if queue.is_empty() {
            self.waiting.remove(&client);
        } else {
            self.order.push_back(client);
        }
        self.queued -= 1;
        Some((client, item))
    }

    fn push(&mut self, client: Client, item: T) {
        let queue = self.waiting.entry(client).or_default();
        if queue.is_empty() {
            self.order.push_back(client);
        }
        queue.push_back(item);
        *self.held.entry(client).or_default() += 1;
        self.queued += 1;
    }

    fn take_newest(&mut self, client: Client) -> T {
        let queue = self.waiting.get_mut(&client).expect("a waiting client");
        let item = queue.pop_back().expect("no empty queues are kept");
        if queue.is_empty() {
            self.waiting.remove(&client);
            self.order.retain(|c| *c != client);
        }
        self.queued -= 1;
        self.release(client);
        item
    }

    fn release(&mut self, client: Client) {
        if let Some(n) = self.held.get_mut(&client) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(last: u8) -> Client {
        Client::of(Some([10, 0, 0, last].into()))
    }

    fn queued(p: Pushed<u32>) -> bool {
        matches!(p, Pushed::Queued)
    }

    /// One thread (busy, nothing taken yet) and three waiting places.
    #[test]
    fn a_hog_keeps_every_place_until_another_client_asks() {
        let q = FairQueue::new(1, 3);
        let (hog, other, third) = (client(1), client(2), client(3));
        for i in 0..3 {
            assert!(queued(q.push(hog, i)));
        }
        // Alone, the hog may have every place; the fourth is refused.
        assert!(matches!(q.push(hog, 3), Pushed::Refused(3)));
        assert!(!q.has_place(hog));
        // Another client takes the hog's newest waiting place.
        assert!(q.has_place(other));
        assert!(matches!(q.push(other, 10), Pushed::Displaced(2)));
        // Share is now (1 + 3) / 2 = 2: the hog holds 2, the other 1; the hog is refused.
        assert!(matches!(q.push(hog, 4), Pushed::Refused(4)));
        // A third client: share 4 / 3 = 1, the hog is over it and gives up another place.
        assert!(matches!(q.push(third, 20), Pushed::Displaced(1)));
        // Round-robin: hog, other, third.
        assert_eq!(q.next(), (hog, 0));
        assert_eq!(q.next(), (other, 10));
        assert_eq!(q.next(), (third, 20));
        assert_eq!(q.queued(), 0);
    }

    #[test]
    fn the_client_holding_fewest_places_goes_first() {
        let q = FairQueue::new(1, 8);
        let (hog, other) = (client(1), client(2));
        for i in 0..4 {
            assert!(queued(q.push(hog, i)));
        }
        assert!(queued(q.push(other, 10)));
        assert_eq!(q.next(), (other, 10));
        assert_eq!(q.next(), (hog, 0));
    }

    #[test]
    fn finished_work_frees_the_clients_places() {
        let q = FairQueue::new(1, 1);
        let a = client(1);
        assert!(queued(q.push(a, 1)));
        assert!(matches!(q.push(a, 2), Pushed::Refused(2)));
        let (c, _) = q.next();
        // Taken but not finished: the place is still held, the waiting place is free.
        assert!(queued(q.push(a, 3)));
        q.finished(c);
        assert_eq!(q.next(), (a, 3));
    }
}
