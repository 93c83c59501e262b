//! What a node is ([`NodeConfig`]: its place in the cluster, its tuning, its protocol) and
//! why it cannot go on ([`NodeError`]).

use std::sync::Arc;

use luigi_baseline::{BaseReplicas, Mode};
use luigi_protocol::leader::LeaderConfig;
use luigi_protocol::replica::LuigiReplicas;
use luigi_raft::{RaftConfig, RaftError};
use luigi_replica::{empty_store, InitialStore, ReplicaFactory};
use luigi_txn::procedure::Registry;
use luigi_txn::types::Protocol;

use crate::snapshot_transfer::TransferConfig;
use crate::tuning::Tuning;
use luigi_txn::types::NodeId;
/// The replica factory of `protocol`: Luigi's ([`LuigiReplicas`]) over `leader`, or the
/// baseline's ([`BaseReplicas`], which ignores `leader`). The one way every shell gets a
/// cluster's protocol: the server and the simulator build their nodes with it
/// ([`NodeConfig::with_protocol`]), and the simulator reads the protocol's peer messages with
/// it.
pub fn replicas_for(protocol: Protocol, leader: &LeaderConfig) -> Arc<dyn ReplicaFactory> {
    let base = |mode: Mode| Arc::new(BaseReplicas { mode }) as Arc<dyn ReplicaFactory>;
    match protocol {
        Protocol::Luigi => Arc::new(LuigiReplicas { leader: leader.clone() }),
        Protocol::Occ => base(Mode::Occ),
        Protocol::TwoPl => base(Mode::TwoPl),
        Protocol::Direct => base(Mode::Direct),
    }
}

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
    /// The protocol, if not Luigi's: builds the replica's state machine over its Raft log
    /// (`None`: Luigi's, [`LuigiReplicas`] over [`NodeConfig::leader`]; see
    /// [`NodeConfig::with_protocol`], [`replicas_for`] and [`NodeConfig::factory`]).
    pub protocol: Option<Arc<dyn ReplicaFactory>>,
}

impl NodeConfig {
    /// The configuration of `node` in a cluster with `replicas[s]` replicas in shard `s`.
    pub fn new(node: NodeId, replicas: Vec<u32>, seed: u64, tuning: Tuning, registry: Registry) -> Self {
        let mut leader = LeaderConfig::new(node.shard, replicas.len() as u32);
        leader.floor_lookahead_us = tuning.floor_lookahead_us;
        leader.recover_after_us = tuning.recover_after_us;
        leader.max_ahead_us = tuning.max_ahead_us();
        leader.answer_expiry_us = tuning.answer_expiry_us;
        leader.snapshot_retention_us = tuning.snapshot_retention_us;
        leader.idle_marker_us = tuning.idle_marker_us;
        leader.group_sizes = replicas.clone();
        let transfers = TransferConfig::new(&tuning);
        NodeConfig { node, replicas, seed, tuning, leader, registry, initial: empty_store(), transfers, protocol: None }
    }

    /// The same, running `protocol`'s replicas instead of Luigi's (a cluster's named protocol:
    /// [`replicas_for`]; a protocol of one's own: its factory).
    pub fn with_protocol(mut self, protocol: Arc<dyn ReplicaFactory>) -> Self {
        self.protocol = Some(protocol);
        self
    }

    /// The factory that builds this node's replica: the one [`NodeConfig::with_protocol`]
    /// set, or Luigi's over [`NodeConfig::leader`] as it is now.
    pub fn factory(&self) -> Arc<dyn ReplicaFactory> {
        match &self.protocol {
            Some(protocol) => protocol.clone(),
            None => replicas_for(Protocol::Luigi, &self.leader),
        }
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
