//! Resolution: deciding a transaction from its participants' durable states, when its
//! coordinator timed out in round 2 or a prepared piece waited a round for a decision (its
//! coordinator may be gone). Committed iff every participant prepared it durably; a
//! participant asked about a piece it never prepared first logs that it never will. Every
//! resolver (and the coordinator, whose all-yes votes are the same fact) computes the same
//! answer from durable, monotone facts, so concurrent resolvers agree.

use std::collections::BTreeMap;

use luigi_protocol::log::ReplicatedLog;
use luigi_txn::msg::{ServerMsg, TxnError};
use luigi_txn::types::{ClientId, ShardId, TimeUs, TxnId};

use super::coordinator::with_rounds;
use super::BaseLeader;
use crate::msg::{BaseItem, BaseOutput, BaseState};
use crate::record::BaseRecord;

/// A transaction being resolved.
#[derive(Debug)]
pub(super) struct Resolution {
    shards: Vec<ShardId>,
    states: BTreeMap<ShardId, BaseState>,
    /// The client to answer (when this leader coordinates it), and its arrival delta.
    client: Option<(ClientId, i64)>,
    pub(super) next_ask_us: TimeUs,
}

impl<L: ReplicatedLog<BaseRecord>> BaseLeader<L> {
    /// Asks every participant of `id` for its durable state.
    pub(super) fn start_resolution(&mut self, id: TxnId, shards: Vec<ShardId>, client: Option<(ClientId, i64)>) {
        if let Some(r) = self.resolving.get_mut(&id) {
            if client.is_some() {
                r.client = client;
            }
            return;
        }
        self.stats.resolutions += 1;
        let next_ask_us = self.now_us + self.config.round_timeout_us;
        for s in &shards {
            self.send(*s, BaseItem::Status { id });
        }
        self.resolving.insert(id, Resolution { shards, states: BTreeMap::new(), client, next_ask_us });
    }

    /// A participant's answer; once all are in, the decision.
    pub(super) fn on_resolution_answer(
        &mut self,
        from: ShardId,
        id: TxnId,
        state: BaseState,
        out: &mut Vec<BaseOutput>,
    ) {
        let Some(r) = self.resolving.get_mut(&id) else { return };
        if !r.shards.contains(&from) {
            return;
        }
        r.states.insert(from, state);
        if r.states.len() < r.shards.len() {
            return;
        }
        let r = self.resolving.remove(&id).expect("present");
        let commit = r.states.values().all(|s| matches!(s, BaseState::Prepared { .. } | BaseState::Committed { .. }));
        for s in &r.shards {
            self.send(*s, BaseItem::Decide { id, commit });
        }
        let Some((client, arrival)) = r.client else { return };
        for s in &r.shards {
            let outcome = match &r.states[s] {
                BaseState::Prepared { output } | BaseState::Committed { output } if commit => Ok(output.clone()),
                BaseState::Prepared { .. } | BaseState::Committed { .. } | BaseState::Aborted => {
                    Err(TxnError::Aborted("a participant never prepared it (resolved after a timeout)".into()))
                }
            };
            let reply = with_rounds(self.reply(id, *s, outcome, arrival), 2);
            out.push(BaseOutput::ToClient { client, msg: ServerMsg::Reply(reply) });
        }
    }

    /// Participants that have not answered are asked again, every round.
    pub(super) fn resolver_resends(&mut self) {
        let now = self.now_us;
        let round = self.config.round_timeout_us;
        let mut asks = Vec::new();
        for (id, r) in self.resolving.iter_mut().filter(|(_, r)| r.next_ask_us <= now) {
            r.next_ask_us = now + round;
            asks.extend(r.shards.iter().filter(|s| !r.states.contains_key(s)).map(|s| (*s, *id)));
        }
        for (s, id) in asks {
            self.send(s, BaseItem::Status { id });
        }
    }
}
