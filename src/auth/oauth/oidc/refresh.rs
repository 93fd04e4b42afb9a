//! The thread that keeps every provider's discovery document and key set fresh: fetched at
//! start, then every `CONSOLED_OIDC_REFRESH_SECONDS`. A failure is retried sooner (1 s, doubling
//! up to a minute, never later than the refresh interval) and logged once per distinct reason; a
//! provider that has answered before keeps its last good document and keys meanwhile.
//!
//! It runs beside the server, so that a provider that is down or slow never keeps the service
//! from starting or a request from being answered.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::{discovery, jwks, OidcProvider, Providers};

const MAX_RETRY: Duration = Duration::from_secs(60);
/// How often the thread looks at the clock and at `stopping`.
const TICK: Duration = Duration::from_millis(100);

/// When a provider is next due, and how it fared last.
struct Schedule {
    next: Instant,
    failures: u32,
    last_error: Option<String>,
}

/// Starts the thread; `None` when no provider is configured.
pub fn start(
    providers: Arc<Providers>,
    stopping: Arc<AtomicBool>,
    every: Duration,
    timeout: Duration,
) -> io::Result<Option<thread::JoinHandle<()>>> {
    if providers.is_empty() {
        return Ok(None);
    }
    let handle = thread::Builder::new()
        .name("oidc-refresh".into())
        .spawn(move || {
            let mut schedules: Vec<Schedule> = providers
                .all()
                .map(|_| Schedule {
                    next: Instant::now(),
                    failures: 0,
                    last_error: None,
                })
                .collect();
            while !stopping.load(Ordering::SeqCst) {
                for (provider, schedule) in providers.all().zip(&mut schedules) {
                    if Instant::now() >= schedule.next {
                        refresh(provider, schedule, every, timeout);
                    }
                }
                thread::sleep(TICK);
            }
        })?;
    Ok(Some(handle))
}

fn refresh(provider: &OidcProvider, schedule: &mut Schedule, every: Duration, timeout: Duration) {
    let config = &provider.config;
    let fetched =
        discovery::fetch(config, timeout).and_then(|d| Ok((jwks::fetch(&d.jwks_uri, timeout)?, d)));
    match fetched {
        Ok((keys, discovered)) => {
            if provider.discovered().is_none() || schedule.failures > 0 {
                log::info!(
                    "oidc {}: discovered {} ({} signing keys); listed in /auth/providers",
                    config.name,
                    config.issuer,
                    keys.len()
                );
            }
            provider.set_discovered(discovered, keys);
            schedule.failures = 0;
            schedule.last_error = None;
            schedule.next = Instant::now() + every;
        }
        Err(e) => {
            schedule.failures += 1;
            if schedule.last_error.as_deref() != Some(e.as_str()) {
                let meanwhile = if provider.discovered().is_some() {
                    "keeping the document and keys fetched before"
                } else {
                    "left out of /auth/providers until it answers"
                };
                log::warn!(
                    "oidc {}: discovery of {} failed: {e}; {meanwhile}",
                    config.name,
                    config.issuer
                );
            }
            schedule.last_error = Some(e);
            schedule.next = Instant::now() + retry_after(schedule.failures).min(every);
        }
    }
}

/// 1 s after the first failure, doubling up to `MAX_RETRY`.
fn retry_after(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(6)).min(MAX_RETRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_a_minute() {
        let secs: Vec<u64> = (1..=9).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }
}
