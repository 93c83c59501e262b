//! Latency and outcome statistics collected by the benchmark driver.
//!
//! [`LatencyRecorder`] wraps an HDR histogram of transaction latencies in
//! microseconds; [`LatencySummary`] is the serializable digest of it that goes
//! into reports. [`Counters`] tallies transaction outcomes.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Lowest latency (in µs) the recorder distinguishes; smaller values are clamped up to it.
pub const MIN_LATENCY_US: u64 = 1;
/// Highest latency (in µs, = 120 s) the recorder tracks; larger values are clamped down to it.
pub const MAX_LATENCY_US: u64 = 120_000_000;
/// Number of significant decimal digits the recorder preserves.
pub const SIGNIFICANT_FIGURES: u8 = 3;

/// A latency histogram in microseconds covering 1 µs ..= 120 s with 3 significant figures.
///
/// Recording never panics: out-of-range values are clamped into the tracked range.
/// Recorders from different threads can be combined with [`LatencyRecorder::merge`].
#[derive(Clone, Debug)]
pub struct LatencyRecorder {
    hist: Histogram<u64>,
}

impl LatencyRecorder {
    /// Creates an empty recorder.
    pub fn new() -> Self {
        let hist = Histogram::new_with_bounds(MIN_LATENCY_US, MAX_LATENCY_US, SIGNIFICANT_FIGURES)
            .expect("constant histogram bounds are valid");
        Self { hist }
    }

    /// Records one latency sample given in microseconds, clamped to 1 µs ..= 120 s.
    pub fn record_us(&mut self, us: u64) {
        self.hist.saturating_record(us.clamp(MIN_LATENCY_US, MAX_LATENCY_US));
    }

