//! [`ReplicaNode`]: one replica of a shard, everything above the protocol core that decides
//! what to call and when: the Raft log's readies, ticks, the first election, role switches,
//! snapshots and compaction, and where agreement batches go. Event and time in, [`Effect`]s
//! out. The server shell and the simulator execute the effects; neither makes any of these
//! decisions itself.
//!
//! The node owns the replica's Raft log (a byte log, as raft-rs's and etcd's drivers own
//! theirs): it drives it and lends it to the replica's calls that propose or take committed
//! records (`luigi_replica::replica_api` states that contract); the replica holds none.
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
//!
//! The node's parts, one concern a file: [`config`] (what a node is, why it stops), `inputs`
//! (messages and links), `drive` (the log's readies, ticks, the first election, role
//! switches, persistence), `outputs` (the core's outputs as effects, held until the log or
//! the accept log is durable), `progress` (rule 14's progress reports), `accepts` (the fast
//! path's recovery questions and accept log), `snapshotting` (own snapshots, checks of
//! received ones, compaction) and `installs` (the leader's snapshots sent as transfers).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use luigi_protocol::msg::{SnapshotKind, TransferId};
use luigi_raft::{RaftLog, RecoveredState};
use luigi_replica::{ReplicaFactory, ReplicaSetup, ShardReplica, SnapshotDecoder, StateBox};
use luigi_txn::peer::{NodeOutput, PeerMsg};
use luigi_txn::types::{ShardId, TimeUs};

use crate::clock_watch::ClockWatch;
use crate::routing::ShardRoutes;
use crate::snapshot_transfer::{TransferEvent, TransferStats, Transfers};
use crate::snapshots::Cadence;
use luigi_txn::types::NodeId;

mod accepts;
pub mod config;
mod drive;
mod inputs;
mod installs;
mod outputs;
mod progress;
mod snapshotting;

pub use accepts::ACCEPTS_ASK_AGAIN_US;
pub use config::{replicas_for, NodeConfig, NodeError};
pub use drive::DRIVE_ROUNDS_MAX;

use accepts::{AcceptsAsked, AcceptsQuestion, AcceptsWrite};
use drive::AwaitingSync;
use inputs::LeaderLost;
use installs::Delivered;
use outputs::HeldMsg;
use progress::ProgressSent;

/// One replica of a shard (see the module docs).
pub struct ReplicaNode {
    config: NodeConfig,
    /// The protocol's factory ([`NodeConfig::factory`]): its name, whether it uses progress
    /// reports.
    factory: Arc<dyn ReplicaFactory>,
    /// The replica's Raft log: the node drives it and lends it to the replica.
    log: RaftLog,
    replica: Box<dyn ShardReplica>,
    /// The replica's decoder of snapshot images, for the checks of received ones.
    decoder: Arc<dyn SnapshotDecoder>,
    next_tick_us: Option<TimeUs>,
    /// The first election is still this replica's to start (see [`ReplicaNode::turn`]).
    may_campaign: bool,
    /// Replicas of this group with a link up.
    linked: BTreeSet<u32>,
    /// Readies written and waiting for their sync, with the messages to send after it.
    awaiting: VecDeque<AwaitingSync>,
    /// The number of the last ready issued (a write of accepts alone reuses it).
    last_ready: u64,
    /// The last question for the group's accepts.
    accepts_asked: AcceptsAsked,
    /// Questions for accepts (`AcceptsQuery`) of a term this replica has not reached yet, by
    /// asker: answered as soon as it reaches it (rule V2), not dropped for the asker's next
    /// try (with jitter a candidate's question often overtakes its vote request). One per
    /// replica of the group (the newest term asked).
    accepts_questions: Vec<AcceptsQuestion>,
    /// This follower's connection to its leader broke: the group's other replicas are told
    /// at the next turn (`ReplicationMsg::LeaderLost`).
    leader_lost: Option<LeaderLost>,
    /// Accept records written since the last rewrite of the live ones (see
    /// [`crate::tuning::Tuning::accepts_rewrite_records`]).
    accepts_written: u64,
    /// Messages that wait for the accept log (see `NodeOutput::ToClientDurably`), by the
    /// persist number that makes their records durable.
    awaiting_accepts: VecDeque<AcceptsWrite>,
    /// The core's messages that name a position of this replica's log, held until the log is
    /// durable here up to it (rule 14), in the order they were produced.
    held: VecDeque<HeldMsg>,
    /// The last progress report sent, and when the next may go.
    progress: ProgressSent,
    snapshots: Cadence,
    routes: ShardRoutes,
    /// The Raft term this replica serves in (0: not serving).
    serving_term: u64,
    /// Scratch for the core's outputs.
    out: Vec<NodeOutput>,
    /// Scratch for routed batches.
    batches: Vec<(NodeId, PeerMsg)>,
    stats: NodeStats,
    /// The latest time the node was given (for inputs that come without one).
    now_us: TimeUs,
    /// Snapshot transfers in and out.
    transfers: Transfers,
    /// What the transfers asked for and the node has not turned into effects yet.
    transfer_events: Vec<TransferEvent>,
    /// Snapshots received whole and being checked off the event loop (at most
    /// [`crate::snapshot_transfer::TransferConfig::incoming_max`]).
    checks: Vec<PendingCheck>,
    next_check: u64,
    /// The leader's snapshot, decoded off the loop and stepped into Raft: installed when the
    /// log hands it out in this turn.
    restored: Option<Restored>,
    /// CRC-32 of the log's latest snapshot data, when known: sent with it.
    snapshot_crc: Option<SnapshotCrc>,
    /// After a failed transfer of the leader's snapshot to a replica (Raft id), none is tried
    /// before this time.
    install_backoff: BTreeMap<u64, TimeUs>,
    /// The leader's snapshot delivered whole to a replica (Raft id): no snapshot is sent to it
    /// again for a while unless its log is known to have reached its index. The receiver
    /// still checks and decodes it (seconds for hundreds of MB) before its log moves; Raft's
    /// probes meanwhile find it behind and ask for the snapshot again, which would send the
    /// same image over and over.
    installs_delivered: BTreeMap<u64, Delivered>,
    /// The clock offsets to the group's other replicas, and what this replica does about them
    /// (DESIGN.md rule 22).
    clock: ClockWatch,
}

