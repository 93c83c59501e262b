//! A bound on how often one kind of warning is logged: a peer that sends garbled frames, or a
//! stream of misaddressed replication messages, must not fill the log with one line per
//! message. The first one is logged at once; the next ones at most once per interval, each
//! saying how many were left unlogged since the last. Sans I/O: the caller passes its clock.

use crate::types::TimeUs;

/// How often a throttled warning may be logged, and what was left unlogged.
#[derive(Clone, Debug)]
pub struct Throttle {
    interval_us: u64,
    last_us: Option<TimeUs>,
    suppressed: u64,
}

/// A warning that may be logged now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Logged {
    /// Occurrences not logged since the last logged one.
    pub suppressed: u64,
}

impl Throttle {
    /// One warning per second at most: what the server's throttled warnings use.
    pub const EVERY_SECOND_US: u64 = 1_000_000;

    /// A throttle logging at most once per `interval_us` (the first occurrence always).
    pub const fn new(interval_us: u64) -> Self {
        Self { interval_us, last_us: None, suppressed: 0 }
    }

    /// One occurrence at `now`: `Some` if it is to be logged (with the count left unlogged
    /// before it), `None` if it is counted and left unlogged. A clock that went back counts
    /// as no time passed.
    pub fn occurred(&mut self, now: TimeUs) -> Option<Logged> {
        let due = self.last_us.is_none_or(|last| now.saturating_sub(last) >= self.interval_us);
        if !due {
            self.suppressed = self.suppressed.saturating_add(1);
            return None;
        }
        self.last_us = Some(now);
        Some(Logged { suppressed: std::mem::take(&mut self.suppressed) })
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Self::new(Self::EVERY_SECOND_US)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_first_is_logged_then_one_per_interval_with_the_count_left_out() {
        let mut t = Throttle::new(1_000);
        assert_eq!(t.occurred(5), Some(Logged { suppressed: 0 }));
        assert_eq!(t.occurred(6), None);
        assert_eq!(t.occurred(1_004), None);
        assert_eq!(t.occurred(1_005), Some(Logged { suppressed: 2 }));
        assert_eq!(t.occurred(9_000), Some(Logged { suppressed: 0 }));
    }

    #[test]
    fn a_clock_that_goes_back_logs_nothing_more() {
        let mut t = Throttle::new(1_000);
        assert!(t.occurred(u64::MAX).is_some());
        assert_eq!(t.occurred(0), None);
        assert_eq!(t.occurred(u64::MAX - 1), None);
    }

    proptest! {
        /// Over any times, at most one warning is logged per interval, and every occurrence is
        /// either logged or counted in the next logged one's `suppressed`.
        #[test]
        fn nothing_is_lost_and_at_most_one_per_interval(
            interval in any::<u64>(),
            mut times in proptest::collection::vec(any::<u64>(), 1..64),
        ) {
            times.sort_unstable();
            let mut t = Throttle::new(interval);
            let mut logged_at: Vec<u64> = Vec::new();
            let mut accounted = 0u64;
            for &now in &times {
                if let Some(l) = t.occurred(now) {
                    accounted += 1 + l.suppressed;
                    logged_at.push(now);
                }
            }
            prop_assert_eq!(accounted + t.suppressed, times.len() as u64);
            for pair in logged_at.windows(2) {
                prop_assert!(pair[1] - pair[0] >= interval);
            }
        }
    }
}
