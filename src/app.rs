//! The application state every handler receives: configuration, database pool, hash pool,
//! metrics and the event hub. Built once by `serve` (or a test) and shared by `Arc`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::capacity::Capacity;
use crate::config::Config;
use crate::db::Pool;
use crate::events::Hub;
use crate::hashing::Hasher;
use crate::http::Response;
use crate::metrics::Metrics;

pub struct App {
    pub config: Config,
    pub pool: Pool,
    pub hasher: Hasher,
    /// Client addresses known to be over their failed-sign-in budget (the cheap refusal).
    pub signin_blocks: crate::admission::Blocks,
    pub metrics: Arc<Metrics>,
    pub hub: Arc<Hub>,
    /// Opens streams in groups (`events::openings`).
    pub openings: crate::events::Openings,
    /// Lower-case origins of the base and console URLs (CSRF Origin check).
    pub origins: Vec<String>,
    /// Seal and open TOTP secrets (`keys`).
    pub data_keys: crate::keys::DataKeys,
    /// Signs CSRF tokens (`http::csrf`): configured, derived from the data key, or shared
    /// through the database.
    pub csrf_key: [u8; 32],
    /// Set when the process is shutting down.
    pub stopping: Arc<AtomicBool>,
    /// What this process can hold (connections, streams), derived at start.
    pub capacity: Capacity,
    /// The `/readyz` check, run on its own thread.
    pub ready: Arc<crate::ready::Readiness>,
    /// Streams held per client address.
    pub stream_shares: Arc<crate::admission::Shares>,
    /// This instance's stream places (`capacity.max_streams`).
    pub stream_places: Arc<crate::admission::StreamPlaces>,
    /// Streams held here per user or token (the per-principal limit, checked from memory).
    pub stream_principals: Arc<crate::admission::Principals>,
    /// The OpenID Connect providers and what each has told us (endpoints, keys).
    pub oidc: Arc<crate::auth::oauth::oidc::Providers>,
    /// Sessions and tokens checked here, kept while the listener hears nothing of them.
    pub checked: Arc<crate::identity::Checked>,
    /// Uses of those, written in batches (`identity::seen`).
    pub seen: crate::identity::Seen,
}

/// What a handler produces: a complete response, or an event stream to hand to its own thread.
pub enum Reply {
    Response(Response),
    Stream(crate::events::StreamPlan),
}

impl From<Response> for Reply {
    fn from(r: Response) -> Reply {
        Reply::Response(r)
    }
}
