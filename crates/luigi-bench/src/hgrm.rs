//! HdrHistogram's classic percentile export (`.hgrm`, the text of Java's
//! `outputPercentileDistribution`, which HdrHistogram's plotter and most tools read): a
//! `Value Percentile TotalCount 1/(1-Percentile)` table, five steps per halving of the
//! distance to 100 %, then the mean, deviation, maximum and count. The `hdrhistogram` crate
//! serializes histograms (V2) but has no such text, so it is written here.
//!
//! A run's bench process keeps the table ([`PercentileExport`]) in its JSON result (a
//! histogram itself does not cross the process boundary); the suite writes it out as
//! `points/<id>.hgrm` with values in milliseconds.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Steps per halving of the distance to the 100th percentile (Java's default, 5).
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;
/// Decimals of the values printed (the recorder's 3 significant figures).
const VALUE_DECIMALS: usize = 3;

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PercentileRow {
    /// The value at this percentile, microseconds (the top of its histogram bucket).
    pub value_us: u64,
    /// The percentile as a fraction (0.0 ..= 1.0).
    pub quantile: f64,
    /// Samples at or below this value.
    pub total_count: u64,
}

/// A histogram's percentile table and footer: what a `.hgrm` file holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PercentileExport {
    /// The rows, by growing percentile (empty for an empty histogram).
    pub rows: Vec<PercentileRow>,
    /// Mean, microseconds.
    pub mean_us: f64,
    /// Standard deviation, microseconds.
    pub stddev_us: f64,
    /// Maximum, microseconds.
    pub max_us: u64,
    /// Samples.
    pub total_count: u64,
    /// The histogram's bucket count (the footer's `Buckets`).
    pub buckets: u32,
    /// Its sub-buckets per bucket (the footer's `SubBuckets`).
    pub sub_buckets: u32,
}

impl PercentileExport {
    /// The table of `hist` (values in microseconds).
    pub fn of(hist: &Histogram<u64>) -> Self {
        let mut rows = Vec::new();
        if !hist.is_empty() {
            // Java's schedule: steps of 1 / (ticks * 2^(halvings + 1)) until every sample is
            // covered, then the 100th percentile. (The crate's quantile iterator yields at
            // most one row per bucket and stops early on sparse histograms.)
            let mut quantile = 0.0f64;
            loop {
                let value_us = hist.highest_equivalent(hist.value_at_quantile(quantile));
                let total_count = hist.count_between(0, value_us);
                if total_count >= hist.len() || quantile >= 1.0 {
                    break;
                }
                rows.push(PercentileRow { value_us, quantile, total_count });
                let halvings = (1.0 / (1.0 - quantile)).log2().floor() as u32;
                if halvings > 40 {
                    break; // far past any count a run holds: 1 - 2^-40
                }
                quantile += 1.0 / f64::from(TICKS_PER_HALF_DISTANCE * 2) / f64::from(1u32 << halvings.min(30));
            }
            let max = hist.highest_equivalent(hist.max());
            rows.push(PercentileRow { value_us: max, quantile: 1.0, total_count: hist.len() });
        }
        // Sub-buckets cover the precision asked: the power of two at or above 2 * 10^sigfig.
        let sub_buckets = (2 * 10u32.pow(u32::from(hist.sigfig()))).next_power_of_two();
        PercentileExport {
            rows,
            mean_us: hist.mean(),
            stddev_us: hist.stdev(),
            max_us: hist.max(),
            total_count: hist.len(),
            buckets: u32::from(hist.buckets()),
            sub_buckets,
        }
    }

    /// The `.hgrm` text, values in milliseconds.
    pub fn to_hgrm_ms(&self) -> String {
        let ms = |us: f64| us / 1000.0;
        let d = VALUE_DECIMALS;
        let mut s = format!("{:>12} {:>14} {:>10} {:>14}\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
        for r in &self.rows {
            let value = ms(r.value_us as f64);
            if r.quantile < 1.0 {
                let inverse = 1.0 / (1.0 - r.quantile);
                s += &format!("{value:>12.d$} {:>2.12} {:>10} {inverse:>14.2}\n", r.quantile, r.total_count);
            } else {
                s += &format!("{value:>12.d$} {:>2.12} {:>10}\n", r.quantile, r.total_count);
            }
        }
        s += &format!("#[Mean    = {:>12.d$}, StdDeviation   = {:>12.d$}]\n", ms(self.mean_us), ms(self.stddev_us));
        s += &format!("#[Max     = {:>12.d$}, Total count    = {:>12}]\n", ms(self.max_us as f64), self.total_count);
        s += &format!("#[Buckets = {:>12}, SubBuckets     = {:>12}]\n", self.buckets, self.sub_buckets);
        s
    }
}

/// A row of an `.hgrm` text read back: value (the file's unit), percentile, total count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HgrmLine {
    /// The value, in the file's unit.
    pub value: f64,
    /// The percentile as a fraction.
    pub quantile: f64,
    /// Samples at or below the value.
    pub total_count: u64,
}

/// Reads the rows of an `.hgrm` text (the header, blank lines and the `#[` footer skipped);
/// `None` if a row does not parse.
pub fn parse_hgrm(text: &str) -> Option<Vec<HgrmLine>> {
    let mut lines = Vec::new();
    for line in text.lines().skip(1) {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line.split_whitespace();
        let value = f.next()?.parse().ok()?;
        let quantile = f.next()?.parse().ok()?;
        let total_count = f.next()?.parse().ok()?;
        lines.push(HgrmLine { value, quantile, total_count });
    }
    Some(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::LatencyRecorder;

    #[test]
    fn an_export_parses_back_to_the_histogram_it_came_from() {
        let mut r = LatencyRecorder::new();
        for ms in 1..=1000u64 {
            r.record_us(ms * 1000);
        }
        let export = r.percentiles();
        let text = export.to_hgrm_ms();
        assert!(text.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)\n\n"), "{text}");
        let max = format!("#[Max     = {:>12.3}, Total count    = {:>12}]", export.max_us as f64 / 1000.0, 1000);
        assert!(text.contains(&max), "{text}");
        let rows = parse_hgrm(&text).expect("parses");
        assert_eq!(rows.len(), export.rows.len());
        let last = rows.last().unwrap();
        assert_eq!((last.quantile, last.total_count), (1.0, 1000), "ends at 100 % with every sample");
        assert!(rows.windows(2).all(|w| w[0].quantile <= w[1].quantile && w[0].value <= w[1].value));
        assert!(rows.windows(2).all(|w| w[0].total_count <= w[1].total_count));
        // The median row is within the recorder's precision of 500 ms.
        let median = rows.iter().find(|l| l.quantile >= 0.5).unwrap();
        assert!((median.value - 500.0).abs() <= 0.5, "{median:?}");
        // Every row agrees with the histogram (ms, 3 decimals).
        for (line, row) in rows.iter().zip(&export.rows) {
            assert!((line.value - row.value_us as f64 / 1000.0).abs() < 1e-3);
            assert_eq!(line.total_count, row.total_count);
        }
    }

    #[test]
    fn an_empty_histogram_exports_only_its_footer() {
        let export = LatencyRecorder::new().percentiles();
        assert!(export.rows.is_empty());
        let text = export.to_hgrm_ms();
        assert_eq!(parse_hgrm(&text), Some(vec![]));
        assert!(text.contains("Total count    =            0]"));
    }
}
