//! The fan-out rungs again, on a fresh instance, with other work wanting the CPUs (issue 38):
//! the client of one blocking thread per stream (`blocking`), and the light client beside
//! CPU-bound neighbour processes (`neighbours`). The ladder's own rungs, with the light client
//! alone, stay as they were (issue 13's figures).

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::blocking::Blocking;
use crate::client::{Readers, Stamps};
use crate::ladder::{emit, open_until, Rung, SETTLED};
use crate::neighbours::Neighbours;
use crate::pollers::Pollers;
use crate::server::Server;

/// A client shape of the contended rungs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Shape {
    /// One blocking thread per stream.
    Threads,
    /// The light client (two epoll threads), with this many CPU-bound processes beside it.
    Neighbours(usize),
}

impl Shape {
    /// `threads` or `neighbours` (with `neighbours` processes), as `--shapes` names them.
    pub fn parse(name: &str, neighbours: usize) -> Shape {
        match name {
            "threads" => Shape::Threads,
            "neighbours" => Shape::Neighbours(neighbours),
            other => panic!("--shapes takes threads and neighbours, not {other}"),
        }
    }

    /// How the table names the shape, after the rung's size.
    pub fn label(self) -> String {
        match self {
            Shape::Threads => "a client thread per stream".into(),
            Shape::Neighbours(1) => "1 CPU-bound neighbour".into(),
            Shape::Neighbours(n) => format!("{n} CPU-bound neighbours"),
        }
    }
}

/// The readers of one shape, closed when the shape's rungs are done.
enum Client {
    Threads(Blocking),
    Light(Pollers),
}

impl Client {
    fn start(shape: Shape, stamps: &Arc<Stamps>) -> Client {
        match shape {
            Shape::Threads => Client::Threads(Blocking::new(stamps)),
            Shape::Neighbours(_) => Client::Light(Pollers::start(2, stamps)),
        }
    }

    fn readers(&self) -> &dyn Readers {
        match self {
            Client::Threads(b) => b,
            Client::Light(p) => p,
        }
    }

    fn close(self) {
        match self {
            Client::Threads(b) => b.close_all(),
            Client::Light(p) => p.close_all(),
        }
    }
}

/// Runs `rungs` in each of `shapes` on `server`, each shape on streams of its own that grow
/// from rung to rung as in the ladder, and closes them before the next shape.
pub fn run(
    server: &mut Server,
    shapes: &[Shape],
    rungs: &[(usize, u64, f64)],
    db: &mut postgres::Client,
    project: i64,
    secret: &str,
) -> Vec<Rung> {
    let auth = format!("Bearer {secret}");
    let mut out = Vec::new();
    let stamps = Arc::new(Stamps::new(1_000_000));
    let mut seq = 0usize;
    for &shape in shapes {
        let client = Client::start(shape, &stamps);
        for &(n, rate, secs) in rungs {
            let (opened, why) = open_until(server, client.readers(), &auth, n);
            if let Some(why) = why {
                eprintln!(
                    "{}: only {opened} of {n} streams: {why}",
                    server.kind.name()
                );
            }
            let name = format!("{n} × {rate}/s, {}", shape.label());
            eprintln!("{}: {name} for {secs} s", server.kind.name());
            thread::sleep(SETTLED);
            // The neighbours start once the streams are open and settled: they compete with
            // the deliveries, not with the openings.
            let neighbours = match shape {
                Shape::Neighbours(k) => Some(Neighbours::start(k)),
                Shape::Threads => None,
            };
            let before = neighbours.as_ref().map_or(0.0, Neighbours::cpu_seconds);
            let rung = emit(
                server,
                client.readers(),
                &stamps,
                db,
                project,
                &mut seq,
                (rate, secs),
            );
            let neighbours_cpu_s = neighbours
                .as_ref()
                .map_or(0.0, |n| n.cpu_seconds() - before);
            drop(neighbours);
            out.push(Rung {
                name,
                shape: format!("{shape:?}"),
                neighbours_cpu_s,
                ..rung
            });
        }
        client.close();
        // Let the server end the closed streams before the next shape opens its own.
        thread::sleep(Duration::from_secs(2));
    }
    out
}
