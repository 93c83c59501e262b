//! What leaves the node: the core's outputs turned into effects, held until the log is
//! durable here up to the position they name (rule 14) or until the accept log holds their
//! records; Raft's messages (a snapshot's as a transfer); agreement batches through their
//! routes.

use luigi_protocol::msg::ReplicationMsg;
use luigi_raft::OutMessage;
use luigi_txn::msg::ServerMsg;
use luigi_txn::peer::{NodeOutput, PeerMsg, PeerOut};
use luigi_txn::types::ShardId;

use super::{replica_of, ReplicaNode};
use crate::effect::Effect;

/// A message of the core waiting for the log to be durable (see `ReplicaNode::held`).
#[allow(clippy::large_enum_variant)] // few and short-lived; boxing would allocate per answer
pub(super) enum Held {
    Effect(Effect),
    Batch(ShardId, PeerMsg),
}

/// A message of the core and the log position it rests on (0: none).
pub(super) struct HeldMsg {
    /// The log is durable here up to this index before it leaves.
    pub(super) need: u64,
    pub(super) msg: Held,
}

impl ReplicaNode {
    /// Turns the core's outputs into effects; agreement batches wait in the routes until
    /// [`ReplicaNode::send_batches`].
    pub(super) fn emit(&mut self, fx: &mut Vec<Effect>) {
        // A message naming a position of this replica's log (a speculative answer, a
        // proposal sent at admission) leaves once the log is durable here up to it (rule 14:
        // the receiver counts this copy towards the majority that commits it); the others
        // rest on committed records and leave at once.
        let durable = self.log.persisted_index();
        let (mut records, mut after_records) = (Vec::new(), Vec::new());
        for o in std::mem::take(&mut self.out) {
            let held = match o {
                NodeOutput::ToClientDurably { client, msg, record } => {
                    // A leader's fast answer also names a position: it waits for both.
                    records.extend(record);
                    let held = HeldMsg { need: position_in(&msg), msg: Held::Effect(Effect::ToClient { client, msg }) };
                    self.hold_for_accepts(held, &mut after_records);
                    continue;
                }
                NodeOutput::ToPeerDurably { shard, batch: PeerOut { msg, rests_on }, records: theirs } => {
                    // A marked proposal names its PREPARE's position too.
                    records.extend(theirs);
                    let held = HeldMsg { need: rests_on, msg: Held::Batch(shard, msg) };
                    self.hold_for_accepts(held, &mut after_records);
                    continue;
                }
                NodeOutput::ToClient { client, msg } => {
                    HeldMsg { need: position_in(&msg), msg: Held::Effect(Effect::ToClient { client, msg }) }
                }
                NodeOutput::ToClients { clients, msg } => {
                    HeldMsg { need: 0, msg: Held::Effect(Effect::ToClients { clients, msg }) }
                }
                NodeOutput::ToAllClients { msg } => {
                    HeldMsg { need: 0, msg: Held::Effect(Effect::ToAllClients { msg }) }
                }
                NodeOutput::ToPeer { shard, batch: PeerOut { msg, rests_on } } => {
                    HeldMsg { need: rests_on, msg: Held::Batch(shard, msg) }
                }
                NodeOutput::Executed { shard, id, ts } => {
                    HeldMsg { need: 0, msg: Held::Effect(Effect::Executed { shard, id, ts }) }
                }
            };
            if held.need <= durable {
                self.let_go(held.msg, fx);
            } else {
                self.held.push_back(held);
            }
        }
        if !records.is_empty() || !after_records.is_empty() {
            // The answers leave when the write is reported.
            self.write_accepts(records, after_records, fx);
        }
        let shard = self.config.node.shard;
        for (id, ts) in self.replica.take_executed() {
            fx.push(Effect::Executed { shard, id, ts });
        }
        self.release_held(fx);
    }

    /// Sends the held messages the log's durable prefix now covers, in the order they were
    /// produced (one waits for those before it).
    pub(super) fn release_held(&mut self, fx: &mut Vec<Effect>) {
        let durable = self.log.persisted_index();
        while self.held.front().is_some_and(|h| h.need <= durable) {
            let held = self.held.pop_front().expect("checked");
            self.let_go(held.msg, fx);
        }
        self.send_batches(fx);
    }

    /// A message of the core leaves: an effect now, a batch into its shard's route.
    fn let_go(&mut self, held: Held, fx: &mut Vec<Effect>) {
        match held {
            Held::Effect(e) => fx.push(e),
            Held::Batch(shard, batch) => self.routes.push(shard, batch),
        }
    }

    fn send_batches(&mut self, fx: &mut Vec<Effect>) {
        self.routes.drain(&mut self.batches);
        for (to, batch) in self.batches.drain(..) {
            fx.push(Effect::ToPeer { to, batch });
        }
    }

    /// Raft's messages leave: to their replica, a snapshot's as a transfer.
    pub(super) fn send_raft(&mut self, msgs: Vec<OutMessage>, fx: &mut Vec<Effect>) {
        let me = self.config.node;
        for m in msgs {
            if let Some(snap) = m.snapshot {
                self.send_install(m.to, m.bytes, snap, fx);
                continue;
            }
            let to = replica_of(me.shard, m.to);
            fx.push(Effect::Replicate {
                to,
                msg: ReplicationMsg::Raft { shard: me.shard, from: me.raft_id(), bytes: m.bytes },
            });
        }
    }

    /// This replica's announcement as its shard's serving leader.
    pub(super) fn leader_is(&self) -> ReplicationMsg {
        let me = self.config.node;
        ReplicationMsg::LeaderIs { shard: me.shard, replica: me.replica, term: self.serving_term }
    }
}

/// The log position a message to a client rests on (a speculative answer's), or 0.
fn position_in(msg: &ServerMsg) -> u64 {
    match msg {
        ServerMsg::Reply(r) => r.position.map_or(0, |p| p.index),
        ServerMsg::Pong { .. }
        | ServerMsg::Watermark { .. }
        | ServerMsg::Status(_)
        | ServerMsg::Progress(_)
        | ServerMsg::Promise { .. } => 0,
        // Rests on the follower's accept log, not on a Raft position (DESIGN.md, the fast
        // path): sent as `NodeOutput::ToClientDurably`.
        ServerMsg::FastAccept { .. } => 0,
        // A leader's read ahead of its commits names the position it rests on (rule 23 (e)).
        ServerMsg::SnapshotRead(r) => r.position.map_or(0, |p| p.index),
    }
}
