//! [`ClockOffsets`]: a replica's estimates of its clock's offsets to the other replicas of its
//! group (DESIGN.md rule 22), sans I/O.
//!
//! NTP style: a replica sends each peer a probe with its clock (`ReplicationMsg::ClockProbe`)
//! about once a second; the peer echoes it with its own clock (`ClockEcho`). When the echo
//! comes back at `now`, the round trip is `rtt = now - probe_sent`, and the peer read its clock
//! at some point of it: `offset = echo - (probe_sent + rtt / 2)`, within `rtt / 2` of the
//! truth whatever the delays on the way out and back. The rules mirror the clients'
//! `OwdEstimator` (`luigi-protocol`'s `owd`): a sample whose round trip exceeds a limit waited in
//! a queue or a buffer and is dropped; samples older than [`SAMPLE_MAX_AGE_US`] no longer count.
//! Of a peer's fresh samples, the one with the smallest round trip (the tightest error bound)
//! is the estimate.
//!
//! An echo counts only for a probe this replica sent and has not heard back about (at most
//! [`OUTSTANDING_MAX`] per peer are remembered): a duplicate, a forged or a very late echo is
//! ignored. Every time from the wire is taken with saturating arithmetic.

use std::collections::{BTreeMap, VecDeque};

use luigi_txn::types::TimeUs;

/// Samples older than this do not count (µs), as the clients' delay samples.
pub use luigi_protocol::owd::SAMPLE_MAX_AGE_US;

/// Probes a replica sends each peer: one per this period, µs.
pub const PROBE_INTERVAL_US: TimeUs = 1_000_000;
/// Samples kept per peer (the newest; with a probe a second, all of the last few seconds).
pub const SAMPLES_MAX: usize = 8;
/// Probes per peer remembered while their echo is awaited (older ones are forgotten: their
/// echo, if it ever comes, is ignored).
pub const OUTSTANDING_MAX: usize = 4;

/// How a replica probes its peers' clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// One probe to each peer per this period, µs.
    pub interval_us: TimeUs,
    /// A sample whose round trip took longer is dropped, µs (the node uses the clients'
    /// resend timeout, as the clients' delay estimates do).
    pub max_rtt_us: u64,
}

/// One measurement of a peer's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetSample {
    /// When it was taken (this replica's clock at the echo), µs.
    pub at_us: TimeUs,
    /// The peer's clock minus this replica's, µs.
    pub offset_us: i64,
    /// Its error bound: half the round trip (rounded up), µs.
    pub error_us: u64,
}

impl OffsetSample {
    /// The sample of a probe sent at `probe_sent_us` and echoed with the peer's clock
    /// `echo_us`, the echo arriving at `now` (all µs, any values: saturating).
    pub fn new(probe_sent_us: TimeUs, echo_us: TimeUs, now: TimeUs) -> Self {
        let rtt = now.saturating_sub(probe_sent_us);
        let midpoint = i128::from(probe_sent_us) + i128::from(rtt / 2);
        let offset = i128::from(echo_us) - midpoint;
        let offset_us = offset.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        OffsetSample { at_us: now, offset_us, error_us: rtt.div_ceil(2) }
    }

    /// How far the peer's clock is surely off this replica's, µs: `|offset| - error`, at
    /// least 0.
    pub fn surely_off_us(&self) -> u64 {
        self.offset_us.unsigned_abs().saturating_sub(self.error_us)
    }
}

/// What became of an echo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EchoOutcome {
    /// It became a sample.
    Counted(OffsetSample),
    /// Its round trip exceeded the limit: dropped.
    TooSlow,
    /// It answers no probe awaited (a duplicate, a forgotten probe, a stranger's): ignored.
    Unknown,
}

/// One peer's probes awaited and samples.
#[derive(Clone, Debug, Default)]
struct PeerClock {
    /// Send times of probes whose echo is awaited, oldest first.
    outstanding: VecDeque<TimeUs>,
    /// Samples, oldest first.
    samples: VecDeque<OffsetSample>,
}

/// A replica's clock-offset estimates to its peers (see the module docs).
#[derive(Clone, Debug)]
pub struct ClockOffsets {
    config: ProbeConfig,
    peers: BTreeMap<u32, PeerClock>,
    /// When the next probes go (`None`: not started; the first go an interval after the
    /// first call, so that a fresh group's first election, which its replica 0 starts at once,
    /// is not raced by a verdict on its clock: a skewed replica 0 is elected, then hands over).
    next_probe_us: Option<TimeUs>,
}

impl ClockOffsets {
    /// Estimates to `peers` (replica indexes), none measured yet.
    pub fn new(config: ProbeConfig, peers: impl IntoIterator<Item = u32>) -> Self {
        let peers = peers.into_iter().map(|p| (p, PeerClock::default())).collect();
        ClockOffsets { config, peers, next_probe_us: None }
    }

