//! A provider's signing keys, cached, and the check of an ID token against them.
//!
//! The key set is fetched with the discovery document (at start and at each refresh). A token
//! signed with a key the cache does not know (a `kid` it has not seen: the provider has rotated
//! its keys since) makes the sign-in fetch the set once more, at once; but at most once per
//! `REFETCH_INTERVAL` for the provider, so that tokens with invented `kid`s cannot make us fetch
//! the provider's key set in a loop. A refused sign-in never changes what the cache holds.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::jws::Token;
use super::keys::{self, Choice, Key};
use crate::auth::oauth::client;
use crate::locks::Unpoisoned;

/// The least time between two fetches caused by an unknown `kid`.
pub const REFETCH_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct KeyCache(Mutex<Cached>);

#[derive(Default)]
struct Cached {
    keys: Arc<Vec<Key>>,
    /// When an unknown `kid` last caused a fetch.
    refetched_at: Option<Instant>,
}

impl Cached {
    /// Whether an unknown `kid` may cause a fetch now; if so, the fetch is counted.
    fn may_refetch(&mut self, now: Instant) -> bool {
        let allowed = self
            .refetched_at
            .is_none_or(|at| now.saturating_duration_since(at) >= REFETCH_INTERVAL);
        if allowed {
            self.refetched_at = Some(now);
        }
        allowed
    }
}

/// Fetches and parses a key set.
pub fn fetch(jwks_uri: &str, timeout: Duration) -> Result<Vec<Key>, String> {
    let set = client::fetch_json(jwks_uri, timeout)?;
    keys::parse_set(&set)
}

impl KeyCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.0.lock().unpoisoned()
    }

    pub fn set(&self, keys: Vec<Key>) {
        self.lock().keys = Arc::new(keys);
    }

    /// The token's claims if a key of the provider signed it; else why not, for the log. May
    /// fetch the key set once (see the module comment).
    pub fn verify(&self, token: Token, jwks_uri: &str, timeout: Duration) -> Result<Value, String> {
        let keys = self.lock().keys.clone();
        match keys::choose(&keys, token.kid.as_deref(), token.alg) {
            Choice::Found(key) => return checked(token, key),
            Choice::Ambiguous => {
                return Err("id_token has no kid and several keys fit its alg".into())
            }
            Choice::Unknown => {}
        }
        if !self.lock().may_refetch(Instant::now()) {
            return Err(format!(
                "id_token signed with an unknown key (kid {}, {}); the key set was fetched again \
                 less than {} s ago",
                token.kid_shown(),
                token.alg.name(),
                REFETCH_INTERVAL.as_secs()
            ));
        }
        let fresh = fetch(jwks_uri, timeout)
            .map_err(|e| format!("fetching the key set for kid {}: {e}", token.kid_shown()))?;
        log::info!(
            "oidc: fetched the key set again for an unknown kid {} ({} keys)",
            token.kid_shown(),
            fresh.len()
        );
        let result = match keys::choose(&fresh, token.kid.as_deref(), token.alg) {
            Choice::Found(key) => checked(token, key),
            _ => Err(format!(
                "id_token signed with a key the provider does not publish (kid {}, {})",
                token.kid_shown(),
                token.alg.name()
            )),
        };
        self.set(fresh);
        result
    }
}

fn checked(token: Token, key: &Key) -> Result<Value, String> {
    let kid = token.kid_shown();
    let alg = token.alg.name();
    token
        .verified(key)
        .ok_or_else(|| format!("id_token signature does not verify (kid {kid}, {alg})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_kid_refetches_at_most_once_per_interval() {
        let mut cached = Cached::default();
        let t0 = Instant::now();
        assert!(cached.may_refetch(t0));
        assert!(!cached.may_refetch(t0));
        assert!(!cached.may_refetch(t0 + REFETCH_INTERVAL - Duration::from_millis(1)));
        assert!(cached.may_refetch(t0 + REFETCH_INTERVAL));
        assert!(!cached.may_refetch(t0 + REFETCH_INTERVAL + Duration::from_secs(1)));
    }
}
