//! The coordinator's fast-commit rule (DESIGN.md, "The fast path"): a
//! participant's answer counts without a proven position when its leader marked it fast
//! (an order hash, the coordinator's timestamp unmoved) and every other replica of the shard
//! accepted the transaction at that timestamp with the same order hash. Followers' accepts
//! arrive as [`ServerMsg::FastAccept`](crate::msg::ServerMsg::FastAccept).

use crate::msg::TxnReply;
use crate::types::Timestamp;

/// One replica's accept of a transaction on one shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept {
    /// The accepting replica (index from 0).
    pub replica: u32,
    /// Its Raft term when it accepted.
    pub term: u64,
    /// The timestamp it accepted at.
    pub ts: Timestamp,
    /// Its order hash.
    pub order: u64,
}

/// The accepts heard for one participant of one transaction: one per replica (a replica's
/// first accept stands), at most the group's size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accepts(Vec<Accept>);

impl Accepts {
    /// Notes `accept` from a group of `group_size`; a second one from the same replica, or
    /// one past the group's size, changes nothing.
    pub fn note(&mut self, accept: Accept, group_size: u32) {
        if accept.replica >= group_size || self.0.iter().any(|a| a.replica == accept.replica) {
            return;
        }
        self.0.push(accept);
    }

    /// Whether `reply`, the leader's answer, commits on the fast path with these accepts:
    /// the leader marked it fast at the coordinator's `ts`, and `group_size - 1` other
    /// replicas of the leader's term accepted it at `ts` with the leader's order hash. Only
    /// in replicated groups (3 replicas or more): a lone replica's answers are proven as
    /// they leave it. An answer without a position rests on committed records: it needs no
    /// fast path.
    /// `ignore_order` is the mutation `CoordMutations::fast_ignores_order`.
    pub fn fast_commits(&self, reply: &TxnReply, ts: Timestamp, group_size: u32, ignore_order: bool) -> bool {
        let (Some(order), Some(pos)) = (reply.order, reply.position) else { return false };
        if reply.ts != ts || reply.outcome.is_err() || group_size < 3 {
            return false;
        }
        let agreeing =
            self.0.iter().filter(|a| a.term == pos.term && a.ts == ts && (a.order == order || ignore_order)).count();
        agreeing + 1 >= group_size as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::TxnError;
    use crate::types::TxnId;

    fn reply(ts: Timestamp, order: Option<u64>) -> TxnReply {
        TxnReply {
            id: TxnId { client: 1, seq: 1 },
            shard: 0,
            ts,
            outcome: Ok(vec![]),
            watermark: ts,
            arrival_delta_us: 0,
            rounds: 0,
            position: Some(crate::progress::LogPos { term: 1, index: 9 }),
            order,
        }
    }

    #[test]
    fn fast_only_with_every_other_replica_agreeing_on_timestamp_and_order() {
        let mut a = Accepts::default();
        let leader = reply(100, Some(7));
        a.note(Accept { replica: 1, term: 1, ts: 100, order: 7 }, 3);
        assert!(!a.fast_commits(&leader, 100, 3, false), "one follower of two");
        a.note(Accept { replica: 1, term: 1, ts: 100, order: 7 }, 3);
        assert!(!a.fast_commits(&leader, 100, 3, false), "the same follower twice counts once");
        a.note(Accept { replica: 2, term: 1, ts: 100, order: 8 }, 3);
        assert!(!a.fast_commits(&leader, 100, 3, false), "another order before it");
        let mut b = Accepts::default();
        b.note(Accept { replica: 1, term: 1, ts: 100, order: 7 }, 3);
        b.note(Accept { replica: 2, term: 1, ts: 100, order: 7 }, 3);
        assert!(b.fast_commits(&leader, 100, 3, false));
        assert!(!b.fast_commits(&reply(100, None), 100, 3, false), "the leader did not mark it fast");
        assert!(!b.fast_commits(&reply(120, Some(7)), 100, 3, false), "the leader moved it");
        let mut failed = reply(100, Some(7));
        failed.outcome = Err(TxnError::Busy("x".into()));
        assert!(!b.fast_commits(&failed, 100, 3, false));
        let mut newer = reply(100, Some(7));
        newer.position = Some(crate::progress::LogPos { term: 2, index: 9 });
        assert!(!b.fast_commits(&newer, 100, 3, false), "accepts of term 1 and a leader of term 2");
        let mut committed = reply(100, Some(7));
        committed.position = None;
        assert!(!b.fast_commits(&committed, 100, 3, false), "committed already: no fast path needed");
        b.note(Accept { replica: 9, term: 1, ts: 100, order: 7 }, 3);
        assert_eq!(b.0.len(), 2, "no replica 9 in a group of 3");
        // A group of one has no fast path (its answers are proven as they leave it).
        assert!(!Accepts::default().fast_commits(&leader, 100, 1, false));
    }
}
