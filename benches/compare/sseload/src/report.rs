//! The Markdown table of one sitting (consoled, async reference, ratio consoled ÷ async) and the
//! data files plus gnuplot script behind the PNG plots.

use std::fmt::Write as _;
use std::path::Path;

use crate::ladder::{Outcome, Rung};
use crate::procfs::{self, Sample};

/// One line saying what ran where, for the table's heading.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cores} cores ({cpu}), {mem:.0} GiB, Linux {}; limits: {}",
        kernel.trim(),
        procfs::limits()
    )
}

/// Writes `table.md`, the plot data and `plots.gp` into `dir`; returns the table.
pub fn write(dir: &Path, machine: &str, outcomes: &[Outcome], quick: bool) -> String {
    let table = table(machine, outcomes, quick);
    std::fs::write(dir.join("table.md"), &table).expect("table.md");
    let mut plots = String::from(
        "set terminal pngcairo size 900,520 font ',11'\nset grid\nset key bottom right\n",
    );
    let rungs = outcomes.first().map_or(0, |o| o.rungs.len());
    for j in 0..rungs {
        let mut lines = Vec::new();
        for o in outcomes {
            let file = format!("lat-{}-{j}.dat", o.server);
            std::fs::write(dir.join(&file), cdf(&o.rungs[j].latencies)).expect("latency data");
            lines.push(format!(
                "'{file}' using 1:2 with lines lw 2 title '{}'",
                o.server
            ));
        }
        let _ = write!(
            plots,
            "set output 'latency-{j}.png'\nset title 'commit-to-client latency, {}'\n\
             set logscale x\nset xlabel 'latency (ms, log scale)'\n\
             set ylabel 'fraction of deliveries at or below'\nset yrange [0:1]\nplot {}\n",
            outcomes[0].rungs[j].name,
            lines.join(", ")
        );
    }
    let mut lines = Vec::new();
    for o in outcomes {
        let file = format!("mem-{}.dat", o.server);
        let mut data = String::from("# streams rss_kib_per_stream threads_per_stream rss_mib\n");
        for (n, s) in o.held.curve.iter().filter(|(n, _)| *n >= 100) {
            let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / *n as f64;
            let _ = writeln!(
                data,
                "{n} {:.2} {:.3} {:.1}",
                per(s.rss_kib, o.idle.rss_kib),
                per(s.threads, o.idle.threads),
                s.rss_kib as f64 / 1024.0
            );
        }
        std::fs::write(dir.join(&file), data).expect("memory data");
        lines.push(format!(
            "'{file}' using 1:2 with linespoints title '{}'",
            o.server
        ));
    }
    let _ = write!(
        plots,
        "set output 'memory.png'\nset title 'server RSS per open stream'\nunset logscale x\n\
         set xlabel 'streams open'\nset ylabel 'KiB per stream (RSS above idle)'\n\
         set yrange [0:*]\nset key top right\nplot {}\n",
        lines.join(", ")
    );
    std::fs::write(dir.join("plots.gp"), plots).expect("plots.gp");
    table
}

/// (latency ms, cumulative fraction) at 500 quantiles.
fn cdf(sorted_us: &[u32]) -> String {
    let mut out = String::new();
    if sorted_us.is_empty() {
        return "# no deliveries\n".into();
    }
    for k in 0..=500 {
        let q = k as f64 / 500.0;
        let i = ((sorted_us.len() - 1) as f64 * q) as usize;
        let _ = writeln!(out, "{:.3} {q:.3}", (sorted_us[i].max(1)) as f64 / 1000.0);
    }
    out
}

