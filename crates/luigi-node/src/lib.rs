//! One replica of a Luigi shard as a sans-I/O state machine: [`ReplicaNode`].
//!
//! The protocol cores (`luigi-protocol`: the shard leader, its follower state, the coordinator)
//! and the Raft log (`luigi-raft`) say what happens on each message. This crate holds the
//! layer above them that both shells need and that must not be written twice: driving the
//! log's readies, ticks, the first election, role switches, snapshot cadence and compaction,
//! snapshot transfers in chunks between the replicas ([`snapshot_transfer`]),
//! where agreement batches go (`LeaderIs` routing), where a client sends a shard's
//! transactions, the replicas' clock offsets to each other and what a replica whose clock is
//! beyond the bound does ([`clock_offsets`], [`clock_guard`], [`clock_watch`]), and every
//! timeout ([`tuning`]). It serves every protocol: the state machine
//! is a `Box<dyn luigi_replica::ShardReplica>` built by [`NodeConfig::protocol`] (Luigi's by
//! default). The server (`luigi-runtime`) and the
//! simulator (`luigi-sim`) both run a [`ReplicaNode`] per replica and only execute its
//! [`Effect`]s: sockets and files in one, a seeded network and a faulty in-memory disk in the
//! other.

pub mod clock_guard;
pub mod clock_offsets;
pub mod clock_watch;
pub mod effect;
pub mod node;
pub mod routing;
pub mod snapshot_transfer;
pub mod snapshots;
pub mod status;
pub mod tuning;

pub use effect::{Discarded, Effect, Persist};
pub use node::{replicas_for, NodeConfig, NodeError, NodeStats, ReplicaNode};
pub use routing::ShardRoutes;
pub use snapshot_transfer::{TransferConfig, TransferStats, Transfers};
pub use snapshots::{CheckedSnapshot, SnapshotCheck};
pub use tuning::Tuning;
