//! The cross-shard fast path at a receiving leader (DESIGN.md rule 18): another shard's
//! proposal marked fast may be used before its proof once every follower of the proposer's
//! term accepted the transaction at the proposal. Every replica of that shard then holds a
//! vote for it at that timestamp (the proposer's own is durable before the marked proposal
//! leaves, rule 16), so any later leader there recovers it at the same timestamp (R3) and
//! the maximum of the proposals cannot rise.
//!
//! This file keeps the bookkeeping: the marked proposals held for their proof, and the
//! accepts the other shards' followers sent here (rule 17). Both are bounded, and pruned
//! once this leader's watermark passes their timestamp (losing one costs only speed: the
//! proposal's proof still comes).

use std::collections::BTreeMap;

use luigi_txn::progress::LogPos;
use luigi_txn::types::{ShardId, Timestamp, TxnId};

/// One follower's accept: (replica, its term, the timestamp).
type Accept = (u32, u64, Timestamp);

/// Marked proposals and the accepts that make them usable early.
#[derive(Debug, Default)]
pub(super) struct PeerAccepts {
    /// Accepts by (transaction, the follower's shard), each replica once.
    accepts: BTreeMap<(TxnId, ShardId), Vec<Accept>>,
    /// Marked proposals held for their proof: (transaction, shard) to (position, proposal).
    marked: BTreeMap<(TxnId, ShardId), (LogPos, Timestamp)>,
}

impl PeerAccepts {
    /// Replica `replica` of `shard` (a group of `group_size`) accepted `id` at `ts` in
    /// `term`. Returns the position of a held marked proposal this makes usable. Past `max`
    /// transactions tracked, a new one is not (it waits for its proof).
    pub fn on_accept(
        &mut self,
        shard: ShardId,
        accept: Accept,
        id: TxnId,
        group_size: u32,
        max: usize,
    ) -> Option<LogPos> {
        let key = (id, shard);
        if accept.0 >= group_size || (!self.accepts.contains_key(&key) && self.accepts.len() >= max) {
            return None;
        }
        let heard = self.accepts.entry(key).or_default();
        match heard.iter_mut().find(|(replica, ..)| *replica == accept.0) {
            // A repeat from a later term (the accept is still in its set) replaces it.
            Some(known) if known.1 < accept.1 => *known = accept,
            Some(_) => return None,
            None => heard.push(accept),
        }
        let (at, ts) = *self.marked.get(&key)?;
        self.take_if_usable(key, at, ts, group_size)
    }

    /// `shard`'s proposal `ts` for `id`, marked fast, at the unproven position `at`, is held
    /// for its proof. Returns whether the accepts heard already make it usable (then it is
    /// no longer held here). Past `max` held, it just waits for its proof.
    pub fn on_marked(
        &mut self,
        shard: ShardId,
        at: LogPos,
        id: TxnId,
        ts: Timestamp,
        group_size: u32,
        max: usize,
    ) -> bool {
        let key = (id, shard);
        if self.take_if_usable(key, at, ts, group_size).is_some() {
            return true;
        }
        if self.marked.len() < max {
            self.marked.insert(key, (at, ts));
        }
        false
    }

    /// Rule 18: every follower of the proposer's term (`group_size - 1` replicas of
    /// `at.term`) accepted at the proposal, in a replicated group.
    fn take_if_usable(&mut self, key: (TxnId, ShardId), at: LogPos, ts: Timestamp, group_size: u32) -> Option<LogPos> {
        let heard = self.accepts.get(&key)?;
        let agreeing = heard.iter().filter(|(_, term, at_ts)| *term == at.term && *at_ts == ts).count();
        if group_size < 3 || agreeing + 1 < group_size as usize {
            return None;
        }
        self.accepts.remove(&key);
        self.marked.remove(&key);
        Some(at)
    }

    /// This leader's watermark passed `watermark`: what is at or below it is of no use.
    pub fn prune_to(&mut self, watermark: Timestamp) {
        self.accepts.retain(|_, heard| heard.iter().any(|(_, _, ts)| *ts > watermark));
        self.marked.retain(|_, (_, ts)| *ts > watermark);
    }

    /// The marked proposal of `shard` for `id` held here, not usable yet.
    pub fn marked(&self, id: TxnId, shard: ShardId) -> Option<Timestamp> {
        self.marked.get(&(id, shard)).map(|(_, ts)| *ts)
    }

    /// Transactions tracked (accepts heard, marked proposals held).
    pub fn len(&self) -> (usize, usize) {
        (self.accepts.len(), self.marked.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(seq: u64) -> TxnId {
        TxnId { client: 1, seq }
    }

    const AT: LogPos = LogPos { term: 3, index: 9 };

    #[test]
    fn a_marked_proposal_is_usable_once_every_follower_of_the_proposers_term_accepted_at_it() {
        let mut p = PeerAccepts::default();
        assert!(!p.on_marked(1, AT, id(1), 100, 3, 10), "no accept yet");
        assert_eq!(p.on_accept(1, (1, 3, 100), id(1), 3, 10), None, "one follower of two");
        assert_eq!(p.on_accept(1, (1, 3, 100), id(1), 3, 10), None, "the same follower twice");
        assert_eq!(p.on_accept(1, (2, 2, 100), id(1), 3, 10), None, "an accept of an earlier term");
        assert_eq!(p.on_accept(1, (0, 3, 120), id(1), 3, 10), None, "at another timestamp");
        assert_eq!(p.on_accept(1, (9, 3, 100), id(1), 3, 10), None, "no replica 9 in a group of 3");
        // Another shard's accepts count for that shard only.
        assert_eq!(p.on_accept(2, (2, 3, 100), id(1), 3, 10), None);
        let mut q = PeerAccepts::default();
        q.on_accept(1, (1, 3, 100), id(1), 3, 10);
        assert!(!q.on_marked(1, AT, id(1), 100, 3, 10));
        assert_eq!(q.on_accept(1, (2, 2, 100), id(1), 3, 10), None, "of term 2");
        assert_eq!(q.on_accept(1, (2, 3, 100), id(1), 3, 10), Some(AT), "both followers of term 3 at 100");
        assert_eq!(q.len(), (0, 0), "used: forgotten");
    }

    #[test]
    fn accepts_before_the_proposal_count_and_groups_of_one_have_no_early_use() {
        let mut p = PeerAccepts::default();
        p.on_accept(1, (1, 3, 100), id(1), 3, 10);
        p.on_accept(1, (2, 3, 100), id(1), 3, 10);
        assert!(p.on_marked(1, AT, id(1), 100, 3, 10), "accepts first, then the proposal");
        assert!(!p.on_marked(1, AT, id(2), 100, 1, 10), "a group of one: only its proof counts");
        assert!(!p.on_marked(1, AT, id(3), 200, 3, 10));
        assert!(!p.on_marked(1, AT, id(3), 200, 3, 10), "a different proposal than the accepts");
    }

    #[test]
    fn what_it_holds_is_bounded_and_pruned_by_the_watermark() {
        let mut p = PeerAccepts::default();
        p.on_accept(1, (1, 3, 100), id(1), 3, 1);
        assert_eq!(p.on_accept(1, (1, 3, 100), id(2), 3, 1), None);
        p.on_marked(1, AT, id(3), 300, 3, 1);
        p.on_marked(1, AT, id(4), 300, 3, 1);
        assert_eq!(p.len(), (1, 1), "one of each at most");
        p.prune_to(100);
        assert_eq!(p.len(), (0, 1));
        p.prune_to(300);
        assert_eq!(p.len(), (0, 0));
    }
}
