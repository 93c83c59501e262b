//! A counter's rate between two scrapes, as Prometheus's `rate()` reads counters: a counter
//! only goes up while its process lives, so a reading below the previous one means the server
//! restarted (or, today, a leader's transaction counters started again from 0 when it leads
//! again: docs/METRICS.md) and counted the current value from 0 since.

use std::time::Duration;

/// How much a counter went up from `previous` to `current`: a decrease is a restart, after
/// which it counted `current` from 0 (never a negative increase).
pub fn increase(previous: f64, current: f64) -> f64 {
    if current >= previous {
        current - previous
    } else {
        current
    }
}

/// The counter's increase per second over `elapsed`; `None` without a time between the two
/// readings (nothing can be said of a rate over no time).
pub fn rate(previous: f64, current: f64, elapsed: Duration) -> Option<f64> {
    let seconds = elapsed.as_secs_f64();
    (seconds > 0.0).then(|| increase(previous, current) / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_that_went_up_gives_its_difference_per_second() {
        assert_eq!(increase(10.0, 25.0), 15.0);
        assert_eq!(rate(10.0, 25.0, Duration::from_millis(500)), Some(30.0));
        assert_eq!(rate(7.0, 7.0, Duration::from_secs(1)), Some(0.0), "no change is a rate of 0");
    }

    #[test]
    fn a_counter_that_went_down_restarted_and_counted_its_value_since() {
        // A restarted server (or a replica that leads again) counts from 0: 1000 -> 40 is 40
        // since the restart, not -960.
        assert_eq!(increase(1000.0, 40.0), 40.0);
        assert_eq!(rate(1000.0, 40.0, Duration::from_secs(2)), Some(20.0));
        assert_eq!(increase(1000.0, 0.0), 0.0, "restarted and nothing counted yet");
        for (p, c) in [(0.0, 0.0), (5.0, 1.0), (1.0, 5.0), (u64::MAX as f64, 3.0), (3.0, u64::MAX as f64)] {
            assert!(increase(p, c) >= 0.0, "never negative: {p} -> {c}");
        }
    }

    #[test]
    fn no_rate_over_no_time() {
        assert_eq!(rate(1.0, 2.0, Duration::ZERO), None);
    }
}
