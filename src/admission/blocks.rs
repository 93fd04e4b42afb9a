//! The cheap refusal in front of sign-in: client addresses known to be over their failed
//! sign-in budget, remembered in memory until their wait ends.
//!
//! The budget itself lives in `rate_events` (shared by every instance); once a look there found
//! an address over it, its further requests are refused from here, with no query, no hash, no
//! row and no log line: a flood from one address costs a map look-up per request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::http::client::Client;
use crate::locks::Unpoisoned;

/// Addresses remembered at most; past it, expired entries are dropped, and when none are, new
/// blocks are not remembered (those requests fall back to the database look).
const MAX_ENTRIES: usize = 100_000;

#[derive(Default)]
pub struct Blocks {
    until: Mutex<HashMap<Client, Instant>>,
}

impl Blocks {
    /// Seconds left while `client` is known to be over its budget.
    pub fn blocked_for(&self, client: Client) -> Option<u64> {
        let mut until = self.until.lock().unpoisoned();
        let end = *until.get(&client)?;
        let now = Instant::now();
        if end <= now {
            until.remove(&client);
            return None;
        }
        Some((end - now).as_secs_f64().ceil().max(1.0) as u64)
    }

    pub fn block(&self, client: Client, secs: u64) {
        let mut until = self.until.lock().unpoisoned();
        let now = Instant::now();
        if until.len() >= MAX_ENTRIES {
            until.retain(|_, end| *end > now);
            if until.len() >= MAX_ENTRIES {
                return;
            }
        }
        until.insert(client, now + Duration::from_secs(secs));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_until_the_wait_ends() {
        let blocks = Blocks::default();
        let a = Client::of(Some("1.2.3.4".parse().unwrap()));
        let b = Client::of(Some("1.2.3.5".parse().unwrap()));
        assert_eq!(blocks.blocked_for(a), None);
        blocks.block(a, 30);
        assert_eq!(blocks.blocked_for(a), Some(30));
        assert_eq!(blocks.blocked_for(b), None);
        blocks.until.lock().unwrap().insert(a, Instant::now());
        assert_eq!(blocks.blocked_for(a), None);
    }
}
