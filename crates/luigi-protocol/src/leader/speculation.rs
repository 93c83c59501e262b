//! Speculative execution, guarded by log positions (DESIGN.md rule 14).
//!
//! A leader executes a transaction once it is due without waiting for its `PREPARE` to
//! commit. Its result depends on the log up to a position: its own `PREPARE`, and the
//! position of every transaction executed here before it, not yet known committed, whose
//! writes it may have read (transitively: a writer's position already covers what it read).
//! Whoever receives the result (a coordinator) or a proposal sent at admission (another
//! leader) acts on it only once that shard's progress reports prove the position committed.
//! This file keeps the bookkeeping: the positions of uncommitted writes per key, the
//! positions of answers not yet known committed, other shards' proposals waiting for their
//! proof, and `Recover` requests whose answer waits for this shard's own commit.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::log::LogIndex;
use luigi_txn::keyhash::{key_hash, HashKeyMap};
use luigi_txn::progress::{LogPos, Progress};
use luigi_txn::snapshot::ScannedRange;
use luigi_txn::types::{KeySet, ShardId, Timestamp, Txn, TxnId};

use super::ordered_writes::OrderedWrites;
use luigi_txn::Map;

/// A `Recover` request answered once this shard's answer to it is committed.
#[derive(Debug)]
pub(super) struct DeferredRecover {
    pub txn: Arc<Txn>,
    pub from: ShardId,
    pub ts: Timestamp,
}

/// The speculative state of one leader (all of it about its own term's log).
#[derive(Debug, Default)]
pub(super) struct Speculation {
    /// Per key hash, the position of the last write executed here and not known committed.
    writes: HashKeyMap<LogIndex>,
    writes_len_after_prune: usize,
    /// Answers whose position is not known committed, by position, and the position by id.
    answers: BTreeSet<(LogIndex, TxnId)>,
    answer_pos: Map<TxnId, LogIndex>,
    /// Other shards' proposals waiting for their position to be proven: (shard, position,
    /// transaction) to the proposal.
    unproven: BTreeMap<(ShardId, LogPos, TxnId), Timestamp>,
    /// `Recover` requests waiting for the commit of the answer's position, by that position.
    deferred: BTreeMap<(LogIndex, u64), DeferredRecover>,
    deferred_seq: u64,
    /// The same write positions in key order, while the leader keeps versions for snapshot
    /// reads (rule 23 (e): a read that scanned a range names the writes that could fall in it).
    ordered: Option<OrderedWrites>,
}

impl Speculation {
    /// Empty; `ordered`: also keep the write positions in key order.
    pub fn new(ordered: bool) -> Self {
        Speculation { ordered: ordered.then(OrderedWrites::default), ..Speculation::default() }
    }

    /// The position a transaction with `keys`, whose `PREPARE` is at `prepare_index`, depends
    /// on when it executes now (`committed`: what this leader knows committed).
    pub fn position_for(&self, keys: &KeySet, prepare_index: LogIndex, committed: LogIndex) -> LogIndex {
        let read = keys.reads.iter().chain(&keys.writes).filter_map(|k| self.writes.get(&key_hash(k)));
        read.copied().filter(|i| *i > committed).fold(prepare_index, LogIndex::max)
    }

    /// `id` executed here with `keys`, depending on `position`: later readers of its writes
    /// depend on it too, and its answer waits for it.
    pub fn executed(&mut self, id: TxnId, keys: &KeySet, position: LogIndex, committed: LogIndex) {
        if position <= committed {
            return;
        }
        for k in &keys.writes {
            let slot = self.writes.entry(key_hash(k)).or_insert(position);
            *slot = (*slot).max(position);
        }
        if let Some(ordered) = &mut self.ordered {
            ordered.written(keys.writes.iter(), position);
        }
        self.answers.insert((position, id));
        self.answer_pos.insert(id, position);
    }

