//! Failure budgets and rate limits: the one decision "this bucket is spent, refuse for `wait`
//! seconds", and the message a user reads for each kind of budget.
//!
//! The rules (kinds, limits, windows, settings) are the table in `crate::limits`, which the
//! configuration and the README read too; the events are counted in PostgreSQL by `db::rate`
//! (rows in `rate_events`, shared by every instance). Counting an event is not a decision and
//! stays with the callers (`db::rate::record*`), except where the attempt must not be made
//! without a place (`take`, `take_all`: a password check); whether a budget has room is asked
//! here, by
//! sign-in, re-authentication, password change, sign-up, second factor, verification mail,
//! password-reset mail and provider sign-in start.

use super::refusal::Refusal;
use crate::db::{rate, Sql};
use crate::error::ApiError;
use crate::limits::{Bucket, Kind, Limits};

/// The budgets in force (`Config::limits`), asked about buckets.
#[derive(Clone, Copy)]
pub struct Budgets<'a> {
    limits: &'a Limits,
}

/// A spent budget: which of the buckets asked about, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent {
    /// Index of the spent bucket in the slice asked about.
    pub index: usize,
    /// Seconds until it has room again.
    pub wait: u64,
    pub kind: Kind,
}

/// Why a budget's answer is not "room": spent, or the database could not be asked.
#[derive(Debug)]
pub enum BudgetError {
    Spent(Spent),
    Db(postgres::Error),
}

impl<'a> Budgets<'a> {
    pub fn new(limits: &'a Limits) -> Budgets<'a> {
        Budgets { limits }
    }

    /// Counts one event of `bucket` if it has room, else refuses. In a transaction: the
    /// bucket's lock lasts until it ends, so concurrent requests cannot both take the last
    /// place.
    pub fn take(&self, tx: &mut impl Sql, bucket: &Bucket) -> Result<(), BudgetError> {
        match rate::take(tx, self.limits, bucket)? {
            None => Ok(()),
            Some(wait) => Err(spent(0, wait, bucket)),
        }
    }

    /// Takes a place in every one of `buckets`, all or none, before the attempt they count is
    /// made (a password verified): however many attempts run at once, on however many
    /// instances, no more are made than the budgets allow. The `Claim` gives the places back
    /// when the attempt did not fail. One round trip, outside a transaction.
    pub fn take_all(&self, c: &mut impl Sql, buckets: &[Bucket]) -> Result<Claim, BudgetError> {
        let claim = Claim(i64::from_ne_bytes(crate::crypto::random_bytes::<8>()));
        match rate::take_all(c, self.limits, buckets, claim.0)? {
            None => Ok(claim),
            Some((index, wait)) => Err(spent(index, wait, &buckets[index])),
        }
    }

    /// Locks each of `buckets` (until the transaction ends) and refuses while any is spent,
    /// for the longest wait; counts nothing.
    pub fn require_room_locked(
        &self,
        tx: &mut impl Sql,
        buckets: &[Bucket],
    ) -> Result<(), BudgetError> {
        let mut worst: Option<Spent> = None;
        for (index, bucket) in buckets.iter().enumerate() {
            rate::lock(tx, &bucket.key())?;
            if let Some(wait) = rate::blocked(tx, self.limits, bucket)? {
                if worst.is_none_or(|w| wait > w.wait) {
                    worst = Some(Spent {
                        index,
                        wait,
                        kind: bucket.kind(),
                    });
                }
            }
        }
        worst.map_or(Ok(()), |s| Err(BudgetError::Spent(s)))
    }

    /// The refusal of a spent budget of `kind`, however it was found spent (sign-in's screen
    /// remembers spent addresses: `admission::Blocks`).
    pub fn refusal(kind: Kind, wait: u64) -> Refusal {
        refusal(kind, wait)
    }

    /// Refuses when any of `buckets` is spent (the first in order); one round trip, no lock.
    pub fn require_room(&self, c: &mut impl Sql, buckets: &[Bucket]) -> Result<(), BudgetError> {
        match rate::first_blocked(c, self.limits, buckets)? {
            None => Ok(()),
            Some((index, wait)) => Err(spent(index, wait, &buckets[index])),
        }
    }
}

/// The places one attempt took (`Budgets::take_all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an attempt that did not fail gives its places back"]
pub struct Claim(i64);

impl Claim {
    /// Gives back the places taken in `buckets` (the same as were taken): the attempt did not
    /// fail (a right password), or was not made (refused before it).
    pub fn give_back(self, c: &mut impl Sql, buckets: &[Bucket]) -> Result<(), postgres::Error> {
        rate::give_back(c, buckets, self.0)
    }
}

fn spent(index: usize, wait: u64, bucket: &Bucket) -> BudgetError {
    BudgetError::Spent(Spent {
        index,
        wait,
        kind: bucket.kind(),
    })
}

impl Spent {
    pub fn refusal(self) -> Refusal {
        refusal(self.kind, self.wait)
    }
}

/// The refusal of a spent budget of `kind`: what it limits, as the user reads it.
fn refusal(kind: Kind, wait: u64) -> Refusal {
    let what = match kind {
        Kind::LoginFailuresPerClient
        | Kind::LoginFailuresPerAccountAndClient
        | Kind::LoginFailuresPerAccount
        | Kind::DeviceCookieFailures => Some("Too many failed sign-ins; try again later."),
        Kind::SignupsPerClient => Some("Too many sign-ups from this address; try again later."),
        Kind::VerifyMailsPerMinute | Kind::VerifyMailsPerDay => {
            Some("A verification mail was sent recently; try again later.")
        }
        Kind::WrongCodesPerUser => Some("Too many wrong codes; try again later."),
        Kind::EmailChangesPerUser => {
            Some("Too many address changes were asked for today; try again tomorrow.")
        }
        Kind::InvitationsPerOrg => {
            Some("This organization has sent many invitations recently; try again later.")
        }
        Kind::OrgsPerUser => Some("You created many organizations recently; try again later."),
        // Provider sign-in starts get the generic message; a reset mail past its cap is
        // dropped silently, never refused.
        Kind::OAuthStartsPerClient
        | Kind::ResetMailsPerAddressAndClient
        | Kind::ResetMailsPerClient => None,
    };
    Refusal::Budget { wait, what }
}

impl From<postgres::Error> for BudgetError {
    fn from(e: postgres::Error) -> BudgetError {
        BudgetError::Db(e)
    }
}

impl From<Spent> for Refusal {
    fn from(s: Spent) -> Refusal {
        s.refusal()
    }
}

impl From<BudgetError> for ApiError {
    fn from(e: BudgetError) -> ApiError {
        match e {
            BudgetError::Spent(s) => s.refusal().into(),
            BudgetError::Db(e) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Response;

    #[test]
    fn a_spent_budget_is_a_429_with_its_wait_and_its_message() {
        let e = ApiError::from(BudgetError::Spent(Spent {
            index: 0,
            wait: 42,
            kind: Kind::WrongCodesPerUser,
        }));
        let r = Response::from_error(&e);
        assert_eq!(r.status, 429);
        assert_eq!(e.retry_after, Some(42));
        assert_eq!(e.more.message, "Too many wrong codes; try again later.");
        // Every kind has an answer (the generic message where `what` is None).
        for kind in Kind::ALL {
            assert!(matches!(refusal(kind, 1), Refusal::Budget { wait: 1, .. }));
        }
    }
}
