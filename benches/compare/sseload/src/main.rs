//! `sseload`: the same stream ladder against consoled (in both delivery modes: with the hub's
//! writes for idle streams, the default, and with `CONSOLED_STREAM_DIRECT=false`) and against the
//! async reference, back to back on one database, then a Markdown table of ratios (÷ async) and
//! the data and gnuplot script for the plots. `make bench-compare` runs it; see BENCHMARKS.md.
//!
//!     sseload --consoled BIN --async-ref BIN --out DIR [--quick] [--only NAME]
//!             [--rounds N] [--held-cap N] [--rung STREAMS,RATE,SECONDS] [--storm N]
//!
//! `--storm N`: after each server's ladder, a fresh instance gets N streams opened at once (a
//! reconnect storm, `storm.rs`); default 5,000 (1,000 with --quick), 0 leaves it out.
//! `--only NAMES`: those columns only (comma-separated: `consoled`, `consoled-indirect`,
//! `async-ref`). `--storm-only`: no ladder, only the storm (a short measurement of the opening
//! path; the table's other rows are then empty).
//!
//! After each ladder, a fresh instance runs the fan-out rungs again in the other client shapes
//! (`contended.rs`, issue 38): one blocking client thread per stream, and the light client beside
//! CPU-bound neighbour processes (`--neighbours N`, default one per core). `--shapes LIST`
//! picks them (`threads`, `neighbours`; `none` leaves them out); `--contended-rung S,R,T`
//! (repeatable) replaces their rungs; `--contended-only`: only those rungs (and the storm if
//! `--storm N` is given), for trying a change.
//!
//! `--rounds N` repeats the pair N times, alternating which server goes first, so that a drift
//! of the machine's load shows as a range instead of favouring one side. `--held-cap N`: the most
//! streams the held rung opens (default: the client's open-file limit; 3,000 with --quick).
//! `--rung S,R,T` (repeatable) replaces the latency rungs: S streams, R changes/s, T seconds (with
//! `--quick --held-cap 0`, one rung side by side in about a minute, for trying a change).
//!
//! Needs `DATABASE_URL` (consoled's schema is applied with `consoled migrate`).

mod blocking;
mod client;
mod contended;
mod ladder;
mod neighbours;
mod plots;
mod pollers;
mod procfs;
mod report;
mod server;
mod storm;

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use contended::Shape;
use ladder::{Outcome, Plan};
use server::{Kind, Server};

struct Args {
    consoled: String,
    async_ref: String,
    out: PathBuf,
    quick: bool,
    only: Option<String>,
    held_cap: Option<usize>,
    rounds: usize,
    rungs: Vec<(usize, u64, f64)>,
    storm: Option<usize>,
    storm_only: bool,
    shapes: Option<String>,
    neighbours: Option<usize>,
    contended_rungs: Vec<(usize, u64, f64)>,
    contended_only: bool,
}

