//! The data files and gnuplot script behind the PNGs: one latency distribution (CDF) per rung
//! with both servers, and RSS per stream against streams open.

use std::fmt::Write as _;
use std::path::Path;

use crate::ladder::Outcome;

/// Every round of one server (a column of the table, a line of the plots).
pub struct Side<'a> {
    pub name: String,
    pub runs: Vec<&'a Outcome>,
}

pub fn write(dir: &Path, sides: &[Side], quick: bool) {
    let mode = if quick { " (QUICK ladder)" } else { "" };
    let mut gp = String::from(
        "set terminal pngcairo size 900,520 font ',11'\nset grid\nset key bottom right\n",
    );
    let rungs = sides.first().map_or(0, |s| s.runs[0].rungs.len());
    for j in 0..rungs {
        let mut lines = Vec::new();
        for side in sides {
            // Every round's deliveries of this rung together.
            let mut all: Vec<u32> = side
                .runs
                .iter()
                .flat_map(|o| o.rungs[j].latencies.iter().copied())
                .collect();
            all.sort_unstable();
            let file = format!("lat-{}-{j}.dat", slug(&side.name));
            std::fs::write(dir.join(&file), cdf(&all)).expect("latency data");
            lines.push(format!(
                "'{file}' using 1:2 with lines lw 2 title '{}'",
                side.name
            ));
        }
        let _ = write!(
            gp,
            "set output 'latency-{j}.png'\nset title 'commit-to-client latency, {}{mode}'\n\
             set logscale x\nset xlabel 'latency (ms, log scale)'\n\
             set ylabel 'fraction of deliveries at or below'\nset yrange [0:1]\nplot {}\n",
            sides[0].runs[0].rungs[j].name,
            lines.join(", ")
        );
    }
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
    std::fs::write(dir.join("plots.gp"), gp).expect("plots.gp");
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
