//! The open-loop schedule (`--rate`): transactions start at fixed intended times whatever
//! the answers, and their latency counts from the intended start (YCSB's
//! `measurement.interval=intended`), so a stalled cluster shows as latency instead of
//! hiding behind a closed loop that stops sending (coordinated omission).
//!
//! A rate of `r` transactions per second over `T` threads gives thread `t` the intended
//! starts `(k T + t) / r` seconds after the load starts (`k = 0, 1, ...`): together one every
//! `1 / r` seconds. A thread keeps at most `bound` transactions in flight; a transaction
//! that is due while the bound is full starts when one is answered, late, and is counted
//! [`OpenLoop::delayed`] (its latency still counts from its intended start). Transactions
//! due in the measured interval that had not started by its end are counted by
//! [`OpenLoop::unstarted`]. Nothing is dropped silently.
//!
//! Pure: times are offsets from the load's start, given by the caller (tests inject them).

use std::time::Duration;

/// What a thread does next under its schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Start the next transaction now; its intended start is this offset.
    Start(Duration),
    /// Nothing is due before this offset.
    WaitUntil(Duration),
    /// A transaction is due but the bound is full: wait for an answer.
    Full,
    /// Every transaction due before the stop has started.
    Done,
}

/// One thread's open-loop schedule.
#[derive(Clone, Debug)]
pub struct OpenLoop {
    phase_ns: u128,
    interval_ns: u128,
    bound: usize,
    stop: Duration,
    /// Index of the next transaction to start.
    next: u64,
    /// Transactions below this index were already counted delayed.
    counted_to: u64,
    delayed: u64,
}

impl OpenLoop {
    /// Thread `thread`'s schedule of `threads` sharing `rate_tps` (finite, positive), at most
    /// `bound` in flight, no start intended at or after `stop`.
    pub fn new(rate_tps: f64, threads: u32, thread: u32, bound: u32, stop: Duration) -> Self {
        assert!(rate_tps.is_finite() && rate_tps > 0.0 && thread < threads && bound > 0, "checked options");
        let per_tx_ns = 1e9 / rate_tps;
        Self {
            phase_ns: (per_tx_ns * f64::from(thread)) as u128,
            interval_ns: ((per_tx_ns * f64::from(threads)) as u128).max(1),
            bound: bound as usize,
            stop,
            next: 0,
            counted_to: 0,
            delayed: 0,
        }
    }

    /// The intended start of transaction `k`.
    pub fn intended(&self, k: u64) -> Duration {
        nanos(self.phase_ns + u128::from(k) * self.interval_ns)
    }

    /// The last index whose intended start is at or before `now` (`None`: none yet).
    fn last_due(&self, now: Duration) -> Option<u64> {
        let now_ns = now.as_nanos();
        (now_ns >= self.phase_ns).then(|| ((now_ns - self.phase_ns) / self.interval_ns) as u64)
    }

    /// What to do at `now` with `in_flight` transactions outstanding. A [`Next::Start`]
    /// takes the transaction: call again for the next one.
    pub fn poll(&mut self, now: Duration, in_flight: usize) -> Next {
        let due = self.intended(self.next);
        if due >= self.stop {
            return Next::Done;
        }
        if due > now {
            return Next::WaitUntil(due);
        }
        if in_flight >= self.bound {
            let last = self.last_due(now).expect("one is due");
            let first = self.counted_to.max(self.next);
            let stop_index = self.first_at_or_after(self.stop);
            let last = last.min(stop_index.saturating_sub(1));
            if last >= first {
                self.delayed += last - first + 1;
                self.counted_to = last + 1;
            }
            return Next::Full;
        }
        self.next += 1;
        Next::Start(due)
    }

    /// The first index intended at or after `at`.
    fn first_at_or_after(&self, at: Duration) -> u64 {
        let at_ns = at.as_nanos();
        if at_ns <= self.phase_ns {
            return 0;
        }
        (at_ns - self.phase_ns).div_ceil(self.interval_ns) as u64
    }

    /// Transactions that were due while the bound was full (each counted once).
    pub fn delayed(&self) -> u64 {
        self.delayed
    }

    /// Transactions intended in `from..until` that have not started.
    pub fn unstarted(&self, from: Duration, until: Duration) -> u64 {
        let first = self.first_at_or_after(from).max(self.next);
        self.first_at_or_after(until).saturating_sub(first)
    }

    /// Transactions started so far.
    pub fn started(&self) -> u64 {
        self.next
    }
}

