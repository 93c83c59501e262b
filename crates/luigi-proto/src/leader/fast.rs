//! The leader's side of the fast path (DESIGN.md, "The fast path"):
//! which answers are fast-eligible (F1, F2) and their order hashes. Kept only when the
//! cluster runs the fast path ([`LeaderConfig::fast_path`](super::LeaderConfig::fast_path)).
//!
//! - F1: the transaction kept the coordinator's timestamp (single-shard for now: a
//!   cross-shard one would also need every leader to decide it there in one round).
//! - F2: no conflicting transaction with a higher timestamp was admitted before it, so its
//!   `PREPARE` precedes, in the log, every conflicting `PREPARE` above it; recovery rule R2
//!   relies on it.
//!
//! A fast answer is this leader's vote for the transaction at its timestamp. Until its
//! `PREPARE` is known committed, the vote is kept here and written to the accept log before
//! the answer leaves ([`FastOrder::vote`]), so a new leader's recovery reads it even if the
//! `PREPARE` is lost from this replica's log (DESIGN.md, the fast path, "the leader's vote").
//!
//! The order table holds what this leader admitted (moved when a decision raises a
//! timestamp, dropped when refused or aborted) and is pruned at each committed `Applied`
//! marker. By the time a transaction executes, every conflicting entry before it has
//! executed (rule 5), so its order hash is over its executed recent predecessors.

use std::sync::Arc;

use crate::fast::{hashed_keys, AcceptRecord, RecentOrder};
use crate::types::{KeySet, Timestamp, Txn, TxnId};
use crate::Map;

/// Fast-path bookkeeping of a leader.
#[derive(Debug, Default)]
pub struct FastOrder {
    order: RecentOrder,
    /// Admitted transactions that are fast-eligible and not executed yet.
    eligible: Map<TxnId, Arc<Txn>>,
    /// Executed fast-eligible transactions whose answer is not sent yet: their order hash.
    hashes: Map<TxnId, (u64, Arc<Txn>)>,
    /// Fast answers sent whose `PREPARE` is not known committed: this leader's votes.
    votes: Map<TxnId, AcceptRecord>,
    /// The mutation `Mutations::fast_ignores_f2`.
    ignore_f2: bool,
}

impl FastOrder {
    /// An empty table; `ignore_f2` is the mutation `Mutations::fast_ignores_f2`.
    pub fn new(ignore_f2: bool) -> Self {
        FastOrder { ignore_f2, ..FastOrder::default() }
    }

    /// `txn` was admitted here at `proposal` on `keys`; returns whether it is fast-eligible.
    pub fn admitted(&mut self, txn: &Arc<Txn>, proposal: Timestamp, keys: &KeySet) -> bool {
        let keys = hashed_keys(keys);
        let f2 = self.ignore_f2 || !self.order.conflict_above(txn.id, proposal, &keys);
        let eligible = !txn.is_cross_shard() && proposal == txn.ts && f2;
        self.order.record(txn.id, proposal, &keys);
        if eligible {
            self.eligible.insert(txn.id, txn.clone());
        }
        eligible
    }

    /// `id`'s timestamp moved to `ts` (a decision raised it): no longer fast.
    pub fn moved(&mut self, id: TxnId, ts: Timestamp, keys: &KeySet) {
        self.eligible.remove(&id);
        self.order.record(id, ts, &hashed_keys(keys));
    }

    /// `id` will not execute here (refused or aborted).
    pub fn dropped(&mut self, id: TxnId) {
        self.eligible.remove(&id);
        self.order.remove(id);
    }

    /// `id` executed at `ts` on `keys`: a fast-eligible one gets its order hash.
    pub fn executed(&mut self, id: TxnId, ts: Timestamp, keys: &KeySet) {
        if let Some(txn) = self.eligible.remove(&id) {
            let hash = self.order.order_hash(id, ts, &hashed_keys(keys));
            self.hashes.insert(id, (hash, txn));
        }
    }

    /// The order hash `id`'s answer carries, if it is fast, with the transaction (for the
    /// vote); taken once (a resent answer goes without it and takes rule 14's path).
    pub fn take_hash(&mut self, id: TxnId) -> Option<(u64, Arc<Txn>)> {
        self.hashes.remove(&id)
    }

    /// A fast answer to `txn` at `ts` is about to leave while its `PREPARE` is not known
    /// committed: this leader's vote, kept until the `PREPARE` commits. Returns the accept
    /// record to make durable before the answer leaves.
    pub fn vote(&mut self, txn: Arc<Txn>, ts: Timestamp) -> AcceptRecord {
        let record = AcceptRecord { txn, ts };
        self.votes.insert(record.txn.id, record.clone());
        record
    }

    /// `id`'s `PREPARE` committed: every later leader's log holds it (rule R1), so its vote
    /// is no longer needed.
    pub fn prepare_committed(&mut self, id: TxnId) {
        self.votes.remove(&id);
    }

    /// The votes whose `PREPARE` is not known committed, in `(ts, id)` order (what a new
    /// leader's recovery must read from this replica).
    pub fn votes(&self) -> Vec<AcceptRecord> {
        let mut out: Vec<AcceptRecord> = self.votes.values().cloned().collect();
        out.sort_by_key(|r| (r.ts, r.txn.id));
        out
    }

    /// A committed `Applied` marker at `ts`: entries at or below it are committed and
    /// executed everywhere they will be.
    pub fn applied(&mut self, ts: Timestamp) {
        self.order.prune_to(ts);
    }

    /// Entries in the order table.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether the order table is empty.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::entry_hash;
    use crate::types::ShardPiece;