/// A snapshot received whole, waiting for its [`crate::snapshots::SnapshotCheck`].
struct PendingCheck {
    token: u64,
    from: u64,
    transfer: TransferId,
    kind: SnapshotKind,
    index: u64,
    data: Bytes,
    crc32: u32,
}

/// The leader's snapshot, decoded off the event loop ([`crate::snapshots::SnapshotCheck`])
/// and stepped into Raft.
struct Restored {
    /// The log index it covers.
    index: u64,
    /// The decoded state.
    state: StateBox,
    /// CRC-32 of its data.
    crc32: u32,
}

/// CRC-32 of the data of the log's snapshot at `index`.
#[derive(Clone, Copy)]
struct SnapshotCrc {
    index: u64,
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

/// Snapshot transfers under way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    /// Sending.
    pub out: usize,
    /// Receiving.
    pub incoming: usize,
}

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
        let log = RaftLog::new(config.raft(), Some(recovered)).map_err(|source| NodeError::Raft {
            node,
            what: "opening the log",
            source,
        })?;
        let setup = ReplicaSetup {
            shard: node.shard,
            replica: node.replica,
            shards: config.leader.shards,
            round_timeout_us: config.leader.recover_after_us,
            registry: config.registry.clone(),
            initial: config.initial.clone(),
        };
        let factory = config.factory();
        let replica =
            factory.build(setup, &log).map_err(|e| NodeError::Raft { node, what: e.what, source: e.source })?;
        let snapshot_index = log.snapshot_index();
        let decoder = replica.snapshot_decoder();
        let snapshots = Cadence::new(config.tuning.snapshot_entries, snapshot_index, node.replica, config.group_size());
        let routes = ShardRoutes::new(config.replicas.len() as u32);
        let transfers = Transfers::new(node.shard, node.raft_id(), config.transfers.clone());
        let clock = ClockWatch::new(node, config.group_size(), &config.tuning);
        Ok(ReplicaNode {
            config,
            factory,
            log,
            replica,
            decoder,
            next_tick_us: None,
            may_campaign,
            linked: BTreeSet::new(),
            awaiting: VecDeque::new(),
            last_ready: 0,
            accepts_asked: AcceptsAsked::default(),
            accepts_questions: Vec::new(),
            leader_lost: None,
            accepts_written: 0,
            awaiting_accepts: VecDeque::new(),
            held: VecDeque::new(),
            progress: ProgressSent::default(),
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
    /// This node.
    pub fn id(&self) -> NodeId {
        self.config.node
    }

    /// Its configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// Its protocol's replica factory.
    pub fn factory(&self) -> &dyn ReplicaFactory {
        self.factory.as_ref()
    }

    /// The replica (its protocol's leader or follower state over the node's Raft log), for
    /// reports and checks; `replica().leader_figures()` for what its serving leader holds.
    pub fn replica(&self) -> &dyn ShardReplica {
        self.replica.as_ref()
    }

    /// The replica's Raft log, which the node owns and drives (role, term, indexes, for
    /// reports and checks).
    pub fn log(&self) -> &RaftLog {
        &self.log
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

    /// Snapshot transfers under way.
    pub fn transfers_in_flight(&self) -> InFlight {
        let (out, incoming) = self.transfers.in_flight();
        InFlight { out, incoming }
    }

    /// When [`ReplicaNode::turn`] next has timed work: the next Raft tick, the leader's next
    /// deadline, a snapshot transfer's timeout or the next clock probes.
    pub fn next_deadline(&self) -> TimeUs {
        let tick = self.next_tick_us.unwrap_or(0);
        let mut at = self.replica.next_deadline().map_or(tick, |d| d.min(tick));
        at = at.min(self.clock.next_deadline().unwrap_or(0));
        if self.progress.last != self.progress_report() {
            at = at.min(self.progress.next_at);
        }
        self.transfers.next_deadline().map_or(at, |d| d.min(at))
    }
}

/// The replica a group member's Raft id names.
fn replica_of(shard: ShardId, raft_id: u64) -> NodeId {
    NodeId { shard, replica: (raft_id - 1) as u32 }
}
