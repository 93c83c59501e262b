//! [`ReplicaNode`]: one replica of a shard, everything above the protocol core that decides
//! what to call and when: the Raft log's readies, ticks, the first election, role switches,
//! snapshots and compaction, and where agreement batches go. Event and time in, [`Effect`]s
//! out. The server shell and the simulator execute the effects; neither makes any of these
//! decisions itself.
//!
//! The calling contract (both shells follow it):
//!
//! ```text
//! on an input:   node.on_client / on_peer_batch / on_replication / persisted / snapshot_made
//!                / snapshot_checked / replica_link / shard_link   (any number of them, then)
//! always:        node.turn(now, effects)            (drives the log and the role)
//! then:          execute the effects in order; wake again at node.next_deadline()
//! ```
//!
//! Persistence is asynchronous: a [`Persist`] effect is written by the shell in the order the
//! effects come, and when its `sync` is set the shell calls [`ReplicaNode::persisted`] once it
//! is durable (fsynced; without durability, once written). Raft messages that promise what it
//! wrote (votes, acknowledgements) leave only then.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use std::sync::Arc;

use luigi_protocol::leader::{LeaderConfig, LeaderOutput};
use luigi_protocol::msg::{PeerBatch, PeerItem, ReplicationMsg, SnapshotKind, TransferId};
use luigi_raft::replica::{empty_store, InitialStore, LuigiReplicas};
use luigi_raft::{
    OutMessage, RaftConfig, RaftError, RecoveredState, ReplicaFactory, ReplicaSetup, ShardReplica, SnapshotData,
    SnapshotDecoder, SnapshotImage, StateBox, Transition,
};
use luigi_txn::msg::{ClientMsg, ServerMsg};
use luigi_txn::procedure::Registry;
use luigi_txn::progress::{LogPos, ProgressReport};
use luigi_txn::types::{ClientId, ShardId, TimeUs};

use crate::clock_watch::ClockWatch;
use crate::effect::{Discarded, Effect, Persist};
use crate::routing::{NodeId, ShardRoutes};
use crate::snapshot_transfer::{TransferConfig, TransferEvent, TransferStats, Transfers};
use crate::snapshots::{Cadence, CheckedSnapshot, SnapshotCheck};
use crate::tuning::{Tuning, TICK_CATCH_UP_MAX};

/// Ready-and-turn rounds in one [`ReplicaNode::turn`] before the node counts as livelocked
/// (each round must make progress; a few are normal).
pub const DRIVE_ROUNDS_MAX: usize = 256;

/// What a node is and how it is tuned.
#[derive(Clone)]
pub struct NodeConfig {
    /// This node.
    pub node: NodeId,
    /// Replicas of each shard, by shard.
    pub replicas: Vec<u32>,
    /// The cluster's seed (Raft's election timeouts are drawn from it).
    pub seed: u64,
    /// Every timeout.
    pub tuning: Tuning,
    /// The shard leader's configuration (its shard, shard count and timeouts are set from
    /// the fields above by [`NodeConfig::new`]).
    pub leader: LeaderConfig,
    /// The stored procedures.
    pub registry: Registry,
    /// The shard's state before its log's first entry (empty unless a workload populates it,
    /// see [`NodeConfig::with_initial`]).
    pub initial: InitialStore,
    /// The snapshot transfers' parameters ([`TransferConfig::new`] over `tuning`).
    pub transfers: TransferConfig,
    /// The protocol: builds the replica's state machine and its Raft log (default:
    /// Luigi's, [`LuigiReplicas`]; see [`NodeConfig::with_protocol`]).
    pub protocol: Arc<dyn ReplicaFactory>,
}

impl NodeConfig {
    /// The configuration of `node` in a cluster with `replicas[s]` replicas in shard `s`.
    pub fn new(node: NodeId, replicas: Vec<u32>, seed: u64, tuning: Tuning, registry: Registry) -> Self {
        let mut leader = LeaderConfig::new(node.shard, replicas.len() as u32);
        leader.floor_lookahead_us = tuning.floor_lookahead_us;
        leader.recover_after_us = tuning.recover_after_us;
        leader.max_ahead_us = tuning.max_ahead_us();
        leader.answer_expiry_us = tuning.answer_expiry_us;
        leader.group_sizes = replicas.clone();
        let transfers = TransferConfig::new(&tuning);
        NodeConfig {
            node,
            replicas,
            seed,
            tuning,
            leader,
            registry,
            initial: empty_store(),
            transfers,
            protocol: Arc::new(LuigiReplicas),
        }
    }

    /// The same, running `protocol`'s replicas instead of Luigi's.
    pub fn with_protocol(mut self, protocol: Arc<dyn ReplicaFactory>) -> Self {
        self.protocol = protocol;
        self
    }

    /// The same, starting from the store `initial` builds (a workload's population) instead
    /// of an empty one.
    pub fn with_initial(mut self, initial: InitialStore) -> Self {
        self.initial = initial;
        self
    }

    /// Replicas in this node's group.
    pub fn group_size(&self) -> u32 {
        self.replicas[self.node.shard as usize]
    }

    /// The Raft configuration: every replica of a group draws from the same seed (see
    /// [`luigi_raft::RaftLog`], "Determinism").
    pub fn raft(&self) -> RaftConfig {
        let voters: Vec<u64> = (1..=u64::from(self.group_size())).collect();
        let mut rc =
            RaftConfig::new(self.node.raft_id(), voters, self.seed ^ u64::from(self.node.shard).rotate_left(40));
        rc.election_ticks = self.tuning.election_ticks;
        rc.election_spacing_ticks = self.tuning.election_spacing_ticks;
        // A snapshot's data travels in chunks (`snapshot_transfer`), never inside a message.
        rc.external_snapshots = true;
        rc
    }
}

/// Why a node cannot go on. The shell stops it (the server exits with the message; the
/// simulator reports a violation).
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Its configuration is wrong.
    #[error("node {node}: {reason}")]
    Config {
        /// The node.
        node: NodeId,
        /// What is wrong.
        reason: String,
    },
    /// The log or the state machine failed (a lost entry, a snapshot that does not load, a
    /// bad record).
    #[error("node {node}: {what}: {source}")]
    Raft {
        /// The node.
        node: NodeId,
        /// What it was doing.
        what: &'static str,
        /// The error.
        source: RaftError,
    },
    /// Its accept log holds a record it cannot read (see `luigi-raft`'s `accepts`).
    #[error("node {node}: its fast-path accept log is damaged: {reason}")]
    Accepts {
        /// The node.
        node: NodeId,
        /// What is wrong.
        reason: String,
    },
    /// The node keeps producing work without settling (a bug).
    #[error("node {node}: the log never settles ({rounds} rounds in one turn)")]
    Livelock {
        /// The node.
        node: NodeId,
        /// Rounds run.
        rounds: usize,
    },
}

