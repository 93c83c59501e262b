//! What a participant keeps of a cross-shard transaction's outcome for the other
//! participants' recoveries (DESIGN.md rules 7 and 9; issue 26).
//!
//! A participant's new leader asks the others (`Recover`) for every cross-shard transaction
//! its committed log holds prepared and not executed. It can ask only while its committed log
//! has no `Applied` marker at or past the transaction: such a marker executes it (an executed
//! one), or comes after its `ABORT` (a refused one). So an outcome is kept until every other
//! participant's committed marker is past it ([`Outcomes::peer_applied`], from the
//! `PeerApplied` records this shard logs as the other leaders tell it their markers), and
//! not a moment longer. It is kept apart from the answer table, whose entries go when the
//! client acknowledges or expires: neither may lose an outcome a peer still needs.
//!
//! What "past it" means ([`Outcome::bound`]):
//! - an execution at final timestamp `F`: a marker at or past `F` (every proposal is at most
//!   `F`, so the other participant has executed it too);
//! - a refusal of a transaction stamped `ts` by its coordinator: a marker past
//!   `ts` plus the answer expiry (`LeaderConfig::answer_expiry_us`, the same on every server
//!   of a cluster). No leader prepares a cross-shard transaction at a proposal above that
//!   (it refuses it instead, `ShardLeader::admit`), so such a
//!   marker comes after its `ABORT`; and a leader whose watermark is past that refuses it as
//!   expired, so it is never prepared there again.
//!
//! Replicated state: leaders and followers insert at the same records (an execution at its
//! `Applied` marker on a follower, a `Refuse` record) and forget at the same `PeerApplied`
//! records, so a new leader keeps exactly what its predecessor kept. Bounded: a leader admits
//! a cross-shard transaction only while the kept outcomes and the transactions that may add
//! one stay below `LeaderConfig::outcomes_max` (`Busy` past it).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use luigi_txn::types::{ShardId, Timestamp, TxnId};
use luigi_txn::Map;

/// The outcome of a cross-shard transaction on this shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Executed here at this final timestamp.
    Executed(Timestamp),
    /// Refused here (a `Refuse` record), for this reason; the transaction was stamped `ts`
    /// by its coordinator.
    Refused {
        /// Why (the other participants pass it on to their clients).
        reason: String,
        /// The coordinator's timestamp.
        ts: Timestamp,
    },
}