    /// The position `id`'s answer depends on, while it is not known committed.
    pub fn answer_position(&self, id: TxnId) -> Option<LogIndex> {
        self.answer_pos.get(&id).copied()
    }

    /// The log is committed up to `committed`: forget what that covers, and return the
    /// `Recover` requests that may be answered now.
    pub fn on_committed(&mut self, committed: LogIndex) -> Vec<DeferredRecover> {
        while let Some(&(index, id)) = self.answers.first() {
            if index > committed {
                break;
            }
            self.answers.pop_first();
            self.answer_pos.remove(&id);
        }
        if let Some(ordered) = &mut self.ordered {
            ordered.committed(committed);
        }
        let len = self.writes.len();
        if len >= 2 * self.writes_len_after_prune + 4096 {
            self.writes.retain(|_, index| *index > committed);
            self.writes_len_after_prune = self.writes.len();
        }
        let mut ready = Vec::new();
        while let Some(entry) = self.deferred.first_entry() {
            if entry.key().0 > committed {
                break;
            }
            ready.push(entry.remove());
        }
        ready
    }

    /// Answers `Recover` for `txn` once `position` is committed. False if the bound is
    /// reached (the requester asks again a period later).
    pub fn defer_recover(&mut self, position: LogIndex, d: DeferredRecover, max: usize) -> bool {
        if self.deferred.len() >= max {
            return false;
        }
        self.deferred_seq += 1;
        self.deferred.insert((position, self.deferred_seq), d);
        true
    }

    /// Holds `shard`'s proposal for `id` until `at` is proven. False if the bound is reached
    /// (dropped: the transaction then completes through recovery, whose proposals are
    /// committed).
    pub fn hold_proposal(&mut self, shard: ShardId, at: LogPos, id: TxnId, ts: Timestamp, max: usize) -> bool {
        if self.unproven.len() >= max {
            return false;
        }
        self.unproven.insert((shard, at, id), ts);
        true
    }

    /// The held proposals of `shard` that `progress` now proves, in log order. Proposals of
    /// terms older than the newest one `shard` reported are dropped: a later leader there
    /// re-announces the committed ones (`Recover`).
    pub fn proven_proposals(&mut self, shard: ShardId, progress: &Progress) -> Vec<(TxnId, Timestamp)> {
        let newest = progress.newest_term(shard);
        let lo = (shard, LogPos::default(), TxnId { client: 0, seq: 0 });
        let hi = (shard, LogPos { term: u64::MAX, index: u64::MAX }, TxnId { client: u64::MAX, seq: u64::MAX });
        let mut proven = Vec::new();
        let mut gone = Vec::new();
        for (&(s, at, id), &ts) in self.unproven.range(lo..=hi) {
            if progress.proven(s, at) {
                proven.push((id, ts));
                gone.push((s, at, id));
            } else if at.term < newest {
                gone.push((s, at, id));
            }
        }
        for key in gone {
            self.unproven.remove(&key);
        }
        proven
    }

    /// Takes `shard`'s held proposal for `id` at `at`, to use before its proof (DESIGN.md
    /// rule 18); `None` if it is no longer held (proven and used, or dropped).
    pub fn take_held(&mut self, shard: ShardId, at: LogPos, id: TxnId) -> Option<Timestamp> {
        self.unproven.remove(&(shard, at, id))
    }

    /// Proposals held for proof.
    pub fn unproven_len(&self) -> usize {
        self.unproven.len()
    }

    /// Answers whose position is not known committed.
    pub fn answers_len(&self) -> usize {
        self.answers.len()
    }

    /// The smallest position an answer waits for.
    pub fn min_answer_position(&self) -> Option<LogIndex> {
        self.answers.first().map(|(index, _)| *index)
    }

