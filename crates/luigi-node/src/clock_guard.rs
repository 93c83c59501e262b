//! [`ClockGuard`]: what a replica does about its measured clock offsets (DESIGN.md rule 22),
//! sans I/O. The estimates come from [`crate::clock_offsets`]; the node applies the verdict
//! (abstain from elections, hand leadership over) and reports it in `luigi status`.
//!
//! **The rule.** A peer is *surely off* when its estimated offset is beyond the clock bound
//! by more than the estimate's error (`|offset| - error > max_clock_offset_us`). A replica's
//! own clock is *beyond the bound* when the peers surely off form a majority of the whole
//! group (`n / 2 + 1` of its `n` replicas; the replica counts itself as within its own
//! bound, so only peers count towards it).
//!
//! - One bad peer never moves a correct replica: if a majority of the group (itself among
//!   them) is within the bound of its clock, at most `n - majority < majority` peers can be
//!   surely off. In a group of 3, one skewed peer is one of the two needed; in a group of 2
//!   or 1 nothing is ever beyond (nobody can tell which clock is wrong).
//! - A replica whose clock is off by more than the bound plus the errors from a majority of
//!   its group sees exactly that majority surely off, once it has fresh estimates to them.
//! - The error is subtracted, so a slow or a jittery link makes the rule slower to act,
//!   never wrong about a correct clock.
//! - A replica beyond the bound stays so until fresh estimates to enough peers to make a
//!   majority with it show otherwise: estimates that went stale (the replica was cut off)
//!   clear nothing, or a skewed replica would stand for election again at the moment it is
//!   reconnected, a probe interval before it could know.

use luigi_txn::msg::{ClockStatus, PeerClockOffset};
use luigi_txn::types::TimeUs;

use crate::clock_offsets::OffsetSample;

/// The loud logs (an `error!` while this replica's clock is beyond the bound, a `warn!` while
/// a peer's is) are repeated at most once per this period, µs.
pub const CLOCK_LOG_EVERY_US: TimeUs = 5_000_000;

/// The verdict on a group's offsets, as seen from one replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockJudgement {
    /// Peers (replica indexes) surely off by more than the bound.
    pub far_peers: Vec<u32>,
    /// This replica's clock is beyond the bound from a majority of its group.
    pub beyond_bound: bool,
}

/// The rule (see the module docs) for a group of `group_size` replicas, with `estimates` the
/// fresh estimates to the peers (replica index, sample) and `bound_us` the clock bound.
pub fn judge(group_size: u32, estimates: &[(u32, OffsetSample)], bound_us: u64) -> ClockJudgement {
    let far_peers: Vec<u32> = estimates.iter().filter(|(_, s)| s.surely_off_us() > bound_us).map(|(p, _)| *p).collect();
    let majority = group_size as usize / 2 + 1;
    ClockJudgement { beyond_bound: far_peers.len() >= majority, far_peers }
}

/// What the node must do after [`ClockGuard::update`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockAction {
    /// Abstain from elections (and hand leadership over if leading).
    pub abstain: bool,
}

/// One replica's clock verdict over time: the rule's latest judgement, the rate-limited
/// logs, and which peer a leadership hand-over tries next.
#[derive(Clone, Debug)]
pub struct ClockGuard {
    /// This replica (index in its shard's list), for the logs.
    me: (u32, u32),
    group_size: u32,
    bound_us: u64,
    judgement: ClockJudgement,
    /// When the next `error!` / `warn!` may be logged.
    next_error_log_us: TimeUs,
    next_warn_log_us: TimeUs,
    /// The peer (Raft id) leadership was last handed to.
    last_target: Option<u64>,
    /// Hand-overs started while beyond the bound.
    handovers: u64,
}

impl ClockGuard {
    /// The guard of replica `replica` of `shard`, in a group of `group_size`, under the clock
    /// bound `bound_us`.
    pub fn new(shard: u32, replica: u32, group_size: u32, bound_us: u64) -> Self {
        ClockGuard {
            me: (shard, replica),
            group_size,
            bound_us,
            judgement: ClockJudgement { far_peers: Vec::new(), beyond_bound: false },
            next_error_log_us: 0,
            next_warn_log_us: 0,
            last_target: None,
            handovers: 0,
        }
    }

