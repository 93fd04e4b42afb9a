//! The narrow handles the listener and the lease keeper get (`Core`): the hub, the pool, the
//! metrics and two settings, never the application.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use super::hub::Hub;
use crate::db;
use crate::metrics::Metrics;

/// The handles the listener and the lease keeper need, and no more.
#[derive(Clone)]
pub struct Core {
    pub hub: Arc<Hub>,
    pub pool: db::Pool,
    pub metrics: Arc<Metrics>,
    pub stopping: Arc<AtomicBool>,
    /// Settings of the listener's own connection (never a pooled one).
    pub listen_db: db::Target,
    pub session_idle: Duration,
    /// Checked sessions and tokens (`identity`), forgotten on the listener's news of them.
    pub checked: Arc<crate::identity::Checked>,
}
