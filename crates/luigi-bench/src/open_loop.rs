//! The open-loop schedule (`--rate`): transactions start at fixed intended times whatever
//! the answers, and their latency counts from the intended start (YCSB's
//! `measurement.interval=intended`), so a stalled cluster shows as latency instead of
//! hiding behind a closed loop that stops sending (coordinated omission).
//!
//! A rate of `r` transactions per second over `T` threads gives thread `t` the intended
//! starts `(k T + t) / r` seconds after the load starts (`k = 0, 1, ...`): together one every
//! `1 / r` seconds. A thread keeps at most `bound` transactions in flight; a transaction
//! that is due while the bound is full starts when one is answered, late, and is counted
//! [`OpenLoop::delayed`] (its latency still counts from its intended start). No transaction
//! starts once the stop (the measured interval's end) has passed, so past saturation the
//! backlog does not outlive the run; transactions due in the measured interval that had not
//! started by then are counted by [`OpenLoop::unstarted`]. Nothing is dropped silently.
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
    /// The stop has passed, or every transaction intended before it has started.
    Done,
}

/// One thread's open-loop schedule.
#[derive(Clone, Debug)]
pub struct OpenLoop {
    /// Nanoseconds between two intended starts over all threads (`1e9 / rate`, unrounded:
    /// rounding it would drift the rate).
    per_tx_ns: f64,
    threads: u64,
    thread: u64,
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
        Self {
            per_tx_ns: 1e9 / rate_tps,
            threads: u64::from(threads),
            thread: u64::from(thread),
            bound: bound as usize,
            stop,
            next: 0,
            counted_to: 0,
            delayed: 0,
        }
    }

    /// The intended start of transaction `k`: the `(k threads + thread)`-th over all threads.
    pub fn intended(&self, k: u64) -> Duration {
        let ns = ((k * self.threads + self.thread) as f64 * self.per_tx_ns) as u128;
        Duration::new((ns / 1_000_000_000) as u64, (ns % 1_000_000_000) as u32)
    }

    /// The last index whose intended start is at or before `now` (`None`: none yet).
    fn last_due(&self, now: Duration) -> Option<u64> {
        self.first_at_or_after(now + Duration::from_nanos(1)).checked_sub(1)
    }

    /// What to do at `now` with `in_flight` transactions outstanding. A [`Next::Start`]
    /// takes the transaction: call again for the next one.
    pub fn poll(&mut self, now: Duration, in_flight: usize) -> Next {
        let due = self.intended(self.next);
        // Nothing starts at or after the stop, not even a backlog intended before it: past
        // saturation that backlog only grows, and the ones left are counted unstarted.
        if due >= self.stop || now >= self.stop {
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

    /// The first index intended at or after `at` (an estimate, corrected by the exact
    /// [`OpenLoop::intended`]).
    fn first_at_or_after(&self, at: Duration) -> u64 {
        let global = (at.as_nanos() as f64 / self.per_tx_ns).ceil();
        let mut k = ((global - self.thread as f64) / self.threads as f64).ceil().max(0.0) as u64;
        while k > 0 && self.intended(k - 1) >= at {
            k -= 1;
        }
        while self.intended(k) < at {
            k += 1;
        }
        k
    }

    /// Transactions seen due while the bound was full (each counted once; started late, or
    /// never if the stop came first).
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
        // A rate whose interval is no whole number of nanoseconds does not drift: 30 000 tx/s
        // intend exactly 300 000 starts in 10 s, wherever the interval begins.
        let s = OpenLoop::new(30_000.0, 3, 1, 10, Duration::from_secs(100));
        let (from, until) = (Duration::from_millis(2_000), Duration::from_millis(12_000));
        let mine = s.first_at_or_after(until) - s.first_at_or_after(from);
        assert_eq!(mine, 100_000);
        assert!(s.intended(s.first_at_or_after(from)) >= from && s.intended(s.first_at_or_after(from) - 1) < from);
        assert_eq!(s.last_due(from), Some(s.first_at_or_after(from) - 1));
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
        let mut last = Next::Full;
        for _ in 0..200 {
            last = s.poll(Duration::from_millis(999), 0);
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
    fn no_backlog_starts_after_the_stop_and_it_is_counted_unstarted() {
        let mut s = OpenLoop::new(1000.0, 1, 0, 1, 5 * MS);
        assert_eq!(s.poll(Duration::ZERO, 0), Next::Start(Duration::ZERO));
        assert_eq!(s.poll(2 * MS, 1), Next::Full);
        assert_eq!(s.delayed(), 2, "transactions 1 and 2 wait for the bound");
        // The stop passes with transactions 1..=4 intended before it: none starts any more,
        // even with a free slot, and all four are unstarted (two of them also delayed).
        assert_eq!(s.poll(6 * MS, 0), Next::Done);
        assert_eq!(s.poll(Duration::from_secs(9), 0), Next::Done);
        assert_eq!((s.started(), s.delayed()), (1, 2));
        assert_eq!(s.unstarted(Duration::ZERO, 5 * MS), 4);
    }
}