    /// Judges the fresh `estimates` at `now`, logs what needs it, and says what to do.
    pub fn update(&mut self, now: TimeUs, estimates: &[(u32, OffsetSample)]) -> ClockAction {
        let mut judgement = judge(self.group_size, estimates, self.bound_us);
        let majority = self.group_size as usize / 2 + 1;
        if self.judgement.beyond_bound && estimates.len() + 1 < majority {
            judgement.beyond_bound = true; // nothing fresh enough to clear it
        }
        let (shard, replica) = self.me;
        let offsets = || describe(estimates);
        if judgement.beyond_bound && now >= self.next_error_log_us {
            self.next_error_log_us = now.saturating_add(CLOCK_LOG_EVERY_US);
            tracing::error!(
                node = %format!("s{shard}r{replica}"),
                bound_ms = self.bound_us as f64 / 1e3,
                offsets = %offsets(),
                "THIS SERVER'S CLOCK IS BEYOND THE CLOCK BOUND from a majority of its group: it does not lead \
                 or stand for election until it is back within it; fix its clock (NTP)"
            );
        } else if !judgement.far_peers.is_empty() && now >= self.next_warn_log_us {
            self.next_warn_log_us = now.saturating_add(CLOCK_LOG_EVERY_US);
            let far: Vec<String> = judgement.far_peers.iter().map(|p| format!("s{shard}r{p}")).collect();
            tracing::warn!(
                node = %format!("s{shard}r{replica}"),
                peers = %far.join(", "),
                bound_ms = self.bound_us as f64 / 1e3,
                offsets = %offsets(),
                "a peer's clock is beyond the clock bound from this server's"
            );
        }
        if self.judgement.beyond_bound && !judgement.beyond_bound {
            tracing::warn!(node = %format!("s{shard}r{replica}"), offsets = %offsets(), "clock back within the bound; takes part in elections again");
            self.last_target = None;
        }
        self.judgement = judgement;
        ClockAction { abstain: self.judgement.beyond_bound }
    }

    /// The latest judgement.
    pub fn judgement(&self) -> &ClockJudgement {
        &self.judgement
    }

    /// Hand-overs of leadership started because of the clock.
    pub fn handovers(&self) -> u64 {
        self.handovers
    }

    /// For a leader beyond the bound: the peer to hand leadership to, of `candidates` (Raft
    /// id, highest log index it is known to hold), or `None` without any. The most up to date
    /// (the lowest id among equals), unless the last hand-over went to it and did not happen
    /// (its transfer lapsed: it may abstain too, or be cut off): then the next best, so
    /// hand-overs go round the group.
    pub fn handover_target(&mut self, candidates: &[(u64, u64)]) -> Option<u64> {
        let mut ranked = candidates.to_vec();
        ranked.sort_by_key(|(id, matched)| (std::cmp::Reverse(*matched), *id));
        let pick = match ranked.first() {
            Some((first, _)) if ranked.len() > 1 && Some(*first) == self.last_target => ranked[1].0,
            Some((first, _)) => *first,
            None => return None,
        };
        self.last_target = Some(pick);
        self.handovers += 1;
        Some(pick)
    }

    /// What `luigi status` shows of it: the bound, the verdict and the fresh estimates.
    pub fn status(&self, estimates: &[(u32, OffsetSample)]) -> ClockStatus {
        ClockStatus {
            bound_us: self.bound_us,
            beyond_bound: self.judgement.beyond_bound,
            peers: estimates
                .iter()
                .map(|(p, s)| PeerClockOffset { replica: *p, offset_us: s.offset_us, error_us: s.error_us })
                .collect(),
        }
    }
}

