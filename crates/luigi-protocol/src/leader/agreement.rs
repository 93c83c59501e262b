//! Timestamp agreement of one cross-shard transaction on one participant (DESIGN.md rule 4).
//!
//! Each participant logs `PREPARE` with its proposal and, once that is committed, announces the
//! proposal to the others. The final timestamp is the maximum proposal. If every proposal was
//! equal the transaction is decided at once. Otherwise each participant logs `DECIDE` with the
//! final timestamp, announces `Confirm` once that record is committed, and the transaction is
//! decided only when every participant has confirmed: without this second round a shard that
//! still held its old, smaller proposal could let a later transaction with a timestamp between
//! the two slip in before the agreed one ("timestamp inversion").

use luigi_txn::types::{ShardId, Timestamp};

/// What the leader must do after feeding the agreement an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing yet.
    Wait,
    /// Proposals differ: reposition to `final_ts` and log `DECIDE`.
    LogDecide {
        /// The final timestamp.
        final_ts: Timestamp,
    },
    /// Decided at `final_ts`: the transaction may be released.
    Decided {
        /// The final timestamp.
        final_ts: Timestamp,
    },
}

/// Agreement state of one transaction on this shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Agreement {
    shards: Vec<ShardId>,
    proposals: Vec<Option<Timestamp>>,
    /// The proposal slot holds the final timestamp a participant reported executing at (a
    /// stand-in, see [`Agreement::on_executed`]), not its own proposal.
    stand_in: Vec<bool>,
    confirms: Vec<bool>,
    final_ts: Option<Timestamp>,
    decide_requested: bool,
    decided: bool,
}

impl Agreement {
    /// Agreement over `shards` (sorted participant list).
    pub fn new(shards: Vec<ShardId>) -> Self {
        let n = shards.len();
        assert!(n > 1, "agreement is only for cross-shard transactions");
        Self {
            shards,
            proposals: vec![None; n],
            stand_in: vec![false; n],
            confirms: vec![false; n],
            final_ts: None,
            decide_requested: false,
            decided: false,
        }
    }

    fn slot(&self, shard: ShardId) -> Option<usize> {
        self.shards.iter().position(|s| *s == shard)
    }

    /// The participants.
    pub fn shards(&self) -> &[ShardId] {
        &self.shards
    }

    /// The final timestamp, once every proposal is known.
    pub fn final_ts(&self) -> Option<Timestamp> {
        self.final_ts
    }

    /// Rounds needed: 1 when the proposals were equal, 2 when they differed.
    pub fn rounds(&self) -> u8 {
        if self.decide_requested {
            2
        } else {
            1
        }
    }

    /// True once the transaction may be released.
    pub fn is_decided(&self) -> bool {
        self.decided
    }

    /// `shard`'s proposal, once counted (or the final timestamp it stood in with).
    pub fn proposal(&self, shard: ShardId) -> Option<Timestamp> {
        self.slot(shard).and_then(|i| self.proposals[i])
    }

    /// Records `shard`'s proposal (its `PREPARE` is committed). Returns what to do next;
    /// `skip_second_round` is a test-only mutation that decides on the first round.
    pub fn on_proposal(&mut self, shard: ShardId, ts: Timestamp, skip_second_round: bool) -> Step {
        let Some(i) = self.slot(shard) else { return Step::Wait };
        if let Some(old) = self.proposals[i] {
            // Its real proposal may come after a stand-in (a stale replica of that shard
            // answering recovery): it is at most the final timestamp, which stays the maximum.
            debug_assert!(
                old == ts || (self.stand_in[i] && ts <= old),
                "a participant's proposal never changes ({old} then {ts})"
            );
            return Step::Wait;
        }
        self.proposals[i] = Some(ts);
        if self.proposals.iter().any(Option::is_none) {
            return Step::Wait;
        }
        let max = self.proposals.iter().flatten().copied().max().expect("all known");
        self.final_ts = Some(max);
        let all_equal = self.proposals.iter().all(|p| *p == Some(max));
        if all_equal || skip_second_round {
            self.decided = true;
            return Step::Decided { final_ts: max };
        }
        self.decide_requested = true;
        Step::LogDecide { final_ts: max }
    }