    /// The highest position of an uncommitted write that could fall in one of `scanned`'s
    /// ranges: from the keys in order when kept, else the highest position any uncommitted
    /// execution rests on (every write's is at or below it).
    pub fn scanned_position(&self, scanned: &[ScannedRange]) -> Option<LogIndex> {
        match (&self.ordered, scanned.is_empty()) {
            (_, true) => None,
            (Some(ordered), false) => ordered.highest_in(scanned),
            (None, false) => self.answers.last().map(|(index, _)| *index),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_txn::progress::ProgressReport;

    fn ks(reads: &[&str], writes: &[&str]) -> KeySet {
        let v = |s: &[&str]| s.iter().map(|k| k.as_bytes().to_vec()).collect();
        KeySet::new(v(reads), v(writes))
    }

    fn id(seq: u64) -> TxnId {
        TxnId { client: 1, seq }
    }

    #[test]
    fn a_reader_of_an_uncommitted_write_depends_on_its_writer() {
        let mut s = Speculation::default();
        assert_eq!(s.position_for(&ks(&["x"], &[]), 5, 0), 5, "nothing uncommitted: its own PREPARE");
        s.executed(id(1), &ks(&[], &["x"]), 9, 0);
        assert_eq!(s.position_for(&ks(&["x"], &[]), 5, 0), 9, "read x, written at 9");
        assert_eq!(s.position_for(&ks(&["y"], &[]), 5, 0), 5, "another key");
        assert_eq!(s.position_for(&ks(&["x"], &[]), 5, 9), 5, "the writer is committed");
        assert_eq!(s.answer_position(id(1)), Some(9));
        assert!(s.on_committed(9).is_empty());
        assert_eq!(s.answer_position(id(1)), None, "committed: the answer needs no proof");
    }

    #[test]
    fn positions_are_transitive_through_writes() {
        let mut s = Speculation::default();
        s.executed(id(1), &ks(&[], &["x"]), 20, 0);
        // Reads x (written at 20) and writes y: whoever reads y depends on 20 too.
        let p = s.position_for(&ks(&["x"], &["y"]), 12, 0);
        assert_eq!(p, 20);
        s.executed(id(2), &ks(&["x"], &["y"]), p, 0);
        assert_eq!(s.position_for(&ks(&["y"], &[]), 13, 0), 20);
    }

    #[test]
    fn proposals_wait_for_their_proof_and_stale_terms_are_dropped() {
        let mut s = Speculation::default();
        let mut progress = Progress::new(&[3, 3], 2);
        s.hold_proposal(1, LogPos { term: 2, index: 7 }, id(1), 100, 16);
        s.hold_proposal(1, LogPos { term: 2, index: 9 }, id(2), 110, 16);
        s.hold_proposal(1, LogPos { term: 1, index: 3 }, id(3), 90, 16);
        assert!(s.proven_proposals(1, &progress).is_empty());
        progress.on_report(&ProgressReport {
            shard: 1,
            replica: 2,
            term: 2,
            pos: LogPos { term: 2, index: 8 },
            committed: false,
        });
        assert_eq!(s.proven_proposals(1, &progress), vec![(id(1), 100)]);
        assert_eq!(s.unproven_len(), 1, "term 1's proposal is dropped once term 2 is reported");
        assert!(!s.hold_proposal(1, LogPos { term: 2, index: 10 }, id(4), 1, 1), "bounded");
    }

    #[test]
    fn deferred_recovers_come_back_in_position_order_once_committed() {
        let mut s = Speculation::default();
        let txn = |seq| Arc::new(Txn { id: id(seq), procedure: "noop".into(), args: vec![], pieces: vec![], ts: 0 });
        assert!(s.defer_recover(8, DeferredRecover { txn: txn(1), from: 1, ts: 5 }, 4));
        assert!(s.defer_recover(6, DeferredRecover { txn: txn(2), from: 1, ts: 5 }, 4));
        assert!(s.on_committed(5).is_empty());
        let ready: Vec<u64> = s.on_committed(8).iter().map(|d| d.txn.id.seq).collect();
        assert_eq!(ready, vec![2, 1]);
    }
}
