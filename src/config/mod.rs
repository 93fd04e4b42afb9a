//! Configuration: the environment is read once into a typed, validated `Config`.
//!
//! Every variable has a default that works on a laptop except `DATABASE_URL`. Secrets (database
//! password, OAuth client secrets, SMTP credentials) are redacted from `Debug`.

pub mod checks;
mod env;
pub mod keys;
pub mod oidc;
pub mod secret;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use env::{database_target, invalid, parse_nets, url_var, Env};
pub use oidc::OidcConfig;

/// OAuth client settings and endpoints of one identity provider.
#[derive(Clone)]
pub struct ProviderConfig {
    pub client_id: String,
    pub client_secret: String,
    pub auth_url: String,
    pub token_url: String,
    /// Google: userinfo endpoint; GitHub: API base (`/user`, `/user/emails`).
    pub api_url: String,
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("auth_url", &self.auth_url)
            .field("token_url", &self.token_url)
            .field("api_url", &self.api_url)
            .finish()
    }
}

#[derive(Clone)]
pub struct Config {
    pub database_url: String,
    /// `CONSOLED_DATABASE_DIRECT_URL`: a session connection to PostgreSQL itself, for what a
    /// transaction-mode PgBouncer cannot carry: `LISTEN`, the migrations' session lock, the mail
    /// sender and the commands. `None`: `database_url`.
    pub database_direct_url: Option<String>,
    /// `database_url` read (hosts, TLS): what the pool connects with.
    pub database: crate::db::Target,
    /// `database_direct_url` read, when set.
    pub database_direct: Option<crate::db::Target>,
    /// `CONSOLED_DB_KEEP_STATEMENTS` (default true): the pool keeps named prepared statements per
    /// connection. False for a pool behind a transaction-mode PgBouncer older than 1.21, which
    /// cannot carry them: each statement is then sent unnamed (docs/OPERATIONS.md, "PgBouncer").
    pub db_keep_statements: bool,
    pub listen: SocketAddr,
    /// `CONSOLED_METRICS_LISTEN`: where `/metrics` is served instead of `listen` (`ops_listener`).
    pub metrics_listen: Option<SocketAddr>,
    pub base_url: String,
    pub console_url: String,
    pub cookie_secure: bool,
    pub smtp_url: Option<String>,
    pub mail_from: String,
    pub mail_dir: PathBuf,
    /// First retry delay of a failed mail delivery; it doubles per attempt up to 5 minutes.
    pub mail_retry: Duration,
    /// Whether this instance runs a mail sender (any number of instances may).
    pub mail_sender: bool,
    /// Local development only (`make run`): log each mailed link, token included. Refused with
    /// SMTP, where a logged link would hand a secret to whoever reads the logs.
    pub mail_log_links: bool,
    pub github: Option<ProviderConfig>,
    pub google: Option<ProviderConfig>,
    /// `CONSOLED_OIDC_PROVIDERS`: the OpenID Connect providers, in the order listed (`oidc`).
    pub oidc: Vec<OidcConfig>,
    /// How often each provider's discovery document and keys are fetched again.
    pub oidc_refresh: Duration,
    /// Limit for each call to an identity provider (connect, send, answer).
    pub oauth_timeout: Duration,
    pub ping_interval: Duration,
    pub stream_queue: usize,
    /// `CONSOLED_STREAM_HISTORY` and `_SECONDS`: the recent changes kept for streams that
    /// resume (`events::history`).
    pub stream_history: crate::events::history::Limits,
    pub session_idle: Duration,
    pub session_max: Duration,
    pub mfa_pending: Duration,
    /// How long after a sign-in the session may change the second factor without the password.
    pub reauth: Duration,
    /// The longest life a user may give an API token, and the life of one given none.
    pub token_max_lifetime: Duration,
    /// Live API tokens a project may have (409 `too_many_tokens` past it).
    pub tokens_per_project: usize,
    /// Where the client's address comes from: trusted proxies and the header they set.
    pub client_source: crate::http::client::Source,
    /// Every rate limit in force (defaults of `crate::limits` with their settings applied).
    pub limits: crate::limits::Limits,
    /// Request worker threads (ordinary requests; event streams get their own threads).
    pub workers: usize,
    /// Password-hashing threads; at most this many argon2 hashes (19 MiB each) run at once.
    pub hash_threads: usize,
    /// Hash jobs allowed to wait; past this, logins get 429 instead of queueing without bound.
    pub hash_queue: usize,
    /// A hash thread gives its 19 MiB back after this long without a hash (0: after every
    /// hash that nothing waits behind).
    pub hash_memory_keep: Duration,
    /// How often a quiet server gives malloc's free memory back (zero: never; `maintenance`).
    pub memory_trim: Duration,
    pub db_pool_size: u32,
    pub db_timeout: Duration,
    /// Open event streams per user or API token, across instances (429 `too_many_streams`).
    pub streams_per_principal: usize,
    /// Open event streams on this instance, all principals together (503 past it); `None`: as
    /// many as the machine allows (`server::capacity`).
    pub max_streams: Option<usize>,
    /// A stream whose bytes could not be sent for this long is ended (a client that stopped
    /// reading or vanished).
    pub stream_stall: Duration,
    /// The hub may write an event itself on a stream whose thread sleeps with nothing to send,
    /// instead of waking the thread (false: every event through the stream's thread).
    pub stream_direct: bool,
    /// Threads that write a change to its streams together (the listener's and helpers), when
    /// it goes to many (`events::fanout`).
    pub stream_fanout: usize,
    /// The share of this instance's connections, and of its streams, one client address may hold.
    pub client_share: f64,
    /// A request body must arrive within this, extended by 1 s per 500 bytes received
    /// (Apache's `RequestReadTimeout body=20,MinRate=500`); 408 past it.
    pub body_timeout: Duration,
    /// Open client connections allowed at once (more are refused with 503); `None`: as many as
    /// the machine allows (`server::capacity`).
    pub max_connections: Option<usize>,
    /// Read time-out of client sockets: every single read of a head or body ends after it.
    pub read_timeout: Duration,
    /// A request head must be complete this long after the server started waiting for it
    /// (Apache's `RequestReadTimeout header=20`); 408 and close past it.
    pub header_timeout: Duration,
    /// A kept-alive connection with nothing in flight closes after this long without a byte.
    pub keep_alive: Duration,
    /// The log's refusal summary is written at most this often (`logging::flood`).
    pub log_summary: Duration,
    pub demo: bool,
    /// The data key(s) that seal TOTP secrets, and the CSRF key (`keys.rs`).
    pub keys: keys::KeySettings,
    /// Test hook: `GET /__panic` panics inside a handler, to prove the worker survives.
    pub panic_route: bool,
    /// Who may make an account (`CONSOLED_SIGNUP`, `CONSOLED_SIGNUP_DOMAINS`).
    pub signup: crate::auth::signup_policy::Policy,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("database_url", &redact_url(&self.database_url))
            .field(
                "database_direct_url",
                &self.database_direct_url.as_deref().map(redact_url),
            )
            .field("db_keep_statements", &self.db_keep_statements)
            .field("listen", &self.listen)
            .field("metrics_listen", &self.metrics_listen)
            .field("base_url", &self.base_url)
            .field("console_url", &self.console_url)
            .field("cookie_secure", &self.cookie_secure)
            .field("smtp_url", &self.smtp_url.as_deref().map(redact_url))
            .field("mail_from", &self.mail_from)
            .field("mail_dir", &self.mail_dir)
            .field("mail_retry", &self.mail_retry)
            .field("github", &self.github)
            .field("google", &self.google)
            .field("oidc", &self.oidc)
            .field("oauth_timeout", &self.oauth_timeout)
            .field("ping_interval", &self.ping_interval)
            .field("stream_queue", &self.stream_queue)
            .field("stream_history", &self.stream_history)
            .field("session_idle", &self.session_idle)
            .field("session_max", &self.session_max)
            .field("reauth", &self.reauth)
            .field("client_source", &self.client_source)
            .field("limits", &self.limits)
            .field("workers", &self.workers)
            .field("hash_threads", &self.hash_threads)
            .field("hash_queue", &self.hash_queue)
            .field("hash_memory_keep", &self.hash_memory_keep)
            .field("memory_trim", &self.memory_trim)
            .field("db_pool_size", &self.db_pool_size)
            .field("signup", &self.signup)
            .finish_non_exhaustive()
    }
}

