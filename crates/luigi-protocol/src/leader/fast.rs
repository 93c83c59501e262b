//! The leader's side of the fast path (DESIGN.md, "The fast path"):
//! which answers are fast-eligible (F1, F2) and their order hashes. Kept only when the
//! cluster runs the fast path ([`LeaderConfig::fast_path`](super::LeaderConfig::fast_path)).
//!
//! - F1: the transaction kept the coordinator's timestamp: admitted unmoved, and for a
//!   cross-shard one, decided there (every proposal at it, rule 19; a decision that
//!   raises it moves it, [`FastOrder::moved`]).
//! - F2: no conflicting transaction with a higher timestamp was admitted before it, so its
//!   `PREPARE` precedes, in the log, every conflicting `PREPARE` above it; recovery rule R2
//!   relies on it.
//! - C: every predecessor in the order table (transitively, rule H) is clean: fast-eligible
//!   with clean predecessors itself. Its answer left first, marked fast, so it is committed
//!   or voted for, and a new leader recovers it with the transaction (DESIGN.md, "Rules C
//!   and H").
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

use super::Mutations;
use crate::fast::{hash_of, hashed_keys, AcceptRecord, RecentOrder};
use luigi_txn::keyhash::IdMap;
use luigi_txn::types::{KeySet, Timestamp, Txn, TxnId};

/// Fast-path bookkeeping of a leader.
#[derive(Debug, Default)]
pub struct FastOrder {
    order: RecentOrder,
    /// Admitted transactions that are fast-eligible and not executed yet.
    eligible: IdMap<Arc<Txn>>,
    /// Executed fast-eligible transactions whose answer is not sent yet: their order hash.
    hashes: IdMap<(u64, Arc<Txn>)>,
    /// Fast answers sent whose `PREPARE` is not known committed: this leader's votes.
    votes: IdMap<AcceptRecord>,
    /// Executed entries of the order table that were clean (rule C): fast-eligible, with
    /// every predecessor clean; by their timestamp, to prune with the table.
    clean: IdMap<Timestamp>,
    /// The mutations of the fast path's leader rules.
    mutations: Mutations,
}

impl FastOrder {
    /// An empty table, with the leader's `mutations` (those of F2, C and H apply here).
    pub fn new(mutations: &Mutations) -> Self {
        FastOrder { mutations: *mutations, ..FastOrder::default() }
    }

    /// `txn` was admitted here at `proposal` on `keys`; returns whether it is fast-eligible:
    /// its client `asked` for the fast path (rule 20), and F1 and F2 hold. Recorded either
    /// way (it is a predecessor of what comes later).
    pub fn admitted(&mut self, txn: &Arc<Txn>, proposal: Timestamp, keys: &KeySet, asked: bool) -> bool {
        let keys = hashed_keys(keys);
        // F2 is looked up only for a transaction that asked (most do not where it pays not to).
        let eligible = asked
            && proposal == txn.ts
            && (self.mutations.fast_ignores_f2 || !self.order.conflict_above(txn.id, proposal, &keys));
        self.order.record(txn.id, proposal, keys);
        if eligible {
            self.eligible.insert(txn.id, txn.clone());
        }
        eligible
    }

    /// `id`'s timestamp moved to `ts` (a decision raised it): no longer fast.
    pub fn moved(&mut self, id: TxnId, ts: Timestamp, keys: &KeySet) {
        self.eligible.remove(&id);
        self.order.record(id, ts, hashed_keys(keys));
    }

    /// `id` will not execute here (refused or aborted).
    pub fn dropped(&mut self, id: TxnId) {
        self.eligible.remove(&id);
        self.order.remove(id);
    }

    /// `id` executed at `ts` on `keys`: a fast-eligible one whose predecessors here (rule H:
    /// transitively) are all clean is clean itself (rule C) and gets its order hash. Its
    /// predecessors all executed before it (rule 5), so their cleanliness is settled.
    /// Returns whether it was clean, or `None` when it was not fast-eligible.
    pub fn executed(&mut self, id: TxnId, ts: Timestamp, keys: &KeySet) -> Option<bool> {
        let txn = self.eligible.remove(&id)?;
        let Some(found) = self.clean_predecessors(id, ts, keys) else { return Some(false) };
        self.clean.insert(id, ts);
        self.hashes.insert(id, (hash_of(&found), txn));
        Some(true)
    }

