//! Early answers (DESIGN.md rule 21): a cross-shard transaction held here only by another
//! shard's marked proposal, not usable yet (rule 18 waits for that shard's followers'
//! accepts, a wide-area hop away when the leaders are near each other), is worked out at
//! once on a copy of what it would read, and the result goes to the coordinator marked
//! `early`. Nothing is executed or decided: the transaction takes its regular path here as
//! before, and the coordinator counts the early answer only if the whole transaction commits
//! on the fast path, whose super-quorums prove that no participant's proposal can change.
//!
//! An early answer is sent only when it equals what the regular execution will return:
//! every proposal is at the coordinator's timestamp (counted, or marked and held), the
//! transaction is fast-eligible here (F1, F2) with clean predecessors (rules C and H) whose
//! answers have left, nothing conflicting is ahead of it in the hold queue, and the clock
//! and the committed floor promise are past its timestamp (nothing new is admitted at or
//! below it, by this leader or a later one, which is what the coordinator's watermark rule
//! needs of this shard).

use super::{LeaderOutput, ShardLeader};
use crate::log::{LogRecord, ReplicatedLog};
use luigi_txn::msg::{ServerMsg, TxnReply};
use luigi_txn::types::{TimeUs, Timestamp, TxnId};

/// Candidates examined at most per turn, oldest first: one that waits (a conflicting
/// transaction ahead of it) is examined again every turn, so the scan is bounded; a
/// candidate past it waits for a later turn, which costs it only its early answer.
pub const EARLY_SCAN_MAX: usize = 256;

/// What to do with one candidate for an early answer.
enum EarlyStep {
    /// Answer it now with this reply.
    Answer(TxnReply),
    /// Not yet: something it waits for is an event or the clock.
    Wait,
    /// Never: it takes the regular path only.
    Drop,
}

impl<L: ReplicatedLog<LogRecord>> ShardLeader<L> {
    /// Another shard's marked proposal for `id` at `ts` is held here: `id` may get an early
    /// answer. Bounded like the held proposals (past the bound it just goes the regular way).
    pub(super) fn early_candidate(&mut self, id: TxnId, ts: Timestamp) {
        if self.early_candidates.len() < self.config.max_early {
            self.early_candidates.insert((ts, id));
        }
    }

    /// Sends the early answers that can go at `now` and drops the candidates that never will.
    pub(super) fn answer_early(&mut self, log: &mut L, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        let before_time = self.config.mutations.early_before_its_time;
        let due: Vec<(Timestamp, TxnId)> = self
            .early_candidates
            .iter()
            .take_while(|(ts, _)| *ts < now || before_time)
            .take(EARLY_SCAN_MAX)
            .copied()
            .collect();
        for (ts, id) in due {
            match self.early_answer(log, id, ts, now) {
                EarlyStep::Wait => {}
                EarlyStep::Drop => {
                    self.early_candidates.remove(&(ts, id));
                }
                EarlyStep::Answer(reply) => {
                    self.early_candidates.remove(&(ts, id));
                    self.stats.early_answers += 1;
                    // After the vote the marked proposal wrote, and after the votes of its
                    // predecessors' answers (sent before it: their timestamps are under the
                    // watermark).
                    let msg = ServerMsg::Reply(reply);
                    out.push(LeaderOutput::ToClientDurably { client: id.client, msg, record: None });
                }
            }
        }
    }

    /// The candidates at or below the watermark are decided or gone.
    pub(super) fn prune_early_candidates(&mut self) {
        let w = self.watermark;
        while self.early_candidates.first().is_some_and(|(ts, _)| *ts <= w) {
            self.early_candidates.pop_first();
        }
    }

    /// The earliest time a candidate waits for (its timestamp passed), if any. A range
    /// lookup, not a scan: the shells ask before every wait, and candidates whose time has
    /// come may be many.
    pub(super) fn early_deadline(&self) -> Option<TimeUs> {
        let from = (self.now, TxnId { client: 0, seq: 0 });
        self.early_candidates.range(from..).next().map(|(ts, _)| ts.saturating_add(1))
    }

    /// Rule 21's conditions for `id` at `ts`, checked at `now > ts`.
    fn early_answer(&mut self, log: &mut L, id: TxnId, ts: Timestamp, now: TimeUs) -> EarlyStep {
        let Some(p) = self.pending.get(&id) else {
            // Its dispatch may still come; answered or gone otherwise.
            return if self.is_answered(id) { EarlyStep::Drop } else { EarlyStep::Wait };
        };
        let Some(agreement) = p.agreement.as_ref() else { return EarlyStep::Drop };
        let fast = self.fast.as_ref().expect("marked proposals are held only with the fast path");
        if agreement.is_decided() || p.ts != ts || p.proposal != ts || p.txn.ts != ts || log.term() != self.term {
            return EarlyStep::Drop; // decided (the regular answer follows), moved, or deposed (V2)
        }
        if !fast.voted(id) && !self.config.mutations.skip_leader_vote {
            return EarlyStep::Drop; // its proposal left unmarked: not a vote
        }
        let me = self.config.shard;
        for &s in agreement.shards().iter().filter(|s| **s != me) {
            match agreement.proposal(s).or_else(|| self.fast_peers.marked(id, s)) {
                Some(at) if at == ts => {}
                Some(_) => return EarlyStep::Drop,
                None => return EarlyStep::Wait,
            }
        }
        let ahead = !self.queue.would_release(id, now.max(ts));
        if self.floor_committed < ts || ahead {
            return EarlyStep::Wait;
        }
        let keys = p.txn.piece(me).expect("pending here, so a participant");
        let Some((order, latest_predecessor)) = fast.early(id, ts, keys) else { return EarlyStep::Drop };
        if latest_predecessor > self.watermark {
            return EarlyStep::Wait; // a predecessor's answer (its vote) has not left yet
        }
        let Some(position) = self.uncommitted(self.spec.position_for(keys, p.prepare_index, self.committed_index))
        else {
            return EarlyStep::Drop; // everything committed: it is decided soon anyway
        };
        let outcome = self.registry.dry_run(&p.txn.procedure, &p.txn.args, &mut self.store, keys, me);
        let Ok(result) = outcome else { return EarlyStep::Drop }; // an error is never fast
        EarlyStep::Answer(TxnReply {
            id,
            shard: me,
            ts,
            outcome: Ok(result),
            watermark: self.watermark,
            arrival_delta_us: p.arrival_delta_us,
            rounds: 1,
            position: Some(position),
            order: Some(order),
            early: true,
        })
    }
}
