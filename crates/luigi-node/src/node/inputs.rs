//! The node's inputs: clients' messages, other shards' agreement batches, the group's
//! replication messages (Raft, snapshot transfers, fast-path accepts, clock probes, leader
//! announcements) and the links coming up or going.

use luigi_protocol::msg::{ReplicationMsg, SnapshotKind};
use luigi_raft::RaftError;
use luigi_txn::msg::ClientMsg;
use luigi_txn::peer::PeerMsg;
use luigi_txn::types::{ClientId, ShardId, TimeUs};

use super::accepts::AcceptsQuestion;
use super::ReplicaNode;
use crate::effect::Effect;
use luigi_txn::types::NodeId;

/// This follower's connection to its leader broke: what the group's other replicas are told
/// (`ReplicationMsg::LeaderLost`).
pub(super) struct LeaderLost {
    /// The leader's term.
    term: u64,
    /// The leader (replica index).
    leader: u32,
    /// Where this replica's log ends: (term, index).
    last: (u64, u64),
}

impl ReplicaNode {
    /// A client's message.
    pub fn on_client(&mut self, now: TimeUs, client: ClientId, msg: ClientMsg, fx: &mut Vec<Effect>) {
        self.now_us = self.now_us.max(now);
        self.replica.on_client(&mut self.log, now, client, msg, &mut self.out);
        self.emit(fx);
    }

    /// A message from another shard's replica (its protocol's batch, opaque here, or a
    /// progress report); dropped unless this replica serves (the sender's recovery asks
    /// again) or if it does not decode (the replica counts and logs it).
    pub fn on_peer_batch(&mut self, now: TimeUs, msg: PeerMsg, fx: &mut Vec<Effect>) {
        if msg.from == self.config.node.shard || msg.from as usize >= self.config.replicas.len() {
            tracing::debug!(from = msg.from, "peer message from no other shard; dropped");
            return;
        }
        if !self.replica.on_peer(&mut self.log, now, msg, &mut self.out) {
            self.stats.batches_dropped += 1;
        }
        self.emit(fx);
    }

    /// A replication message from `from`. Misaddressed ones (another shard's Raft traffic,
    /// a transfer message naming another sender) are dropped.
    ///
    /// # Errors
    /// The message is malformed or misaddressed (the shell logs it and goes on).
    pub fn on_replication(&mut self, from: NodeId, msg: ReplicationMsg, fx: &mut Vec<Effect>) -> Result<(), String> {
        match msg {
            ReplicationMsg::Raft { shard, bytes, .. } => self.on_raft(shard, from, &bytes),
            ReplicationMsg::SnapshotBegin { shard, from: sender, .. }
            | ReplicationMsg::SnapshotChunk { shard, from: sender, .. }
            | ReplicationMsg::SnapshotAck { shard, from: sender, .. }
            | ReplicationMsg::SnapshotCancel { shard, from: sender, .. }
            | ReplicationMsg::SnapshotRefuse { shard, from: sender, .. } => {
                self.group_peer("snapshot transfer message for shard", shard, sender, from)?;
                self.on_transfer_message(sender, msg, fx)
            }
            ReplicationMsg::LeaderLost { shard, from: sender, term, last } => {
                self.group_peer("leader lost in shard", shard, sender, from)?;
                self.log.peer_lost_leader(sender, term, last);
                Ok(())
            }
            ReplicationMsg::AcceptsQuery { shard, from: sender, term } => {
                self.group_peer("accepts query for shard", shard, sender, from)?;
                self.accepts_questions.retain(|q| q.asker != from);
                self.accepts_questions.push(AcceptsQuestion { asker: from, term });
                self.answer_accepts_questions(fx);
                Ok(())
            }
            ReplicationMsg::Accepts { shard, from: sender, term, records } => {
                self.group_peer("accepts of shard", shard, sender, from)?;
                match self.replica.fast_path_mut() {
                    Some(fast) => fast.accepts_from(&self.log, from.replica, term, &records),
                    None => Ok(()), // no fast path: no recovery round asked
                }
            }
            ReplicationMsg::ClockProbe { shard, from: sender, sent_us } => {
                self.group_peer("clock probe for shard", shard, sender, from)?;
                self.clock.on_probe(from.replica, sent_us);
                Ok(())
            }
            ReplicationMsg::ClockEcho { shard, from: sender, probe_sent_us, echo_us } => {
                self.group_peer("clock echo for shard", shard, sender, from)?;
                self.clock.on_echo(from.replica, probe_sent_us, echo_us);
                Ok(())
            }
            ReplicationMsg::LeaderIs { shard, replica, term } => self.on_leader_is(from, shard, replica, term),
        }
    }

