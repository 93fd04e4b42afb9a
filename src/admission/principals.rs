//! The per-principal stream limit, checked on this instance first: how many of a user's or API
//! token's streams this instance holds, so that one past the limit is refused from memory,
//! without a round trip to PostgreSQL. The lease statement (`db::leases::open`) still enforces
//! the limit across every instance; this check only answers early what it would answer.
//!
//! A stream presents a credential (the hash of a token or session cookie), not its holder: which
//! user or token it is becomes known when the database answers. So every open stream remembers
//! the credential it was opened with, and a credential is known here exactly while a stream it
//! opened is open (a revoked session's streams end, and with them its entry). A credential not
//! seen before goes to the database, which counts every stream of its holder, here included.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};

use super::refusal::Refusal;
use crate::db::leases::Holder;
use crate::sharded::Sharded;

/// Each map is kept in this many parts (by holder, by credential): thousands of streams opening
/// at once each lock one part, so that they seldom wait for each other.
const SHARDS: usize = 16;

/// This instance's streams per user or token, against the per-principal limit.
pub struct Principals {
    limit: usize,
    /// Open streams per holder.
    held: Sharded<HashMap<Holder, usize>, SHARDS>,
    /// The credentials of open streams: whose they are, and how many streams each opened.
    known: Sharded<Known, SHARDS>,
}

/// Credentials of open streams: each one's holder and how many streams it opened.
type Known = HashMap<Vec<u8>, (Holder, usize)>;

/// One stream counted against its holder; dropping it gives the place back.
pub struct PrincipalPlace {
    of: Arc<Principals>,
    holder: Holder,
    credential: Vec<u8>,
}

impl Principals {
    pub fn new(limit: usize) -> Arc<Principals> {
        Arc::new(Principals {
            limit,
            held: Sharded::default(),
            known: Sharded::default(),
        })
    }

    fn held_of(&self, holder: Holder) -> MutexGuard<'_, HashMap<Holder, usize>> {
        let id = match holder {
            Holder::User(id) | Holder::Token(id) => id,
        };
        self.held.part(id.unsigned_abs())
    }

    fn known_of(&self, credential: &[u8]) -> MutexGuard<'_, Known> {
        let part = credential.first().copied().unwrap_or(0);
        self.known.part(u64::from(part))
    }

    /// Before the database: refuses a credential whose holder already holds its limit here.
    pub fn admit_known(&self, credential: &[u8]) -> Result<(), Refusal> {
        let Some((holder, _)) = self.known_of(credential).get(credential).copied() else {
            return Ok(());
        };
        match self.held_of(holder).get(&holder) {
            Some(&n) if n >= self.limit => Err(self.refusal()),
            _ => Ok(()),
        }
    }

    /// After the database named the holder: counts the stream, unless the holder already holds
    /// its limit here (streams of the same holder opened at the same moment).
    pub fn admit(
        self: &Arc<Self>,
        holder: Holder,
        credential: &[u8],
    ) -> Result<PrincipalPlace, Refusal> {
        {
            let mut held = self.held_of(holder);
            let n = held.entry(holder).or_insert(0);
            if *n >= self.limit {
                return Err(self.refusal());
            }
            *n += 1;
        }
        self.known_of(credential)
            .entry(credential.to_vec())
            .or_insert((holder, 0))
            .1 += 1;
        Ok(PrincipalPlace {
            of: self.clone(),
            holder,
            credential: credential.to_vec(),
        })
    }

    fn refusal(&self) -> Refusal {
        Refusal::PrincipalStreams { limit: self.limit }
    }

    /// Streams this instance holds for `holder`.
    pub fn held(&self, holder: Holder) -> usize {
        self.held_of(holder).get(&holder).copied().unwrap_or(0)
    }
}

impl Drop for PrincipalPlace {
    fn drop(&mut self) {
        {
            let mut held = self.of.held_of(self.holder);
            if let Some(n) = held.get_mut(&self.holder) {
                *n -= 1;
                if *n == 0 {
                    held.remove(&self.holder);
                }
            }
        }
        let mut known = self.of.known_of(&self.credential);
        if let Some((_, n)) = known.get_mut(&self.credential) {
            *n -= 1;
            if *n == 0 {
                known.remove(&self.credential);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_credential_past_its_holders_limit_is_refused_before_the_database() {
        let p = Principals::new(2);
        let (user, other) = (Holder::User(1), Holder::Token(1));
        assert_eq!(
            p.admit_known(b"s1"),
            Ok(()),
            "unknown: the database decides"
        );
        let a = p.admit(user, b"s1").unwrap();
        let b = p.admit(user, b"s2").unwrap();
        let refused = Err(Refusal::PrincipalStreams { limit: 2 });
        assert_eq!(p.admit_known(b"s1"), refused);
        assert_eq!(
            p.admit_known(b"s2"),
            refused,
            "another session of the same user"
        );
        assert_eq!(p.admit_known(b"s3"), Ok(()), "not known here yet");
        assert!(p.admit(user, b"s3").is_err(), "taking is exact");
        let _c = p.admit(other, b"t1").unwrap();
        drop(a);
        assert_eq!(p.admit_known(b"s2"), Ok(()));
        assert_eq!(p.held(user), 1);
        drop(b);
        assert_eq!(p.held(user), 0);
        let held: usize = p.held.parts().map(|m| m.len()).sum();
        let known: usize = p.known.parts().map(|m| m.len()).sum();
        assert_eq!((held, known), (1, 1), "only t1 left");
    }
}