    /// Records that `shard` executed the transaction at the final timestamp `ts` (its answer
    /// to recovery). If its proposal is unknown, `ts` stands in for it: every proposal is at
    /// most the final timestamp and one equals it, so the maximum is unchanged.
    pub fn on_executed(&mut self, shard: ShardId, ts: Timestamp, skip_second_round: bool) -> Step {
        let Some(i) = self.slot(shard) else { return Step::Wait };
        let step = if self.proposals[i].is_none() {
            self.stand_in[i] = true;
            self.on_proposal(shard, ts, skip_second_round)
        } else {
            Step::Wait
        };
        let confirmed = self.on_confirm(shard, ts);
        if step == Step::Wait {
            confirmed
        } else {
            step
        }
    }

    /// Records that `shard` durably adopted the final timestamp `ts`.
    pub fn on_confirm(&mut self, shard: ShardId, ts: Timestamp) -> Step {
        let Some(i) = self.slot(shard) else { return Step::Wait };
        if let Some(f) = self.final_ts {
            assert_eq!(f, ts, "participants disagree on the final timestamp");
        }
        self.confirms[i] = true;
        if self.decided || !self.decide_requested || self.confirms.iter().any(|c| !c) {
            return Step::Wait;
        }
        self.decided = true;
        Step::Decided { final_ts: ts }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_proposals_decide_in_one_round() {
        let mut a = Agreement::new(vec![0, 1, 2]);
        assert_eq!(a.on_proposal(0, 100, false), Step::Wait);
        assert_eq!(a.on_proposal(2, 100, false), Step::Wait);
        assert_eq!(a.on_proposal(1, 100, false), Step::Decided { final_ts: 100 });
        assert!(a.is_decided());
    }

    #[test]
    fn differing_proposals_need_every_confirm() {
        let mut a = Agreement::new(vec![0, 1]);
        a.on_proposal(0, 100, false);
        assert_eq!(a.on_proposal(1, 130, false), Step::LogDecide { final_ts: 130 });
        assert!(!a.is_decided());
        assert_eq!(a.on_confirm(1, 130), Step::Wait, "own DECIDE not committed yet");
        assert_eq!(a.on_confirm(0, 130), Step::Decided { final_ts: 130 });
    }

    #[test]
    fn an_executed_answer_stands_in_for_a_missing_proposal_and_confirms() {
        let mut a = Agreement::new(vec![0, 1, 2]);
        a.on_proposal(0, 100, false);
        a.on_proposal(2, 90, false);
        // Shard 1 executed it at 130 (its own proposal, the maximum).
        assert_eq!(a.on_executed(1, 130, false), Step::LogDecide { final_ts: 130 });
        assert_eq!(a.on_confirm(2, 130), Step::Wait);
        assert_eq!(a.on_confirm(0, 130), Step::Decided { final_ts: 130 });
        // Its real, smaller proposal arriving after the stand-in changes nothing.
        assert_eq!(a.on_proposal(1, 110, false), Step::Wait);
        assert_eq!(a.final_ts(), Some(130));
        // Known proposal, then the executed answer: only a confirmation.
        let mut b = Agreement::new(vec![0, 1]);
        b.on_proposal(1, 80, false);
        assert_eq!(b.on_proposal(0, 100, false), Step::LogDecide { final_ts: 100 });
        assert_eq!(b.on_executed(1, 100, false), Step::Wait, "own DECIDE not committed yet");
        assert_eq!(b.on_confirm(0, 100), Step::Decided { final_ts: 100 });
    }

    #[test]
    fn confirms_may_arrive_before_the_proposals() {
        let mut a = Agreement::new(vec![3, 5]);
        assert_eq!(a.on_confirm(5, 90), Step::Wait);
        a.on_proposal(5, 90, false);
        assert_eq!(a.on_proposal(3, 40, false), Step::LogDecide { final_ts: 90 });
        assert_eq!(a.on_confirm(3, 90), Step::Decided { final_ts: 90 });
    }

    #[test]
    fn mutation_skips_the_second_round() {
        let mut a = Agreement::new(vec![0, 1]);
        a.on_proposal(0, 100, true);
        assert_eq!(a.on_proposal(1, 130, true), Step::Decided { final_ts: 130 });
    }

    #[test]
    fn duplicates_and_strangers_are_ignored() {
        let mut a = Agreement::new(vec![0, 1]);
        assert_eq!(a.on_proposal(7, 1, false), Step::Wait);
        a.on_proposal(0, 10, false);
        assert_eq!(a.on_proposal(0, 10, false), Step::Wait);
        assert_eq!(a.on_proposal(1, 10, false), Step::Decided { final_ts: 10 });
    }
}
