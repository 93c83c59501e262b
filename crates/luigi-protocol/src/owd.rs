//! One-way-delay estimation (DESIGN.md rule 1). A sample is the server's clock at arrival
//! minus the client's clock at send: the one-way delay plus the clock offset, which is exactly
//! what a timestamp needs to add so that it lands at the server's clock when it arrives.

use std::collections::VecDeque;

use luigi_txn::types::TimeUs;

/// Samples older than this do not count (µs): a client idle for a while, or cut off by a
/// partition, starts again from fresh samples (or its initial estimate).
pub const SAMPLE_MAX_AGE_US: u64 = 5_000_000;

/// Sliding-window estimator over the last `window` samples; the estimate is a high percentile
/// so that most transactions arrive before their timestamp.
///
/// A sample counts only when its round trip was short enough to trust (see
/// [`OwdEstimator::record`]): after a partition heals, pings that waited seconds in a socket
/// buffer come back with "delays" of seconds, and one such percentile stretched every
/// timestamp by that much for the next 64 samples.
#[derive(Clone, Debug)]
pub struct OwdEstimator {
    /// (when it was taken, the sample), oldest first.
    samples: VecDeque<(TimeUs, i64)>,
    window: usize,
    percentile: u32,
    estimate_us: Option<i64>,
    /// The smallest sample in the window (the earliest a dispatch has been seen to arrive).
    low_us: Option<i64>,
    since_recompute: usize,
}

impl OwdEstimator {
    /// Samples kept.
    pub const WINDOW_DEFAULT: usize = 64;
    /// Percentile used as the estimate.
    pub const PERCENTILE_DEFAULT: u32 = 90;

    /// An estimator with a `window`-sample window using the `percentile`-th percentile.
    pub fn new(window: usize, percentile: u32) -> Self {
        assert!(window > 0 && percentile <= 100);
        Self {
            samples: VecDeque::with_capacity(window),
            window,
            percentile,
            estimate_us: None,
            low_us: None,
            since_recompute: 0,
        }
    }

    /// Adds a sample (µs, may be negative when the server's clock is behind) taken at `now`
    /// from an exchange whose round trip took `rtt_us`. A sample whose round trip exceeds
    /// `max_rtt_us` (what the client waits for an answer before it resends) is dropped: it
    /// waited in a queue or a buffer, not on the wire. Samples older than
    /// [`SAMPLE_MAX_AGE_US`] leave the window. Returns whether the sample counted.
    pub fn record(&mut self, now: TimeUs, delta_us: i64, rtt_us: u64, max_rtt_us: u64) -> bool {
        let mut moved = false;
        while self.samples.front().is_some_and(|(at, _)| now.saturating_sub(*at) > SAMPLE_MAX_AGE_US) {
            self.samples.pop_front();
            moved = true;
        }
        let counted = rtt_us <= max_rtt_us;
        if counted {
            if self.samples.len() == self.window {
                self.samples.pop_front();
            }
            self.samples.push_back((now, delta_us));
            self.since_recompute += 1;
        }
        // Recomputing sorts the window; do it on the first samples, after old ones left,
        // then every 8th.
        if moved || self.estimate_us.is_none() || self.samples.len() < 8 || self.since_recompute >= 8 {
            self.recompute();
        }
        counted
    }

    fn recompute(&mut self) {
        self.since_recompute = 0;
        let mut sorted: Vec<i64> = self.samples.iter().map(|(_, d)| *d).collect();
        if sorted.is_empty() {
            (self.estimate_us, self.low_us) = (None, None);
            return;
        }
        sorted.sort_unstable();
        let rank = (sorted.len() - 1) * self.percentile as usize / 100;
        self.estimate_us = Some(sorted[rank]);
        self.low_us = Some(sorted[0]);
    }

    /// The current estimate at `now`: none before the first sample, or when the newest is
    /// older than [`SAMPLE_MAX_AGE_US`].
    pub fn estimate_us(&self, now: TimeUs) -> Option<i64> {
        let (newest, _) = self.samples.back()?;
        (now.saturating_sub(*newest) <= SAMPLE_MAX_AGE_US).then_some(self.estimate_us).flatten()
    }

