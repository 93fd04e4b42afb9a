//! Process metrics in the Prometheus text format (`GET /metrics`). Every family is listed in
//! docs/METRICS.md (a test keeps the two in step).

mod process;

use crate::locks::Unpoisoned;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram buckets.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    total: u64,
}

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    latency: Mutex<BTreeMap<&'static str, Histogram>>,
    pub panics: AtomicU64,
    pub streams_total: AtomicU64,
    /// Stream refusals answered as `event: refused` (an `EventSource` retries them).
    pub streams_refused_as_events: AtomicU64,
    /// Streams opened with `Last-Event-ID`: resumed, or answered with a plain `ready`.
    pub streams_resumed: AtomicU64,
    pub streams_not_resumed: AtomicU64,
    pub changes_received: AtomicU64,
    pub changes_dropped: AtomicU64,
    pub listener_reconnects: AtomicU64,
    /// Mails delivered, except password resets asked for by address (`reset_requests`).
    pub mails_sent: AtomicU64,
    pub mail_failures: AtomicU64,
    /// Password resets asked for by address, handled: mailed, or dropped for an address without
    /// an account (never counted apart: issue 37, item 4).
    pub reset_requests: AtomicU64,
    pub connections_refused: AtomicU64,
    /// Accepted connections whose socket was not known (closed at once; should stay 0).
    pub connections_unguarded: AtomicU64,
    /// Connections whose first request came from another peer than their socket's (never seen).
    pub connections_mismatched: AtomicU64,
    pub connections_idle_closed: AtomicU64,
    pub heads_timed_out: AtomicU64,
    pub heads_too_large: AtomicU64,
    pub drains_cut: AtomicU64,
    pub connections_aborted: AtomicU64,
    /// Connections refused because their address held its share of connections.
    pub connections_over_share: AtomicU64,
    /// Ended event streams by reason, in the order of `events::End` (revoked, shutdown,
    /// client_gone, pipelined, stalled).
    pub streams_ended: [AtomicU64; 5],
    /// Sign-ins refused by a failed-sign-in limit, before any hash or database write.
    pub signins_refused: AtomicU64,
    /// Queued mails due now, and all queued mails (counted by the maintenance thread).
    pub mail_queue_due: AtomicU64,
    pub mail_queue_total: AtomicU64,
}

/// Gauges read at scrape time from their owners.
pub struct Gauges {
    /// Stream places held (`admission::StreamPlaces`): the one count of open streams.
    pub streams_open: usize,
    pub hash_queue_depth: usize,
    /// Requests the hash admission refused (their client held its share, or no place).
    pub hashes_refused: u64,
    /// Password hashes computed.
    pub hashes_computed: u64,
    pub pool_connections: u32,
    pub pool_idle: u32,
    pub pool_max: u32,
    /// Connections and event streams this process holds at most (`capacity`).
    pub max_connections: usize,
    pub max_streams: usize,
    /// Credentials checked from memory and from the database (`identity`), and those remembered.
    pub checks: [u64; 2],
    pub checked: usize,
}

impl Metrics {
    pub fn observe(&self, route: &'static str, status: u16, elapsed: Duration) {
        *self
            .requests
            .lock()
            .unpoisoned()
            .entry((route, status))
            .or_default() += 1;
        let secs = elapsed.as_secs_f64();
        let mut latency = self.latency.lock().unpoisoned();
        let h = latency.entry(route).or_default();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.total += 1;
    }