/// One line with an open-loop run's figures (`None` for a closed-loop run): its target rate,
/// its bound, and how many starts the bound delayed or left undone.
pub fn summary_line(result: &crate::report::BenchResult) -> Option<String> {
    let rate = result.params.get("rate_tps")?;
    let figure = |name: &str| result.params.get(name).cloned().unwrap_or_default();
    Some(format!(
        "open loop at {rate} tx/s (bound {} per thread): {} started late (bound full), {} due in the measured \
         interval never started",
        figure("open_loop_bound"),
        figure("open_loop_delayed"),
        figure("open_loop_unstarted")
    ))
}

fn nanos(ns: u128) -> Duration {
    Duration::new((ns / 1_000_000_000) as u64, (ns % 1_000_000_000) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn threads_share_the_rate_on_interleaved_intended_starts() {
        // 1000 tx/s over 4 threads: thread t at t ms, t + 4 ms, t + 8 ms, ...
        let stop = Duration::from_secs(1);
        let schedules: Vec<OpenLoop> = (0..4).map(|t| OpenLoop::new(1000.0, 4, t, 10, stop)).collect();
        let mut all: Vec<Duration> = schedules.iter().flat_map(|s| (0..250).map(|k| s.intended(k))).collect();
        all.sort();
        let expected: Vec<Duration> = (0..1000).map(|i| i * MS).collect();
        assert_eq!(all, expected);
    }

    #[test]
    fn starts_follow_the_clock_not_the_answers() {
        let mut s = OpenLoop::new(100.0, 1, 0, 1_000, Duration::from_secs(1)); // every 10 ms
        assert_eq!(s.poll(Duration::ZERO, 0), Next::Start(Duration::ZERO));
        assert_eq!(s.poll(Duration::ZERO, 1), Next::WaitUntil(10 * MS));
        // The clock jumps 35 ms with nothing answered: three more are due, each from its own
        // intended start, started at once.
        let now = 35 * MS;
        let started: Vec<Next> = (0..3).map(|i| s.poll(now, 1 + i)).collect();
        assert_eq!(started, vec![Next::Start(10 * MS), Next::Start(20 * MS), Next::Start(30 * MS)]);
        assert_eq!(s.poll(now, 4), Next::WaitUntil(40 * MS));
        assert_eq!(s.delayed(), 0);
        // Nothing intended at or after the stop starts.
        assert_eq!(s.poll(Duration::from_secs(5), 0), Next::Start(40 * MS));
        let mut last = Next::Full;
        for _ in 0..200 {
            last = s.poll(Duration::from_secs(5), 0);
            if last == Next::Done {
                break;
            }
        }
        assert_eq!(last, Next::Done);
        assert_eq!(s.started(), 100);
    }

    #[test]
    fn a_full_bound_delays_starts_and_counts_each_once() {
        let mut s = OpenLoop::new(1000.0, 1, 0, 2, Duration::from_secs(1)); // every 1 ms
        assert_eq!(s.poll(Duration::ZERO, 0), Next::Start(Duration::ZERO));
        assert_eq!(s.poll(MS, 1), Next::Start(MS));
        // Bound reached: at 5 ms, transactions 2..=5 are due and wait.
        assert_eq!(s.poll(5 * MS, 2), Next::Full);
        assert_eq!(s.delayed(), 4);
        assert_eq!(s.poll(5 * MS, 2), Next::Full);
        assert_eq!(s.delayed(), 4, "counted once");
        assert_eq!(s.poll(7 * MS, 2), Next::Full);
        assert_eq!(s.delayed(), 6);
        // An answer frees a slot: the oldest due one starts, late, with its intended start.
        assert_eq!(s.poll(7 * MS, 1), Next::Start(2 * MS));
        // The measured interval 0..10 ms ends at 10 ms with transactions 3..=9 not started.
        assert_eq!(s.unstarted(Duration::ZERO, 10 * MS), 7);
        assert_eq!(s.unstarted(5 * MS, 10 * MS), 5);
    }

    #[test]
    fn delays_past_the_stop_are_not_counted() {
        let mut s = OpenLoop::new(1000.0, 1, 0, 1, 3 * MS);
        assert_eq!(s.poll(Duration::ZERO, 0), Next::Start(Duration::ZERO));
        assert_eq!(s.poll(Duration::from_secs(1), 1), Next::Full);
        assert_eq!(s.delayed(), 2, "only transactions 1 and 2 are intended before the stop");
        assert_eq!(s.unstarted(Duration::ZERO, 3 * MS), 2);
    }
}
