//! Hash admission: whether a client gets a place in the password-hashing queue now. The queue
//! itself (who waits, who runs next) is `hashing::fair`; it asks here, under its own lock, with
//! what it holds, and acts on the answer.
//!
//! The rule: while a waiting place is free, anyone gets it. When every waiting place is taken, a
//! client below its share (places, threads + queue, divided by the clients holding or asking for
//! one) takes the newest waiting place of the client furthest over its share; a client at or
//! over its share finds no place. So while others want places no client holds more than its
//! share, and nothing is refused while there is room.

use std::collections::HashMap;

use super::refusal::Refusal;
use crate::http::client::Client;

/// The hash queue's size: places running (`threads`) and waiting (`queue`).
#[derive(Debug, Clone, Copy)]
pub struct HashGate {
    pub threads: usize,
    pub queue: usize,
}

/// A place granted in the hash queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashPlace {
    /// A free waiting place.
    Free,
    /// The newest waiting place of this client, which is over its share and loses it.
    From(Client),
}

impl HashGate {
    /// `client`'s place, given the items `queued` (waiting), the places `held` per client
    /// (running or waiting) and which clients have an item `waiting`.
    pub fn admit(
        &self,
        client: Client,
        queued: usize,
        held: &HashMap<Client, usize>,
        waiting: impl Fn(&Client) -> bool,
    ) -> Result<HashPlace, Refusal> {
        if queued < self.queue {
            return Ok(HashPlace::Free);
        }
        let mine = held.get(&client).copied().unwrap_or(0);
        let clients = held.len() + usize::from(mine == 0);
        let share = ((self.threads + self.queue) / clients).max(1);
        if mine >= share {
            return Err(Refusal::HashQueue);
        }
        held.iter()
            .filter(|(c, n)| **n > share && waiting(c))
            .max_by_key(|(_, n)| **n)
            .map(|(c, _)| HashPlace::From(*c))
            .ok_or(Refusal::HashQueue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(last: u8) -> Client {
        Client::of(Some([10, 0, 0, last].into()))
    }

    #[test]
    fn a_client_below_its_share_takes_the_place_of_the_one_furthest_over_it() {
        let gate = HashGate {
            threads: 1,
            queue: 3,
        };
        let (hog, other, third) = (client(1), client(2), client(3));
        let empty = HashMap::new();
        assert_eq!(gate.admit(hog, 0, &empty, |_| false), Ok(HashPlace::Free));
        let held = HashMap::from([(hog, 3)]);
        let all = |_: &Client| true;
        assert_eq!(gate.admit(hog, 3, &held, all), Err(Refusal::HashQueue));
        assert_eq!(gate.admit(other, 3, &held, all), Ok(HashPlace::From(hog)));
        // Two clients: share (1 + 3) / 2 = 2, the hog at 2 is not over it and keeps its places.
        let held = HashMap::from([(hog, 2), (other, 1)]);
        assert_eq!(gate.admit(other, 3, &held, all), Err(Refusal::HashQueue));
        // A third: share 4 / 3 = 1, the hog is over it and gives up a place.
        assert_eq!(gate.admit(third, 3, &held, all), Ok(HashPlace::From(hog)));
        // A client over its share whose items all run has no waiting place to give.
        assert_eq!(
            gate.admit(third, 3, &held, |_| false),
            Err(Refusal::HashQueue)
        );
    }
}