fn args() -> Args {
    let mut a = Args {
        consoled: "target/release/consoled".into(),
        async_ref: "benches/compare/target/release/async-ref".into(),
        out: "benches/out/compare".into(),
        quick: false,
        only: None,
        held_cap: None,
        rounds: 1,
        rungs: Vec::new(),
        storm: None,
        storm_only: false,
        shapes: None,
        neighbours: None,
        contended_rungs: Vec::new(),
        contended_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--consoled" => a.consoled = value(),
            "--async-ref" => a.async_ref = value(),
            "--out" => a.out = value().into(),
            "--only" => a.only = Some(value()),
            "--quick" => a.quick = true,
            "--storm-only" => a.storm_only = true,
            "--contended-only" => a.contended_only = true,
            "--shapes" => a.shapes = Some(value()),
            "--neighbours" => a.neighbours = Some(value().parse().expect("--neighbours N")),
            "--contended-rung" => a.contended_rungs.push(rung(&value())),
            "--rounds" => a.rounds = value().parse().expect("--rounds N"),
            "--storm" => a.storm = Some(value().parse().expect("--storm N")),
            "--held-cap" => a.held_cap = Some(value().parse().expect("--held-cap N")),
            "--rung" => a.rungs.push(rung(&value())),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// `STREAMS,RATE,SECONDS`.
fn rung(v: &str) -> (usize, u64, f64) {
    let p: Vec<&str> = v.split(',').collect();
    let bad = format!("a rung is STREAMS,RATE,SECONDS, not {v}");
    assert_eq!(p.len(), 3, "{bad}");
    (
        p[0].parse().expect(&bad),
        p[1].parse().expect(&bad),
        p[2].parse().expect(&bad),
    )
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some(neighbours::FLAG) {
        neighbours::compute();
    }
    let args = args();
    let database_url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let nofile = procfs::raise_nofile();
    // The client holds one descriptor per stream plus a few of its own.
    let client_cap = (nofile as usize).saturating_sub(200);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let shapes: Vec<Shape> = match args.shapes.as_deref() {
        Some("none") => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|n| Shape::parse(n, args.neighbours.unwrap_or(cores)))
            .collect(),
        None => vec![
            Shape::Threads,
            Shape::Neighbours(args.neighbours.unwrap_or(cores)),
        ],
    };
    let mut plan = if args.quick {
        Plan {
            rungs: vec![(1, 20, 2.5), (200, 50, 4.0), (1000, 10, 4.0)],
            held_cap: client_cap.min(3000),
            release: (5, Duration::from_secs(3)),
            pollers: 2,
            contended: vec![(200, 50, 4.0), (1000, 10, 4.0)],
            shapes,
        }
    } else {
        Plan {
            rungs: vec![(1, 20, 10.0), (1000, 50, 10.0), (5000, 10, 10.0)],
            held_cap: client_cap,
            // Longer than two pings (20 s each): a server that notices a close only when a
            // write fails shows it here.
            release: (10, Duration::from_secs(45)),
            pollers: 2,
            contended: vec![(1000, 50, 10.0), (5000, 10, 10.0)],
            shapes,
        }
    };
    if !args.rungs.is_empty() {
        plan.rungs = args.rungs.clone();
    }
    if !args.contended_rungs.is_empty() {
        plan.contended = args.contended_rungs.clone();
    }
    if let Some(cap) = args.held_cap {
        plan.held_cap = cap.min(client_cap);
    }
    std::fs::create_dir_all(&args.out).expect("output directory");
    server::migrate(&args.consoled, &database_url);
    let mut db = postgres::Client::connect(&database_url, postgres::NoTls).expect("database");
    let (project, secret) = setup(&mut db);

    let machine = report::machine();
    eprintln!("{machine}");
    let mut outcomes: Vec<Outcome> = Vec::new();
    let storm = match (args.storm, args.contended_only) {
        (Some(n), _) => n,
        (None, true) => 0,
        (None, false) if args.quick => 1000,
        (None, false) => 5000,
    };
    let storm_secrets = tokens(&mut db, project, storm.div_ceil(storm::PER_TOKEN));
    for round in 0..args.rounds.max(1) {
        let mut all = [
            (Kind::Consoled, &args.consoled, "consoled"),
            (Kind::ConsoledIndirect, &args.consoled, "consoled-indirect"),
            (Kind::AsyncRef, &args.async_ref, "async-ref"),
        ];
        // Each round starts with another server, so that a drift of the machine's load does not
        // favour one.
        all.rotate_left(round % 3);
        for (kind, bin, short) in all {
            if args
                .only
                .as_deref()
                .is_some_and(|o| !o.split(',').any(|n| n == short))
            {
                continue;
            }
            eprintln!("round {}: {}", round + 1, kind.name());
            let mut outcome = ladder::Outcome {
                server: kind.name().to_string(),
                ..ladder::Outcome::default()
            };
            if !args.storm_only && !args.contended_only {
                let mut server = Server::start(kind, bin, &database_url);
                outcome = ladder::run(&mut server, &plan, &mut db, project, &secret);
                drop(server);
                // Let the closed connections and the server's exit settle before the next.
                std::thread::sleep(Duration::from_secs(2));
            }
            if !args.storm_only && !plan.shapes.is_empty() {
                let mut server = Server::start(kind, bin, &database_url);
                std::thread::sleep(Duration::from_secs(1));
                outcome.contended = contended::run(
                    &mut server,
                    &plan.shapes,
                    &plan.contended,
                    &mut db,
                    project,
                    &secret,
                );
                drop(server);
                std::thread::sleep(Duration::from_secs(2));
            }
            if storm > 0 {
                eprintln!(
                    "{}: storm of {storm} streams on a fresh instance",
                    kind.name()
                );
                let server = Server::start(kind, bin, &database_url);
                std::thread::sleep(Duration::from_secs(1));
                outcome.storm = storm::run(server.addr, server.pid(), &storm_secrets, storm);
                drop(server);
                std::thread::sleep(Duration::from_secs(2));
            }
            outcomes.push(outcome);
        }
    }
    // The table's columns in one order whichever went first.
    outcomes.sort_by_key(|o| Kind::rank(&o.server));
    let json = serde_json::to_string_pretty(&outcomes).expect("json");
    std::fs::write(args.out.join("results.json"), json).expect("results.json");
    let table = report::write(&args.out, &machine, &outcomes, args.quick);
    println!("{table}");
}

/// An organization, a project and an API token of it, straight in consoled's tables; the token
/// is stored as consoled stores it (SHA-256 of the secret).
fn setup(db: &mut postgres::Client) -> (i64, String) {
    let org: i64 = db
        .query_one(
            "INSERT INTO organizations (name, kind) VALUES ('bench-compare', 'team') RETURNING id",
            &[],
        )
        .expect("organization")
        .get(0);
    let secret = legacy_secret();
    let project: i64 = db
        .query_one(
            "INSERT INTO projects (org_id, name) VALUES ($1, $2) RETURNING id",
            &[&org, &format!("compare-{}", &secret[4..12])],
        )
        .expect("project")
        .get(0);
    db.execute(
        "INSERT INTO api_tokens (project_id, name, token_hash)
         VALUES ($1, 'bench-compare', sha256(convert_to($2, 'UTF8')))",
        &[&project, &secret],
    )
    .expect("token");
    (project, secret)
}

/// `n` more API tokens of `project` (the storm's clients), stored as consoled stores them.
fn tokens(db: &mut postgres::Client, project: i64, n: usize) -> Vec<String> {
    let secrets: Vec<String> = (0..n).map(|_| legacy_secret()).collect();
    let mut tx = db.transaction().expect("transaction");
    let insert = tx
        .prepare(
            "INSERT INTO api_tokens (project_id, name, token_hash)
             VALUES ($1, 'bench-storm', sha256(convert_to($2, 'UTF8')))",
        )
        .expect("prepare");
    for secret in &secrets {
        tx.execute(&insert, &[&project, secret]).expect("token");
    }
    tx.commit().expect("commit");
    secrets
}

/// A secret of consoled's first token form (`csd_` and 43 base64url characters, which hex digits
/// are), which consoled still looks up; a secret of another form it refuses unread.
fn legacy_secret() -> String {
    format!("csd_{}", &random_hex(22)[..43])
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("/dev/urandom");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}