/// How long a new leader waits for the group's accepts before asking again.
pub const ACCEPTS_ASK_AGAIN_US: TimeUs = 200_000;

/// One replica of a shard (see the module docs).
pub struct ReplicaNode {
    config: NodeConfig,
    replica: Box<dyn ShardReplica>,
    /// The replica's decoder of snapshot images, for the checks of received ones.
    decoder: Arc<dyn SnapshotDecoder>,
    next_tick_us: Option<TimeUs>,
    /// The first election is still this replica's to start (see [`ReplicaNode::turn`]).
    may_campaign: bool,
    /// Replicas of this group with a link up.
    linked: BTreeSet<u32>,
    /// Readies written and waiting for their sync: (number, messages to send after it).
    awaiting: VecDeque<(u64, Vec<OutMessage>)>,
    /// The number of the last ready issued (a write of accepts alone reuses it).
    last_ready: u64,
    /// The term and time of the last question for the group's accepts.
    accepts_asked: (u64, TimeUs),
    /// Questions for accepts (`AcceptsQuery`) of a term this replica has not reached yet, by
    /// asker: answered as soon as it reaches it (rule V2), not dropped for the asker's next
    /// try (with jitter a candidate's question often overtakes its vote request). One per
    /// replica of the group (the newest term asked).
    accepts_questions: Vec<(NodeId, u64)>,
    /// This follower's connection to its leader (term, replica) broke, its log ending at
    /// (term, index): the group's other replicas are told at the next turn
    /// (`ReplicationMsg::LeaderLost`).
    leader_lost: Option<(u64, u32, (u64, u64))>,
    /// Accept records written since the last rewrite of the live ones (see
    /// [`Tuning::accepts_rewrite_records`]).
    accepts_written: u64,
    /// Messages that wait for the accept log (see `LeaderOutput::ToClientDurably`), by the
    /// persist number that makes their records durable.
    awaiting_accepts: VecDeque<(u64, Vec<(u64, Held)>)>,
    /// The core's messages that name a position of this replica's log, held until the log is
    /// durable here up to it (rule 14), in the order they were produced.
    held: VecDeque<(u64, Held)>,
    /// The last progress report sent, and when the next may go.
    progress: (Option<ProgressReport>, TimeUs),
    snapshots: Cadence,
    routes: ShardRoutes,
    /// The Raft term this replica serves in (0: not serving).
    serving_term: u64,
    /// Scratch for the core's outputs.
    out: Vec<LeaderOutput>,
    /// Scratch for routed batches.
    batches: Vec<(NodeId, PeerBatch)>,
    stats: NodeStats,
    /// The latest time the node was given (for inputs that come without one).
    now_us: TimeUs,
    /// Snapshot transfers in and out.
    transfers: Transfers,
    /// What the transfers asked for and the node has not turned into effects yet.
    transfer_events: Vec<TransferEvent>,
    /// Snapshots received whole and being checked off the event loop (at most
    /// [`TransferConfig::incoming_max`]).
    checks: Vec<PendingCheck>,
    next_check: u64,
    /// The leader's snapshot, decoded off the loop and stepped into Raft: installed when the
    /// log hands it out in this turn (index, state, CRC of the data).
    restored: Option<(u64, StateBox, u32)>,
    /// CRC-32 of the log's latest snapshot data, when known (index, CRC): sent with it.
    snapshot_crc: Option<(u64, u32)>,
    /// After a failed transfer of the leader's snapshot to a replica (Raft id), none is tried
    /// before this time.
    install_backoff: BTreeMap<u64, TimeUs>,
    /// The leader's snapshot delivered whole to a replica (Raft id): its index, and until when
    /// no snapshot is sent to it again unless its log is known to have reached that index. The receiver still checks and decodes it
    /// (seconds for hundreds of MB) before its log moves; Raft's probes meanwhile find it
    /// behind and ask for the snapshot again, which would send the same image over and over.
    installs_delivered: BTreeMap<u64, (u64, TimeUs)>,
    /// The clock offsets to the group's other replicas, and what this replica does about them
    /// (DESIGN.md rule 22).
    clock: ClockWatch,
}

/// A message of the core waiting for the log to be durable (see `ReplicaNode::held`).
#[allow(clippy::large_enum_variant)] // few and short-lived; boxing would allocate per answer
enum Held {
    Effect(Effect),
    Batch(ShardId, PeerBatch),
}

/// A snapshot received whole, waiting for its [`SnapshotCheck`].
struct PendingCheck {
    token: u64,
    from: u64,
    transfer: TransferId,
    kind: SnapshotKind,
    index: u64,
    data: Bytes,
    crc32: u32,
}

/// Counters of what a node did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Snapshots of its own it compacted behind.
    pub snapshots_taken: u64,
    /// Snapshots its leader sent it that it installed.
    pub snapshots_installed: u64,
    /// Times it compacted behind a follower's offered snapshot (as the leader).
    pub compactions_behind_offers: u64,
    /// Agreement batches received while not serving (dropped: recovery asks again).
    pub batches_dropped: u64,
    /// Snapshots received whole whose check failed (dropped).
    pub snapshots_rejected: u64,
}

/// How many snapshot acknowledgement timeouts a replica that received the leader's snapshot
/// whole gets to check, decode and install it before the same snapshot is sent to it again.
const INSTALL_GRACE_TIMEOUTS: u64 = 8;