impl Outcome {
    /// The marker another participant's committed log must reach (at or past) before that
    /// participant can no longer ask for this outcome, under an answer expiry of
    /// `expiry_us` (see the module doc).
    pub fn bound(&self, expiry_us: u64) -> Timestamp {
        match self {
            Outcome::Executed(final_ts) => *final_ts,
            Outcome::Refused { ts, .. } => ts.saturating_add(expiry_us).saturating_add(1),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Kept {
    outcome: Outcome,
    /// [`Outcome::bound`] when it was kept (the index key, whatever the expiry is later).
    bound: Timestamp,
    /// Participants whose committed marker is not known past it yet.
    waiting: usize,
}

/// The kept outcomes, and the other shards' committed `Applied` markers as logged here.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Outcomes {
    kept: Map<TxnId, Kept>,
    /// Per other shard, the kept outcomes it may still need, by bound.
    waiting_on: BTreeMap<ShardId, BTreeSet<(Timestamp, TxnId)>>,
    /// Per other shard, its committed `Applied` marker as this shard's log says.
    floors: BTreeMap<ShardId, Timestamp>,
}

impl Outcomes {
    /// Keeps `outcome` of `id` for those of `others` (the other participants) whose
    /// committed marker is not past it yet; nothing if none is. A refusal is kept past its
    /// timestamp plus `expiry_us`, the answer expiry in force (`Answers` owns it).
    pub fn remember(&mut self, id: TxnId, outcome: Outcome, others: &[ShardId], expiry_us: u64) {
        if self.kept.contains_key(&id) {
            return; // an outcome is final; the first one stays
        }
        let bound = outcome.bound(expiry_us);
        let mut waiting = 0;
        for shard in others {
            if self.floor(*shard) < bound && self.waiting_on.entry(*shard).or_default().insert((bound, id)) {
                waiting += 1;
            }
        }
        if waiting > 0 {
            self.kept.insert(id, Kept { outcome, bound, waiting });
        }
    }

    /// Shard `shard`'s committed `Applied` marker reached `ts`: the outcomes it alone still
    /// waited for go.
    pub fn peer_applied(&mut self, shard: ShardId, ts: Timestamp) {
        let floor = self.floors.entry(shard).or_default();
        if ts <= *floor {
            return;
        }
        *floor = ts;
        let Some(waiting) = self.waiting_on.get_mut(&shard) else { return };
        while let Some(&(bound, id)) = waiting.first() {
            if bound > ts {
                break;
            }
            waiting.pop_first();
            let kept = self.kept.get_mut(&id).expect("indexed outcomes are kept");
            kept.waiting -= 1;
            if kept.waiting == 0 {
                self.kept.remove(&id);
            }
        }
        if waiting.is_empty() {
            self.waiting_on.remove(&shard);
        }
    }

    /// The kept outcome of `id`.
    pub fn get(&self, id: TxnId) -> Option<&Outcome> {
        self.kept.get(&id).map(|k| &k.outcome)
    }

    /// Shard `shard`'s committed `Applied` marker as logged here (0 if never heard).
    pub fn floor(&self, shard: ShardId) -> Timestamp {
        self.floors.get(&shard).copied().unwrap_or(0)
    }

    /// Number of kept outcomes.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// True if none is kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Forgets `id`'s outcome, whoever may still need it (only `Mutations::outcomes_fifo`
    /// does this).
    pub fn forget(&mut self, id: TxnId) {
        let Some(kept) = self.kept.remove(&id) else { return };
        let bound = kept.bound;
        for waiting in self.waiting_on.values_mut() {
            waiting.remove(&(bound, id));
        }
        self.waiting_on.retain(|_, w| !w.is_empty());
    }

    /// Kept outcomes shard `shard` may still need (for reports and tests).
    pub fn waiting_on(&self, shard: ShardId) -> usize {
        self.waiting_on.get(&shard).map_or(0, BTreeSet::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::answers::DEFAULT_ANSWER_EXPIRY_US;

    fn id(seq: u64) -> TxnId {
        TxnId { client: 7, seq }
    }

    /// The retention rule: an execution stays until every other participant's committed
    /// marker is at or past its final timestamp, whatever order the markers come in.
    #[test]
    fn an_execution_stays_until_every_other_participant_applied_past_it() {
        let mut o = Outcomes::default();
        o.remember(id(1), Outcome::Executed(100), &[1, 2], DEFAULT_ANSWER_EXPIRY_US);
        o.peer_applied(1, 99);
        o.peer_applied(2, 5_000);
        assert_eq!(o.get(id(1)), Some(&Outcome::Executed(100)), "shard 1 is below it");
        o.peer_applied(1, 50); // markers never go back
        assert_eq!((o.floor(1), o.waiting_on(1), o.waiting_on(2)), (99, 1, 0));
        o.peer_applied(1, 100);
        assert_eq!((o.get(id(1)), o.len()), (None, 0), "at its final timestamp: executed there");
        assert_eq!(o.waiting_on(1), 0);
    }

    /// A shard that is down holds only the outcomes of transactions it took part in.
    #[test]
    fn a_silent_shard_holds_only_what_it_took_part_in() {
        let mut o = Outcomes::default();
        for seq in 0..100 {
            o.remember(id(seq), Outcome::Executed(10 + seq), &[1], DEFAULT_ANSWER_EXPIRY_US);
        }
        o.remember(id(1_000), Outcome::Executed(20), &[2], DEFAULT_ANSWER_EXPIRY_US);
        o.peer_applied(1, u64::MAX);
        assert_eq!((o.len(), o.waiting_on(2)), (1, 1), "shard 2 has not applied: its one stays");
        assert_eq!(o.get(id(1_000)), Some(&Outcome::Executed(20)));
    }

    /// A refusal stays until the marker is past the coordinator's timestamp plus the expiry,
    /// and an outcome a participant is already past is not kept at all.
    #[test]
    fn a_refusal_stays_until_the_expiry_past_its_timestamp_and_nothing_is_kept_for_shards_past_it() {
        let mut o = Outcomes::default();
        let refused = Outcome::Refused { reason: "full".into(), ts: 1_000 };
        assert_eq!(refused.bound(DEFAULT_ANSWER_EXPIRY_US), 1_001 + DEFAULT_ANSWER_EXPIRY_US);
        o.remember(id(1), refused.clone(), &[3], DEFAULT_ANSWER_EXPIRY_US);
        o.peer_applied(3, 1_000 + DEFAULT_ANSWER_EXPIRY_US);
        assert_eq!(o.get(id(1)), Some(&refused));
        o.peer_applied(3, 1_001 + DEFAULT_ANSWER_EXPIRY_US);
        assert!(o.is_empty());
        o.remember(id(2), Outcome::Executed(500), &[3], DEFAULT_ANSWER_EXPIRY_US);
        o.remember(id(3), Outcome::Executed(500), &[], DEFAULT_ANSWER_EXPIRY_US);
        assert!(o.is_empty(), "shard 3 is past it; a single-shard one has nobody to wait for");
        let far = Outcome::Refused { reason: "x".into(), ts: u64::MAX };
        assert_eq!(far.bound(DEFAULT_ANSWER_EXPIRY_US), u64::MAX, "saturating");
    }

    /// A configured expiry moves a refusal's bound, and what was kept is found under the
    /// bound it was kept by.
    #[test]
    fn a_configured_expiry_sets_how_long_a_refusal_stays() {
        let mut o = Outcomes::default();
        o.remember(id(1), Outcome::Refused { reason: "full".into(), ts: 1_000 }, &[3], 10_000_000);
        o.peer_applied(3, 1_000 + 10_000_000);
        assert_eq!(o.len(), 1);
        o.peer_applied(3, 1_001 + 10_000_000);
        assert!(o.is_empty());
        o.remember(id(2), Outcome::Refused { reason: "full".into(), ts: 2_000 }, &[4], 10_000_000);
        o.forget(id(2));
        assert_eq!((o.len(), o.waiting_on(4)), (0, 0), "forgotten under the bound it was kept by");
    }

    #[test]
    fn the_first_outcome_stays() {
        let mut o = Outcomes::default();
        o.remember(id(1), Outcome::Executed(10), &[1], DEFAULT_ANSWER_EXPIRY_US);
        o.remember(id(1), Outcome::Executed(20), &[1, 2], DEFAULT_ANSWER_EXPIRY_US);
        assert_eq!((o.get(id(1)), o.waiting_on(2)), (Some(&Outcome::Executed(10)), 0));
        o.peer_applied(1, 10);
        assert!(o.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Remember { seq: u64, outcome: Outcome, others: Vec<ShardId> },
        Applied { shard: ShardId, ts: Timestamp },
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let outcome = prop_oneof![
            any::<u64>().prop_map(Outcome::Executed),
            any::<u64>().prop_map(|ts| Outcome::Refused { reason: "r".into(), ts }),
        ];
        prop_oneof![
            (0..16u64, outcome, proptest::collection::btree_set(1..4u32, 0..4))
                .prop_map(|(seq, outcome, others)| Op::Remember { seq, outcome, others: others.into_iter().collect() }),
            (1..4u32, any::<u64>()).prop_map(|(shard, ts)| Op::Applied { shard, ts }),
        ]
    }

    proptest::proptest! {
        /// Against a model, over full-range timestamps: an outcome is kept exactly while one
        /// of its other participants' markers is below its bound, and its first value stays.
        #[test]
        fn kept_exactly_while_some_other_participant_is_below_it(ops in proptest::collection::vec(op(), 0..64)) {
            let mut o = Outcomes::default();
            let mut floors = std::collections::BTreeMap::<ShardId, Timestamp>::new();
            let mut first = std::collections::BTreeMap::<u64, (Outcome, Vec<ShardId>)>::new();
            for op in ops {
                match op {
                    Op::Remember { seq, outcome, others } => {
                        let below = |s: &ShardId| floors.get(s).copied().unwrap_or(0) < outcome.bound(DEFAULT_ANSWER_EXPIRY_US);
                        if o.get(id(seq)).is_none() && others.iter().any(below) {
                            first.insert(seq, (outcome.clone(), others.clone()));
                        }
                        o.remember(id(seq), outcome, &others, DEFAULT_ANSWER_EXPIRY_US);
                    }
                    Op::Applied { shard, ts } => {
                        let f = floors.entry(shard).or_default();
                        *f = (*f).max(ts);
                        o.peer_applied(shard, ts);
                    }
                }
                first.retain(|_, (outcome, others)| {
                    others.iter().any(|s| floors.get(s).copied().unwrap_or(0) < outcome.bound(DEFAULT_ANSWER_EXPIRY_US))
                });
                for seq in 0..16 {
                    proptest::prop_assert_eq!(o.get(id(seq)), first.get(&seq).map(|(outcome, _)| outcome));
                }
                proptest::prop_assert_eq!(o.len(), first.len());
            }
        }
    }
}
