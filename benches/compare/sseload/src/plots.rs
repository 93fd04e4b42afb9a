//! The data files and gnuplot script behind the PNGs: one latency distribution (CDF) per rung
//! with both servers, and RSS per stream against streams open.

use std::fmt::Write as _;
use std::path::Path;

use crate::ladder::{Outcome, Rung};

/// Every round of one server (a column of the table, a line of the plots).
pub struct Side<'a> {
    pub name: String,
    pub runs: Vec<&'a Outcome>,
}

pub fn write(dir: &Path, sides: &[Side], quick: bool) {
    let mode = if quick { " (QUICK ladder)" } else { "" };
    // `noenhanced`: titles print as written (enhanced text would make the `_` of
    // `CONSOLED_STREAM_DIRECT` a subscript).
    let mut gp = String::from(
        "set terminal pngcairo noenhanced size 900,520 font ',11'\nset grid\nset key bottom right\n",
    );
    let rungs = sides.first().map_or(0, |s| s.runs[0].rungs.len());
    for j in 0..rungs {
        let file = format!("latency-{j}");
        latency(dir, &mut gp, sides, &file, mode, &|o| o.rungs.get(j));
    }
    // The contended rungs (the other client shapes), drawn as the ladder's are.
    let contended = sides.first().map_or(0, |s| s.runs[0].contended.len());
    for j in 0..contended {
        let r = &sides[0].runs[0].contended[j];
        let shape = if r.shape == "Threads" {
            "threads"
        } else {
            "neighbours"
        };
        let file = format!("latency-{shape}-{}", r.streams);
        latency(dir, &mut gp, sides, &file, mode, &|o| o.contended.get(j));
    }
    // The held rung's memory curve, when the ladder ran (not with `--storm-only` or
    // `--contended-only`).
    if sides.first().is_some_and(|s| !s.runs[0].rungs.is_empty()) {
        memory(dir, &mut gp, sides, mode);
    }
    std::fs::write(dir.join("plots.gp"), gp).expect("plots.gp");
}

/// The memory curve of the held rung, into `memory.png`.
fn memory(dir: &Path, gp: &mut String, sides: &[Side], mode: &str) {
    let mut lines = Vec::new();
    for side in sides {
        // The first round's curve: rounds differ in noise, not in shape.
        let o = side.runs[0];
        let file = format!("mem-{}.dat", slug(&side.name));
        let mut data = String::from("# streams rss_kib_per_stream threads_per_stream rss_mib\n");
        // Below 100 streams the idle process's own noise outweighs the streams.
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
            side.name
        ));
    }
    let _ = write!(
        gp,
        "set output 'memory.png'\nset title 'server RSS per open stream{mode}'\n\
         set logscale x\nset xlabel 'streams open (log scale)'\n\
         set ylabel 'KiB per stream (RSS above the idle server)'\n\
         set yrange [0:*]\nset key top right\nplot {}\n",
        lines.join(", ")
    );
}

/// The data files and the plot of one rung (`rung` picks it from an outcome) into `<file>.png`:
/// every round's deliveries of each side together.
fn latency(
    dir: &Path,
    gp: &mut String,
    sides: &[Side],
    file: &str,
    mode: &str,
    rung: &dyn Fn(&Outcome) -> Option<&Rung>,
) {
    let mut lines = Vec::new();
    for side in sides {
        let mut all: Vec<u32> = side
            .runs
            .iter()
            .filter_map(|o| rung(o))
            .flat_map(|r| r.latencies.iter().copied())
            .collect();
        all.sort_unstable();
        let data = format!("lat-{}-{}.dat", slug(&side.name), &file["latency-".len()..]);
        std::fs::write(dir.join(&data), cdf(&all)).expect("latency data");
        lines.push(format!(
            "'{data}' using 1:2 with lines lw 2 title '{}'",
            side.name
        ));
    }
    let name = rung(sides[0].runs[0]).map_or("", |r| r.name.as_str());
    let _ = write!(
        gp,
        "set output '{file}.png'\nset title 'commit-to-client latency, {name}{mode}'\n\
         set logscale x\nset xlabel 'latency (ms, log scale)'\n\
         set ylabel 'fraction of deliveries at or below'\nset yrange [0:1]\nplot {}\n",
        lines.join(", ")
    );
}

/// (latency ms, cumulative fraction) at 500 quantiles.
fn cdf(sorted_us: &[u32]) -> String {
    if sorted_us.is_empty() {
        return "# no deliveries\n".into();
    }
    let mut out = String::new();
    for k in 0..=500 {
        let q = k as f64 / 500.0;
        let i = ((sorted_us.len() - 1) as f64 * q) as usize;
        let _ = writeln!(out, "{:.3} {q:.3}", sorted_us[i].max(1) as f64 / 1000.0);
    }
    out
}

/// A file name part for a column name ("consoled (CONSOLED_STREAM_DIRECT=false)").
fn slug(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect::<String>()
        .trim_matches('_')
        .to_string()
}
