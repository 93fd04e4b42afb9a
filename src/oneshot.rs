//! One answer from one thread to another that waits for it, with a mutex and a condition
//! variable: the waiting thread sleeps at once instead of spinning and yielding first, as a
//! channel's receive does. A stream's opening waits twice this way (for its worker, and the worker
//! for the group that opens it); when 5,000 streams open at once on two cores, the yields of
//! those waits were a tenth of the workers' time (BENCHMARKS.md, "Storm").

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

enum State<T> {
    Waiting,
    Sent(T),
    /// The sender went without answering.
    Gone,
}

struct Content<T> {
    state: State<T>,
    /// The receiver sleeps on `ready`. Only then does an answer wake it: a condition variable's
    /// notification is a system call even when no one waits (an answer that comes before the
    /// receiver asks for it).
    asleep: bool,
}

struct Mailbox<T> {
    content: Mutex<Content<T>>,
    ready: Condvar,
}

impl<T> Mailbox<T> {
    fn lock(&self) -> MutexGuard<'_, Content<T>> {
        self.content.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn put(&self, state: State<T>) {
        let asleep = {
            let mut slot = self.lock();
            slot.state = state;
            slot.asleep
        };
        // Woken after the lock is free, the receiver takes it at once; woken under it, it slept
        // again on the mutex and needed a second wake-up (two system calls on each side instead
        // of one, 5,000 times in a reconnect storm). No wake-up is lost: the receiver marked
        // itself asleep under the lock before it began to wait.
        if asleep {
            self.ready.notify_one();
        }
    }
}

/// The answering side; dropping it unanswered wakes the waiter with nothing.
pub struct Sender<T>(Option<Arc<Mailbox<T>>>);

/// The waiting side.
pub struct Receiver<T>(Arc<Mailbox<T>>);

pub fn pair<T>() -> (Sender<T>, Receiver<T>) {
    let mailbox = Arc::new(Mailbox {
        content: Mutex::new(Content {
            state: State::Waiting,
            asleep: false,
        }),
        ready: Condvar::new(),
    });
    (Sender(Some(mailbox.clone())), Receiver(mailbox))
}

impl<T> Sender<T> {
    pub fn send(mut self, value: T) {
        if let Some(mailbox) = self.0.take() {
            mailbox.put(State::Sent(value));
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if let Some(mailbox) = self.0.take() {
            mailbox.put(State::Gone);
        }
    }
}

impl<T> Receiver<T> {
    /// The answer, or `None` when the sender went without one.
    pub fn recv(self) -> Option<T> {
        let mut slot = self.0.lock();
        loop {
            match std::mem::replace(&mut slot.state, State::Waiting) {
                State::Sent(value) => return Some(value),
                State::Gone => return None,
                State::Waiting => {
                    slot.asleep = true;
                    slot = self
                        .0
                        .ready
                        .wait(slot)
                        .unwrap_or_else(PoisonError::into_inner);
                    slot.asleep = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_arrives_across_threads_and_a_dropped_sender_ends_the_wait() {
        let (tx, rx) = pair();
        let t = std::thread::spawn(move || tx.send(42));
        assert_eq!(rx.recv(), Some(42));
        t.join().unwrap();
        let (tx, rx) = pair::<u8>();
        let t = std::thread::spawn(move || drop(tx));
        assert_eq!(rx.recv(), None);
        t.join().unwrap();
    }
}
