//! The `process_*` families every Prometheus client library exports, read from `/proc` at
//! scrape time (Linux only; elsewhere they are left out): resident memory, descriptors, CPU
//! time and start time.

use std::fmt::Write;

/// `/proc` counts CPU time in clock ticks of `USER_HZ`, which Linux fixes at 100 for user space
/// on every architecture it supports.
const TICKS_PER_SECOND: f64 = 100.0;

/// What `/proc` says about this process.
#[derive(Debug, Default, PartialEq)]
pub struct Process {
    pub resident_bytes: u64,
    pub open_fds: u64,
    pub max_fds: u64,
    pub cpu_seconds: f64,
    pub start_time_seconds: f64,
}

impl Process {
    /// Reads this process's figures; `None` where `/proc` is missing.
    pub fn read() -> Option<Process> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        parse(&stat, &status, &limits, &boot, open_fds)
    }

    /// The families in the text format.
    pub fn render(&self, out: &mut String) {
        let families: [(&str, &str, &str, String); 5] = [
            (
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory size in bytes.",
                self.resident_bytes.to_string(),
            ),
            (
                "process_open_fds",
                "gauge",
                "Number of open file descriptors.",
                self.open_fds.to_string(),
            ),
            (
                "process_max_fds",
                "gauge",
                "Maximum number of open file descriptors (the soft limit).",
                self.max_fds.to_string(),
            ),
            (
                "process_cpu_seconds_total",
                "counter",
                "Total user and system CPU time spent in seconds.",
                self.cpu_seconds.to_string(),
            ),
            (
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since the Unix epoch in seconds.",
                self.start_time_seconds.to_string(),
            ),
        ];
        for (name, kind, help, value) in families {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
    }
}

fn parse(stat: &str, status: &str, limits: &str, boot: &str, open_fds: u64) -> Option<Process> {
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    // Field N of proc_pid_stat(5) is fields[N - 3].
    let ticks = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse::<f64>().ok() };
    let cpu = (ticks(14)? + ticks(15)?) / TICKS_PER_SECOND;
    let started_after_boot = ticks(22)? / TICKS_PER_SECOND;
    let boot_time: f64 = boot
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let max_fds = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()?;
    Some(Process {
        resident_bytes: rss_kib * 1024,
        open_fds,
        // "unlimited" cannot be for descriptors on Linux, but say so rather than fail.
        max_fds: max_fds.parse().unwrap_or(u64::MAX),
        cpu_seconds: cpu,
        start_time_seconds: boot_time + started_after_boot,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_proc_says() {
        let stat = "17396 (a (b) c) R 17394 17394 22086 0 -1 4194304 99 0 0 0 250 150 0 0 20 0 1 0 62834 3133440 360 18446744073709551615";
        let status = "Name:\tx\nVmPeak:\t  9000 kB\nVmRSS:\t    1440 kB\nThreads:\t1\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            20000                40000                files\n";
        let boot = "cpu  1 2 3\nbtime 1795600247\nprocesses 5\n";
        let p = parse(stat, status, limits, boot, 7).unwrap();
        assert_eq!(
            p,
            Process {
                resident_bytes: 1440 * 1024,
                open_fds: 7,
                max_fds: 20000,
                cpu_seconds: 4.0,
                start_time_seconds: 1795600247.0 + 628.34,
            }
        );
    }

    #[test]
    fn this_process_is_readable() {
        let p = Process::read().expect("/proc");
        assert!(p.resident_bytes > 0 && p.open_fds > 0 && p.max_fds >= p.open_fds);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(p.start_time_seconds <= now + 1.0 && p.start_time_seconds > now - 86400.0 * 365.0);
    }
}
