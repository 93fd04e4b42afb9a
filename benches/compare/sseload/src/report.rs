//! The Markdown table of one sitting: consoled in both delivery modes, the async reference, and
//! the ratio of each consoled column ÷ async. With several rounds each cell is the median over
//! the rounds, and a range column per ratio gives the spread of the round-by-round ratios: how
//! much of a difference the machine's noise can make.

use std::fmt::Write as _;
use std::path::Path;

use crate::ladder::{Outcome, Rung};
use crate::plots::Side;
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
    let mut sides: Vec<Side> = Vec::new();
    for o in outcomes {
        match sides.iter_mut().find(|s| s.name == o.server) {
            Some(side) => side.runs.push(o),
            None => sides.push(Side {
                name: o.server.clone(),
                runs: vec![o],
            }),
        }
    }
    let table = table(machine, &sides, quick);
    std::fs::write(dir.join("table.md"), &table).expect("table.md");
    crate::plots::write(dir, &sides, quick);
    table
}

fn table(machine: &str, sides: &[Side], quick: bool) -> String {
    let mut t = String::new();
    let rounds = sides.iter().map(|s| s.runs.len()).min().unwrap_or(0);
    let mode = if quick { "QUICK" } else { "full" };
    let _ = writeln!(t, "{mode} ladder, {rounds} round(s), {machine}\n");
    let names: Vec<&str> = sides.iter().map(|s| s.name.as_str()).collect();
    let (median, with_range) = if rounds > 1 {
        (" (median)", true)
    } else {
        ("", false)
    };
    let ratio_heads: Vec<String> = pairs(sides)
        .iter()
        .flat_map(|(a, _)| {
            let head = format!("{} ÷ async{median}", sides[*a].name);
            let range = format!("{} ÷ async: range over {rounds} rounds", sides[*a].name);
            std::iter::once(head).chain(with_range.then_some(range))
        })
        .collect();
    let _ = writeln!(
        t,
        "| measure | {} | {} |",
        names
            .iter()
            .map(|n| format!("{n}{median}"))
            .collect::<Vec<_>>()
            .join(" | "),
        ratio_heads.join(" | ")
    );
    let _ = writeln!(
        t,
        "|---|{}{}",
        "---|".repeat(names.len()),
        "---|".repeat(ratio_heads.len())
    );
    let blank = " |".repeat(ratio_heads.len());
    // How much else ran: the rest of the machine's CPU during each run (PostgreSQL included;
    // a load average would also count the previous server's own runnable threads).
    // The ladder's rows only when it ran (`--storm-only` and `--contended-only` leave it out).
    let ladder = sides.first().is_some_and(|s| !s.runs[0].rungs.is_empty());
    let others: Vec<String> = sides
        .iter()
        .map(|s| {
            s.runs
                .iter()
                .map(|o| format!("{:.0} %", o.others_share * 100.0))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    if ladder {
        let _ = writeln!(
            t,
            "| CPU of everything else during each run (PostgreSQL included), share of all cores | {} |{blank}",
            others.join(" | "),
        );
    }
    if ladder {
        release_row(&mut t, sides, rounds, "descriptors", |o| &o.release.fd_ms);
        release_row(&mut t, sides, rounds, "slot", |o| &o.release.slot_ms);
    }
    let mut row = |label: &str, f: &dyn Fn(&Outcome) -> f64, digits: usize| {
        numeric_row(&mut t, sides, rounds, label, f, digits);
    };
    if ladder {
        row(
            "idle server RSS (MiB)",
            &|o| o.idle.rss_kib as f64 / 1024.0,
            1,
        );
    }
    let rungs = sides.first().map_or(0, |s| s.runs[0].rungs.len());
    for j in 0..rungs {
        let name = sides[0].runs[0].rungs[j].name.clone();
        let fanout = sides[0].runs[0].rungs[j].streams > 1;
        rung_rows(&mut row, &name, fanout, &|o| o.rungs.get(j));
    }
    if let Some(last) = rungs.checked_sub(1) {
        let name = sides[0].runs[0].rungs[last].name.clone();
        let per = move |o: &Outcome, f: fn(&Sample) -> u64| {
            let r = &o.rungs[last];
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
    if ladder {
        held_rows(&mut row);
    }
    let contended = sides.first().map_or(0, |s| s.runs[0].contended.len());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    for j in 0..contended {
        let name = sides[0].runs[0].contended[j].name.clone();
        rung_rows(&mut row, &name, true, &|o| o.contended.get(j));
        if sides[0].runs[0].contended[j].neighbours_cpu_s > 0.0 {
            let share = |o: &Outcome| {
                o.contended.get(j).map_or(f64::NAN, |r| {
                    100.0 * r.neighbours_cpu_s / (cores * r.wall_s.max(1e-9))
                })
            };
            row(
                &format!("{name}: neighbours' CPU, % of all cores"),
                &share,
                0,
            );
        }
    }
    let storm = sides.first().map_or(0, |s| s.runs[0].storm.streams);
    if storm > 0 {
        let name = format!("storm: {storm} streams opened at once on a fresh instance");
        row(
            &format!("{name}: seconds until all ready"),
            &|o| o.storm.seconds,
            2,
        );
        row(
            &format!("{name}: streams ready per second"),
            &|o| o.storm.rate,
            0,
        );
        row(
            &format!("{name}: server CPU µs per stream"),
            &|o| o.storm.server_cpu_us,
            0,
        );
        row(&format!("{name}: p50 ms to ready"), &|o| o.storm.p50_ms, 1);
        row(&format!("{name}: p99 ms to ready"), &|o| o.storm.p99_ms, 1);
        row(
            &format!("{name}: refused or failed"),
            &|o| o.storm.failed as f64,
            0,
        );
    }
    let _ = writeln!(t);
    for side in sides {
        for (i, o) in side.runs.iter().enumerate() {
            if ladder {
                let _ = writeln!(
                    t,
                    "- {} (round {}) stopped opening streams: {}",
                    side.name,
                    i + 1,
                    o.held.stopped_by
                );
            }
            if !o.storm.first_failure.is_empty() {
                let _ = writeln!(
                    t,
                    "- {} (round {}) storm, first failure: {}",
                    side.name,
                    i + 1,
                    o.storm.first_failure
                );
            }
        }
    }
    t
}

/// Writes one row of the table: its label, the measure of an outcome, the digits shown.
type Row<'a> = dyn FnMut(&str, &dyn Fn(&Outcome) -> f64, usize) + 'a;

/// The rows of the held rung: what the most streams held at once cost, and whether a change
/// still reached them.
fn held_rows(row: &mut Row) {
    let held = |o: &Outcome, f: fn(&Sample) -> u64| {
        f(&o.held.with_streams).saturating_sub(f(&o.idle)) as f64 / o.held.streams.max(1) as f64
    };
    row("streams held at once", &|o| o.held.streams as f64, 0);
    row("held: RSS KiB per stream", &|o| held(o, |s| s.rss_kib), 1);
    row("held: threads per stream", &|o| held(o, |s| s.threads), 3);
    row("held: descriptors per stream", &|o| held(o, |s| s.fds), 3);
    row("held: seconds to open them", &|o| o.held.open_s, 1);
    let reached = |o: &Outcome| o.held.delivered as f64 / o.held.expected.max(1) as f64;
    row("held: a change reached (received ÷ expected)", &reached, 4);
    row("held: p50 ms of those changes", &|o| o.held.p50_ms, 2);
    row("held: p99 ms of those changes", &|o| o.held.p99_ms, 2);
}

/// The rows of one latency rung (`rung` picks it from an outcome): percentiles, what arrived,
/// and for a fan-out the CPU per delivery and the client's share.
fn rung_rows(row: &mut Row, name: &str, fanout: bool, rung: &dyn Fn(&Outcome) -> Option<&Rung>) {
    let of = |f: fn(&Rung) -> f64| move |o: &Outcome| rung(o).map_or(f64::NAN, f);
    row(&format!("{name}: p50 ms"), &of(|r| r.p50_ms), 2);
    row(&format!("{name}: p99 ms"), &of(|r| r.p99_ms), 2);
    row(&format!("{name}: max ms"), &of(|r| r.max_ms), 2);
    let received = of(|r| r.delivered as f64 / r.expected.max(1) as f64);
    row(
        &format!("{name}: deliveries received ÷ expected"),
        &received,
        4,
    );
    row(&format!("{name}: resyncs"), &of(|r| r.resyncs as f64), 0);
    // Per delivery: meaningful for fan-out rungs, not for the single stream.
    if fanout {
        let per = of(|r| r.cpu_us_per_delivery);
        row(&format!("{name}: server CPU µs per delivery"), &per, 1);
        let client = of(|r| r.client_cpu_s / r.server_cpu_s.max(1e-9));
        row(&format!("{name}: client CPU ÷ server CPU"), &client, 2);
    }
}

/// (consoled side, reference side) for every side that is not the reference.
fn pairs(sides: &[Side]) -> Vec<(usize, usize)> {
    let Some(reference) = sides.iter().position(|s| s.name == "async-ref") else {
        return Vec::new();
    };
    (0..sides.len())
        .filter(|&i| i != reference)
        .map(|i| (i, reference))
        .collect()
}

/// Medians per server, the median of the round-by-round ratios, and their range.
fn numeric_row(
    t: &mut String,
    sides: &[Side],
    rounds: usize,
    label: &str,
    f: &dyn Fn(&Outcome) -> f64,
    digits: usize,
) {
    let cells: Vec<String> = sides
        .iter()
        .map(|s| num(median(s.runs.iter().map(|o| f(o)).collect()), digits))
        .collect();
    let mut ratio_cells = Vec::new();
    for (a, b) in pairs(sides) {
        let (a, b) = (&sides[a], &sides[b]);
        let ratios: Vec<f64> = (0..rounds)
            .map(|i| f(a.runs[i]) / f(b.runs[i]))
            .filter(|r| r.is_finite())
            .collect();
        ratio_cells.push(num(median(ratios.clone()), 2));
        if rounds > 1 {
            let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            ratio_cells.push(if ratios.is_empty() {
                "—".to_string()
            } else {
                format!("{lo:.2}–{hi:.2}")
            });
        }
    }
    let _ = writeln!(
        t,
        "| {label} | {} | {} |",
        cells.join(" | "),
        ratio_cells.join(" | ")
    );
}

/// Close-to-release times of all rounds together: p50 / max when every closed stream was
/// released within the wait, else how many were; the ratio is of the maxima, a lower bound
/// ("> x") when consoled's was not reached. The slot needs consoled's gauge (the reference has
/// none; "n/a" when a server did not serve it).
fn release_row(
    t: &mut String,
    sides: &[Side],
    rounds: usize,
    what: &str,
    f: fn(&Outcome) -> &Vec<f64>,
) {
    let label = match what {
        "slot" => "close → stream slot freed (`consoled_streams_open`), p50 / max ms",
        _ => "close → server released the stream's descriptors, p50 / max ms",
    };
    let measured = |s: &Side| what != "slot" || s.runs.iter().all(|o| o.release.slot_gauge);
    let all = |s: &Side| -> (Vec<f64>, usize, f64) {
        let v = s.runs.iter().flat_map(|o| f(o).iter().copied()).collect();
        let closed = s.runs.iter().map(|o| o.release.closed).sum();
        (v, closed, s.runs[0].release.wait_s * 1000.0)
    };
    let done = |s: &Side| {
        let (v, closed, _) = all(s);
        closed > 0 && v.len() >= closed
    };
    let cells: Vec<String> = sides
        .iter()
        .map(|s| {
            let (v, closed, wait) = all(s);
            if !measured(s) {
                "n/a".into()
            } else if done(s) {
                format!("{:.1} / {:.1}", quantile(&v, 0.5), quantile(&v, 1.0))
            } else {
                format!("> {wait:.0} ({} of {closed} within)", v.len())
            }
        })
        .collect();
    let mut ratio_cells = Vec::new();
    for (a, b) in pairs(sides) {
        let (a, b) = (&sides[a], &sides[b]);
        ratio_cells.push(if measured(a) && measured(b) && done(b) {
            let theirs = quantile(&all(b).0, 1.0).max(0.001);
            if done(a) {
                format!("{:.2}", quantile(&all(a).0, 1.0) / theirs)
            } else {
                format!("> {:.0}", all(a).2 / theirs)
            }
        } else {
            "—".into()
        });
        if rounds > 1 {
            ratio_cells.push(String::new());
        }
    }
    let _ = writeln!(
        t,
        "| {label} | {} | {} |",
        cells.join(" | "),
        ratio_cells.join(" | ")
    );
}

fn num(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "—".into()
    }
}

fn median(v: Vec<f64>) -> f64 {
    let mut v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
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
