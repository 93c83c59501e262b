//! The watermark and what hangs on it (DESIGN.md rules 6 and 7): its advance and the
//! admission bound clients are told, the answers that bound releases, its broadcast to the
//! client audience, the `Floor` promises that let it follow
//! the clock, and the `Applied` markers followers execute by.

use super::answers::Answer;
use super::{LeaderOutput, ShardLeader};
use crate::log::{LogRecord, ReplicatedLog};
use luigi_txn::msg::{ServerMsg, TxnError, TxnReply};
use luigi_txn::progress::LogPos;
use luigi_txn::types::{TimeUs, Timestamp, Txn, TxnId};
use std::sync::Arc;

/// How far an idle shard's watermark moves between two `Applied` markers (timestamp µs):
/// as often as the answers' expiry scans at the default expiry (a kept refusal waits at
/// most this long past its bound).
pub const IDLE_MARKER_US: u64 = 15_000_000;

impl<L: ReplicatedLog<LogRecord>> ShardLeader<L> {
    pub(super) fn advance_watermark(&mut self, log: &mut L, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        let below_pending = self.queue.min_ts().map_or(Timestamp::MAX, |ts| ts - 1);
        let w = now.min(below_pending).min(self.floor_committed);
        if w > self.watermark {
            self.watermark = w;
            self.floors.prune_at_or_below(w);
        }
        let closed = now.saturating_sub(1).min(self.floor_committed).max(self.watermark);
        self.admission_closed = self.admission_closed.max(closed);
        while let Some(&(ts, id)) = self.unanswered.first() {
            if ts > self.admission_closed {
                break;
            }
            self.unanswered.pop_first();
            let Some(answer) = self.answers.get(id).cloned() else {
                continue;
            };
            match self.fast.as_mut().and_then(|f| f.take_hash(id)) {
                Some((order, txn)) => self.reply_fast(log, id, txn, answer, order, out),
                None => self.reply_with_order(id, answer, None, out),
            }
        }
    }

    /// The answer to a fast-eligible `txn` (F1, F2), marked with its order hash `order`.
    /// While its position is not known committed, the answer is this leader's vote for `txn`
    /// at its timestamp: kept, and written to the accept log before the answer leaves, so
    /// that a new leader's recovery reads it even if the `PREPARE` is lost from this log. A
    /// leader whose log has moved to a later term no longer votes: its answer goes without
    /// the mark (a new leader may already have read this replica's accepts).
    fn reply_fast(
        &mut self,
        log: &mut L,
        id: TxnId,
        txn: Arc<Txn>,
        answer: Answer,
        order: u64,
        out: &mut Vec<LeaderOutput>,
    ) {
        if log.term() != self.term {
            return self.reply_with_order(id, answer, None, out);
        }
        if self.answer_position(id).is_none() || self.config.mutations.skip_leader_vote {
            // Its PREPARE is committed: no vote needed, and no fast path either (or the
            // mutation that answers without writing the vote).
            return self.reply_with_order(id, answer, Some(order), out);
        }
        let record = self.fast.as_mut().expect("a fast answer needs the fast path").vote(txn, answer.ts);
        let msg = self.reply_msg(id, answer, Some(order));
        out.push(LeaderOutput::ToClientDurably { client: id.client, msg, record: Some(record.encode()) });
    }

    pub(super) fn reply_now(
        &self,
        id: TxnId,
        ts: Timestamp,
        outcome: Result<Vec<u8>, TxnError>,
        arrival_delta_us: i64,
        rounds: u8,
        out: &mut Vec<LeaderOutput>,
    ) {
        self.reply_with_order(id, Answer { ts, outcome, arrival_delta_us, rounds }, None, out);
    }

    /// `answer` to its client, fast-eligible when `order` is set (the fast path's order hash).
    fn reply_with_order(&self, id: TxnId, answer: Answer, order: Option<u64>, out: &mut Vec<LeaderOutput>) {
        out.push(LeaderOutput::ToClient { client: id.client, msg: self.reply_msg(id, answer, order) });
    }

    /// `id`'s answer, carrying `order` when fast-eligible.
    pub(super) fn reply_msg(&self, id: TxnId, answer: Answer, order: Option<u64>) -> ServerMsg {
        let Answer { ts, outcome, arrival_delta_us, rounds } = answer;
        ServerMsg::Reply(TxnReply {
            id,
            shard: self.config.shard,
            ts,
            outcome,
            watermark: self.admission_closed,
            arrival_delta_us,
            rounds,
            position: self.answer_position(id),
            order,
            early: false,
        })
    }

