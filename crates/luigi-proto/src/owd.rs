//! One-way-delay estimation (DESIGN.md rule 1). A sample is the server's clock at arrival
//! minus the client's clock at send: the one-way delay plus the clock offset, which is exactly
//! what a timestamp needs to add so that it lands at the server's clock when it arrives.

use std::collections::VecDeque;

/// Sliding-window estimator over the last `window` samples; the estimate is a high percentile
/// so that most transactions arrive before their timestamp.
#[derive(Clone, Debug)]
pub struct OwdEstimator {
    samples: VecDeque<i64>,
    window: usize,
    percentile: u32,
    estimate_us: Option<i64>,
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
        Self { samples: VecDeque::with_capacity(window), window, percentile, estimate_us: None, since_recompute: 0 }
    }

    /// Adds a sample (µs, may be negative when the server's clock is behind).
    pub fn record(&mut self, delta_us: i64) {
        if self.samples.len() == self.window {
            self.samples.pop_front();
        }
        self.samples.push_back(delta_us);
        self.since_recompute += 1;
        // Recomputing sorts the window; do it on the first samples, then every 8th.
        if self.estimate_us.is_none() || self.samples.len() < 8 || self.since_recompute >= 8 {
            self.recompute();
        }
    }

    fn recompute(&mut self) {
        let mut sorted: Vec<i64> = self.samples.iter().copied().collect();
        sorted.sort_unstable();
        let rank = (sorted.len() - 1) * self.percentile as usize / 100;
        self.estimate_us = Some(sorted[rank]);
        self.since_recompute = 0;
    }

    /// The current estimate, if any sample was seen.
    pub fn estimate_us(&self) -> Option<i64> {
        self.estimate_us
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

    #[test]
    fn empty_has_no_estimate() {
        assert_eq!(OwdEstimator::default().estimate_us(), None);
    }

    #[test]
    fn estimate_is_the_window_percentile() {
        let mut e = OwdEstimator::new(100, 90);
        for d in 1..=100 {
            e.record(d * 10);
        }
        e.recompute();
        assert_eq!(e.estimate_us(), Some(900));
    }

    #[test]
    fn old_samples_leave_the_window() {
        let mut e = OwdEstimator::new(16, 50);
        for _ in 0..16 {
            e.record(1_000_000);
        }
        for _ in 0..16 {
            e.record(2_000);
        }
        assert_eq!(e.estimate_us(), Some(2_000));
    }

    #[test]
    fn negative_offsets_are_kept() {
        let mut e = OwdEstimator::new(8, 90);
        for _ in 0..8 {
            e.record(-5_000);
        }
        assert_eq!(e.estimate_us(), Some(-5_000));
    }
}