impl ReplicaNode {
    /// The node, restarted from `recovered` (what its disk holds; default: fresh). It starts
    /// as a follower replaying its log (from its snapshot, if any); the elected one serves.
    ///
    /// # Errors
    /// The recovered state is inconsistent or its snapshot does not load.
    pub fn new(config: NodeConfig, recovered: RecoveredState) -> Result<Self, NodeError> {
        let node = config.node;
        if node.shard as usize >= config.replicas.len() || node.replica >= config.group_size() {
            let reason = format!("not in a cluster of {:?} replicas per shard", config.replicas);
            return Err(NodeError::Config { node, reason });
        }
        // A fresh group's first election is started by its replica 0 once it reaches every
        // other replica (a campaign before that would be lost, and another replica would win),
        // so that benchmarks start from a known layout; later elections are Raft's own. A
        // restarted replica never starts one: the group has a leader or elects one by timeout.
        // A group of one has nobody else to lead it: its replica elects itself at once, fresh
        // or restarted. A rejoining replica never campaigns (its log refuses anyway).
        let restarted = recovered.hard_state.term > 0 || !recovered.entries.is_empty() || recovered.snapshot.is_some();
        let single = config.group_size() == 1;
        let may_campaign = node.replica == 0 && (!restarted || single) && !recovered.rejoining;
        let setup = ReplicaSetup {
            shard: node.shard,
            replica: node.replica,
            raft: config.raft(),
            recovered,
            leader: config.leader.clone(),
            registry: config.registry.clone(),
            initial: config.initial.clone(),
        };
        let replica =
            config.protocol.build(setup).map_err(|e| NodeError::Raft { node, what: e.what, source: e.source })?;
        let snapshot_index = replica.log().snapshot_index();
        let decoder = replica.snapshot_decoder();
        let snapshots = Cadence::new(config.tuning.snapshot_entries, snapshot_index, node.replica, config.group_size());
        let routes = ShardRoutes::new(config.replicas.len() as u32);
        let transfers = Transfers::new(node.shard, node.raft_id(), config.transfers.clone());
        let clock = ClockWatch::new(node, config.group_size(), &config.tuning);
        Ok(ReplicaNode {
            config,
            replica,
            decoder,
            next_tick_us: None,
            may_campaign,
            linked: BTreeSet::new(),
            awaiting: VecDeque::new(),
            last_ready: 0,
            accepts_asked: (0, 0),
            accepts_questions: Vec::new(),
            leader_lost: None,
            accepts_written: 0,
            awaiting_accepts: VecDeque::new(),
            held: VecDeque::new(),
            progress: (None, 0),
            snapshots,
            routes,
            serving_term: 0,
            out: Vec::new(),
            batches: Vec::new(),
            stats: NodeStats::default(),
            now_us: 0,
            transfers,
            transfer_events: Vec::new(),
            checks: Vec::new(),
            next_check: 1,
            restored: None,
            snapshot_crc: None,
            install_backoff: BTreeMap::new(),
            installs_delivered: BTreeMap::new(),
            clock,
        })
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.config.node
    }

    /// Its configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The replica (its protocol's leader or follower state over the Raft log), for reports
    /// and checks; `replica().downcast_ref::<luigi_raft::replica::Replica>()` for Luigi's own.
    pub fn replica(&self) -> &dyn ShardReplica {
        self.replica.as_ref()
    }

    /// Counters.
    pub fn stats(&self) -> NodeStats {
        self.stats
    }

    /// The routes to the other shards' leaders.
    pub fn routes(&self) -> &ShardRoutes {
        &self.routes
    }

    /// The snapshot transfers' counters.
    pub fn transfer_stats(&self) -> TransferStats {
        self.transfers.stats()
    }

    /// The clock measurements of the group (DESIGN.md rule 22).
    pub fn clock(&self) -> &ClockWatch {
        &self.clock
    }

    /// Snapshot transfers under way: (out, in).
    pub fn transfers_in_flight(&self) -> (usize, usize) {
        self.transfers.in_flight()
    }

    /// When [`ReplicaNode::turn`] next has timed work: the next Raft tick, the leader's next
    /// deadline, a snapshot transfer's timeout or the next clock probes.
    pub fn next_deadline(&self) -> TimeUs {
        let tick = self.next_tick_us.unwrap_or(0);
        let mut at = self.replica.next_deadline().map_or(tick, |d| d.min(tick));
        at = at.min(self.clock.next_deadline().unwrap_or(0));
        if self.progress.0 != self.progress_report() {
            at = at.min(self.progress.1);
        }
        self.transfers.next_deadline().map_or(at, |d| d.min(at))
    }

    // ---- inputs ----

    /// A client's message.
    pub fn on_client(&mut self, now: TimeUs, client: ClientId, msg: ClientMsg, fx: &mut Vec<Effect>) {
        self.now_us = self.now_us.max(now);
        self.replica.on_client(now, client, msg, &mut self.out);
        self.emit(fx);
    }

    /// Agreement items from another shard's leader; dropped unless this replica serves (the
    /// sender's recovery asks again).
    pub fn on_peer_batch(&mut self, now: TimeUs, batch: PeerBatch, fx: &mut Vec<Effect>) {
        if batch.from == self.config.node.shard || batch.from as usize >= self.config.replicas.len() {
            tracing::debug!(from = batch.from, "agreement batch from no other shard; dropped");
            return;
        }
        if !self.replica.on_peer(now, batch, &mut self.out) {
            self.stats.batches_dropped += 1;
        }
        self.emit(fx);
    }