    /// A Raft message of the group, stepped into the log.
    fn on_raft(&mut self, shard: ShardId, from: NodeId, bytes: &[u8]) -> Result<(), String> {
        let me = self.config.node;
        if shard != me.shard || from.shard != me.shard {
            return Err(format!("raft message for shard {shard} from {from}"));
        }
        match self.log.step_bytes(bytes) {
            // Fatal, and reported as such by the next turn's ready.
            Ok(()) | Err(RaftError::LostEntries { .. }) => Ok(()),
            Err(e) => Err(format!("bad raft message from {from}: {e}")),
        }
    }

    /// A snapshot transfer's message from the group's replica `sender` (Raft id).
    fn on_transfer_message(&mut self, sender: u64, msg: ReplicationMsg, fx: &mut Vec<Effect>) -> Result<(), String> {
        // Which snapshots this replica takes now: the leader's while it does not lead,
        // followers' offers while it serves.
        let leads = self.log.is_leader();
        let serving = self.replica.is_serving();
        let wanted = |kind: &SnapshotKind| match kind {
            SnapshotKind::Install { .. } => !leads,
            SnapshotKind::Offer => serving,
        };
        let result = self.transfers.on_message(self.now_us, sender, msg, wanted, &mut self.transfer_events);
        self.transfer_effects(fx);
        result
    }

    /// Another shard's leader announces itself (`from` must be it).
    fn on_leader_is(&mut self, from: NodeId, shard: ShardId, replica: u32, term: u64) -> Result<(), String> {
        if shard == self.config.node.shard || from != (NodeId { shard, replica }) {
            return Err(format!("leader announcement of s{shard}r{replica} from {from}"));
        }
        if self.routes.leader_is(shard, replica, term) {
            tracing::info!(shard, replica, term, "shard has a new leader");
            self.replica.peer_leader_changed(shard);
        }
        Ok(())
    }

    /// A message of `shard`'s group, naming Raft id `sender` as its sender, may come over
    /// `from`'s link only from another replica of this group, the one it names; else the
    /// error says "`what` `shard` from raft id `sender` by `from`".
    fn group_peer(&self, what: &str, shard: ShardId, sender: u64, from: NodeId) -> Result<(), String> {
        let me = self.config.node;
        let member = from.shard == me.shard && from.replica < self.config.group_size();
        if shard == me.shard && member && sender == from.raft_id() && from != me {
            Ok(())
        } else {
            Err(format!("{what} {shard} from raft id {sender} by {from}"))
        }
    }

    /// A link to `replica` of this shard is up (`true`) or gone. Snapshot transfers to a
    /// replica whose link came back resume at once (at the next turn).
    pub fn replica_link(&mut self, replica: u32, up: bool) {
        let peer = NodeId { shard: self.config.node.shard, replica };
        // A snapshot delivered before the link broke may be lost with a restart: it may be
        // sent again at once.
        self.installs_delivered.remove(&peer.raft_id());
        if up {
            self.linked.insert(replica);
            self.transfers.link_up(self.now_us, peer.raft_id(), &mut self.transfer_events);
        } else {
            self.linked.remove(&replica);
            // A leader whose connections all broke at once has most likely crashed: its
            // followers elect the next one without waiting out their timeouts (rule 15's
            // pass-over then follows one hop after the vote), and tell each other, so that
            // the first of them need not pre-vote once a majority lost it.
            if let Some((term, last)) = self.log.leader_link_lost(peer.raft_id()) {
                self.leader_lost = Some(LeaderLost { term, leader: replica, last });
            }
        }
    }

    /// Tells the group's other replicas that this follower's connection to its leader broke.
    pub(super) fn tell_leader_lost(&mut self, fx: &mut Vec<Effect>) {
        let Some(LeaderLost { term, leader, last }) = self.leader_lost.take() else { return };
        let me = self.config.node;
        for replica in (0..self.config.group_size()).filter(|r| *r != me.replica && *r != leader) {
            let msg = ReplicationMsg::LeaderLost { shard: me.shard, from: me.raft_id(), term, last };
            fx.push(Effect::Replicate { to: NodeId { shard: me.shard, replica }, msg });
        }
    }

    /// A link to `node` of another shard is up (`true`) or gone. A serving leader announces
    /// itself on every new link (an announcement lost with a link is made again).
    pub fn shard_link(&mut self, node: NodeId, up: bool, fx: &mut Vec<Effect>) {
        self.routes.set_reachable(node, up);
        if up && self.serving_term > 0 {
            fx.push(Effect::Replicate { to: node, msg: self.leader_is() });
        }
    }

    /// The shell could not hand `batch` to the link to `to` (its queue is full): it is sent
    /// again, first, at the next turn.
    pub fn batch_refused(&mut self, to: NodeId, batch: PeerMsg) {
        self.routes.refused(to.shard, batch);
    }
}
