//! CPU-bound neighbours: processes that only compute, as a compiler, a test run or another
//! service's busy thread would, started beside a server for the length of a rung. They never
//! sleep, so every thread of the server, PostgreSQL and the client competes with them for the
//! CPUs; what a server's latency does then is the question of issue 38's neighbour rung.

use std::process::{Child, Command, Stdio};

/// The flag that makes this binary a neighbour (`main` checks it first).
pub const FLAG: &str = "--neighbour";

/// The neighbours of one rung; they end when this drops.
pub struct Neighbours {
    children: Vec<Child>,
}

impl Neighbours {
    /// Starts `n` neighbour processes (this binary, `--neighbour`).
    pub fn start(n: usize) -> Neighbours {
        let me = std::env::current_exe().expect("this binary's path");
        let children = (0..n)
            .map(|_| {
                Command::new(&me)
                    .arg(FLAG)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("a neighbour process")
            })
            .collect();
        Neighbours { children }
    }

    /// CPU seconds the neighbours have had so far.
    pub fn cpu_seconds(&self) -> f64 {
        self.children
            .iter()
            .map(|c| crate::procfs::cpu_seconds(c.id()))
            .sum()
    }
}

impl Drop for Neighbours {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A neighbour's life: computing until it is killed.
pub fn compute() -> ! {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    loop {
        // A little arithmetic the compiler cannot drop: the CPU is busy, memory is not.
        for _ in 0..1_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        std::hint::black_box(x);
    }
}