    /// The smallest sample of the window at `now` (as fresh as [`OwdEstimator::estimate_us`]):
    /// what a timestamp adds when arriving after it costs nothing (a single-shard
    /// transaction without the fast path, DESIGN.md rule 1), so that it is not held either.
    pub fn low_us(&self, now: TimeUs) -> Option<i64> {
        let (newest, _) = self.samples.back()?;
        (now.saturating_sub(*newest) <= SAMPLE_MAX_AGE_US).then_some(self.low_us).flatten()
    }
}

impl Default for OwdEstimator {
    fn default() -> Self {
        Self::new(Self::WINDOW_DEFAULT, Self::PERCENTILE_DEFAULT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTT_MAX: u64 = 1_000_000;

    #[test]
    fn empty_has_no_estimate() {
        assert_eq!(OwdEstimator::default().estimate_us(0), None);
    }

    #[test]
    fn estimate_is_the_window_percentile() {
        let mut e = OwdEstimator::new(100, 90);
        for d in 1..=100 {
            e.record(5, d * 10, 0, RTT_MAX);
        }
        e.recompute();
        assert_eq!(e.estimate_us(5), Some(900));
        assert_eq!(e.low_us(5), Some(10), "the smallest sample");
        assert_eq!(e.low_us(5 + SAMPLE_MAX_AGE_US + 1), None, "stale like the estimate");
    }

    #[test]
    fn old_samples_leave_the_window() {
        let mut e = OwdEstimator::new(16, 50);
        for _ in 0..16 {
            e.record(0, 1_000_000, 0, RTT_MAX);
        }
        for _ in 0..16 {
            e.record(0, 2_000, 0, RTT_MAX);
        }
        assert_eq!(e.estimate_us(0), Some(2_000));
    }

    #[test]
    fn negative_offsets_are_kept() {
        let mut e = OwdEstimator::new(8, 90);
        for _ in 0..8 {
            e.record(0, -5_000, 0, RTT_MAX);
        }
        assert_eq!(e.estimate_us(0), Some(-5_000));
    }

    /// After a partition heals, pings that waited seconds in a buffer come back: their
    /// apparent delays of 3-7 s must not become the estimate (issue 26: every timestamp was
    /// stretched by 5 s for 16 s after each heal).
    #[test]
    fn samples_that_waited_longer_than_a_resend_timeout_do_not_count() {
        let mut e = OwdEstimator::default();
        let mut now = 0;
        for _ in 0..64 {
            now += 250_000;
            assert!(e.record(now, 2_000, 4_000, RTT_MAX));
        }
        for late in 0..64 {
            now += 10_000;
            let waited = 3_000_000 + late * 60_000;
            assert!(!e.record(now, waited as i64, waited, RTT_MAX));
        }
        assert_eq!(e.estimate_us(now), Some(2_000));
    }

    #[test]
    fn stale_samples_stop_counting() {
        let mut e = OwdEstimator::default();
        for i in 0..10 {
            e.record(i, 900_000, 0, RTT_MAX);
        }
        assert_eq!(e.estimate_us(10), Some(900_000));
        assert_eq!(e.estimate_us(10 + SAMPLE_MAX_AGE_US + 1), None, "the newest sample is too old");
        let later = 20 + SAMPLE_MAX_AGE_US;
        e.record(later, 3_000, 0, RTT_MAX);
        assert_eq!(e.estimate_us(later), Some(3_000), "old samples left at once");
    }

    #[test]
    fn any_sample_or_time_is_taken_without_panicking() {
        let mut e = OwdEstimator::new(4, 90);
        for (now, d) in [(u64::MAX, i64::MIN), (0, i64::MAX), (u64::MAX, i64::MAX), (1, 0)] {
            e.record(now, d, u64::MAX, u64::MAX);
            let _ = e.estimate_us(now);
        }
    }
}
