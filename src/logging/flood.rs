//! Summaries of refusals: a flood is counted where it is refused (the `/metrics` counters, one
//! atomic or map increment each), and at most once per interval one `warn` line says how many of
//! each kind there were since the last line. No refusal writes a line of its own, so a flood
//! cannot turn into a disk or log-pipeline flood.
//!
//! The background maintenance thread calls `Summary::tick` with the current counters; the first
//! call only takes the baseline.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use log::kv::Value;
use log::Level;

/// The log target of the summaries.
pub const TARGET: &str = "consoled::flood";

/// Counters of refusals by kind (`login_429`, `connections_refused`...), as `/metrics` has them.
pub type Counts = BTreeMap<String, u64>;

pub struct Summary {
    interval: Duration,
    last: Option<(Instant, Counts)>,
}

impl Summary {
    pub fn new(interval: Duration) -> Summary {
        Summary {
            interval,
            last: None,
        }
    }

    /// Writes the summary line when an interval has passed since the last one and something was
    /// refused meanwhile; returns what it wrote. `counts` is read only then.
    pub fn tick(&mut self, now: Instant, counts: impl FnOnce() -> Counts) -> Option<String> {
        let Some((since, before)) = &self.last else {
            self.last = Some((now, counts()));
            return None;
        };
        if now.duration_since(*since) < self.interval {
            return None;
        }
        let counts = counts();
        let seconds = now.duration_since(*since).as_secs();
        let delta: Vec<(String, u64)> = counts
            .iter()
            .map(|(k, n)| (k.clone(), n.saturating_sub(*before.get(k).unwrap_or(&0))))
            .filter(|(_, n)| *n > 0)
            .collect();
        self.last = Some((now, counts));
        if delta.is_empty() {
            return None;
        }
        let total: u64 = delta.iter().map(|(_, n)| n).sum();
        let parts: Vec<String> = delta.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let msg = format!(
            "refused {total} requests or connections in the last {seconds} s: {}",
            parts.join(", ")
        );
        let mut fields: Vec<(&str, Value)> = vec![
            ("refused_total", Value::from(total)),
            ("interval_seconds", Value::from(seconds)),
        ];
        fields.extend(delta.iter().map(|(k, n)| (k.as_str(), Value::from(*n))));
        super::emit(Level::Warn, TARGET, &msg, &fields);
        Some(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, u64)]) -> Counts {
        pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    #[test]
    fn one_line_per_interval_with_the_increase_of_each_kind() {
        let mut s = Summary::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(s.tick(t0, || counts(&[("login_429", 5)])), None);
        // Within the interval: nothing, and the counters are not even read.
        let early = || -> Counts { panic!("counters read within the interval") };
        assert_eq!(s.tick(t0 + Duration::from_secs(5), early), None);
        let line = s
            .tick(t0 + Duration::from_secs(10), || {
                counts(&[("login_429", 9005), ("connections_refused", 3)])
            })
            .unwrap();
        assert_eq!(
            line,
            "refused 9003 requests or connections in the last 10 s: \
             connections_refused 3, login_429 9000"
        );
        // A quiet interval writes nothing.
        let quiet = counts(&[("login_429", 9005), ("connections_refused", 3)]);
        assert_eq!(s.tick(t0 + Duration::from_secs(20), || quiet), None);
    }
}
