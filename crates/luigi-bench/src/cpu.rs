//! CPU time from /proc/self/stat: this process's own (the benchmark's client threads) and its
//! reaped children's (a suite point's whole process tree: the benchmark and its servers).

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
    fn this_process_has_spent_some_cpu() {
        let spin: u64 = (0..5_000_000u64).fold(0, |a, b| a.wrapping_add(b * b));
        assert!(spin > 0);
        assert!(own_cpu_s() >= 0.0 && children_cpu_s() >= 0.0);
    }
}