    /// A replication message from `from`. Misaddressed ones (another shard's Raft traffic,
    /// a transfer message naming another sender) are dropped.
    ///
    /// # Errors
    /// The message is malformed or misaddressed (the shell logs it and goes on).
    #[allow(clippy::too_many_lines)] // Over CONTRIBUTING.md's ~70 lines; issue 27 splits it.
    pub fn on_replication(&mut self, from: NodeId, msg: ReplicationMsg, fx: &mut Vec<Effect>) -> Result<(), String> {
        let me = self.config.node;
        match msg {
            ReplicationMsg::Raft { shard, bytes, .. } => {
                if shard != me.shard || from.shard != me.shard {
                    return Err(format!("raft message for shard {shard} from {from}"));
                }
                match self.replica.log_mut().step_bytes(&bytes) {
                    // Fatal, and reported as such by the next turn's ready.
                    Ok(()) | Err(RaftError::LostEntries { .. }) => Ok(()),
                    Err(e) => Err(format!("bad raft message from {from}: {e}")),
                }
            }
            ReplicationMsg::SnapshotBegin { shard, from: sender, .. }
            | ReplicationMsg::SnapshotChunk { shard, from: sender, .. }
            | ReplicationMsg::SnapshotAck { shard, from: sender, .. }
            | ReplicationMsg::SnapshotCancel { shard, from: sender, .. }
            | ReplicationMsg::SnapshotRefuse { shard, from: sender, .. } => {
                if !self.is_group_peer(shard, sender, from) {
                    return Err(format!("snapshot transfer message for shard {shard} from raft id {sender} by {from}"));
                }
                // Which snapshots this replica takes now: the leader's while it does not
                // lead, followers' offers while it serves.
                let leads = self.replica.log().is_leader();
                let serving = self.replica.is_serving();
                let wanted = |kind: &SnapshotKind| match kind {
                    SnapshotKind::Install { .. } => !leads,
                    SnapshotKind::Offer => serving,
                };
                let result = self.transfers.on_message(self.now_us, sender, msg, wanted, &mut self.transfer_events);
                self.transfer_effects(fx);
                result
            }
            ReplicationMsg::LeaderLost { shard, from: sender, term, last } => {
                if !self.is_group_peer(shard, sender, from) {
                    return Err(format!("leader lost in shard {shard} from raft id {sender} by {from}"));
                }
                self.replica.log_mut().peer_lost_leader(sender, term, last);
                Ok(())
            }
            ReplicationMsg::AcceptsQuery { shard, from: sender, term } => {
                if !self.is_group_peer(shard, sender, from) {
                    return Err(format!("accepts query for shard {shard} from raft id {sender} by {from}"));
                }
                self.accepts_questions.retain(|(asker, _)| *asker != from);
                self.accepts_questions.push((from, term));
                self.answer_accepts_questions(fx);
                Ok(())
            }
            ReplicationMsg::Accepts { shard, from: sender, term, records } => {
                if !self.is_group_peer(shard, sender, from) {
                    return Err(format!("accepts of shard {shard} from raft id {sender} by {from}"));
                }
                match self.replica.fast_path_mut() {
                    Some(fast) => fast.accepts_from(from.replica, term, &records),
                    None => Ok(()), // no fast path: no recovery round asked
                }
            }
            ReplicationMsg::ClockProbe { shard, from: sender, sent_us } => {
                if !self.is_group_peer(shard, sender, from) {
                    return Err(format!("clock probe for shard {shard} from raft id {sender} by {from}"));
                }
                self.clock.on_probe(from.replica, sent_us);
                Ok(())
            }
            ReplicationMsg::ClockEcho { shard, from: sender, probe_sent_us, echo_us } => {
                if !self.is_group_peer(shard, sender, from) {
                    return Err(format!("clock echo for shard {shard} from raft id {sender} by {from}"));
                }
                self.clock.on_echo(from.replica, probe_sent_us, echo_us);
                Ok(())
            }
            ReplicationMsg::LeaderIs { shard, replica, term } => {
                if shard == me.shard || from != (NodeId { shard, replica }) {
                    return Err(format!("leader announcement of s{shard}r{replica} from {from}"));
                }
                if self.routes.leader_is(shard, replica, term) {
                    tracing::info!(shard, replica, term, "shard has a new leader");
                    self.replica.peer_leader_changed(shard);
                }
                Ok(())
            }
        }
    }

    /// Answers the questions for accepts whose term this replica has reached (V2); the
    /// others wait for it.
    fn answer_accepts_questions(&mut self, fx: &mut Vec<Effect>) {
        let me = self.config.node;
        let replica = &self.replica;
        self.accepts_questions.retain(|&(asker, term)| {
            // Without a fast path, nothing is undecided: the answer is empty.
            let answer = replica.fast_path().map_or(Some(Vec::new()), |fast| fast.accepts_of(term));
            let Some(records) = answer else { return true };
            let msg = ReplicationMsg::Accepts { shard: me.shard, from: me.raft_id(), term, records };
            fx.push(Effect::Replicate { to: asker, msg });
            false
        });
    }

    /// Whether a message of `shard`'s group, naming Raft id `sender` as its sender, may come
    /// over `from`'s link: from another replica of this group, the one it names.
    fn is_group_peer(&self, shard: ShardId, sender: u64, from: NodeId) -> bool {
        let me = self.config.node;
        let member = from.shard == me.shard && from.replica < self.config.group_size();
        shard == me.shard && member && sender == from.raft_id() && from != me
    }

    /// Tells the group's other replicas that this follower's connection to its leader broke.
    fn tell_leader_lost(&mut self, fx: &mut Vec<Effect>) {
        let Some((term, lost, last)) = self.leader_lost.take() else { return };
        let me = self.config.node;
        for replica in (0..self.config.group_size()).filter(|r| *r != me.replica && *r != lost) {
            let msg = ReplicationMsg::LeaderLost { shard: me.shard, from: me.raft_id(), term, last };
            fx.push(Effect::Replicate { to: NodeId { shard: me.shard, replica }, msg });
        }
    }

    /// A new leader's fast-path recovery round waits for the group's undecided accepts: asks
    /// every other replica of the group, again every [`ACCEPTS_ASK_AGAIN_US`] while it waits
    /// (a question or an answer may be lost).
    fn ask_for_accepts(&mut self, now: TimeUs, fx: &mut Vec<Effect>) {
        let Some(term) = self.replica.fast_path().and_then(|fast| fast.accepts_wanted()) else { return };
        let (asked_term, asked_at) = self.accepts_asked;
        if asked_term == term && now < asked_at.saturating_add(ACCEPTS_ASK_AGAIN_US) {
            return;
        }
        self.accepts_asked = (term, now);
        let me = self.config.node;
        for replica in (0..self.config.group_size()).filter(|r| *r != me.replica) {
            let msg = ReplicationMsg::AcceptsQuery { shard: me.shard, from: me.raft_id(), term };
            fx.push(Effect::Replicate { to: NodeId { shard: me.shard, replica }, msg });
        }
    }

    /// The accept records the shell's disk found at open (`DiskStorage::take_found_accepts`),
    /// given right after [`ReplicaNode::new`].
    ///
    /// # Errors
    /// A damaged record.
    pub fn restore_accepts(&mut self, records: &[(u64, Vec<u8>)]) -> Result<(), NodeError> {
        let node = self.config.node;
        self.accepts_written = records.len() as u64; // a long log found is rewritten soon
        let restored = match (self.replica.fast_path_mut(), records.first()) {
            (Some(fast), _) => fast.restore_accepts(records),
            (None, None) => Ok(()),
            (None, Some((n, _))) => Err(format!("accept record {n} found, but this protocol has no fast path")),
        };
        restored.map_err(|reason| NodeError::Accepts { node, reason })
    }

