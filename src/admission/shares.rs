//! Fair shares: how many connections or streams one client holds, so that no single client takes
//! more than its share of what this instance can hold. A client is what every limit counts
//! (`http::client::Client`: an IPv4 address, or an IPv6 /64), for connections and streams alike.
//! A `SharePlace` is one unit held; dropping it gives the unit back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::http::client::Client;

/// Counts per client against a fixed per-client limit.
pub struct Shares {
    limit: usize,
    held: Mutex<HashMap<Client, usize>>,
}

/// One unit held by a client.
pub struct SharePlace {
    shares: Arc<Shares>,
    ip: Client,
}

impl Shares {
    /// `fraction` of `capacity` per address (at least one).
    pub fn new(capacity: usize, fraction: f64) -> Arc<Shares> {
        let limit = ((capacity as f64 * fraction).floor() as usize).max(1);
        Arc::new(Shares {
            limit,
            held: Mutex::new(HashMap::new()),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    fn held(&self) -> MutexGuard<'_, HashMap<Client, usize>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A unit for `ip`, unless it already holds its share.
    pub fn admit(self: &Arc<Self>, ip: Client) -> Option<SharePlace> {
        let mut held = self.held();
        let n = held.entry(ip).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(SharePlace {
            shares: self.clone(),
            ip,
        })
    }
}

impl Drop for SharePlace {
    fn drop(&mut self) {
        let mut held = self.shares.held();
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
        let shares = Shares::new(8, 0.25);
        let a = Client::of(Some("10.0.0.1".parse().unwrap()));
        let b = Client::of(Some("10.0.0.2".parse().unwrap()));
        let t1 = shares.admit(a).unwrap();
        let _t2 = shares.admit(a).unwrap();
        assert!(shares.admit(a).is_none());
        assert!(shares.admit(b).is_some(), "others are not affected");
        drop(t1);
        assert!(shares.admit(a).is_some());
        assert_eq!(Shares::new(2, 0.25).limit(), 1);
    }

    #[test]
    fn an_ipv6_slash_64_is_one_client() {
        let shares = Shares::new(4, 0.25);
        let at = |ip: &str| Client::of(Some(ip.parse().unwrap()));
        let _t = shares.admit(at("fd00:1::1")).unwrap();
        assert!(shares.admit(at("fd00:1::2")).is_none(), "same /64");
        assert!(shares.admit(at("fd00:1:0:1::1")).is_some(), "another /64");
    }
}
