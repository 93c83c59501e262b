//! CPU time from /proc/self/stat: this process's own (the benchmark's client threads) and its
//! reaped children's (a suite point's whole process tree: the benchmark and its servers);
//! and from /proc/PID/stat, a running local cluster's servers', taken at both ends of a
//! run's measured interval ([`CpuInterval`]: CPU per committed transaction).

use serde::{Deserialize, Serialize};

/// Clock ticks per second of /proc's CPU times (`USER_HZ`, 100 on every Linux ABI).
const USER_HZ: f64 = 100.0;

/// The user + system seconds of fields `first` and `first + 1` of /proc/self/stat (proc(5)
/// numbering: the pid is 1 and the command name 2); 0 if /proc cannot be read.
fn stat_pair_s(first: usize) -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    stat_pair_of(&stat, first)
}

/// [`stat_pair_s`] of a /proc/PID/stat line.
fn stat_pair_of(stat: &str, first: usize) -> f64 {
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(first) + tick(first + 1)) / USER_HZ
}

/// This process's own CPU time so far, seconds (`utime` + `stime`): its threads only, not
/// the children (a local cluster's servers) it runs.
pub fn own_cpu_s() -> f64 {
    stat_pair_s(14)
}

/// The CPU time of the children this process has waited for, and theirs, seconds (`cutime`
/// + `cstime`).
pub fn children_cpu_s() -> f64 {
    stat_pair_s(16)
}

/// The CPU time of process `pid` so far, seconds (`utime` + `stime` of /proc/PID/stat: all
/// its threads, not its children); `None` once it is gone.
pub fn pid_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat_pair_of(&stat, 14))
}

/// The CPU time spent at one instant: this process's and the servers' it started.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuSample {
    /// This process's (the client's) CPU time so far, seconds.
    pub client_s: f64,
    /// The servers' CPU time so far, seconds (`None`: one of them could not be read).
    pub servers_s: Option<f64>,
}

impl CpuSample {
    /// Reads this process's CPU time and that of the servers `pids` (none: a cluster this
    /// process did not start, whose servers it cannot see, and `servers_s` is `None`).
    pub fn take(pids: &[u32]) -> Self {
        let servers_s = if pids.is_empty() { None } else { pids.iter().map(|&p| pid_cpu_s(p)).sum() };
        Self { client_s: own_cpu_s(), servers_s }
    }
}

/// The CPU time a run's measured interval took: the differences between a [`CpuSample`] at
/// its start and one at its end (what the `luigi bench` tables show per committed
/// transaction; /proc's times have a resolution of 10 ms).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct CpuInterval {
    /// The client's (this benchmark process's) CPU seconds in the interval.
    pub client_s: f64,
    /// The local cluster's servers' CPU seconds in the interval (`None` for a cluster file's
    /// servers, or if a server could not be read).
    pub servers_s: Option<f64>,
}

impl CpuInterval {
    /// The CPU time between `start` and `end`.
    pub fn between(start: &CpuSample, end: &CpuSample) -> Self {
        let servers_s = start.servers_s.zip(end.servers_s).map(|(a, b)| (b - a).max(0.0));
        Self { client_s: (end.client_s - start.client_s).max(0.0), servers_s }
    }

    /// Client and servers CPU microseconds per transaction of `committed` (`None` if nothing
    /// committed or the servers' time is unknown).
    pub fn us_per_commit(&self, committed: u64) -> Option<f64> {
        let servers_s = self.servers_s?;
        (committed > 0).then(|| (self.client_s + servers_s) * 1e6 / committed as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_and_children_times_come_from_their_fields_even_with_spaces_in_the_name() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime ...
        let stat = "42 (luigi (x) y) S 1 42 42 0 -1 0 10 0 0 0 250 50 700 100 20 0 1 0";
        assert_eq!(stat_pair_of(stat, 14), 3.0);
        assert_eq!(stat_pair_of(stat, 16), 8.0);
        assert_eq!(stat_pair_of("garbage", 14), 0.0);
    }

    #[test]
    fn an_interval_is_the_difference_and_per_commit_needs_the_servers() {
        let start = CpuSample { client_s: 1.0, servers_s: Some(10.0) };
        let end = CpuSample { client_s: 1.5, servers_s: Some(12.0) };
        let i = CpuInterval::between(&start, &end);
        assert_eq!(i, CpuInterval { client_s: 0.5, servers_s: Some(2.0) });
        assert_eq!(i.us_per_commit(1_000), Some(2_500.0));
        assert_eq!(i.us_per_commit(0), None);
        let unseen = CpuInterval::between(&CpuSample { servers_s: None, ..start }, &end);
        assert_eq!(unseen.servers_s, None);
        assert_eq!(unseen.us_per_commit(1_000), None);
    }

    #[test]
    fn a_live_process_is_read_and_a_gone_one_is_not() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let pid = child.id();
        assert!(pid_cpu_s(pid).is_some_and(|s| s >= 0.0));
        assert!(CpuSample::take(&[pid]).servers_s.is_some());
        assert_eq!(CpuSample::take(&[]).servers_s, None);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(pid_cpu_s(pid), None);
        assert_eq!(CpuSample::take(&[pid]).servers_s, None);
    }

    #[test]
    fn this_process_has_spent_some_cpu() {
        let spin: u64 = (0..5_000_000u64).fold(0, |a, b| a.wrapping_add(b * b));
        assert!(spin > 0);
        assert!(own_cpu_s() >= 0.0 && children_cpu_s() >= 0.0);
    }
}
