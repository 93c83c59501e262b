//! Per-second samples of a run's measured interval (warm-up excluded), in the shape of
//! BenchBase's `samples.csv`: for each second, the transactions that completed in it (open
//! loop: whose intended start lies in it, as the run counts them) by outcome, and the
//! latency of the committed ones among them (average, minimum, percentiles, maximum).
//!
//! Memory is bounded: one record per second of the measured interval (shared by the load
//! threads), their number fixed when the load starts; each holds counts and a small
//! histogram (2 significant figures, 32-bit counts: about 10 KB) made at the second's first
//! commit. A second's percentiles are those of its own
//! completions, not of the run so far.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::client::TxnStatus;
use crate::stats::{MAX_LATENCY_US, MIN_LATENCY_US};

/// Significant figures of a second's latency histogram (1 % precision).
const SECOND_SIGFIG: u8 = 2;

/// The header of `samples.csv`: a comment saying what a row means, then BenchBase's columns
/// and the outcome counts.
pub const CSV_HEADER: &str = "# one row per second of the measured interval (warm-up excluded): the transactions \
that completed in that second (open loop: whose intended start lies in it); latencies are of the committed ones \
among them, from submission (open loop: intended start) to answer, in microseconds\n\
Time (seconds),Requests,Throughput (requests/second),Minimum Latency (microseconds),\
25th Percentile Latency (microseconds),Median Latency (microseconds),Average Latency (microseconds),\
75th Percentile Latency (microseconds),90th Percentile Latency (microseconds),\
95th Percentile Latency (microseconds),99th Percentile Latency (microseconds),\
Maximum Latency (microseconds),Rolled Back,Aborted,Rejected,Unknown\n";

/// One second's figures, as a run's JSON holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SecondSample {
    /// Seconds since the measured interval began (0 = its first second).
    pub second: u32,
    /// Committed in it.
    pub committed: u64,
    /// Rolled back on purpose by their procedure.
    pub rolled_back: u64,
    /// Aborted.
    pub aborted: u64,
    /// Refused by a participant.
    pub rejected: u64,
    /// Unknown outcome.
    pub unknown: u64,
    /// Mean latency of the committed ones, µs (0 if none).
    pub avg_us: f64,
    /// Minimum, µs.
    pub min_us: u64,
    /// 25th percentile, µs.
    pub p25_us: u64,
    /// Median, µs.
    pub p50_us: u64,
    /// 75th percentile, µs.
    pub p75_us: u64,
    /// 90th percentile, µs.
    pub p90_us: u64,
    /// 95th percentile, µs.
    pub p95_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// Maximum, µs.
    pub max_us: u64,
}

/// One second being recorded.
#[derive(Clone, Debug, Default)]
struct Second {
    committed: u64,
    rolled_back: u64,
    aborted: u64,
    rejected: u64,
    unknown: u64,
    /// Latencies of the committed ones (made at the first).
    latency: Option<Histogram<u32>>,
}

/// The per-second records of a measured interval.
#[derive(Clone, Debug, Default)]
pub struct SampleLog {
    seconds: Vec<Second>,
}

impl SampleLog {
    /// A log of a measured interval of `duration` (one record per started second).
    pub fn new(duration: Duration) -> Self {
        let n = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
        SampleLog { seconds: vec![Second::default(); n.max(1) as usize] }
    }

    /// Counts a transaction that ended with `status` at `offset` into the measured interval
    /// (a later offset counts in the last second: never lost), `latency` if it committed.
    pub fn record(&mut self, offset: Duration, status: TxnStatus, latency: Duration) {
        let last = self.seconds.len() - 1;
        let s = &mut self.seconds[(offset.as_secs() as usize).min(last)];
        match status {
            TxnStatus::Committed => {
                s.committed += 1;
                let hist = s.latency.get_or_insert_with(|| {
                    Histogram::new_with_bounds(MIN_LATENCY_US, MAX_LATENCY_US, SECOND_SIGFIG)
                        .expect("constant histogram bounds are valid")
                });
                let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
                hist.saturating_record(us.clamp(MIN_LATENCY_US, MAX_LATENCY_US));
            }
            TxnStatus::RolledBack => s.rolled_back += 1,
            TxnStatus::Aborted => s.aborted += 1,
            TxnStatus::Rejected => s.rejected += 1,
            TxnStatus::Unknown => s.unknown += 1,
        }
    }