/// `r1 +2000.1±0.2 ms, r2 -3.0±0.1 ms`: the estimates, for the logs.
fn describe(estimates: &[(u32, OffsetSample)]) -> String {
    let parts: Vec<String> = estimates
        .iter()
        .map(|(p, s)| format!("r{p} {:+.1}±{:.1} ms", s.offset_us as f64 / 1e3, s.error_us as f64 / 1e3))
        .collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: u64 = 500_000;

    fn at(offset_us: i64, error_us: u64) -> OffsetSample {
        OffsetSample { at_us: 0, offset_us, error_us }
    }

    #[test]
    fn one_skewed_peer_never_puts_a_correct_replica_beyond() {
        // Group of 3: peer 2 is 2 s ahead, peer 1 is fine.
        let j = judge(3, &[(1, at(3_000, 100)), (2, at(2_000_000, 100))], BOUND);
        assert_eq!(j, ClockJudgement { far_peers: vec![2], beyond_bound: false });
        // Group of 5: two skewed peers of four are not a majority of five.
        let e = [(1, at(-2_000_000, 1)), (2, at(2_000_000, 1)), (3, at(0, 1)), (4, at(10, 1))];
        assert!(!judge(5, &e, BOUND).beyond_bound);
        // Groups of 2 and 1 never judge themselves beyond.
        assert!(!judge(2, &[(1, at(i64::MAX, 0))], BOUND).beyond_bound);
        assert!(!judge(1, &[], BOUND).beyond_bound);
    }

    #[test]
    fn a_replica_off_from_a_majority_is_beyond() {
        // The skewed replica of a group of 3 sees both peers 2 s behind.
        let j = judge(3, &[(0, at(-2_000_000, 300)), (2, at(-2_000_100, 200))], BOUND);
        assert_eq!(j, ClockJudgement { far_peers: vec![0, 2], beyond_bound: true });
        // Group of 5: three of its four peers.
        let e = [(0, at(-900_000, 1)), (1, at(-800_000, 1)), (3, at(-700_000, 1)), (4, at(0, 1))];
        assert!(judge(5, &e, BOUND).beyond_bound);
        // A peer not measured (no fresh estimate) does not count either way.
        assert!(!judge(3, &[(0, at(-2_000_000, 300))], BOUND).beyond_bound);
    }

    #[test]
    fn the_error_is_given_the_benefit_of_the_doubt() {
        // 600 ms off, but the round trip was 300 ms: it may be 450 ms, within the bound.
        assert!(!judge(3, &[(0, at(600_000, 150_000)), (2, at(600_000, 150_000))], BOUND).beyond_bound);
        assert!(judge(3, &[(0, at(600_000, 99_999)), (2, at(-600_000, 0))], BOUND).beyond_bound);
        // Exactly at the bound is within it.
        assert!(!judge(3, &[(0, at(500_000, 0)), (2, at(-500_000, 0))], BOUND).beyond_bound);
        // The extremes do not overflow.
        assert!(judge(3, &[(0, at(i64::MIN, 0)), (2, at(i64::MAX, 1))], 0).beyond_bound);
        assert!(!judge(3, &[(0, at(i64::MIN, u64::MAX)), (2, at(i64::MAX, u64::MAX))], 0).beyond_bound);
    }

    #[test]
    fn hand_overs_go_to_the_most_up_to_date_peer_then_round_the_group() {
        let mut g = ClockGuard::new(0, 0, 3, BOUND);
        assert_eq!(g.handover_target(&[]), None);
        assert_eq!(g.handover_target(&[(2, 40), (3, 50)]), Some(3));
        // It lapsed (still leading): the other one next, then back.
        assert_eq!(g.handover_target(&[(2, 50), (3, 50)]), Some(2));
        assert_eq!(g.handover_target(&[(2, 50), (3, 50)]), Some(3));
        assert_eq!(g.handover_target(&[(3, 50)]), Some(3), "the only one is tried again");
        assert_eq!(g.handovers(), 4);
    }

    #[test]
    fn the_guard_abstains_while_beyond_and_reports_it() {
        let mut g = ClockGuard::new(0, 1, 3, BOUND);
        let beyond = [(0, at(-2_000_000, 300)), (2, at(-2_000_000, 300))];
        assert_eq!(g.update(0, &beyond), ClockAction { abstain: true });
        let s = g.status(&beyond);
        assert!(s.beyond_bound);
        assert_eq!(s.bound_us, BOUND);
        assert_eq!(
            s.peers,
            vec![
                PeerClockOffset { replica: 0, offset_us: -2_000_000, error_us: 300 },
                PeerClockOffset { replica: 2, offset_us: -2_000_000, error_us: 300 },
            ]
        );
        // Back within: takes part again.
        let fine = [(0, at(1_000, 300)), (2, at(-2_000, 300))];
        assert_eq!(g.update(10_000_000, &fine), ClockAction { abstain: false });
        assert!(!g.status(&fine).beyond_bound);
        // No estimates (all stale): nothing to act on.
        assert_eq!(g.update(20_000_000, &[]), ClockAction { abstain: false });
        // Once beyond, stale estimates clear nothing; fresh ones to one peer (a majority of
        // three with itself) do.
        g.update(30_000_000, &beyond);
        assert_eq!(g.update(40_000_000, &[]), ClockAction { abstain: true });
        assert_eq!(g.update(40_000_000, &fine[..1]), ClockAction { abstain: false });
    }
}
