//! Starting a transaction (DESIGN.md rules 1 and 2): stamp it, send the whole transaction to
//! every participant at once, and say which answers are acknowledged (`acked_below`).

use std::sync::Arc;

use super::{fast, CoordOutput, Coordinator, CoordinatorConfig, InFlight};
use crate::msg::ClientMsg;
use crate::progress::Progress;
use crate::types::{ShardId, ShardPiece, TimeUs, Txn, TxnId};

impl Coordinator {
    /// Starts a transaction calling `procedure(args)` over `pieces` (one per participant).
    pub fn submit(
        &mut self,
        now: TimeUs,
        procedure: &str,
        args: Vec<u8>,
        mut pieces: Vec<ShardPiece>,
        out: &mut Vec<CoordOutput>,
    ) -> TxnId {
        assert!(!pieces.is_empty(), "a transaction needs at least one participant");
        pieces.sort_by_key(|p| p.shard);
        let id = TxnId { client: self.config.client, seq: self.next_seq };
        self.next_seq += 1;
        let ts = self.stamp(now, pieces.iter().map(|p| p.shard));
        let txn = Arc::new(Txn { id, procedure: procedure.to_string(), args, pieces, ts });
        let slots = txn.pieces.len();
        let fast = self.fan_out.ask();
        self.stats.fanned_out += u64::from(fast);
        let retry_at_us = now + self.config.retry_timeout_us;
        let flight = InFlight {
            txn,
            submitted_us: now,
            retry_at_us,
            leader_wait: false,
            leader_waits: 0,
            attempts: 1,
            replies: vec![None; slots],
            accepts: vec![fast::Accepts::default(); slots],
            fast,
            reported: None,
        };
        if self.in_flight.is_empty() {
            // Dispatches keep this client known to the participants for now.
            self.keepalive_at_us = now.saturating_add(self.config.keepalive_us);
        }
        self.in_flight_seqs.insert(id.seq);
        self.stats.submitted += 1;
        self.send_dispatch(now, &flight, out);
        self.in_flight.insert(id, flight);
        id
    }

    /// The shell lost its connection to the replica it sends `shard`'s messages to (the
    /// leader may have died): dispatches still waiting for `shard` are sent again soon, to
    /// whichever replica the shell picks next, instead of after the full retry timeout.
    pub fn shard_unreachable(&mut self, now: TimeUs, shard: ShardId) {
        let soon = now + self.config.not_leader_retry_us;
        let (progress, config) = (&self.progress, &self.config);
        for flight in self.in_flight.values_mut() {
            let waiting = (0..flight.replies.len())
                .any(|slot| flight.txn.pieces[slot].shard == shard && !settled(progress, config, flight, slot));
            if waiting && flight.retry_at_us > soon {
                flight.retry_at_us = soon;
                flight.leader_wait = true;
            }
        }
    }

    pub(super) fn acked_below(&self) -> u64 {
        self.in_flight_seqs.first().copied().unwrap_or(self.next_seq)
    }

    pub(super) fn send_dispatch(&self, now: TimeUs, flight: &InFlight, out: &mut Vec<CoordOutput>) {
        let acked_below = self.acked_below();
        for (slot, piece) in flight.txn.pieces.iter().enumerate() {
            if !settled(&self.progress, &self.config, flight, slot) {
                out.push(CoordOutput::Send {
                    shard: piece.shard,
                    msg: ClientMsg::Dispatch { txn: flight.txn.clone(), sent_us: now, acked_below, fast: flight.fast },
                });
            }
        }
    }
}

/// Participant `slot`'s answer counts: there, and its position proven committed (rule 14),
/// or committed on the fast path (`group_sizes`: replicas per shard).
/// An early answer (rule 21) counts only when every participant's answer commits on the
/// fast path: it rests on other shards' proposals that only their super-quorums fix.
pub(super) fn settled(progress: &Progress, config: &CoordinatorConfig, flight: &InFlight, slot: usize) -> bool {
    let Some(r) = flight.replies[slot].as_ref() else { return false };
    if r.early && !config.mutations.early_answers_count_alone {
        return (0..flight.replies.len()).all(|s| fast_settled(config, flight, s));
    }
    r.position.is_none_or(|pos| progress.proven(r.shard, pos)) || fast_settled(config, flight, slot)
}

/// Participant `slot`'s answer committed on the fast path.
pub(super) fn fast_settled(config: &CoordinatorConfig, flight: &InFlight, slot: usize) -> bool {
    let Some(r) = flight.replies[slot].as_ref() else { return false };
    let n = config.group_sizes.get(r.shard as usize).copied().unwrap_or(0);
    flight.accepts[slot].fast_commits(r, flight.txn.ts, n, config.mutations.fast_ignores_order)
}

impl Coordinator {
    /// Every participant's answer counts (see [`settled`]).
    pub(super) fn all_settled(&self, flight: &InFlight) -> bool {
        (0..flight.replies.len()).all(|slot| settled(&self.progress, &self.config, flight, slot))
    }
}