    /// Adds `other`'s records (another thread's, of the same interval) into `self`.
    pub fn merge(&mut self, other: &SampleLog) {
        if self.seconds.len() < other.seconds.len() {
            self.seconds.resize(other.seconds.len(), Second::default());
        }
        for (mine, theirs) in self.seconds.iter_mut().zip(&other.seconds) {
            mine.committed += theirs.committed;
            mine.rolled_back += theirs.rolled_back;
            mine.aborted += theirs.aborted;
            mine.rejected += theirs.rejected;
            mine.unknown += theirs.unknown;
            if let Some(h) = &theirs.latency {
                match &mut mine.latency {
                    // Same bounds: adding cannot fail.
                    Some(m) => m.add(h).expect("same bounds"),
                    None => mine.latency = Some(h.clone()),
                }
            }
        }
    }

    /// The samples, one per second.
    pub fn samples(&self) -> Vec<SecondSample> {
        self.seconds.iter().enumerate().map(|(i, s)| sample(i as u32, s)).collect()
    }
}

fn sample(second: u32, s: &Second) -> SecondSample {
    let mut out = SecondSample {
        second,
        committed: s.committed,
        rolled_back: s.rolled_back,
        aborted: s.aborted,
        rejected: s.rejected,
        unknown: s.unknown,
        ..SecondSample::default()
    };
    if let Some(h) = s.latency.as_ref().filter(|h| !h.is_empty()) {
        out.avg_us = h.mean();
        out.min_us = h.min();
        out.p25_us = h.value_at_quantile(0.25);
        out.p50_us = h.value_at_quantile(0.50);
        out.p75_us = h.value_at_quantile(0.75);
        out.p90_us = h.value_at_quantile(0.90);
        out.p95_us = h.value_at_quantile(0.95);
        out.p99_us = h.value_at_quantile(0.99);
        out.max_us = h.max();
    }
    out
}

/// `samples` as `samples.csv` text ([`CSV_HEADER`], then a row per second).
pub fn to_csv(samples: &[SecondSample]) -> String {
    let mut s = CSV_HEADER.to_string();
    for x in samples {
        s += &format!(
            "{},{},{:.1},{},{},{},{:.1},{},{},{},{},{},{},{},{},{}\n",
            x.second,
            x.committed,
            x.committed as f64,
            x.min_us,
            x.p25_us,
            x.p50_us,
            x.avg_us,
            x.p75_us,
            x.p90_us,
            x.p95_us,
            x.p99_us,
            x.max_us,
            x.rolled_back,
            x.aborted,
            x.rejected,
            x.unknown
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holds_its_own_completions_and_the_samples_sum_to_the_run() {
        let mut a = SampleLog::new(Duration::from_millis(2500));
        let mut b = SampleLog::new(Duration::from_millis(2500));
        for i in 0..100u64 {
            a.record(Duration::from_millis(i * 10), TxnStatus::Committed, Duration::from_millis(1));
        }
        for i in 0..50u64 {
            b.record(Duration::from_millis(1000 + i * 10), TxnStatus::Committed, Duration::from_millis(10));
        }
        b.record(Duration::from_millis(2400), TxnStatus::Aborted, Duration::from_millis(3));
        b.record(Duration::from_millis(9000), TxnStatus::Unknown, Duration::ZERO);
        a.merge(&b);
        let s = a.samples();
        assert_eq!(s.len(), 3, "one per started second");
        assert_eq!(s.iter().map(|x| x.committed).sum::<u64>(), 150);
        // Within the second's histogram precision (1 %).
        let near = |got: u64, want: u64| got >= want && got <= want + want / 100;
        assert_eq!(s[0].committed, 100);
        assert!(near(s[0].p50_us, 1000) && near(s[0].max_us, 1000), "{:?}", s[0]);
        assert_eq!(s[1].committed, 50);
        assert!(near(s[1].p99_us, 10_000) && near(s[1].min_us, 9_900), "second 1: its own only: {:?}", s[1]);
        assert_eq!((s[2].committed, s[2].aborted, s[2].unknown), (0, 1, 1), "a late answer in the last");
        assert_eq!(s[2].p99_us, 0, "no commit, no latency");
        let csv = to_csv(&s);
        let rows: Vec<&str> = csv.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(rows[0].starts_with("Time (seconds),Requests,Throughput (requests/second)"));
        assert_eq!(rows.len(), 4);
        let fields: Vec<&str> = rows[2].split(',').collect();
        assert_eq!(fields.len(), rows[0].split(',').count(), "a value per column");
        assert_eq!((fields[0], fields[1], fields[2]), ("1", "50", "50.0"));
    }
}