    /// The refusals counted so far, by kind, for the log's flood summary
    /// (`logging::flood`): answered requests refused with 429 or 503 by route and status, and
    /// connections refused or cut before they became requests.
    pub fn refusals(&self) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        for ((route, status), n) in self.requests.lock().unpoisoned().iter() {
            if crate::logging::access::is_refusal(*status) {
                out.insert(format!("{route}_{status}"), *n);
            }
        }
        for (kind, value) in [
            ("connections_refused", &self.connections_refused),
            ("connections_over_share", &self.connections_over_share),
            ("heads_timed_out", &self.heads_timed_out),
            ("heads_too_large", &self.heads_too_large),
        ] {
            out.insert(kind.to_string(), value.load(Ordering::Relaxed));
        }
        out
    }

    pub fn render(&self, g: &Gauges) -> String {
        let mut out = String::new();
        out.push_str("# HELP consoled_requests_total HTTP requests by route and status.\n");
        out.push_str("# TYPE consoled_requests_total counter\n");
        for ((route, status), n) in self.requests.lock().unpoisoned().iter() {
            let _ = writeln!(
                out,
                "consoled_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP consoled_request_duration_seconds Request latency by route.\n");
        out.push_str("# TYPE consoled_request_duration_seconds histogram\n");
        for (route, h) in self.latency.lock().unpoisoned().iter() {
            for (i, bound) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "consoled_request_duration_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "consoled_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.total
            );
            let _ = writeln!(
                out,
                "consoled_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "consoled_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.total
            );
        }
        let counters = [
            (
                "consoled_handler_panics_total",
                "Handler panics turned into 500.",
                &self.panics,
            ),
            (
                "consoled_streams_total",
                "Event streams opened.",
                &self.streams_total,
            ),
            (
                "consoled_streams_refused_as_events_total",
                "Stream refusals answered as event: refused, for an EventSource to retry.",
                &self.streams_refused_as_events,
            ),
            (
                "consoled_streams_resumed_total",
                "Streams opened with Last-Event-ID that resumed (ready {\"resumed\":true}).",
                &self.streams_resumed,
            ),
            (
                "consoled_streams_not_resumed_total",
                "Streams opened with Last-Event-ID answered with a plain ready (the client reloads).",
                &self.streams_not_resumed,
            ),
            (
                "consoled_changes_received_total",
                "Change notifications received from PostgreSQL.",
                &self.changes_received,
            ),
            (
                "consoled_changes_dropped_total",
                "Changes dropped on full stream queues (resync sent).",
                &self.changes_dropped,
            ),
            (
                "consoled_listener_reconnects_total",
                "Reconnections of the change listener.",
                &self.listener_reconnects,
            ),
            (
                "consoled_mails_sent_total",
                "Mails delivered (reset requests by address are counted apart).",
                &self.mails_sent,
            ),
            (
                "consoled_reset_requests_total",
                "Password-reset requests by address handled, whether the address has an account or not.",
                &self.reset_requests,
            ),
            (
                "consoled_mail_failures_total",
                "Failed mail delivery attempts.",
                &self.mail_failures,
            ),
            (
                "consoled_connections_refused_total",
                "Connections refused at the connection cap.",
                &self.connections_refused,
            ),
            (
                "consoled_connections_over_share_total",
                "Connections refused because their client address held its share.",
                &self.connections_over_share,
            ),
            (
                "consoled_connections_unguarded_total",
                "Accepted connections closed because their socket was not known.",
                &self.connections_unguarded,
            ),
            (
                "consoled_connections_mismatched_total",
                "Connections closed because their socket's peer was not their request's.",
                &self.connections_mismatched,
            ),
            (
                "consoled_connections_idle_closed_total",
                "Idle keep-alive or silent connections closed by the connection guard.",
                &self.connections_idle_closed,
            ),
            (
                "consoled_heads_timed_out_total",
                "Request heads cut off at their deadline.",
                &self.heads_timed_out,
            ),
            (
                "consoled_heads_too_large_total",
                "Request heads refused for size.",
                &self.heads_too_large,
            ),
            (
                "consoled_drains_cut_total",
                "Refused request bodies whose draining was cut short.",
                &self.drains_cut,
            ),
            (
                "consoled_connections_aborted_total",
                "Cut connections reset because their client kept sending.",
                &self.connections_aborted,
            ),
            (
                "consoled_signins_refused_total",
                "Sign-ins refused by a failed-sign-in limit before any hash.",
                &self.signins_refused,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP consoled_streams_ended_total Event streams ended, by reason.\n\
             # TYPE consoled_streams_ended_total counter"
        );
        let reasons = ["revoked", "shutdown", "client_gone", "pipelined", "stalled"];
        for (reason, value) in reasons.iter().zip(&self.streams_ended) {
            let _ = writeln!(
                out,
                "consoled_streams_ended_total{{reason=\"{reason}\"}} {}",
                value.load(Ordering::Relaxed)
            );
        }
        let hash_counters = [
            (
                "consoled_hashes_refused_total",
                "Requests refused by the fair hash admission.",
                g.hashes_refused,
            ),
            (
                "consoled_hashes_total",
                "Password hashes computed (sign-in, sign-up, reset).",
                g.hashes_computed,
            ),
        ];
        for (name, help, value) in hash_counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP consoled_checks_total Sessions and API tokens checked, by where they were found.\n\
             # TYPE consoled_checks_total counter\nconsoled_checks_total{{from=\"memory\"}} {}\n\
             consoled_checks_total{{from=\"database\"}} {}\n\
             # HELP consoled_checked_credentials Sessions and API tokens remembered as checked.\n\
             # TYPE consoled_checked_credentials gauge\nconsoled_checked_credentials {}",
            g.checks[0], g.checks[1], g.checked
        );
        let gauges = [
            (
                "consoled_streams_open",
                "Open event streams.",
                g.streams_open as u64,
            ),
            (
                "consoled_hash_queue_depth",
                "Password hashes waiting for a hash thread.",
                g.hash_queue_depth as u64,
            ),
            (
                "consoled_db_pool_connections",
                "Open pooled database connections.",
                g.pool_connections as u64,
            ),
            (
                "consoled_db_pool_idle",
                "Idle pooled database connections.",
                g.pool_idle as u64,
            ),
            (
                "consoled_db_pool_max",
                "Pool size limit.",
                g.pool_max as u64,
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
        self.render_operations(g, &mut out);
        out
    }

    /// What an operator watches beside the traffic: the build, the process, the capacities and
    /// the mail queue.
    fn render_operations(&self, g: &Gauges, out: &mut String) {
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        let _ = writeln!(
            out,
            "# HELP consoled_build_info The running build (always 1).\n\
             # TYPE consoled_build_info gauge\n\
             consoled_build_info{{version=\"{}\",profile=\"{profile}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        if let Some(p) = process::Process::read() {
            p.render(out);
        }
        let gauges = [
            (
                "consoled_connections_max",
                "Client connections this process holds at most.",
                g.max_connections as u64,
            ),
            (
                "consoled_streams_max",
                "Event streams this process holds at most.",
                g.max_streams as u64,
            ),
            (
                "consoled_mail_queue_due",
                "Queued mails due for delivery now.",
                self.mail_queue_due.load(Ordering::Relaxed),
            ),
            (
                "consoled_mail_queue",
                "Queued mails, due or waiting to be retried.",
                self.mail_queue_total.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_histogram() {
        let m = Metrics::default();
        m.observe("login", 200, Duration::from_millis(3));
        m.observe("login", 401, Duration::from_millis(30));
        let text = m.render(&Gauges {
            streams_open: 4,
            hash_queue_depth: 2,
            hashes_refused: 5,
            hashes_computed: 9,
            pool_connections: 3,
            pool_idle: 1,
            pool_max: 16,
            max_connections: 100,
            max_streams: 90,
            checks: [7, 1],
            checked: 1,
        });
        assert!(text.contains("consoled_requests_total{route=\"login\",status=\"200\"} 1"));
        assert!(text
            .contains("consoled_request_duration_seconds_bucket{route=\"login\",le=\"0.005\"} 1"));
        assert!(text.contains("consoled_request_duration_seconds_count{route=\"login\"} 2"));
        assert!(text.contains("consoled_hash_queue_depth 2"));
        assert!(text.contains("consoled_hashes_refused_total 5"));
        assert!(text.contains("consoled_checks_total{from=\"memory\"} 7\n"));
        assert!(text.contains("consoled_connections_max 100\n"));
        assert!(text.contains("consoled_streams_max 90\n"));
        assert!(text.contains("consoled_build_info{version=\""));
        assert!(text.contains("\nprocess_resident_memory_bytes "));
    }
}
