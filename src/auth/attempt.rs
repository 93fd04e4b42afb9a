//! A password checked against the failed-sign-in budgets of (account, client address): sign-in,
//! re-authentication and password change count into the same three buckets.
//!
//! The places are taken before the password is verified, all or none, under the buckets' locks
//! (`Budgets::take_all`), and given back when it was right or was not verified after all. A
//! look that came before and a count that came after let every request of a burst find the last
//! place free (issue 37, item 2: 9 failures and then 10 at once were 19 verifications against a
//! budget of 10); now no number of threads or instances verifies more than the budget.

use crate::admission::{BudgetError, Budgets, Claim};
use crate::app::App;
use crate::db::{self, Sql};
use crate::error::{ApiError, ApiResult};
use crate::hashing::Verdict;
use crate::http::client::Client;
use crate::http::json::Email;
use crate::limits::{Bucket, Kind};

/// The failed-password buckets of a check.
pub fn buckets(email: &Email, client: Client) -> [Bucket<'_>; 3] {
    [
        Bucket::LoginClient(client),
        Bucket::LoginAccountClient(email, client),
        Bucket::LoginAccount(email),
    ]
}

/// Takes a place in each bucket of (`email`, `client`): 429 when one is full, and an address
/// over its own budget is remembered (`admission::Blocks`) for the cheap refusal.
pub fn take(app: &App, c: &mut impl Sql, email: &Email, client: Client) -> ApiResult<Claim> {
    let buckets = buckets(email, client);
    match Budgets::new(&app.config.limits).take_all(c, &buckets) {
        Ok(claim) => Ok(claim),
        Err(BudgetError::Spent(spent)) => {
            if let Bucket::LoginClient(_) = buckets[spent.index] {
                app.signin_blocks.block(client, spent.wait);
            }
            Err(refused(app, spent.wait))
        }
        Err(BudgetError::Db(e)) => Err(e.into()),
    }
}

/// Gives back the places of `claim` (taken by `take` for the same `email` and `client`).
pub fn give_back(c: &mut impl Sql, claim: Claim, email: &Email, client: Client) -> ApiResult<()> {
    Ok(claim.give_back(c, &buckets(email, client))?)
}

/// Verifies `typed` against `stored` with a place taken first: a wrong password stays counted,
/// a right one (or one not verified: the hash queue refused it) gives its place back.
pub fn verify(
    app: &App,
    email: &Email,
    client: Client,
    typed: &str,
    stored: &str,
) -> ApiResult<Verdict> {
    let claim = take(app, &mut *db::conn(&app.pool)?, email, client)?;
    // No connection is held while hashing.
    let verdict = app.hasher.verify(client, typed, Some(stored));
    if verdict.as_ref().is_ok_and(|v| *v == Verdict::Wrong) {
        return verdict;
    }
    give_back(&mut *db::conn(&app.pool)?, claim, email, client)?;
    verdict
}

/// A refusal by a failed-sign-in limit: counted in /metrics, never logged.
pub fn refused(app: &App, wait: u64) -> ApiError {
    app.metrics
        .signins_refused
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Budgets::refusal(Kind::LoginFailuresPerClient, wait).into()
}
