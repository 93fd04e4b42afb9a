//! Fair shares: how many connections or streams one client address holds, so that no single
//! address takes more than its share of what this instance can hold. A `Ticket` is one unit held;
//! dropping it gives the unit back.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Counts per address (`K`: an `IpAddr`, or the `Client` a request resolves to) against a fixed
/// per-address limit.
pub struct Shares<K = IpAddr> {
    limit: usize,
    held: Mutex<HashMap<K, usize>>,
}

/// One unit held by an address.
pub struct Ticket<K: Eq + Hash + Copy = IpAddr> {
    shares: Arc<Shares<K>>,
    ip: K,
}

impl<K: Eq + Hash + Copy> Shares<K> {
    /// `fraction` of `capacity` per address (at least one).
    pub fn new(capacity: usize, fraction: f64) -> Arc<Shares<K>> {
        let limit = ((capacity as f64 * fraction).floor() as usize).max(1);
        Arc::new(Shares {
            limit,
            held: Mutex::new(HashMap::new()),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Takes a unit for `ip`, unless it already holds its share.
    pub fn take(self: &Arc<Self>, ip: K) -> Option<Ticket<K>> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(ip).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(Ticket {
            shares: self.clone(),
            ip,
        })
    }
}

impl<K: Eq + Hash + Copy> Drop for Ticket<K> {
    fn drop(&mut self) {
        let mut held = self.shares.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_share_and_gets_it_back() {
        let shares: Arc<Shares> = Shares::new(8, 0.25);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let t1 = shares.take(a).unwrap();
        let _t2 = shares.take(a).unwrap();
        assert!(shares.take(a).is_none());
        assert!(shares.take(b).is_some(), "others are not affected");
        drop(t1);
        assert!(shares.take(a).is_some());
        assert_eq!(Shares::<IpAddr>::new(2, 0.25).limit(), 1);
    }
}