    /// Its configuration.
    pub fn config(&self) -> ProbeConfig {
        self.config
    }

    /// Whether probes are due at `now`; if so, the next ones are due an interval later. The
    /// caller then sends a probe stamped `now` to each peer it can reach and calls
    /// [`ClockOffsets::probe_sent`] for it. The first call only starts the interval.
    pub fn probes_due(&mut self, now: TimeUs) -> bool {
        let next = now.saturating_add(self.config.interval_us.max(1));
        match self.next_probe_us {
            None => {
                self.next_probe_us = Some(next);
                false
            }
            Some(at) if now < at => false,
            Some(_) => {
                self.next_probe_us = Some(next);
                true
            }
        }
    }

    /// When probes are next due (`None`: not started, at the next call).
    pub fn next_deadline(&self) -> Option<TimeUs> {
        self.next_probe_us
    }

    /// A probe stamped `sent_us` left for `peer`.
    pub fn probe_sent(&mut self, peer: u32, sent_us: TimeUs) {
        let Some(p) = self.peers.get_mut(&peer) else { return };
        if p.outstanding.len() == OUTSTANDING_MAX {
            p.outstanding.pop_front();
        }
        p.outstanding.push_back(sent_us);
    }

    /// `peer` echoed the probe stamped `probe_sent_us` with its clock `echo_us`; the echo
    /// arrived at `now`.
    pub fn echo(&mut self, peer: u32, probe_sent_us: TimeUs, echo_us: TimeUs, now: TimeUs) -> EchoOutcome {
        let Some(p) = self.peers.get_mut(&peer) else { return EchoOutcome::Unknown };
        let Some(pos) = p.outstanding.iter().position(|t| *t == probe_sent_us) else {
            return EchoOutcome::Unknown;
        };
        // Older probes' echoes are overtaken: a FIFO link lost them, or they are later than this.
        p.outstanding.drain(..=pos);
        if now.saturating_sub(probe_sent_us) > self.config.max_rtt_us {
            return EchoOutcome::TooSlow;
        }
        let sample = OffsetSample::new(probe_sent_us, echo_us, now);
        if p.samples.len() == SAMPLES_MAX {
            p.samples.pop_front();
        }
        p.samples.push_back(sample);
        EchoOutcome::Counted(sample)
    }

    /// `peer`'s estimate at `now`: of its samples at most [`SAMPLE_MAX_AGE_US`] old, the one
    /// with the smallest error (the newest among equals); `None` without any.
    pub fn estimate(&self, peer: u32, now: TimeUs) -> Option<OffsetSample> {
        let p = self.peers.get(&peer)?;
        let fresh = p.samples.iter().filter(|s| now.saturating_sub(s.at_us) <= SAMPLE_MAX_AGE_US);
        // `min_by_key` keeps the first of equals: iterate newest first.
        fresh.rev().min_by_key(|s| s.error_us).copied()
    }

    /// Every peer's estimate at `now` (peer order), skipping peers without one.
    pub fn estimates(&self, now: TimeUs) -> Vec<(u32, OffsetSample)> {
        self.peers.keys().filter_map(|p| self.estimate(*p, now).map(|s| (*p, s))).collect()
    }

    /// The peers, in order.
    pub fn peers(&self) -> impl Iterator<Item = u32> + '_ {
        self.peers.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CONFIG: ProbeConfig = ProbeConfig { interval_us: 1_000_000, max_rtt_us: 1_000_000 };

    fn probe(c: &mut ClockOffsets, peer: u32, at: TimeUs) {
        c.probe_sent(peer, at);
    }

