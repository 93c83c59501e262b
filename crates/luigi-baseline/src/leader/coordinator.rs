//! The coordinator of a cross-shard transaction (the leader of its first participant): round 1
//! has every participant execute its piece, round 2 has every participant prepare it; all
//! prepared durably is the commit point, and the client is answered then.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use luigi_protocol::log::ReplicatedLog;
use luigi_txn::msg::{ServerMsg, TxnError};
use luigi_txn::types::{ClientId, ShardId, Txn, TxnId};

use super::{status_of, BaseLeader};
use crate::msg::{BaseItem, BaseOutput, BaseState};
use crate::record::BaseRecord;

/// Where a coordinated transaction stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Round 1: waiting for the pieces' outputs. Nothing is prepared anywhere: it may abort
    /// freely.
    Executing,
    /// Round 2: waiting for the votes. Only the votes (or a resolution) decide now.
    Preparing,
}

/// A transaction this leader coordinates.
#[derive(Debug)]
pub(super) struct Coordination {
    pub(super) txn: Arc<Txn>,
    pub(super) client: ClientId,
    pub(super) arrival: i64,
    pub(super) phase: Phase,
    results: BTreeMap<ShardId, Result<Vec<u8>, TxnError>>,
    votes: BTreeSet<ShardId>,
    pub(super) deadline_us: u64,
}

impl<L: ReplicatedLog<BaseRecord>> BaseLeader<L> {
    pub(super) fn coordinate(
        &mut self,
        client: ClientId,
        txn: Arc<Txn>,
        arrival: i64,
        acked_below: u64,
        out: &mut Vec<BaseOutput>,
    ) {
        let id = txn.id;
        if self.coordinating.contains_key(&id) {
            return; // a duplicate: the answer goes out when the rounds end
        }
        // Known here already (a retry after this shard's leader changed, or an answer the
        // client missed): its outcome comes from the participants' durable states.
        let known = !matches!(status_of(&self.state, &self.preparing, &self.tombstoning, id), Ok(None));
        if known || self.resolving.contains_key(&id) {
            return self.start_resolution(id, txn.shards().collect(), Some((client, arrival)));
        }
        if self.coordinating.len() >= self.config.coordinating_max {
            let why = format!("{} transactions being coordinated", self.coordinating.len());
            for reply in self.replies(&txn, arrival, |_| Err(TxnError::Busy(why.clone()))) {
                out.push(BaseOutput::ToClient { client, msg: ServerMsg::Reply(reply) });
            }
            return;
        }
        let shards: Vec<ShardId> = txn.shards().collect();
        let coordination = Coordination {
            txn: txn.clone(),
            client,
            arrival,
            phase: Phase::Executing,
            results: BTreeMap::new(),
            votes: BTreeSet::new(),
            deadline_us: self.now_us + self.config.round_timeout_us,
        };
        self.coordinating.insert(id, coordination);
        for s in shards {
            self.send(s, BaseItem::Execute { txn: txn.clone(), acked_below });
        }
    }

    /// Round 1's answers.
    pub(super) fn on_executed(
        &mut self,
        from: ShardId,
        id: TxnId,
        outcome: Result<Vec<u8>, TxnError>,
        out: &mut Vec<BaseOutput>,
    ) {
        let Some(c) = self.coordinating.get_mut(&id) else { return };
        if c.phase != Phase::Executing || c.txn.piece(from).is_none() {
            return;
        }
        c.results.insert(from, outcome);
        if c.results.len() < c.txn.pieces.len() {
            return;
        }
        if c.results.values().all(Result::is_ok) {
            c.phase = Phase::Preparing;
            c.deadline_us = self.now_us + self.config.round_timeout_us;
            let shards: Vec<ShardId> = c.txn.shards().collect();
            for s in shards {
                self.send(s, BaseItem::Prepare { id });
            }
            return;
        }
        // A piece failed or could not lock: nothing was prepared, so the transaction ends
        // here, installed nowhere. A failed piece's answer is its error; a piece that ran is
        // answered with the first failure too (a protocol abort is retried by the client, a
        // procedure's own abort rolls the whole transaction back).
        let c = self.coordinating.remove(&id).expect("present");
        self.stats.coordinated_aborts += 1;
        for s in c.txn.shards() {
            self.send(s, BaseItem::Release { id });
        }
        let results = c.results;
        let first_failure = results.values().find_map(|r| r.as_ref().err()).cloned().expect("a piece failed");
        let answer = |s| match &results[&s] {
            Ok(_) => Err(first_failure.clone()),
            Err(e) => Err(e.clone()),
        };
        for reply in self.replies(&c.txn, c.arrival, answer) {
            out.push(BaseOutput::ToClient { client: c.client, msg: ServerMsg::Reply(with_rounds(reply, 1)) });
        }
    }