    fn txn(seq: u64, ts: Timestamp, shards: &[u32], key: &str) -> Arc<Txn> {
        let keys = KeySet::new(vec![], vec![key.as_bytes().to_vec()]);
        Arc::new(Txn {
            id: TxnId { client: 2, seq },
            procedure: "kv".into(),
            args: vec![],
            pieces: shards.iter().map(|s| ShardPiece { shard: *s, keys: keys.clone() }).collect(),
            ts,
        })
    }

    fn keys(t: &Txn) -> KeySet {
        t.pieces[0].keys.clone()
    }

    #[test]
    fn only_unmoved_single_shard_transactions_admitted_below_nothing_conflicting_are_fast() {
        let mut f = FastOrder::default();
        let a = txn(1, 100, &[0], "k");
        assert!(f.admitted(&a, 100, &keys(&a)), "F1 and F2 hold");
        let moved = txn(2, 90, &[0], "x");
        assert!(!f.admitted(&moved, 95, &keys(&moved)), "F1: moved");
        let cross = txn(3, 300, &[0, 1], "y");
        assert!(!f.admitted(&cross, 300, &keys(&cross)), "F1: cross-shard, not yet");
        let below = txn(4, 50, &[0], "k");
        assert!(!f.admitted(&below, 50, &keys(&below)), "F2: a conflicting transaction above was admitted first");
        let other_key = txn(5, 50, &[0], "z");
        assert!(f.admitted(&other_key, 50, &keys(&other_key)));
        // Executed in timestamp order: 4 (not fast) then 1, whose hash covers 4.
        f.executed(below.id, 50, &keys(&below));
        f.executed(a.id, 100, &keys(&a));
        assert_eq!(f.take_hash(below.id), None);
        assert_eq!(f.take_hash(a.id), Some((entry_hash(below.id, 50), a.clone())));
        assert_eq!(f.take_hash(a.id), None, "taken once");
    }

    #[test]
    fn moves_drops_and_markers_keep_the_table_to_what_can_still_precede() {
        let mut f = FastOrder::default();
        let a = txn(1, 100, &[0], "k");
        let b = txn(2, 200, &[0], "k");
        assert!(f.admitted(&a, 100, &keys(&a)));
        assert!(f.admitted(&b, 200, &keys(&b)));
        f.moved(a.id, 250, &keys(&a));
        f.executed(b.id, 200, &keys(&b));
        assert_eq!(f.take_hash(b.id).map(|(hash, _)| hash), Some(0), "a moved above b");
        f.executed(a.id, 250, &keys(&a));
        assert_eq!(f.take_hash(a.id), None, "a moved: not fast");
        let c = txn(3, 300, &[0], "k");
        assert!(f.admitted(&c, 300, &keys(&c)));
        f.dropped(c.id);
        f.applied(200);
        assert_eq!(f.len(), 1, "only a (at 250) is left");
    }

    #[test]
    fn a_vote_is_kept_until_its_prepare_commits() {
        let mut f = FastOrder::default();
        let (a, b) = (txn(1, 100, &[0], "k"), txn(2, 50, &[0], "x"));
        let record = f.vote(a.clone(), 100);
        assert_eq!(record, AcceptRecord { txn: a.clone(), ts: 100 });
        f.vote(b.clone(), 50);
        assert_eq!(f.votes(), vec![AcceptRecord { txn: b.clone(), ts: 50 }, record], "in (ts, id) order");
        f.prepare_committed(b.id);
        assert_eq!(f.votes().len(), 1);
        f.prepare_committed(a.id);
        assert!(f.votes().is_empty());
    }
}

/// The order table inside a leader: which answers carry an order hash.
#[cfg(test)]
mod transcript {
    use super::super::tests::replies;
    use super::super::tests_common::{dispatch, id, tick, txn};
    use super::super::{LeaderConfig, ShardLeader};
    use crate::fast::entry_hash;
    use crate::log::LocalLog;
    use crate::procedure::Registry;
    use luigi_store::Store;

    fn leader(fast_path: bool) -> ShardLeader<LocalLog> {
        let mut config = LeaderConfig::new(0, 2);
        config.fast_path = fast_path;
        ShardLeader::new(config, LocalLog::default(), Store::new(), Registry::with_builtins())
    }

    #[test]
    fn answers_of_unmoved_transactions_carry_their_order_hash_and_others_none() {
        let mut l = leader(true);
        // 1 at 100 (early: unmoved), 2 at 50 arrives late (moved to 60), 3 at 200 reads
        // what 1 wrote, 4 at 150 conflicts with 3 admitted above it (F2).
        let mut out = dispatch(&mut l, 10, &txn(1, 100, &[(0, 1, Some(7))]));
        out.extend(dispatch(&mut l, 60, &txn(2, 50, &[(0, 2, Some(8))])));
        out.extend(dispatch(&mut l, 61, &txn(3, 200, &[(0, 1, None)])));
        out.extend(dispatch(&mut l, 62, &txn(4, 150, &[(0, 1, Some(9))])));
        for now in [100, 150, 200, 300] {
            out.extend(tick(&mut l, now));
        }
        let mut got: Vec<_> = replies(&out).into_iter().map(|r| (r.id.seq, r.ts, r.order)).collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (1, 100, Some(0)),
                (2, 60, None),
                (3, 200, Some(entry_hash(id(1), 100) ^ entry_hash(id(4), 150))),
                (4, 150, None),
            ]
        );
        // Without the fast path nothing carries one.
        let mut off = leader(false);
        dispatch(&mut off, 10, &txn(1, 100, &[(0, 1, Some(7))]));
        let r = replies(&tick(&mut off, 200));
        assert_eq!(r.iter().map(|r| r.order).collect::<Vec<_>>(), vec![None]);
    }
}