    /// Records one latency sample given as a [`Duration`] (truncated to whole µs, then clamped).
    pub fn record_duration(&mut self, d: Duration) {
        self.record_us(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    /// Adds all samples of `other` into `self`.
    pub fn merge(&mut self, other: &LatencyRecorder) {
        if self.hist.add(&other.hist).is_err() {
            // Unreachable with identical bounds, but fall back to a clamped
            // per-bucket copy rather than panicking or losing samples.
            for v in other.hist.iter_recorded() {
                self.hist.saturating_record_n(
                    v.value_iterated_to().clamp(MIN_LATENCY_US, MAX_LATENCY_US),
                    v.count_at_value(),
                );
            }
        }
    }

    /// Number of samples recorded so far.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Returns `true` if no sample has been recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Computes mean, percentiles and maximum; all zero if the recorder is empty.
    pub fn summary(&self) -> LatencySummary {
        if self.hist.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            avg: self.hist.mean(),
            p50: self.hist.value_at_quantile(0.50),
            p90: self.hist.value_at_quantile(0.90),
            p95: self.hist.value_at_quantile(0.95),
            p99: self.hist.value_at_quantile(0.99),
            stddev: self.hist.stdev(),
            p999: self.hist.value_at_quantile(0.999),
            max: self.hist.max(),
        }
    }

    /// The percentile table of the samples (what an `.hgrm` file holds).
    pub fn percentiles(&self) -> crate::hgrm::PercentileExport {
        crate::hgrm::PercentileExport::of(&self.hist)
    }

    /// Discards all recorded samples (e.g. at the end of warm-up).
    pub fn reset(&mut self) {
        self.hist.reset();
    }
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

/// Digest of a latency distribution; every field is in microseconds.
///
/// Percentiles and `max` are reported at histogram precision (3 significant
/// figures, rounded up to the top of the containing bucket).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencySummary {
    /// Mean latency (histogram mean).
    pub avg: f64,
    /// Median latency.
    pub p50: u64,
    /// 90th percentile latency.
    pub p90: u64,
    /// 95th percentile latency.
    #[serde(default)]
    pub p95: u64,
    /// 99th percentile latency.
    pub p99: u64,
    /// Standard deviation (histogram).
    #[serde(default)]
    pub stddev: f64,
    /// 99.9th percentile latency.
    pub p999: u64,
    /// Maximum recorded latency.
    pub max: u64,
}

/// Transaction outcome counters.
#[derive(Serialize, Deserialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    /// Transactions that committed.
    pub committed: u64,
    /// Transactions their procedure rolled back on purpose (a user abort on every
    /// participant that did not commit, e.g. TPC-C's 1 % of NewOrders).
    #[serde(default)]
    pub rolled_back: u64,
    /// Transactions that finally aborted.
    pub aborted: u64,
    /// Resends of the same transaction after a retry timeout (the client core's attempts
    /// past the first).
    #[serde(default)]
    pub timeout_resends: u64,
    /// Resends of the same transaction after a "not the leader" or "busy" answer or a lost
    /// link (the client core's resend rule, for every protocol).
    #[serde(default)]
    pub resends: u64,
    /// Submissions again as a new transaction after a protocol abort (the baselines'
    /// [`crate::client::RetryingClient`]; never with Luigi).
    #[serde(default)]
    pub resubmissions: u64,
    /// Transactions refused by a participant (executed nowhere).
    #[serde(alias = "errors")]
    pub rejected: u64,
    /// Transactions whose outcome was unknown when answered (no complete answer in time: they
    /// may have executed).
    #[serde(default)]
    pub unknown: u64,
    /// Committed transactions that spanned several shards.
    #[serde(default)]
    pub cross_shard: u64,
    /// Of those, the ones whose proposals differed (a second agreement round).
    #[serde(default)]
    pub second_round: u64,
    /// Committed ones whose every step committed on Luigi's fast path.
    #[serde(default)]
    pub fast_path: u64,
    /// Committed ones whose every step asked for the fast path.
    #[serde(default)]
    pub fast_path_asked: u64,
    /// Committed ones whose every step was read at a snapshot (the read-only path, DESIGN.md
    /// rule 23).
    #[serde(default)]
    pub read_only: u64,
    /// Protocol aborts (a baseline's lock conflict or failed validation), each retried as a
    /// new transaction but the last of a transaction out of retries (counted in `aborted`).
    #[serde(default)]
    pub protocol_aborts: u64,
}