    /// Round 2's answers.
    pub(super) fn on_vote(&mut self, from: ShardId, id: TxnId, outcome: Result<(), String>, out: &mut Vec<BaseOutput>) {
        let Some(c) = self.coordinating.get_mut(&id) else { return };
        if c.phase != Phase::Preparing || c.txn.piece(from).is_none() {
            return;
        }
        if let Err(why) = outcome {
            let c = self.coordinating.remove(&id).expect("present");
            self.stats.coordinated_aborts += 1;
            self.decide(&c.txn, false);
            for reply in self.replies(&c.txn, c.arrival, |_| Err(TxnError::Aborted(why.clone()))) {
                out.push(BaseOutput::ToClient { client: c.client, msg: ServerMsg::Reply(with_rounds(reply, 2)) });
            }
            return;
        }
        c.votes.insert(from);
        if c.votes.len() < c.txn.pieces.len() {
            return;
        }
        // Every participant prepared durably: committed.
        let c = self.coordinating.remove(&id).expect("present");
        self.stats.coordinated_commits += 1;
        self.procedure_commits.committed(&c.txn.procedure);
        self.decide(&c.txn, true);
        let results = c.results;
        for reply in self.replies(&c.txn, c.arrival, |s| results[&s].clone()) {
            out.push(BaseOutput::ToClient { client: c.client, msg: ServerMsg::Reply(with_rounds(reply, 2)) });
        }
    }

    /// Sends the decision to every participant.
    pub(super) fn decide(&mut self, txn: &Txn, commit: bool) {
        for s in txn.shards() {
            self.send(s, BaseItem::Decide { id: txn.id, commit });
        }
    }

    /// A participant knew `id` durably when asked to execute it: the outcome comes from
    /// resolution.
    pub(super) fn coordination_known_elsewhere(&mut self, id: TxnId) -> bool {
        let Some(c) = self.coordinating.get(&id) else { return false };
        if c.phase != Phase::Executing {
            return false;
        }
        let c = self.coordinating.remove(&id).expect("present");
        self.start_resolution(id, c.txn.shards().collect(), Some((c.client, c.arrival)));
        true
    }

    /// A resolver found `id` unprepared on this (its coordinator's) shard: a coordination
    /// still executing ends as aborted (nothing of it was prepared).
    pub(super) fn abort_unprepared_coordination(&mut self, id: TxnId, out: &mut Vec<BaseOutput>) {
        if self.coordinating.get(&id).is_some_and(|c| c.phase == Phase::Executing) {
            self.abort_executing(id, "a participant's resolver aborted it".into(), out);
        }
    }

    fn abort_executing(&mut self, id: TxnId, why: String, out: &mut Vec<BaseOutput>) {
        let c = self.coordinating.remove(&id).expect("present");
        debug_assert_eq!(c.phase, Phase::Executing);
        self.stats.coordinated_aborts += 1;
        for s in c.txn.shards() {
            self.send(s, BaseItem::Release { id });
        }
        for reply in self.replies(&c.txn, c.arrival, |_| Err(TxnError::Aborted(why.clone()))) {
            out.push(BaseOutput::ToClient { client: c.client, msg: ServerMsg::Reply(with_rounds(reply, 1)) });
        }
    }

    /// A round that took too long: round 1 aborts (nothing is prepared), round 2 resolves.
    pub(super) fn coordinator_timeouts(&mut self, out: &mut Vec<BaseOutput>) {
        let now = self.now_us;
        let due: Vec<(TxnId, Phase)> =
            self.coordinating.iter().filter(|(_, c)| c.deadline_us <= now).map(|(id, c)| (*id, c.phase)).collect();
        for (id, phase) in due {
            match phase {
                Phase::Executing => {
                    let c = &self.coordinating[&id];
                    let silent: Vec<String> =
                        c.txn.shards().filter(|s| !c.results.contains_key(s)).map(|s| s.to_string()).collect();
                    let why = format!("shard(s) {} did not execute it in time", silent.join(", "));
                    self.abort_executing(id, why, out);
                }
                Phase::Preparing => {
                    let c = self.coordinating.remove(&id).expect("present");
                    self.start_resolution(id, c.txn.shards().collect(), Some((c.client, c.arrival)));
                }
            }
        }
    }

    /// A participant's durable state of `id` arrived.
    pub(super) fn on_status_is(&mut self, from: ShardId, id: TxnId, state: BaseState, out: &mut Vec<BaseOutput>) {
        self.coordination_known_elsewhere(id);
        self.on_resolution_answer(from, id, state, out);
    }
}

/// `reply` with its WAN rounds (1: ended in round 1; 2: both rounds).
pub(super) fn with_rounds(mut reply: luigi_txn::msg::TxnReply, rounds: u8) -> luigi_txn::msg::TxnReply {
    reply.rounds = rounds;
    reply
}
