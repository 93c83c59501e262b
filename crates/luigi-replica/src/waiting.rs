//! Dispatches that reach a replica while its shard has no serving leader it knows of: during
//! an election, or while it has won one and waits for its first commit. Answering
//! `NotLeader` at once sends the client around the group a wide-area round trip per guess,
//! each to a replica that does not know the leader yet either; holding the dispatch instead
//! lets the new leader admit it the moment it serves, and lets any other replica answer with
//! the new leader's name the moment it hears of it.
//!
//! Bounded in count and in time: a full queue, or a dispatch held past
//! [`WAITING_US_MAX`], is answered `NotLeader` without a hint (the client tries the next
//! replica), so nothing waits here for good and nothing is dropped without an answer.

use std::collections::VecDeque;
use std::sync::Arc;

use luigi_txn::msg::{ClientMsg, ServerMsg, TxnReply};
use luigi_txn::types::{ClientId, ShardId, TimeUs, Txn};

/// Dispatches held at most.
pub const WAITING_MAX: usize = 4096;
/// How long a dispatch is held at most (a wide-area election takes about a second).
pub const WAITING_US_MAX: TimeUs = 2_000_000;

/// A dispatch held by [`Waiting`].
#[derive(Debug)]
pub struct Held {
    /// When it arrived.
    pub arrived: TimeUs,
    /// Who sent it.
    pub client: ClientId,
    /// The transaction.
    pub txn: Arc<Txn>,
    /// The client's send clock.
    pub sent_us: TimeUs,
    /// The client's acknowledgement (see [`ClientMsg::Dispatch`]).
    pub acked_below: u64,
    /// Whether the client asked for the fast path (see [`ClientMsg::Dispatch`]).
    pub fast: bool,
}

impl Held {
    /// The dispatch as it would have arrived at `now`: its `sent_us` moves later by the time
    /// it waited, so the one-way delay the answer reports (arrival minus send) is the
    /// network's, not the election's, and the client's delay estimate (and the timestamps it
    /// picks) stay what the links warrant.
    pub fn dispatch(self, now: TimeUs) -> (ClientId, ClientMsg) {
        let sent_us = self.sent_at(now);
        (self.client, ClientMsg::Dispatch { txn: self.txn, sent_us, acked_below: self.acked_below, fast: self.fast })
    }

    /// `NotLeader`, naming `leader`, to its client, from a replica of `shard`, at `now`.
    pub fn not_leader(self, shard: ShardId, leader: Option<u32>, now: TimeUs) -> (ClientId, ServerMsg) {
        let reply = TxnReply::not_leader(self.txn.id, shard, leader, now, self.sent_at(now));
        (self.client, ServerMsg::Reply(reply))
    }

    /// The send time that makes an arrival at `now` show the network's delay only.
    fn sent_at(&self, now: TimeUs) -> TimeUs {
        self.sent_us.saturating_add(now.saturating_sub(self.arrived))
    }
}

/// Dispatches waiting for this replica to know its shard's leader, oldest first.
#[derive(Debug, Default)]
pub struct Waiting {
    queue: VecDeque<Held>,
}

impl Waiting {
    /// Holds `held`, or gives it back when the queue is full.
    pub fn hold(&mut self, held: Held) -> Result<(), Held> {
        if self.queue.len() >= WAITING_MAX {
            return Err(held);
        }
        self.queue.push_back(held);
        Ok(())
    }

    /// Every held dispatch, oldest first, for the leader this replica now knows (or is).
    pub fn release(&mut self) -> impl Iterator<Item = Held> + '_ {
        self.queue.drain(..)
    }

    /// The dispatches held longer than [`WAITING_US_MAX`] at `now`.
    pub fn expired(&mut self, now: TimeUs) -> Vec<Held> {
        let mut out = Vec::new();
        while self.queue.front().is_some_and(|h| now.saturating_sub(h.arrived) > WAITING_US_MAX) {
            out.push(self.queue.pop_front().expect("checked"));
        }
        out
    }

    /// Dispatches held.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_txn::msg::TxnError;
    use luigi_txn::types::TxnId;

    fn held(seq: u64, arrived: TimeUs, sent_us: TimeUs) -> Held {
        let txn = Txn { id: TxnId { client: 1, seq }, procedure: "noop".into(), args: vec![], pieces: vec![], ts: 1 };
        Held { arrived, client: 7, txn: Arc::new(txn), sent_us, acked_below: 0, fast: false }
    }

    #[test]
    fn released_dispatches_report_the_network_delay_not_the_wait() {
        let mut w = Waiting::default();
        w.hold(held(1, 1_000, 900)).unwrap();
        w.hold(held(2, 1_500, 1_400)).unwrap();
        let sent: Vec<TimeUs> = w
            .release()
            .map(|h| match h.dispatch(3_000) {
                (7, ClientMsg::Dispatch { sent_us, .. }) => sent_us,
                other => panic!("{other:?}"),
            })
            .collect();
        // Arrival (3000) minus the moved send time is the original 100 us each.
        assert_eq!(sent.iter().map(|s| 3_000 - s).collect::<Vec<_>>(), vec![100, 100]);
        assert!(w.is_empty());
    }

    #[test]
    fn a_send_time_at_the_end_of_the_range_saturates_instead_of_overflowing() {
        // Found by luigi-node's fuzz_group: a client-chosen send time near u64::MAX.
        let (_, msg) = held(1, 0, u64::MAX - 5).dispatch(1_000);
        assert!(matches!(msg, ClientMsg::Dispatch { sent_us: u64::MAX, .. }), "{msg:?}");
        let (_, ServerMsg::Reply(reply)) = held(2, 0, u64::MAX).not_leader(0, None, 1_000) else { unreachable!() };
        assert_eq!(reply.id, TxnId { client: 1, seq: 2 });
    }

    #[test]
    fn the_queue_is_bounded_in_count_and_time_and_answers_what_it_lets_go() {
        let mut w = Waiting::default();
        for seq in 0..WAITING_MAX as u64 {
            w.hold(held(seq, seq, 0)).unwrap();
        }
        assert!(w.hold(held(u64::MAX, 0, 0)).is_err(), "full");
        let old = w.expired(WAITING_US_MAX + 10);
        assert_eq!(old.len(), 10, "held since 0..=9, more than the bound at {}", WAITING_US_MAX + 10);
        assert_eq!(w.len(), WAITING_MAX - 10);
        let (client, msg) = old.into_iter().next().unwrap().not_leader(3, Some(2), WAITING_US_MAX + 10);
        let ServerMsg::Reply(reply) = msg else { panic!("{msg:?}") };
        assert_eq!((client, reply.shard, reply.outcome), (7, 3, Err(TxnError::NotLeader { hint: Some(2) })));
        assert_eq!(reply.arrival_delta_us, 0, "sent at 0, arrived at 0: the wait is not a delay");
    }
}