impl Counters {
    /// Adds `other`'s counts into `self` (saturating).
    pub fn merge(&mut self, other: &Counters) {
        self.committed = self.committed.saturating_add(other.committed);
        self.rolled_back = self.rolled_back.saturating_add(other.rolled_back);
        self.aborted = self.aborted.saturating_add(other.aborted);
        self.timeout_resends = self.timeout_resends.saturating_add(other.timeout_resends);
        self.resends = self.resends.saturating_add(other.resends);
        self.resubmissions = self.resubmissions.saturating_add(other.resubmissions);
        self.rejected = self.rejected.saturating_add(other.rejected);
        self.unknown = self.unknown.saturating_add(other.unknown);
        self.cross_shard = self.cross_shard.saturating_add(other.cross_shard);
        self.second_round = self.second_round.saturating_add(other.second_round);
        self.fast_path = self.fast_path.saturating_add(other.fast_path);
        self.fast_path_asked = self.fast_path_asked.saturating_add(other.fast_path_asked);
        self.read_only = self.read_only.saturating_add(other.read_only);
        self.protocol_aborts = self.protocol_aborts.saturating_add(other.protocol_aborts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uniform(lo: u64, hi: u64) -> LatencyRecorder {
        let mut r = LatencyRecorder::new();
        for v in lo..=hi {
            r.record_us(v);
        }
        r
    }

    #[test]
    fn empty_summary_is_zero() {
        let r = LatencyRecorder::new();
        assert_eq!(r.count(), 0);
        assert!(r.is_empty());
        assert_eq!(r.summary(), LatencySummary::default());
    }

    #[test]
    fn uniform_1_to_1000() {
        let r = uniform(1, 1000);
        assert_eq!(r.count(), 1000);
        let s = r.summary();
        // Values below 2048 are exact at 3 significant figures.
        assert_eq!(s.p50, 500);
        assert_eq!(s.p90, 900);
        assert_eq!(s.p99, 990);
        assert_eq!(s.p999, 999);
        assert_eq!(s.max, 1000);
        assert!((s.avg - 500.5).abs() < 1e-9, "avg {}", s.avg);
    }

    #[test]
    fn uniform_large_values_within_precision() {
        // 1 ms .. 1 s in 1 ms steps.
        let mut r = LatencyRecorder::new();
        for ms in 1..=1000u64 {
            r.record_us(ms * 1000);
        }
        let s = r.summary();
        let close = |got: u64, want: u64| {
            let err = (got as f64 - want as f64).abs() / want as f64;
            assert!(err <= 1e-3, "got {got}, want {want}");
        };
        close(s.p50, 500_000);
        close(s.p90, 900_000);
        close(s.p99, 990_000);
        close(s.max, 1_000_000);
        assert!((s.avg - 500_500.0).abs() / 500_500.0 < 1e-3);
    }

    #[test]
    fn merge_of_halves_equals_whole() {
        let whole = uniform(1, 1000);
        let mut a = uniform(1, 500);
        let b = uniform(501, 1000);
        a.merge(&b);
        assert_eq!(a.count(), whole.count());
        assert_eq!(a.summary(), whole.summary());
    }

    #[test]
    fn out_of_range_values_are_clamped() {
        let mut r = LatencyRecorder::new();
        r.record_us(0);
        r.record_us(u64::MAX);
        r.record_duration(Duration::from_secs(10_000));
        r.record_duration(Duration::ZERO);
        assert_eq!(r.count(), 4);
        let s = r.summary();
        assert_eq!(s.p50, 1);
        assert!(s.max >= MAX_LATENCY_US);
        assert!(s.max <= MAX_LATENCY_US + MAX_LATENCY_US / 1000);
    }

    #[test]
    fn reset_clears() {
        let mut r = uniform(1, 100);
        r.reset();
        assert_eq!(r.count(), 0);
        assert_eq!(r.summary(), LatencySummary::default());
        r.record_us(42);
        assert_eq!(r.summary().max, 42);
    }

    #[test]
    fn counters_merge() {
        let mut a = Counters {
            committed: 10,
            rolled_back: 7,
            aborted: 2,
            timeout_resends: 3,
            resends: 4,
            resubmissions: 5,
            rejected: 1,
            unknown: 2,
            cross_shard: 4,
            second_round: 1,
            fast_path: 6,
            fast_path_asked: 8,
            read_only: 2,
            protocol_aborts: 9,
        };
        let b = Counters {
            committed: 5,
            rolled_back: 1,
            aborted: 1,
            timeout_resends: 0,
            resends: 1,
            resubmissions: 2,
            rejected: u64::MAX,
            unknown: 1,
            cross_shard: 2,
            second_round: 2,
            fast_path: 3,
            fast_path_asked: 4,
            read_only: u64::MAX - 1,
            protocol_aborts: 1,
        };
        a.merge(&b);
        assert_eq!(
            a,
            Counters {
                committed: 15,
                rolled_back: 8,
                aborted: 3,
                timeout_resends: 3,
                resends: 5,
                resubmissions: 7,
                rejected: u64::MAX,
                unknown: 3,
                cross_shard: 6,
                second_round: 3,
                fast_path: 9,
                fast_path_asked: 12,
                read_only: u64::MAX,
                protocol_aborts: 10,
            }
        );
    }

    #[test]
    fn summary_serde_round_trip() {
        let s = uniform(1, 1000).summary();
        let json = serde_json::to_string(&s).unwrap();
        let back: LatencySummary = serde_json::from_str(&json).unwrap();
        assert_eq!(s, back);
    }
}