    #[test]
    fn a_symmetric_round_trip_measures_the_offset_exactly() {
        let mut c = ClockOffsets::new(CONFIG, [1, 2]);
        // 10 ms each way; the peer's clock is 2 s ahead.
        probe(&mut c, 1, 100_000_000);
        let s = match c.echo(1, 100_000_000, 102_010_000, 100_020_000) {
            EchoOutcome::Counted(s) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!((s.offset_us, s.error_us), (2_000_000, 10_000));
        assert_eq!(s.surely_off_us(), 1_990_000);
        assert_eq!(c.estimate(1, 100_020_000), Some(s));
        assert_eq!(c.estimate(2, 100_020_000), None, "never measured");
        // Behind: negative.
        probe(&mut c, 2, 100_030_000);
        c.echo(2, 100_030_000, 99_535_000, 100_040_000);
        assert_eq!(c.estimate(2, 100_040_000).map(|s| s.offset_us), Some(-500_000));
    }

    #[test]
    fn the_smallest_round_trip_of_the_fresh_samples_is_the_estimate() {
        let mut c = ClockOffsets::new(CONFIG, [1]);
        let mut now = 10_000_000;
        // Round trips of 80, 4 and 40 ms: the 4 ms one wins, whatever came after it.
        for (rtt, off) in [(80_000, 30_000), (4_000, 7_000), (40_000, -20_000)] {
            probe(&mut c, 1, now);
            let echo = (now + rtt / 2).checked_add_signed(off).unwrap();
            assert!(matches!(c.echo(1, now, echo, now + rtt), EchoOutcome::Counted(_)));
            now += 1_000_000;
        }
        let best = c.estimate(1, now).unwrap();
        assert_eq!((best.offset_us, best.error_us), (7_000, 2_000));
        // Once it is older than the age limit, the next best fresh one takes over.
        let later = 11_004_000 + SAMPLE_MAX_AGE_US + 1;
        assert_eq!(c.estimate(1, later).map(|s| s.error_us), Some(20_000));
        assert_eq!(c.estimate(1, 12_040_000 + SAMPLE_MAX_AGE_US + 1), None, "all stale");
    }

    #[test]
    fn slow_round_trips_and_unknown_echoes_do_not_count() {
        let mut c = ClockOffsets::new(CONFIG, [1]);
        probe(&mut c, 1, 0);
        assert_eq!(c.echo(1, 0, 5_000_000, 3_000_000), EchoOutcome::TooSlow, "waited 3 s in a buffer");
        assert_eq!(c.estimate(1, 3_000_000), None);
        assert_eq!(c.echo(1, 0, 5_000_000, 3_000_000), EchoOutcome::Unknown, "answered already");
        assert_eq!(c.echo(1, 77, 5_000_000, 3_000_000), EchoOutcome::Unknown, "never sent");
        assert_eq!(c.echo(9, 0, 0, 0), EchoOutcome::Unknown, "not a peer");
        // Only the last few probes are remembered.
        for t in 0..(OUTSTANDING_MAX as u64 + 1) {
            probe(&mut c, 1, 10 + t);
        }
        assert_eq!(c.echo(1, 10, 10, 20), EchoOutcome::Unknown, "forgotten");
        assert!(matches!(c.echo(1, 12, 12, 20), EchoOutcome::Counted(_)));
        assert_eq!(c.echo(1, 11, 11, 20), EchoOutcome::Unknown, "overtaken by a later probe's echo");
    }

    #[test]
    fn probes_are_due_once_an_interval() {
        let mut c = ClockOffsets::new(CONFIG, [1]);
        assert_eq!(c.next_deadline(), None);
        assert!(!c.probes_due(5), "the first call starts the interval");
        assert_eq!(c.next_deadline(), Some(1_000_005));
        assert!(!c.probes_due(5 + 999_999));
        assert!(c.probes_due(1_000_005));
        assert_eq!(c.next_deadline(), Some(2_000_005));
        assert!(!c.probes_due(2_000_004));
        let mut end = ClockOffsets::new(CONFIG, [1]);
        assert!(!end.probes_due(u64::MAX));
        assert!(end.probes_due(u64::MAX), "a saturated deadline is reached, not skipped");
        assert!(end.probes_due(u64::MAX));
    }

    proptest! {
        /// Any send, echo and arrival times (the whole u64 range): no panic, the error is
        /// half the round trip, and when the true offset and the delays fit the types the
        /// estimate is within its error of the truth.
        #[test]
        fn any_times_give_a_sample_within_its_error(
            sent in any::<u64>(),
            echo in any::<u64>(),
            now in any::<u64>(),
            out in 0u64..u64::MAX / 8,
            back in 0u64..u64::MAX / 8,
            offset in i64::MIN / 2..i64::MAX / 2,
        ) {
            let wide = ClockOffsets::new(ProbeConfig { interval_us: 1, max_rtt_us: u64::MAX }, [1]);
            let mut c = wide.clone();
            c.probe_sent(1, sent);
            match c.echo(1, sent, echo, now) {
                EchoOutcome::Counted(s) => {
                    prop_assert_eq!(s.error_us, now.saturating_sub(sent).div_ceil(2));
                    prop_assert!(c.estimate(1, now).is_some());
                }
                other => prop_assert!(false, "{other:?}"),
            }
            // A consistent exchange: the peer reads its clock `out` after the send.
            let truth = i128::from(sent) + i128::from(out) + i128::from(offset);
            let arrival = i128::from(sent) + i128::from(out) + i128::from(back);
            if let (Ok(echo), Ok(arrival)) = (u64::try_from(truth), u64::try_from(arrival)) {
                let mut c = wide.clone();
                c.probe_sent(1, sent);
                let EchoOutcome::Counted(s) = c.echo(1, sent, echo, arrival) else {
                    return Err(TestCaseError::fail("not counted"));
                };
                let miss = (i128::from(s.offset_us) - i128::from(offset)).unsigned_abs();
                prop_assert!(miss <= u128::from(s.error_us), "off by {} > error {}", miss, s.error_us);
            }
        }
    }
}