    /// The position `id`'s answer depends on, while it is not known committed (rule 14).
    fn answer_position(&self, id: TxnId) -> Option<LogPos> {
        if self.config.mutations.hide_positions {
            return None;
        }
        self.spec.answer_position(id).and_then(|index| self.uncommitted(index))
    }

    /// Sends the watermark, if it moved since the last broadcast and a period has passed, to
    /// the clients heard from within `active_client_us`, and now and then to every connected
    /// client (one pinging a replica that no longer leads learns the new leader from it).
    pub(super) fn broadcast_watermark(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        let (at, w) = self.broadcast_at;
        if now >= at.saturating_add(self.config.watermark_broadcast_us) && self.admission_closed > w {
            self.broadcast_at = (now, self.admission_closed);
            self.fast_peers.prune_to(self.watermark);
            self.prune_early_candidates();
            let shard = self.config.shard;
            let mut msgs = vec![ServerMsg::Watermark { shard, watermark: self.admission_closed }];
            if self.floor_committed > self.promise_sent {
                // Rule 15: what lets clients pass over this shard while it fails over.
                self.promise_sent = self.floor_committed;
                msgs.push(ServerMsg::Promise { shard, term: self.term, floor: self.floor_committed });
            }
            let since = now.saturating_sub(self.config.active_client_us);
            self.clients_heard.retain(|_, heard| *heard >= since);
            if now >= self.all_clients_at.saturating_add(self.config.all_clients_broadcast_us) {
                self.all_clients_at = now;
                out.extend(msgs.into_iter().map(|msg| LeaderOutput::ToAllClients { msg }));
            } else if !self.clients_heard.is_empty() {
                let clients: Vec<_> = self.clients_heard.keys().copied().collect();
                out.extend(msgs.into_iter().map(|msg| LeaderOutput::ToClients { clients: clients.clone(), msg }));
            }
        }
    }

    /// Logs an `Applied` marker for the current watermark now if it moved since the last one
    /// (periodic markers come from `tick`; this is for shutdown, snapshots and tests).
    pub fn mark_applied(&mut self, log: &mut L) {
        self.log_applied_marker(log, self.applied_at.0);
    }

    /// Logs a marker if the watermark moved and something executed since the last one, or,
    /// on an idle shard, once the watermark is [`IDLE_MARKER_US`] past the last one: the
    /// other shards keep a refusal for this shard until its committed marker passes the
    /// refused transaction's timestamp plus the expiry (`leader::outcomes`), and nothing
    /// may be kept for good behind an idle shard.
    pub(super) fn log_applied_marker(&mut self, log: &mut L, now: TimeUs) {
        let marker = self.applied_marker();
        let idle_due = marker >= self.applied_at.1.saturating_add(self.config.idle_marker_us);
        if marker > self.applied_at.1 && (self.max_executed_ts > self.applied_at.1 || idle_due) {
            self.applied_at = (now, marker);
            self.propose_record(log, LogRecord::Applied { ts: marker });
        }
    }

    /// The watermark as followers may use it: below the old proposal of any transaction
    /// moved by agreement whose DECIDE is not committed (the log still has it there).
    pub(super) fn applied_marker(&self) -> Timestamp {
        let below_moved = self.undecided_moves.first().map_or(Timestamp::MAX, |(old, _)| old - 1);
        self.watermark.min(below_moved)
    }

    /// A floor promise is renewed once less than this is left (7/8 of the lookahead): a
    /// renewal every lookahead/8 keeps a long margin for the log commit while the promise a
    /// new leader must wait out after a failover stays short.
    pub(super) fn floor_margin_us(&self) -> u64 {
        self.config.floor_lookahead_us - self.config.floor_lookahead_us / 8
    }

    pub(super) fn renew_floor(&mut self, log: &mut L, now: TimeUs) {
        let lookahead = self.config.floor_lookahead_us;
        if self.floor_proposed < now.saturating_add(self.floor_margin_us()) {
            let ts = now.saturating_add(lookahead);
            if log.propose(LogRecord::Floor { ts }).is_ok() {
                self.floor_proposed = ts;
            }
        }
    }
}