/// Hides the password of `scheme://user:password@host/...`, even one with an unencoded `/` (the
/// user information ends at the last `@` before the query).
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let before_query = rest.find('?').unwrap_or(rest.len());
    match rest[..before_query].rfind('@') {
        Some(at) => match rest[..at].find(':') {
            Some(colon) => format!(
                "{}{}:<redacted>{}",
                &url[..scheme_end + 3],
                &rest[..colon],
                &rest[at..]
            ),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[derive(Debug)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

pub const DATABASE_URL_HELP: &str = "DATABASE_URL is not set. Point it at a PostgreSQL database, \
     e.g. DATABASE_URL=postgres://user:password@127.0.0.1:5432/consoled, or run `make run`, \
     which starts a private PostgreSQL cluster under the project folder and sets it for you.";

impl Config {
    /// Reads the process environment; first says what in it cannot mean what was meant
    /// (`checks`): unknown `CONSOLED_*` names, an unusable `RUST_LOG`.
    pub fn from_env() -> Result<Config, ConfigError> {
        let vars: HashMap<String, String> = std::env::vars().collect();
        for warning in checks::warnings(&vars) {
            // A RUST_LOG that turns the log off must still be heard.
            if log::log_enabled!(log::Level::Warn) {
                log::warn!("{warning}");
            } else {
                eprintln!("consoled: warning: {warning}");
            }
        }
        Config::from_vars(vars)
    }

    /// Parses a set of variables; used by `from_env` and by tests that vary the configuration.
    pub fn from_vars(vars: HashMap<String, String>) -> Result<Config, ConfigError> {
        let env = Env(vars);
        let database_url = env
            .secret("DATABASE_URL")?
            .ok_or_else(|| ConfigError(DATABASE_URL_HELP.into()))?;
        let database_password = env.secret("CONSOLED_DATABASE_PASSWORD")?;
        let password = database_password.as_deref();
        let database = database_target("DATABASE_URL", &database_url, password)?;
        let database_direct_url = env.secret("CONSOLED_DATABASE_DIRECT_URL")?;
        let database_direct = database_direct_url
            .as_deref()
            .map(|url| database_target("CONSOLED_DATABASE_DIRECT_URL", url, password))
            .transpose()?;
        let listen = env.parse("CONSOLED_LISTEN", "127.0.0.1:8080".parse().unwrap())?;
        let base_url = url_var(&env, "CONSOLED_BASE_URL", "http://127.0.0.1:8080")?;
        let console_url = url_var(&env, "CONSOLED_CONSOLE_URL", &base_url)?;
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let hash_threads = env.parse("CONSOLED_HASH_THREADS", cores)?;
        let config = Config {
            database_url,
            database_direct_url,
            database,
            database_direct,
            listen,
            metrics_listen: env.optional("CONSOLED_METRICS_LISTEN")?,
            base_url: base_url.clone(),
            console_url,
            cookie_secure: env.bool("CONSOLED_COOKIE_SECURE", true)?,
            smtp_url: env.secret("CONSOLED_SMTP_URL")?,
            mail_from: env
                .get("CONSOLED_MAIL_FROM")
                .unwrap_or_else(|| "consoled@localhost".into()),
            mail_dir: env
                .get("CONSOLED_MAIL_DIR")
                .unwrap_or_else(|| "./mail".into())
                .into(),
            mail_retry: env.seconds("CONSOLED_MAIL_RETRY_SECONDS", 1.0, 0.01..=300.0)?,
            mail_sender: env.bool("CONSOLED_MAIL_SENDER", true)?,
            mail_log_links: env.bool("CONSOLED_MAIL_LOG_LINKS", false)?,
            github: provider(&env, "GITHUB", GITHUB_DEFAULTS)?,
            google: provider(&env, "GOOGLE", GOOGLE_DEFAULTS)?,
            oidc: oidc::read(&env)?,
            oidc_refresh: env.seconds("CONSOLED_OIDC_REFRESH_SECONDS", 3600.0, 1.0..=86400.0)?,
            oauth_timeout: env.seconds("CONSOLED_OAUTH_TIMEOUT_SECONDS", 5.0, 0.01..=300.0)?,
            ping_interval: env.seconds("CONSOLED_PING_SECONDS", 20.0, 0.01..=3600.0)?,
            stream_queue: env.parse("CONSOLED_STREAM_QUEUE", 256)?,
            stream_history: stream_history(&env)?,
            session_idle: secs(env.parse("CONSOLED_SESSION_IDLE_SECONDS", 12 * 3600)?),
            session_max: secs(env.parse("CONSOLED_SESSION_MAX_SECONDS", 7 * 24 * 3600)?),
            mfa_pending: secs(env.parse("CONSOLED_MFA_PENDING_SECONDS", 600)?),
            reauth: secs(env.parse("CONSOLED_REAUTH_SECONDS", 300)?),
            token_max_lifetime: secs(env.parse("CONSOLED_TOKEN_MAX_LIFETIME_SECONDS", 31_536_000)?),
            tokens_per_project: env.parse("CONSOLED_TOKENS_PER_PROJECT", 100)?,
            client_source: crate::http::client::Source {
                trusted_proxies: parse_nets(
                    &env.get("CONSOLED_TRUSTED_PROXIES").unwrap_or_default(),
                )?,
                header: env
                    .get("CONSOLED_CLIENT_IP_HEADER")
                    .unwrap_or_else(|| crate::http::client::FORWARDED_FOR.into())
                    .trim()
                    .to_ascii_lowercase(),
            },
            limits: crate::limits::Limits::from_settings(|name, default| env.parse(name, default))?,
            workers: env.parse("CONSOLED_WORKERS", 32)?,
            hash_threads,
            hash_queue: env.parse("CONSOLED_HASH_QUEUE", hash_threads * 4)?,
            hash_memory_keep: env.seconds(
                "CONSOLED_HASH_MEMORY_KEEP_SECONDS",
                60.0,
                0.0..=86400.0,
            )?,
            memory_trim: env.seconds("CONSOLED_MEMORY_TRIM_SECONDS", 60.0, 0.0..=86400.0)?,
            db_pool_size: env.parse("CONSOLED_DB_POOL", 16)?,
            db_keep_statements: env.bool("CONSOLED_DB_KEEP_STATEMENTS", true)?,
            db_timeout: secs(env.parse("CONSOLED_DB_TIMEOUT_SECONDS", 3)?),
            streams_per_principal: env.parse("CONSOLED_MAX_STREAMS_PER_PRINCIPAL", 10)?,
            max_connections: env.optional("CONSOLED_MAX_CONNECTIONS")?,
            max_streams: env.optional(
                env.renamed("CONSOLED_MAX_STREAMS_PER_INSTANCE", "CONSOLED_MAX_STREAMS"),
            )?,
            stream_stall: env.seconds("CONSOLED_STREAM_STALL_SECONDS", 60.0, 0.05..=3600.0)?,
            stream_direct: env.bool("CONSOLED_STREAM_DIRECT", true)?,
            stream_fanout: env.parse("CONSOLED_STREAM_FANOUT_THREADS", 2 * cores)?,
            client_share: env.parse("CONSOLED_CLIENT_SHARE", 0.25)?,
            body_timeout: env.seconds("CONSOLED_BODY_TIMEOUT_SECONDS", 20.0, 0.05..=3600.0)?,
            read_timeout: env.seconds("CONSOLED_READ_TIMEOUT_SECONDS", 10.0, 0.05..=3600.0)?,
            header_timeout: env.seconds("CONSOLED_HEADER_TIMEOUT_SECONDS", 20.0, 0.05..=3600.0)?,
            keep_alive: env.seconds("CONSOLED_KEEPALIVE_SECONDS", 5.0, 0.05..=3600.0)?,
            log_summary: env.seconds("CONSOLED_LOG_SUMMARY_SECONDS", 60.0, 0.1..=86400.0)?,
            demo: env.bool("CONSOLED_DEMO", false)?,
            keys: keys::read(&env)?,
            panic_route: env.bool("CONSOLED_TEST_PANIC_ROUTE", false)?,
            signup: signup_policy(&env)?,
        };
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("CONSOLED_WORKERS", self.workers),
            ("CONSOLED_HASH_THREADS", self.hash_threads),
            ("CONSOLED_STREAM_QUEUE", self.stream_queue),
            ("CONSOLED_STREAM_FANOUT_THREADS", self.stream_fanout),
            ("CONSOLED_DB_POOL", self.db_pool_size as usize),
            ("CONSOLED_TOKENS_PER_PROJECT", self.tokens_per_project),
            (
                "CONSOLED_MAX_CONNECTIONS",
                self.max_connections.unwrap_or(1),
            ),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(invalid(name, "0", "a whole number of at least 1"));
            }
        }
        if !(self.client_share > 0.0 && self.client_share <= 1.0) {
            return Err(invalid(
                "CONSOLED_CLIENT_SHARE",
                &self.client_share.to_string(),
                "a number above 0 and at most 1, such as 0.25",
            ));
        }
        if let Some(name) = self.limits.invalid() {
            let kind = crate::limits::Kind::ALL
                .into_iter()
                .find(|k| k.rule().setting == Some(name));
            let value = kind.map_or(0, |k| self.limits.limit(k));
            return Err(invalid(
                name,
                &value.to_string(),
                "a whole number of at least 1",
            ));
        }
        if self
            .client_source
            .header
            .parse::<tiny_http::HeaderField>()
            .is_err()
        {
            return Err(invalid(
                "CONSOLED_CLIENT_IP_HEADER",
                &self.client_source.header,
                "a header name such as X-Real-IP or X-Forwarded-For",
            ));
        }
        if self.ping_interval < Duration::from_millis(10) {
            return Err(invalid(
                "CONSOLED_PING_SECONDS",
                &self.ping_interval.as_secs_f64().to_string(),
                "seconds from 0.01",
            ));
        }
        if self.mail_log_links && self.smtp_url.is_some() {
            return Err(ConfigError(
                "CONSOLED_MAIL_LOG_LINKS is for mail written to files (local development): \
                 with CONSOLED_SMTP_URL set, mailed links carry live tokens and are never logged"
                    .into(),
            ));
        }
        for (name, value) in [
            ("CONSOLED_SESSION_IDLE_SECONDS", self.session_idle),
            ("CONSOLED_SESSION_MAX_SECONDS", self.session_max),
            (
                "CONSOLED_TOKEN_MAX_LIFETIME_SECONDS",
                self.token_max_lifetime,
            ),
        ] {
            if value.is_zero() {
                return Err(invalid(
                    name,
                    "0",
                    "a whole number of seconds of at least 1",
                ));
            }
        }
        Ok(())
    }

    /// `scheme://host[:port]` of a configured URL, for the Origin check.
    pub fn origins(&self) -> [String; 2] {
        [origin_of(&self.base_url), origin_of(&self.console_url)]
    }
}

pub fn origin_of(url: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find('/')
        .map_or(url.len(), |i| after_scheme + i);
    url[..end].to_ascii_lowercase()
}

/// `CONSOLED_SIGNUP` (`open`, `invite`, `closed`) and `CONSOLED_SIGNUP_DOMAINS`.
fn signup_policy(env: &Env) -> Result<crate::auth::signup_policy::Policy, ConfigError> {
    let (mode, domains) = (
        env.get("CONSOLED_SIGNUP"),
        env.get("CONSOLED_SIGNUP_DOMAINS"),
    );
    crate::auth::signup_policy::Policy::parse(mode.as_deref(), domains.as_deref())
        .map_err(|(name, form)| invalid(name, &env.get(name).unwrap_or_default(), &form))
}

/// `CONSOLED_STREAM_HISTORY` (0: no stream resumes) and `CONSOLED_STREAM_HISTORY_SECONDS`.
fn stream_history(env: &Env) -> Result<crate::events::history::Limits, ConfigError> {
    let default = crate::events::history::Limits::default();
    Ok(crate::events::history::Limits {
        changes: env.parse("CONSOLED_STREAM_HISTORY", default.changes)?,
        age: env.seconds(
            "CONSOLED_STREAM_HISTORY_SECONDS",
            default.age.as_secs_f64(),
            0.0..=86400.0,
        )?,
    })
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const GITHUB_DEFAULTS: [&str; 3] = [
    "https://github.com/login/oauth/authorize",
    "https://github.com/login/oauth/access_token",
    "https://api.github.com",
];
const GOOGLE_DEFAULTS: [&str; 3] = [
    "https://accounts.google.com/o/oauth2/v2/auth",
    "https://oauth2.googleapis.com/token",
    "https://openidconnect.googleapis.com/v1/userinfo",
];

fn provider(
    env: &Env,
    name: &str,
    defaults: [&str; 3],
) -> Result<Option<ProviderConfig>, ConfigError> {
    let client_secret = env.secret(&format!("CONSOLED_{name}_CLIENT_SECRET"))?;
    let (Some(client_id), Some(client_secret)) = (
        env.get(&format!("CONSOLED_{name}_CLIENT_ID")),
        client_secret,
    ) else {
        return Ok(None);
    };
    let api_var = if name == "GITHUB" { "API" } else { "USERINFO" };
    let endpoint = |suffix: &str, default: &str| {
        env.get(&format!("CONSOLED_{name}_{suffix}_URL"))
            .unwrap_or_else(|| default.to_string())
    };
    Ok(Some(ProviderConfig {
        client_id,
        client_secret,
        auth_url: endpoint("AUTH", defaults[0]),
        token_url: endpoint("TOKEN", defaults[1]),
        api_url: endpoint(api_var, defaults[2])
            .trim_end_matches('/')
            .to_string(),
    }))
}

#[cfg(test)]
mod tests;