    /// The early answer of the fast-eligible `id`, not executed yet, at `ts` on `keys`
    /// (DESIGN.md rule 21): its order hash, and the latest timestamp among its predecessors
    /// (0: none), if every one of them is clean (rule C). Called only once every conflicting
    /// transaction before it has executed, so the predecessors are settled as for
    /// [`FastOrder::executed`].
    pub fn early(&self, id: TxnId, ts: Timestamp, keys: &KeySet) -> Option<(u64, Timestamp)> {
        if !self.eligible.contains_key(&id) {
            return None;
        }
        let found = self.clean_predecessors(id, ts, keys)?;
        Some((hash_of(&found), found.iter().map(|(_, at)| *at).max().unwrap_or(0)))
    }

    /// `id`'s predecessors at `ts` (rule H: transitively), if all are clean (rule C).
    fn clean_predecessors(&self, id: TxnId, ts: Timestamp, keys: &KeySet) -> Option<Vec<(TxnId, Timestamp)>> {
        let m = self.mutations;
        let transitive = !m.fast_hashes_direct_predecessors;
        // Admitted, so recorded (its keys hashed then) until an `Applied` marker above it,
        // which comes after its execution.
        debug_assert!(self.order.holds(id), "an eligible transaction is in the order table");
        // Rule C: the walk stops at the first predecessor that is not clean.
        let clean = &self.clean;
        let unclean = |p: TxnId| !m.fast_ignores_unclean_predecessors && !clean.contains_key(&p);
        if self.order.holds(id) {
            self.order.predecessors_of_unless(id, ts, transitive, unclean)
        } else {
            let found = self.order.predecessors(id, ts, &hashed_keys(keys), transitive);
            found.filter(|found| found.iter().all(|(p, _)| !unclean(*p)))
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

    /// Whether this leader holds a vote for `id` (its `PREPARE` not known committed).
    pub fn voted(&self, id: TxnId) -> bool {
        self.votes.contains_key(&id)
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
        self.clean.retain(|_, at| *at > ts);
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
    use luigi_txn::types::ShardPiece;

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
    fn only_unmoved_transactions_admitted_below_nothing_conflicting_are_fast() {
        let mut f = FastOrder::default();
        let a = txn(1, 100, &[0], "k");
        assert!(f.admitted(&a, 100, &keys(&a), true), "F1 and F2 hold");
        let moved = txn(2, 90, &[0], "x");
        assert!(!f.admitted(&moved, 95, &keys(&moved), true), "F1: moved");
        let cross = txn(3, 300, &[0, 1], "y");
        assert!(f.admitted(&cross, 300, &keys(&cross), true), "F1 at admission: cross-shard too (rule 19)");
        f.moved(cross.id, 310, &keys(&cross));
        assert_eq!(f.executed(cross.id, 310, &keys(&cross)), None, "no longer eligible");
        assert_eq!(f.take_hash(cross.id), None, "F1: the decision raised it");
        let below = txn(4, 50, &[0], "k");
        assert!(!f.admitted(&below, 50, &keys(&below), true), "F2: a conflicting transaction above was admitted first");
        let other_key = txn(5, 50, &[0], "z");
        assert!(f.admitted(&other_key, 50, &keys(&other_key), true));
        // Executed in timestamp order: 4 (not fast) then 1, which read 4's writes: 4 is not
        // clean, so neither is 1 (rule C).
        assert_eq!(f.executed(below.id, 50, &keys(&below)), None, "never eligible");
        assert_eq!(f.executed(a.id, 100, &keys(&a)), Some(false), "eligible, not clean");
        assert_eq!(f.take_hash(below.id), None);
        assert_eq!(f.take_hash(a.id), None, "rule C: a predecessor was not clean");
        // 5 is clean; 6 after it on z is fast, its hash over 5; then taken once.
        assert_eq!(f.executed(other_key.id, 50, &keys(&other_key)), Some(true), "clean");
        let after = txn(6, 120, &[0], "z");
        assert!(f.admitted(&after, 120, &keys(&after), true));
        f.executed(after.id, 120, &keys(&after));
        assert_eq!(f.take_hash(other_key.id), Some((0, other_key.clone())));
        assert_eq!(f.take_hash(after.id), Some((entry_hash(other_key.id, 50), after.clone())));
        assert_eq!(f.take_hash(after.id), None, "taken once");
    }

    #[test]
    fn rule_20_a_transaction_that_did_not_ask_is_not_fast_but_is_a_predecessor_of_those_that_did() {
        let mut f = FastOrder::default();
        let quiet = txn(1, 100, &[0], "k");
        assert!(!f.admitted(&quiet, 100, &keys(&quiet), false), "F1 and F2 hold, but it did not ask");
        f.executed(quiet.id, 100, &keys(&quiet));
        assert_eq!(f.take_hash(quiet.id), None);
        // One that asked after it on k: not clean behind it (rule C), yet its hash covers it.
        let next = txn(2, 200, &[0], "k");
        assert!(f.admitted(&next, 200, &keys(&next), true));
        f.executed(next.id, 200, &keys(&next));
        assert_eq!(f.take_hash(next.id), None, "rule C: its predecessor was not fast");
        let below = txn(3, 50, &[0], "k");
        assert!(!f.admitted(&below, 50, &keys(&below), true), "F2 sees the quiet one above it");
    }

    #[test]
    fn rule_c_is_the_mutations_to_break() {
        let (below, a) = (txn(4, 50, &[0], "k"), txn(1, 100, &[0], "k"));
        let run = |mutations: &Mutations| {
            let mut f = FastOrder::new(mutations);
            f.admitted(&a, 100, &keys(&a), true);
            f.admitted(&below, 50, &keys(&below), true);
            f.executed(below.id, 50, &keys(&below));
            f.executed(a.id, 100, &keys(&a));
            f.take_hash(a.id).map(|(hash, _)| hash)
        };
        assert_eq!(run(&Mutations::default()), None);
        let m = Mutations { fast_ignores_unclean_predecessors: true, ..Mutations::default() };
        assert_eq!(run(&m), Some(entry_hash(below.id, 50)));
    }

    #[test]
    fn moves_drops_and_markers_keep_the_table_to_what_can_still_precede() {
        let mut f = FastOrder::default();
        let a = txn(1, 100, &[0], "k");
        let b = txn(2, 200, &[0], "k");
        assert!(f.admitted(&a, 100, &keys(&a), true));
        assert!(f.admitted(&b, 200, &keys(&b), true));
        f.moved(a.id, 250, &keys(&a));
        f.executed(b.id, 200, &keys(&b));
        assert_eq!(f.take_hash(b.id).map(|(hash, _)| hash), Some(0), "a moved above b");
        f.executed(a.id, 250, &keys(&a));
        assert_eq!(f.take_hash(a.id), None, "a moved: not fast");
        let c = txn(3, 300, &[0], "k");
        assert!(f.admitted(&c, 300, &keys(&c), true));
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
    use super::super::{LeaderConfig, LeaderWithLog};
    use crate::fast::entry_hash;
    use crate::log::LocalLog;

    use luigi_store::Store;

    fn leader(fast_path: bool) -> LeaderWithLog<LocalLog> {
        let mut config = LeaderConfig::new(0, 2);
        config.fast_path = fast_path;
        LeaderWithLog::new(config, LocalLog::default(), Store::new(), luigi_workloads::procedures::builtins())
    }

    #[test]
    fn answers_of_unmoved_transactions_carry_their_order_hash_and_others_none() {
        let mut l = leader(true);
        // 1 at 100 (early: unmoved), 2 at 50 arrives late (moved to 60), 3 at 200 reads
        // what 1 wrote, 4 at 150 conflicts with 3 admitted above it (F2), so 3, which reads
        // 4's write too, is not clean (rule C); nor is 5, which reads what the moved 2
        // wrote. 8 at 120 and 7 at 290 on key 3 are clean, 7's hash over 8.
        let mut out = dispatch(&mut l, 10, &txn(1, 100, &[(0, 1, Some(7))]));
        out.extend(dispatch(&mut l, 60, &txn(2, 50, &[(0, 2, Some(8))])));
        out.extend(dispatch(&mut l, 61, &txn(3, 200, &[(0, 1, None)])));
        out.extend(dispatch(&mut l, 62, &txn(4, 150, &[(0, 1, Some(9))])));
        out.extend(dispatch(&mut l, 63, &txn(5, 250, &[(0, 2, None)])));
        out.extend(dispatch(&mut l, 64, &txn(8, 120, &[(0, 3, Some(1))])));
        out.extend(dispatch(&mut l, 65, &txn(7, 290, &[(0, 3, Some(2))])));
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
                (3, 200, None),
                (4, 150, None),
                (5, 250, None),
                (7, 290, Some(entry_hash(id(8), 120))),
                (8, 120, Some(0)),
            ]
        );
        // Without the fast path nothing carries one.
        let mut off = leader(false);
        dispatch(&mut off, 10, &txn(1, 100, &[(0, 1, Some(7))]));
        let r = replies(&tick(&mut off, 200));
        assert_eq!(r.iter().map(|r| r.order).collect::<Vec<_>>(), vec![None]);
    }
}
