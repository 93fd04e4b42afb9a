//! consoled: account sessions and a change stream for a cloud console, as a synchronous,
//! thread-per-connection server on tiny_http and PostgreSQL.
#![deny(unsafe_code)]

pub mod access;
pub mod account;
pub mod admission;
pub mod app;
pub mod auth;
pub mod capacity;
pub mod cli;
pub mod config;
pub mod crypto;
pub mod db;
pub mod demo;
pub mod error;
pub mod events;
pub mod failure;
pub mod hashing;
pub mod http;
pub mod identity;
pub mod keys;
pub mod limits;
pub mod locks;
pub mod logging;
pub mod mail;
pub mod maintenance;
pub mod metrics;
pub mod oneshot;
pub mod ops;
pub mod ops_listener;
#[allow(unsafe_code)] // the operating-system layer
pub mod os;
pub mod ready;
pub mod router;
pub mod server;
pub mod sharded;
pub mod subscribe;
pub mod teams;
pub mod tokens;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use app::App;
use config::Config;
use failure::Failure;

/// A running service: HTTP server plus background threads.
pub struct Service {
    pub app: Arc<App>,
    pub server: server::Server,
    /// The operations listener, with `CONSOLED_METRICS_LISTEN`.
    ops: Option<ops_listener::OpsListener>,
    background: Vec<thread::JoinHandle<()>>,
}

impl Service {
    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.addr
    }

    /// Where `/metrics` is served when it is not on `addr` (`CONSOLED_METRICS_LISTEN`).
    pub fn ops_addr(&self) -> Option<std::net::SocketAddr> {
        self.ops.as_ref().map(|o| o.addr)
    }

    /// Graceful stop: no new requests, in-flight ones finish, streams end, threads exit.
    pub fn shutdown(self, grace: Duration) {
        let deadline = Instant::now() + grace;
        self.server.shutdown(grace);
        if let Some(ops) = self.ops {
            ops.stop();
        }
        for t in self.background {
            while !t.is_finished() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Applies migrations, waiting up to `wait` for the database to accept connections. A failure
/// that waiting cannot mend (a refused password, no such database) ends it at once; each
/// different failure is logged once, when it first happens.
pub fn migrate(config: &Config, wait: Duration) -> Result<Vec<i32>, Failure> {
    let deadline = Instant::now() + wait;
    let mut last: Option<String> = None;
    loop {
        match db::try_connect(config, "consoled-migrate") {
            Ok(mut client) => {
                if last.is_some() {
                    log::info!("the database answers now");
                }
                return db::migrate::run(&mut client).map_err(|e| {
                    Failure::from(format!("migration failed: {}", db::reach::describe(&e)))
                });
            }
            Err(e) if !e.retry => return Err(e.into()),
            Err(e) if Instant::now() >= deadline => {
                return Err(Failure::from(format!(
                    "{}; gave up after {} s",
                    e.message,
                    wait.as_secs()
                )))
            }
            Err(e) => {
                if last.as_deref() != Some(e.message.as_str()) {
                    log::warn!("{}; retrying for up to {} s", e.message, wait.as_secs());
                }
                last = Some(e.message);
                thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

/// Migrates, builds the application and starts serving on `config.listen`.
pub fn serve(config: Config) -> Result<Service, Failure> {
    let listener = server::bind(config.listen, config.read_timeout)
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    serve_on(config, listener)
}

/// How often a session's use is written: at most once a twentieth of the idle time (and a
/// minute), as `auth::any_session` marks it.
fn touch_after(config: &Config) -> f64 {
    (config.session_idle.as_secs_f64() / 20.0).min(60.0)
}

/// What every stream opening of this process shares.
fn opening_settings(config: &Config, hub: &events::Hub) -> events::OpeningSettings {
    events::OpeningSettings {
        instance: hub.leases.instance_id.clone(),
        rules: db::leases::SessionRules {
            idle: config.session_idle,
            touch_after: touch_after(config),
        },
        limit: config.streams_per_principal,
    }
}

/// Like `serve`, on a listener the caller bound (tests bind port 0).
pub fn serve_on(config: Config, listener: std::net::TcpListener) -> Result<Service, Failure> {
    // The mail settings are configuration, checked before waiting on the database.
    let mailer = mail::Mailer::from_config(&config).map_err(Failure::config)?;
    let ops_socket = config.metrics_listen.map(ops_listener::bind).transpose()?;
    migrate(&config, Duration::from_secs(30))?;
    let (data_keys, csrf_key) = keys::reseal::prepare(&config)?;
    let pool = db::pool(&config);
    let origins = config.origins().to_vec();
    let capacity = capacity::Capacity::derive(&config);
    // The common-password list is indexed here, not by the first sign-up that needs it.
    auth::passwords::warm();
    let hub = Arc::new(events::Hub::with(
        config.stream_history,
        config.stream_fanout,
    ));
    let openings = events::Openings::start(pool.clone(), opening_settings(&config, &hub))
        .map_err(|e| format!("cannot start a background thread: {e}"))?;
    let app = Arc::new(App {
        stream_shares: admission::Shares::new(capacity.max_streams, config.client_share),
        stream_places: admission::StreamPlaces::new(capacity.max_streams),
        stream_principals: admission::Principals::new(config.streams_per_principal),
        oidc: Arc::new(auth::oauth::oidc::Providers::new(&config.oidc)),
        checked: Arc::new(identity::Checked::new(Duration::from_secs_f64(
            touch_after(&config),
        ))),
        seen: identity::LastSeen::default(),
        capacity,
        hasher: hashing::Hasher::start(
            config.hash_threads,
            config.hash_queue,
            config.hash_memory_keep,
        ),
        signin_blocks: admission::Blocks::default(),
        metrics: Arc::new(metrics::Metrics::default()),
        hub,
        openings,
        ready: Arc::default(),
        pool,
        origins,
        data_keys,
        csrf_key,
        stopping: Arc::new(AtomicBool::new(false)),
        config,
    });
    let spawned = |e: std::io::Error| format!("cannot start a background thread: {e}");
    let listener_name = events::listener::application_name(&app.hub.leases.instance_id);
    let upkeep = Arc::new(events::Upkeep {
        hub: app.hub.clone(),
        pool: app.pool.clone(),
        metrics: app.metrics.clone(),
        stopping: app.stopping.clone(),
        listen_db: db::direct_pg_config(&app.config, &listener_name),
        session_idle: app.config.session_idle,
        checked: app.checked.clone(),
    });
    let mut background = vec![
        maintenance::start(app.clone()),
        // Listening before serving: a stream opened right after start-up misses no change.
        events::listener::start(upkeep.clone(), app.config.db_timeout).map_err(spawned)?,
        events::keeper::start_keeper(upkeep).map_err(spawned)?,
        app.ready
            .start(app.pool.clone(), app.stopping.clone())
            .map_err(spawned)?,
    ];
    if app.config.mail_sender {
        background.push(mail::start(app.clone(), mailer));
    }
    // Discovery runs beside the server: a provider that is down keeps nothing from starting.
    let discovery = auth::oauth::oidc::start(
        app.oidc.clone(),
        app.stopping.clone(),
        app.config.oidc_refresh,
        app.config.oauth_timeout,
    );
    background.extend(discovery.map_err(spawned)?);
    let ops = match ops_socket {
        Some(socket) => Some(ops_listener::start(app.clone(), socket).map_err(spawned)?),
        None => None,
    };
    let server = server::Server::start(app.clone(), listener).map_err(|e| e.to_string())?;
    Ok(Service {
        app,
        server,
        ops,
        background,
    })
}