    /// The shell made every [`Persist`] up to `number` durable (see the module docs).
    pub fn persisted(&mut self, number: u64, fx: &mut Vec<Effect>) {
        let mut advanced = None;
        while self.awaiting.front().is_some_and(|(n, _)| *n <= number) {
            let (n, msgs) = self.awaiting.pop_front().expect("checked");
            self.send_raft(msgs, fx);
            advanced = Some(n);
        }
        if let Some(n) = advanced {
            self.replica.log_mut().advance(n);
        }
        while self.awaiting_accepts.front().is_some_and(|(n, _)| *n <= number) {
            let (_, msgs) = self.awaiting_accepts.pop_front().expect("checked");
            self.held.extend(msgs);
        }
        self.release_held(fx);
    }

    /// Sends the held messages the log's durable prefix now covers, in the order they were
    /// produced (one waits for those before it).
    fn release_held(&mut self, fx: &mut Vec<Effect>) {
        let durable = self.replica.log().persisted_index();
        while self.held.front().is_some_and(|(need, _)| *need <= durable) {
            let (_, held) = self.held.pop_front().expect("checked");
            self.let_go(held, fx);
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

    /// This replica's progress (rule 14): a follower's last durable acknowledgement, a
    /// leader's commit index; `None` for protocols that do not use it.
    fn progress_report(&self) -> Option<ProgressReport> {
        if !self.config.protocol.progress_reports() {
            return None;
        }
        let log = self.replica.log();
        let me = self.config.node;
        let (pos, committed) = if log.is_leader() {
            (LogPos { term: log.term(), index: log.commit_index() }, true)
        } else {
            let (term, index) = log.acked();
            (LogPos { term, index }, false)
        };
        Some(ProgressReport { shard: me.shard, replica: me.replica, term: log.term(), pos, committed })
    }

    /// Sends this replica's progress, when it moved and at most every watermark broadcast
    /// period, to every connected client and to the other shards' leaders (rule 14).
    fn report_progress(&mut self, now: TimeUs, fx: &mut Vec<Effect>) {
        let report = self.progress_report();
        if report == self.progress.0 || now < self.progress.1 {
            return;
        }
        let Some(r) = report else { return };
        self.progress = (report, now.saturating_add(self.config.leader.watermark_broadcast_us));
        fx.push(Effect::ToAllClients { msg: ServerMsg::Progress(r) });
        let me = self.config.node.shard;
        for shard in (0..self.config.replicas.len() as ShardId).filter(|s| *s != me) {
            // Best effort, never queued: a later report supersedes this one.
            if let Some(to) = self.routes.reachable_leader(shard) {
                let batch = PeerBatch { from: me, watermark: 0, items: vec![PeerItem::Progress(r)] };
                fx.push(Effect::ToPeer { to, batch });
            }
        }
    }

    /// A snapshot job ([`Effect::MakeSnapshot`]) finished: the log is compacted behind it
    /// (unless it moved past meanwhile, e.g. by installing the leader's snapshot), and a
    /// follower offers it to its leader (a transfer, see [`crate::snapshot_transfer`]).
    ///
    /// # Errors
    /// The job failed: the replica cannot make snapshots of its state.
    pub fn snapshot_made(
        &mut self,
        made: Result<SnapshotImage, RaftError>,
        fx: &mut Vec<Effect>,
    ) -> Result<(), NodeError> {
        let node = self.config.node;
        self.snapshots.making = false;
        let image = made.map_err(|source| NodeError::Raft { node, what: "making a snapshot", source })?;
        let log = self.replica.log_mut();
        if !log.can_compact(image.index) {
            return Ok(());
        }
        let leader = log.leader_id().filter(|l| *l != node.raft_id());
        let snap = log.compact(image.index, image.data).map_err(|source| NodeError::Raft {
            node,
            what: "compacting",
            source,
        })?;
        self.snapshot_crc = Some((snap.index, image.crc32));
        self.snapshots.taken(snap.index);
        self.stats.snapshots_taken += 1;
        let (index, data) = (snap.index, snap.data.clone());
        fx.push(Effect::SaveSnapshot(snap));
        // Offered to the leader, which compacts its own log behind it.
        if let Some(leader) = leader {
            let sent = self.transfers.send(
                self.now_us,
                leader,
                SnapshotKind::Offer,
                index,
                data,
                image.crc32,
                &mut self.transfer_events,
            );
            if let Err(why) = sent {
                tracing::debug!(node = %node, index, ?why, "snapshot not offered to the leader");
            }
            self.transfer_effects(fx);
        }
        Ok(())
    }

    /// A [`SnapshotCheck`] ([`Effect::CheckSnapshot`]) finished: a follower steps the
    /// leader's snapshot into Raft (installed, already decoded, when the log hands it out), a
    /// serving leader compacts behind a follower's offer.
    ///
    /// # Errors
    /// The snapshot does not load or does not fit the log (it is dropped; the shell logs it
    /// and goes on).
    pub fn snapshot_checked(&mut self, checked: CheckedSnapshot, fx: &mut Vec<Effect>) -> Result<(), String> {
        let Some(pos) = self.checks.iter().position(|c| c.token == checked.token) else {
            return Ok(()); // not ours (a shell bug) or already handled
        };
        let c = self.checks.swap_remove(pos);
        let from = NodeId { shard: self.config.node.shard, replica: (c.from - 1) as u32 };
        let restored = match checked.result {
            Ok(restored) => restored,
            Err(e) => {
                self.stats.snapshots_rejected += 1;
                return Err(format!(
                    "snapshot at {} from {from} (transfer {}) does not load: {e}",
                    c.index, c.transfer
                ));
            }
        };
        match c.kind {
            SnapshotKind::Install { envelope } => {
                if self.replica.log().is_leader() {
                    return Ok(()); // this replica leads now: the snapshot is stale
                }
                self.replica
                    .log_mut()
                    .step_snapshot(&envelope, c.data)
                    .map_err(|e| format!("snapshot at {} from {from}: {e}", c.index))?;
                self.restored = restored.map(|f| (c.index, f, c.crc32));
                Ok(())
            }
            SnapshotKind::Offer => self.compact_behind_offer(from, c.index, c.data, c.crc32, fx),
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
            if let Some((term, last)) = self.replica.log_mut().leader_link_lost(peer.raft_id()) {
                self.leader_lost = Some((term, replica, last));
            }
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
    pub fn batch_refused(&mut self, to: NodeId, batch: PeerBatch) {
        self.routes.refused(to.shard, batch);
    }

    // ---- the driver ----

    /// Drives the node at `now`: the first election, Raft ticks, the log's readies, applying
    /// and role switches, the leader's timers, snapshots, and queued agreement batches.
    ///
    /// # Errors
    /// The node cannot go on (see [`NodeError`]); effects already pushed (e.g. marking the
    /// data directory damaged) are still to be executed.
    pub fn turn(&mut self, now: TimeUs, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        let node = self.config.node;
        self.drive_log(now, fx)?;
        // Before the log is driven again: a hand-over's messages leave in this turn.
        self.clock.turn(now, &self.linked, self.replica.log_mut(), fx);
        let mut rounds = 0;
        loop {
            self.drive(fx)?;
            let transition = self.replica.turn(now, &mut self.out).map_err(|source| NodeError::Raft {
                node,
                what: "switching role",
                source,
            })?;
            self.emit(fx);
            if let Some(t) = transition {
                self.on_transition(t, fx);
            }
            if !self.replica.log().has_ready() {
                break;
            }
            rounds += 1;
            if rounds > DRIVE_ROUNDS_MAX {
                return Err(NodeError::Livelock { node, rounds });
            }
        }
        self.snapshot_if_due(fx)?;
        self.tend_transfers(now, fx);
        self.ask_for_accepts(now, fx);
        self.tell_leader_lost(fx);
        if !self.accepts_questions.is_empty() {
            self.answer_accepts_questions(fx);
        }
        self.drive(fx)?;
        self.release_held(fx);
        self.report_progress(now, fx);
        // A decoded snapshot serves only the readies of the turn after it was stepped (Raft
        // hands it out at once, unless it refused it).
        self.restored = None;
        Ok(())
    }

    /// The first part of [`ReplicaNode::turn`] alone: the first election, Raft ticks and the
    /// log's readies, without applying or executing anything. A shell that executes these
    /// effects before calling `turn` gets the log's messages (a leader's appends, a follower's
    /// acknowledgements) on their way before the state machine's work of the turn, which can
    /// be long under load; `turn` does it again (at no cost when nothing is left).
    ///
    /// # Errors
    /// As [`ReplicaNode::turn`].
    pub fn drive_log(&mut self, now: TimeUs, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        let node = self.config.node;
        self.now_us = self.now_us.max(now);
        self.campaign_when_linked().map_err(|source| NodeError::Raft {
            node,
            what: "starting the first election",
            source,
        })?;
        self.tick(now);
        self.drive(fx)
    }

    fn campaign_when_linked(&mut self) -> Result<(), RaftError> {
        let all_linked = self.linked.len() + 1 >= self.config.group_size() as usize;
        if self.may_campaign && all_linked {
            self.may_campaign = false;
            if !self.replica.log().is_leader() {
                self.replica.log_mut().campaign()?;
            }
        }
        Ok(())
    }

    /// Ticks the log for every tick period elapsed by `now` (a bounded catch-up after a
    /// stall).
    fn tick(&mut self, now: TimeUs) {
        let tick_us = self.config.tuning.raft_tick_us.max(1);
        let next = self.next_tick_us.get_or_insert(now.saturating_add(tick_us));
        let mut ticks = 0;
        while now >= *next && ticks < TICK_CATCH_UP_MAX {
            self.replica.log_mut().tick();
            *next = next.saturating_add(tick_us);
            ticks += 1;
        }
        if now >= *next {
            *next = now.saturating_add(tick_us);
        }
    }

    /// Takes every ready the log has: its messages leave, its writes go to the shell, and it
    /// is advanced at once unless something must be synced first.
    fn drive(&mut self, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        let node = self.config.node;
        for _ in 0..DRIVE_ROUNDS_MAX {
            let mut rd = match self.replica.log_mut().ready() {
                Ok(Some(rd)) => rd,
                Ok(None) => return Ok(()),
                Err(e @ RaftError::LostEntries { .. }) => {
                    let reason = lost_entries(node, &e);
                    fx.push(Effect::MarkDamaged { reason });
                    return Err(NodeError::Raft { node, what: "reading its log", source: e });
                }
                Err(source) => return Err(NodeError::Raft { node, what: "reading its log", source }),
            };
            if let Some(change) = &rd.role_change {
                tracing::info!(node = %node, ?change, term = self.replica.log().term(), "raft role change");
            }
            self.send_raft(std::mem::take(&mut rd.messages), fx);
            if let Some(snap) = &rd.snapshot {
                // The state machine is replaced before it applies anything after the snapshot.
                tracing::info!(node = %node, index = snap.index, "installing the leader's snapshot");
                let replaced = match self.restored.take() {
                    // Decoded off the event loop ([`SnapshotCheck`]).
                    Some((index, restored, crc)) if index == snap.index => {
                        self.snapshot_crc = Some((index, crc));
                        self.replica.install_decoded(restored).map_err(|source| NodeError::Raft {
                            node,
                            what: "installing the leader's snapshot",
                            source,
                        })?
                    }
                    _ => {
                        self.snapshot_crc = None;
                        self.replica.install_snapshot(&snap.data).map_err(|source| NodeError::Raft {
                            node,
                            what: "loading the leader's snapshot",
                            source,
                        })?
                    }
                };
                fx.extend(replaced.map(|old| Effect::Discard(Discarded::new(old))));
                self.snapshots.taken(snap.index);
                self.stats.snapshots_installed += 1;
            }
            if rd.rejoined {
                tracing::info!(node = %node, "rejoined: caught up with the leader; votes again from the next term on");
            }
            let number = rd.number;
            self.last_ready = number;
            let persisted_messages = std::mem::take(&mut rd.persisted_messages);
            let wait = rd.must_sync || !self.awaiting.is_empty();
            if rd.has_persist_work() || wait {
                let accepts = Vec::new();
                fx.push(Effect::Persist(Persist { number, sync: wait, ready: rd, accepts, accepts_rewrite: false }));
            }
            if wait {
                self.awaiting.push_back((number, persisted_messages));
            } else {
                self.send_raft(persisted_messages, fx);
                self.replica.log_mut().advance(number);
                self.release_held(fx);
            }
        }
        Err(NodeError::Livelock { node, rounds: DRIVE_ROUNDS_MAX })
    }

    fn on_transition(&mut self, t: Transition, fx: &mut Vec<Effect>) {
        match t {
            Transition::Promoted => {
                tracing::info!(node = %self.config.node, term = self.replica.log().term(), "serving as the shard leader");
                self.serving_term = self.replica.log().term();
                // Every replica of every other shard hears it (one not linked now hears it when
                // its link comes up, see `shard_link`).
                let msg = self.leader_is();
                for to in self.routes.reachable() {
                    fx.push(Effect::Replicate { to, msg: msg.clone() });
                }
            }
            Transition::Demoted => {
                tracing::warn!(node = %self.config.node, "lost leadership; following");
                self.serving_term = 0;
            }
        }
        fx.push(Effect::Transition(t));
    }

    /// Starts this replica's own snapshot when its cadence says so (one at a time).
    fn snapshot_if_due(&mut self, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        if self.snapshots.making {
            return Ok(());
        }
        let node = self.config.node;
        let job = self.replica.own_snapshot_due(self.snapshots.next_at).map_err(|source| NodeError::Raft {
            node,
            what: "taking a snapshot",
            source,
        })?;
        if let Some(job) = job {
            self.snapshots.making = true;
            fx.push(Effect::MakeSnapshot(job));
        }
        Ok(())
    }

    /// A follower's snapshot, checked off the event loop: the serving leader compacts its
    /// own log behind it.
    fn compact_behind_offer(
        &mut self,
        from: NodeId,
        index: u64,
        data: Bytes,
        crc32: u32,
        fx: &mut Vec<Effect>,
    ) -> Result<(), String> {
        if !self.replica.is_serving() {
            return Ok(()); // meant for the leader this replica no longer is
        }
        let log = self.replica.log_mut();
        if !log.can_compact(index) {
            return Ok(());
        }
        let snap = log.compact(index, data).map_err(|e| format!("compacting behind {from}'s snapshot: {e}"))?;
        self.snapshot_crc = Some((index, crc32));
        self.stats.compactions_behind_offers += 1;
        fx.push(Effect::SaveSnapshot(snap));
        Ok(())
    }

    /// The transfers' timeouts, and the end of those whose reason is gone: the leader's
    /// snapshots go out only while this replica leads, offers only to the leader it knows,
    /// and it takes the leader's snapshot only while it does not lead, offers only while it
    /// serves.
    fn tend_transfers(&mut self, now: TimeUs, fx: &mut Vec<Effect>) {
        let log = self.replica.log();
        let (leads, leader, serving) = (log.is_leader(), log.leader_id(), self.replica.is_serving());
        let events = &mut self.transfer_events;
        self.transfers.tick(now, events);
        self.transfers.cancel_outgoing(
            |to, kind| match kind {
                SnapshotKind::Install { .. } => leads,
                SnapshotKind::Offer => leader == Some(to),
            },
            events,
        );
        self.transfers.refuse_incoming(
            |_, kind| match kind {
                SnapshotKind::Install { .. } => !leads,
                SnapshotKind::Offer => serving,
            },
            events,
        );
        self.install_backoff.retain(|_, until| *until > now);
        self.installs_delivered.retain(|_, (_, until)| *until > now);
        self.transfer_effects(fx);
    }

    /// Turns what the transfers asked for into effects and calls: messages, the outcome of
    /// the leader's snapshot for Raft, checks of what was received.
    fn transfer_effects(&mut self, fx: &mut Vec<Effect>) {
        let node = self.config.node;
        let replica_of = |raft_id: u64| NodeId { shard: node.shard, replica: (raft_id - 1) as u32 };
        let mut events = std::mem::take(&mut self.transfer_events);
        for ev in events.drain(..) {
            match ev {
                TransferEvent::Send { to, msg } => fx.push(Effect::Replicate { to: replica_of(to), msg }),
                TransferEvent::Sent { to, transfer, kind, index, outcome } => {
                    let install = matches!(kind, SnapshotKind::Install { .. });
                    match outcome {
                        Ok(()) => {
                            tracing::info!(node = %node, to = %replica_of(to), transfer, index, install, "snapshot sent")
                        }
                        Err(why) => {
                            tracing::warn!(node = %node, to = %replica_of(to), transfer, index, install, ?why, "snapshot transfer failed")
                        }
                    }
                    if install {
                        if outcome.is_err() {
                            let retry_at = self.now_us.saturating_add(self.transfers.config().ack_timeout_us);
                            self.install_backoff.insert(to, retry_at);
                        } else {
                            let until = self
                                .now_us
                                .saturating_add(INSTALL_GRACE_TIMEOUTS * self.transfers.config().ack_timeout_us);
                            self.installs_delivered.insert(to, (index, until));
                        }
                        self.replica.log_mut().report_snapshot(to, outcome.is_ok());
                    }
                }
                TransferEvent::Received { from, transfer, kind, index, data, crc32 } => {
                    if self.checks.len() >= self.transfers.config().incoming_max {
                        tracing::warn!(node = %node, from = %replica_of(from), index, "too many snapshots being checked; dropped");
                        continue;
                    }
                    let install = matches!(kind, SnapshotKind::Install { .. });
                    let token = self.next_check;
                    self.next_check += 1;
                    let check = SnapshotCheck::new(token, self.decoder.clone(), index, install, data.clone());
                    self.checks.push(PendingCheck { token, from, transfer, kind, index, data, crc32 });
                    fx.push(Effect::CheckSnapshot(check));
                }
            }
        }
        self.transfer_events = events;
    }

    /// The leader's snapshot for replica `to` (Raft id), whose Raft message (`envelope`) left
    /// without it: sent as a transfer, unless one to `to` failed a moment ago or there is no
    /// room (then Raft hears at once that it failed, and tries again after a heartbeat).
    fn send_install(&mut self, to: u64, envelope: Vec<u8>, snap: SnapshotData, fx: &mut Vec<Effect>) {
        let node = self.config.node;
        let now = self.now_us;
        if self.install_backoff.get(&to).is_some_and(|until| *until > now) {
            self.replica.log_mut().report_snapshot(to, false);
            return;
        }
        // Delivered already and being installed: Raft tries again after a heartbeat, and by
        // then (or after the grace) the replica's log has moved or it gets the snapshot anew.
        if let Some((delivered, until)) = self.installs_delivered.get(&to).copied() {
            let installed = self.replica.log().matched(to).is_some_and(|m| m >= delivered);
            if !installed && until > now {
                self.replica.log_mut().report_snapshot(to, false);
                return;
            }
            self.installs_delivered.remove(&to);
        }
        let crc32 = match self.snapshot_crc {
            Some((index, crc)) if index == snap.index => crc,
            // Not known (a restart loaded the snapshot from disk): computed once, here.
            _ => {
                let crc = crc32fast::hash(&snap.data);
                self.snapshot_crc = Some((snap.index, crc));
                crc
            }
        };
        let kind = SnapshotKind::Install { envelope };
        let bytes = snap.data.len();
        match self.transfers.send(now, to, kind, snap.index, snap.data, crc32, &mut self.transfer_events) {
            Ok(transfer) => {
                tracing::info!(node = %node, to, transfer, index = snap.index, bytes, "sending the leader's snapshot")
            }
            Err(why) => {
                tracing::warn!(node = %node, to, index = snap.index, ?why, "snapshot not sent; raft tries again later");
                self.install_backoff.insert(to, now.saturating_add(self.transfers.config().ack_timeout_us));
                self.replica.log_mut().report_snapshot(to, false);
            }
        }
        self.transfer_effects(fx);
    }

    fn leader_is(&self) -> ReplicationMsg {
        let me = self.config.node;
        ReplicationMsg::LeaderIs { shard: me.shard, replica: me.replica, term: self.serving_term }
    }

    fn send_raft(&mut self, msgs: Vec<OutMessage>, fx: &mut Vec<Effect>) {
        let me = self.config.node;
        for m in msgs {
            if let Some(snap) = m.snapshot {
                self.send_install(m.to, m.bytes, snap, fx);
                continue;
            }
            let to = NodeId { shard: me.shard, replica: (m.to - 1) as u32 };
            fx.push(Effect::Replicate {
                to,
                msg: ReplicationMsg::Raft { shard: me.shard, from: me.raft_id(), bytes: m.bytes },
            });
        }
    }

    /// Turns the core's outputs into effects; agreement batches wait in the routes until
    /// [`ReplicaNode::send_batches`].
    fn emit(&mut self, fx: &mut Vec<Effect>) {
        // A message naming a position of this replica's log (a speculative answer, a
        // proposal sent at admission) leaves once the log is durable here up to it (rule 14:
        // the receiver counts this copy towards the majority that commits it); the others
        // rest on committed records and leave at once.
        let durable = self.replica.log().persisted_index();
        let (mut records, mut after_records) = (Vec::new(), Vec::new());
        for o in std::mem::take(&mut self.out) {
            let (need, held) = match o {
                LeaderOutput::ToClientDurably { client, msg, record } => {
                    // A leader's fast answer also names a position: it waits for both.
                    records.extend(record);
                    let held = (position_in(&msg), Held::Effect(Effect::ToClient { client, msg }));
                    self.hold_for_accepts(held, &mut after_records);
                    continue;
                }
                LeaderOutput::ToPeerDurably { shard, batch, records: theirs } => {
                    // A marked proposal names its PREPARE's position too.
                    records.extend(theirs);
                    self.hold_for_accepts((proposal_positions(&batch), Held::Batch(shard, batch)), &mut after_records);
                    continue;
                }
                LeaderOutput::ToClient { client, msg } => {
                    (position_in(&msg), Held::Effect(Effect::ToClient { client, msg }))
                }
                LeaderOutput::ToClients { clients, msg } => (0, Held::Effect(Effect::ToClients { clients, msg })),
                LeaderOutput::ToAllClients { msg } => (0, Held::Effect(Effect::ToAllClients { msg })),
                LeaderOutput::ToPeer { shard, batch } => (proposal_positions(&batch), Held::Batch(shard, batch)),
                LeaderOutput::Executed { shard, id, ts } => (0, Held::Effect(Effect::Executed { shard, id, ts })),
            };
            if need <= durable {
                self.let_go(held, fx);
            } else {
                self.held.push_back((need, held));
            }
        }
        if !records.is_empty() || !after_records.is_empty() {
            // One group commit of the accept log (with whatever the Raft log has buffered);
            // the answers leave when it is reported.
            self.accepts_written += records.len() as u64;
            let rewrite = self.accepts_written >= self.config.tuning.accepts_rewrite_records;
            if rewrite {
                // Every record still needed (these ones among them), written again: the
                // accept log then drops what came before.
                records = self.replica.fast_path().map(|fast| fast.accepts_live()).unwrap_or_default();
                self.accepts_written = 0;
            }
            let number = self.last_ready;
            let ready = luigi_raft::Ready { number, ..Default::default() };
            fx.push(Effect::Persist(Persist { number, sync: true, ready, accepts: records, accepts_rewrite: rewrite }));
            self.awaiting_accepts.push_back((number, after_records));
        }
        let shard = self.config.node.shard;
        for (id, ts) in self.replica.take_executed() {
            fx.push(Effect::Executed { shard, id, ts });
        }
        self.release_held(fx);
    }

    /// `held` leaves after this turn's accept-log write is durable (`after`), and then once
    /// the Raft log is durable up to its position.
    fn hold_for_accepts(&mut self, held: (u64, Held), after: &mut Vec<(u64, Held)>) {
        if self.config.leader.mutations.accept_before_durable {
            self.held.push_back(held); // the broken rule: not after the record
        } else {
            after.push(held);
        }
    }

    fn send_batches(&mut self, fx: &mut Vec<Effect>) {
        self.routes.drain(&mut self.batches);
        for (to, batch) in self.batches.drain(..) {
            fx.push(Effect::ToPeer { to, batch });
        }
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
        // path): sent as `LeaderOutput::ToClientDurably`.
        ServerMsg::FastAccept { .. } => 0,
    }
}

/// The highest log position a batch's proposals rest on, or 0.
fn proposal_positions(batch: &PeerBatch) -> u64 {
    batch
        .items
        .iter()
        .filter_map(|item| if let PeerItem::Propose { at: Some(pos), .. } = item { Some(pos.index) } else { None })
        .max()
        .unwrap_or(0)
}

/// The one-line description of lost entries, in node names.
fn lost_entries(node: NodeId, e: &RaftError) -> String {
    match *e {
        RaftError::LostEntries { leader, term, commit, last_index } => format!(
            "this replica lost acknowledged log entries: its leader s{}r{} (term {term}) counts entries up to \
             index {commit} as held here, but its log ends at index {last_index}",
            node.shard,
            leader.saturating_sub(1)
        ),
        _ => e.to_string(),
    }
}