fn table(machine: &str, outcomes: &[Outcome], quick: bool) -> String {
    let mut t = String::new();
    let mode = if quick { "QUICK" } else { "full" };
    let _ = writeln!(t, "{mode} ladder, {machine}\n");
    let names: Vec<&str> = outcomes.iter().map(|o| o.server.as_str()).collect();
    let _ = writeln!(t, "| measure | {} | consoled ÷ async |", names.join(" | "));
    let _ = writeln!(t, "|---|{}---|", "---|".repeat(names.len()));
    let loads: Vec<String> = outcomes
        .iter()
        .map(|o| num(load(&o.load_before), 2))
        .collect();
    let _ = writeln!(
        t,
        "| load average (1 min) before the server's run | {} | |",
        loads.join(" | ")
    );
    release_row(
        &mut t,
        "close → server released the stream's descriptors, p50 / max ms",
        outcomes,
        |o| &o.release.fd_ms,
    );
    release_row(
        &mut t,
        "close → stream slot freed (`consoled_streams_open`), p50 / max ms",
        outcomes,
        |o| &o.release.slot_ms,
    );
    let mut row = |label: &str, f: &dyn Fn(&Outcome) -> f64, digits: usize| {
        let vals: Vec<f64> = outcomes.iter().map(f).collect();
        let cells: Vec<String> = vals.iter().map(|v| num(*v, digits)).collect();
        let ratio = match vals.as_slice() {
            [a, b] if b.is_finite() && *b != 0.0 && a.is_finite() => format!("{:.2}", a / b),
            _ => "—".into(),
        };
        let _ = writeln!(t, "| {label} | {} | {ratio} |", cells.join(" | "));
    };
    row(
        "idle server RSS (MiB)",
        &|o| o.idle.rss_kib as f64 / 1024.0,
        1,
    );
    let rungs = outcomes.first().map_or(0, |o| o.rungs.len());
    for j in 0..rungs {
        let name = outcomes[0].rungs[j].name.clone();
        let r = move |o: &Outcome| o.rungs[j].clone();
        row(&format!("{name}: p50 ms"), &|o| r(o).p50_ms, 2);
        row(&format!("{name}: p99 ms"), &|o| r(o).p99_ms, 2);
        row(&format!("{name}: max ms"), &|o| r(o).max_ms, 2);
        row(
            &format!("{name}: deliveries received ÷ expected"),
            &|o| {
                let r = r(o);
                r.delivered as f64 / r.expected.max(1) as f64
            },
            4,
        );
        row(&format!("{name}: resyncs"), &|o| r(o).resyncs as f64, 0);
        if j > 0 {
            row(
                &format!("{name}: server CPU µs per delivery"),
                &|o| r(o).cpu_us_per_delivery,
                1,
            );
            row(
                &format!("{name}: client CPU s / server CPU s"),
                &|o| {
                    let r = r(o);
                    r.client_cpu_s / r.server_cpu_s.max(1e-9)
                },
                2,
            );
        }
    }
    if let Some(last) = rungs.checked_sub(1) {
        let name = outcomes[0].rungs[last].name.clone();
        let per = move |o: &Outcome, f: fn(&Sample) -> u64| {
            let r: &Rung = &o.rungs[last];
            f(&r.with_streams).saturating_sub(f(&o.idle)) as f64 / r.streams.max(1) as f64
        };
        row(
            &format!("{name}: RSS KiB per stream"),
            &|o| per(o, |s| s.rss_kib),
            1,
        );
        row(
            &format!("{name}: threads per stream"),
            &|o| per(o, |s| s.threads),
            3,
        );
        row(
            &format!("{name}: descriptors per stream"),
            &|o| per(o, |s| s.fds),
            3,
        );
    }
    row("streams held at once", &|o| o.held.streams as f64, 0);
    let held_per = |o: &Outcome, f: fn(&Sample) -> u64| {
        f(&o.held.with_streams).saturating_sub(f(&o.idle)) as f64 / o.held.streams.max(1) as f64
    };
    row(
        "held: RSS KiB per stream",
        &|o| held_per(o, |s| s.rss_kib),
        1,
    );
    row(
        "held: threads per stream",
        &|o| held_per(o, |s| s.threads),
        3,
    );
    row(
        "held: descriptors per stream",
        &|o| held_per(o, |s| s.fds),
        3,
    );
    row("held: seconds to open them", &|o| o.held.open_s, 1);
    row(
        "held: a change reached (received ÷ expected)",
        &|o| o.held.delivered as f64 / o.held.expected.max(1) as f64,
        4,
    );
    let _ = writeln!(t);
    for o in outcomes {
        let _ = writeln!(
            t,
            "- {} stopped opening streams: {}",
            o.server, o.held.stopped_by
        );
    }
    t
}

/// Release times: p50 / max when every closed stream was released within the wait, else how
/// many were and "> wait"; the ratio is of the maxima (a lower bound when consoled's is one).
/// The slot row exists for consoled only (the async reference has no such gauge).
fn release_row(t: &mut String, label: &str, outcomes: &[Outcome], f: fn(&Outcome) -> &Vec<f64>) {
    let measured = |o: &Outcome| o.server == "consoled" || !label.contains("slot");
    let done = |o: &Outcome| f(o).len() >= o.release.closed && o.release.closed > 0;
    let cell = |o: &Outcome| {
        let (v, n) = (f(o), o.release.closed);
        if !measured(o) {
            "n/a".to_string()
        } else if done(o) {
            format!("{:.1} / {:.1}", quantile(v, 0.5), quantile(v, 1.0))
        } else {
            format!(
                "> {:.0} ({} of {n} within)",
                o.release.wait_s * 1000.0,
                v.len()
            )
        }
    };
    let cells: Vec<String> = outcomes.iter().map(cell).collect();
    let ratio = match outcomes {
        [a, b] if measured(a) && measured(b) && done(b) => {
            let theirs = quantile(f(b), 1.0).max(0.001);
            if done(a) {
                format!("{:.2}", quantile(f(a), 1.0) / theirs)
            } else {
                format!("> {:.0}", a.release.wait_s * 1000.0 / theirs)
            }
        }
        _ => "—".into(),
    };
    let _ = writeln!(t, "| {label} | {} | {ratio} |", cells.join(" | "));
}

fn num(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "—".into()
    }
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    s[((s.len() - 1) as f64 * q).round() as usize]
}

fn load(loadavg: &str) -> f64 {
    loadavg
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}
