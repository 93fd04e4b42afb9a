//! How many connections and streams this process can hold without failing: derived at start from
//! the open-file limit, `vm.max_map_count`, `kernel.threads-max`, `kernel.pid_max` and memory.
//! Past these limits new connections and streams are refused cleanly (503 + `Retry-After`);
//! reaching the kernel's limits instead would fail in `accept`, leave connections waiting for
//! threads that cannot be made, or abort the process (a thread of Rust's own whose signal stack
//! cannot be mapped aborts it).

use std::fs;

use crate::config::Config;

/// Memory mappings one connection thread costs: its stack and its guard page (measured: 1.91 per
/// thread at 5,000 streams, `/proc/<pid>/maps`). It has no signal stack (`os::thread::spawn`),
/// the two more mappings each thread std starts has; the server's few std threads are within
/// `RESERVED_MAPS`. At the limit `pthread_create` fails and the connection waits (nothing aborts).
const MAPS_PER_THREAD: u64 = 2;
/// Mappings kept for everything else (libraries, heap arenas, the database driver's runtime).
const RESERVED_MAPS: u64 = 2_000;
/// Descriptors kept for everything but client connections (database, listener, epoll, logs),
/// and room to accept and refuse a connection at the limit.
pub const RESERVED_FDS: usize = 256;
/// Connection threads kept waiting for the next connection (`server::spares`), beside the
/// server's own threads. Enough to take a burst while more are made; each costs a stack mapping
/// and a few KiB of touched memory.
pub const SPARE_THREADS: usize = 64;
/// Connection threads that may wait at most: one whose connection ended waits for the next while
/// fewer wait, so that threads are reused (not ended and made again) while connections come and
/// go. Counted in the server's own threads.
pub const MAX_IDLE_THREADS: usize = 2 * SPARE_THREADS;
/// Threads (system-wide) kept for the rest of the machine.
const RESERVED_TASKS: u64 = 1_000;
/// Memory one connection thread may come to hold (touched stack, buffers), for the memory bound.
const MEMORY_PER_THREAD: u64 = 64 * 1024;

/// What the machine allows, as read at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    pub open_files: u64,
    pub max_map_count: u64,
    pub maps_in_use: u64,
    pub threads_max: u64,
    pub pid_max: u64,
    pub tasks_in_use: u64,
    pub memory_available: u64,
}

/// The limits this process enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Client connections (each holds a thread; two descriptors until it streams, then one).
    pub max_connections: usize,
    /// Descriptors client connections may hold together.
    pub fd_budget: usize,
    /// Open event streams; the rest of the connections stay free for ordinary requests.
    pub max_streams: usize,
    /// Connection threads beyond the server's own threads.
    pub max_threads: usize,
}

impl Capacity {
    /// Derived limits, capped by `CONSOLED_MAX_CONNECTIONS` / `CONSOLED_MAX_STREAMS_PER_INSTANCE` when set.
    pub fn derive(config: &Config) -> Capacity {
        let machine = Machine::read();
        let own_threads = (config.workers + config.hash_threads + 16 + MAX_IDLE_THREADS) as u64;
        let cap = Capacity::from_machine(
            &machine,
            own_threads,
            config.max_connections,
            config.max_streams,
        );
        log::info!(
            "capacity: {} connections, {} streams ({machine:?})",
            cap.max_connections,
            cap.max_streams
        );
        cap
    }

    pub fn from_machine(
        m: &Machine,
        own_threads: u64,
        max_connections: Option<usize>,
        max_streams: Option<usize>,
    ) -> Capacity {
        let by_maps = m
            .max_map_count
            .saturating_sub(m.maps_in_use + RESERVED_MAPS)
            / MAPS_PER_THREAD;
        let by_tasks = m
            .threads_max
            .min(m.pid_max)
            .saturating_sub(m.tasks_in_use + RESERVED_TASKS);
        let by_memory = m.memory_available / MEMORY_PER_THREAD;
        let threads = by_maps
            .min(by_tasks)
            .min(by_memory)
            .saturating_sub(own_threads)
            .max(1);
        let fd_budget = m.open_files.saturating_sub(RESERVED_FDS as u64).max(2);
        // A streaming connection holds one descriptor: the descriptors bound the streams, the
        // threads bound every connection.
        let mut connections = threads.min(fd_budget) as usize;
        if let Some(n) = max_connections {
            connections = connections.min(n.max(1));
        }
        let headroom = (connections / 20).clamp(1, 256);
        let mut streams = connections.saturating_sub(headroom).max(1);
        if let Some(n) = max_streams {
            streams = streams.min(n);
        }
        Capacity {
            max_connections: connections,
            fd_budget: fd_budget as usize,
            max_streams: streams,
            max_threads: threads as usize,
        }
    }
}

impl Machine {
    /// Reads the limits, raising the soft open-file limit to the hard one first (systemd's
    /// default soft limit of 1024 would cap us near 1,000 connections).
    pub fn read() -> Machine {
        let open_files = match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(n) => n,
            Err(e) => {
                log::warn!("cannot read or raise the open-file limit: {e}");
                1024
            }
        };
        let number = |path: &str, default: u64| {
            fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(default)
        };
        Machine {
            open_files,
            max_map_count: number("/proc/sys/vm/max_map_count", 65_530),
            maps_in_use: fs::read_to_string("/proc/self/maps")
                .map_or(1_000, |s| s.lines().count() as u64),
            threads_max: number("/proc/sys/kernel/threads-max", 32_768),
            pid_max: number("/proc/sys/kernel/pid_max", 32_768),
            // The fourth field of loadavg: "running/total" scheduling entities.
            tasks_in_use: fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|s| s.split_whitespace().nth(3)?.split('/').nth(1)?.parse().ok())
                .unwrap_or(1_000),
            memory_available: fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|s| {
                    let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
                    line.split_whitespace().nth(1)?.parse::<u64>().ok()
                })
                .map_or(1 << 30, |kib| kib * 1024),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The machine of the issue: 20,000 open files, the default map count, 2 cores.
    const HERE: Machine = Machine {
        open_files: 20_000,
        max_map_count: 65_530,
        maps_in_use: 400,
        threads_max: 192_729,
        pid_max: 32_768,
        tasks_in_use: 300,
        memory_available: 23 << 30,
    };

    #[test]
    fn the_map_count_bounds_threads_below_the_abort() {
        let cap = Capacity::from_machine(&HERE, 60, None, None);
        // 2 maps per connection thread must stay under 65,530 with what is mapped already.
        assert!(cap.max_threads as u64 * MAPS_PER_THREAD + 400 + 60 * 4 < 65_530);
        assert!(cap.max_streams >= 12_000, "{cap:?}");
        assert!(cap.max_connections <= cap.max_threads);
    }

    #[test]
    fn a_small_open_file_limit_bounds_connections_and_settings_cap_further() {
        let small = Machine {
            open_files: 1024,
            ..HERE
        };
        let cap = Capacity::from_machine(&small, 60, None, None);
        assert_eq!(cap.max_connections, 1024 - 256);
        assert!(cap.max_streams < cap.max_connections);
        let set = Capacity::from_machine(&HERE, 60, Some(300), Some(100));
        assert_eq!((set.max_connections, set.max_streams), (300, 100));
    }

    #[test]
    fn the_pid_limit_counts_what_the_machine_runs_already() {
        let busy = Machine {
            tasks_in_use: 30_000,
            ..HERE
        };
        let cap = Capacity::from_machine(&busy, 60, None, None);
        assert!(cap.max_threads <= 32_768 - 30_000, "{cap:?}");
    }
}
