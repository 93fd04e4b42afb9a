//! Admission: every "not now" the server says, as one `Refusal`, and the one place a refusal
//! becomes a status, a code, a message and a `Retry-After` (`From<Refusal> for ApiError`; the
//! error then becomes a response in `Response::from_error` and leaves through `server::exit`).
//!
//! One word for each idea: a gate *admits* (`admit`, its decision) and what it grants is a
//! *place*, a held unit of capacity given back when it drops (`ConnectionPlace`, `SharePlace`,
//! `StreamPlace`, `PrincipalPlace`; `HashPlace`, a waiting place in the hash queue, is given
//! back by the queue).
//!
//! The gates and what they refuse:
//! - connection capacity (`Connections`: threads and descriptors; the accept loop asks it) and a
//!   client's share of connections (`Shares`);
//! - stream capacity (`StreamPlaces`: exact, a place is taken before any lease) and a client's
//!   share of streams (`Shares`); the per-principal stream limit, on this instance from memory
//!   (`Principals`: a user's or token's streams here, so one past the limit costs no query) and
//!   across instances by lease (`db::leases::open`);
//! - hash admission (`HashGate`: a place in the password-hashing queue and a client's share of
//!   it, asked by the queue, `hashing::fair`, which keeps who waits and who runs next);
//! - failure budgets and rate limits (`Budgets`: whether a bucket is spent, and the refusal's
//!   message per kind of budget; the rule table is `crate::limits`, the counting `db::rate`), and
//!   the addresses known to be over sign-in's (`Blocks`, refused from memory).
//!
//! A client is what every share counts (`http::client::Client`: an IPv4 address or an IPv6
//! /64). A refusal is counted in `/metrics` and never logged.

mod blocks;
mod budgets;
mod connections;
mod hash_gate;
mod principals;
mod refusal;
mod shares;
mod stream_places;

pub use blocks::Blocks;
pub use budgets::{BudgetError, Budgets, Claim, Spent};
pub use connections::{ConnectionPlace, Connections, Full};
pub use hash_gate::{HashGate, HashPlace};
pub use principals::{PrincipalPlace, Principals};
pub use refusal::Refusal;
pub use shares::{SharePlace, Shares};
pub use stream_places::{StreamPlace, StreamPlaces};
