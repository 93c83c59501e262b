//! The replica layer every protocol shares, over the Raft log its node owns (`luigi-raft`):
//!
//! - [`replica_api`]: the seam between a protocol's shard replica and the node that owns and
//!   drives its log ([`ShardReplica`], lent the log in every call that needs it, built over
//!   the node's log by a [`ReplicaFactory`]), the fast path's optional extension
//!   ([`FastPathReplica`]) and the replica's own snapshot jobs ([`SnapshotJob`]);
//! - [`role_machine`]: the one [`RoleMachine`] every protocol's replica is (follower/leader
//!   switching, rebuild, own snapshots, the hint), over the protocol's part
//!   ([`ReplicaProtocol`], with [`FastPathProtocol`] if it has a fast path). Luigi's is
//!   `luigi_protocol::replica`, the baselines' `luigi_baseline::replica`;
//! - [`waiting`]: the dispatches a follower holds while its shard has no serving leader it
//!   knows of;
//! - [`snapshot_reads`]: the snapshot reads a replica holds until its safe time reaches
//!   them (rule 23);
//! - [`procedure_commits`]: a leader's commits per stored procedure, for the metrics.
//!
//! It names no protocol's types: a protocol's configuration is its factory's, and what the
//! shells read of a leader is plain data ([`LeaderFigures`]).

pub mod procedure_commits;
pub mod replica_api;
pub mod role_machine;
pub mod snapshot_reads;
pub mod waiting;

pub use procedure_commits::ProcedureCommits;
pub use replica_api::{
    empty_store, AgreementCounters, BuildError, FastAcceptCounts, FastPathReplica, InitialStore, LeaderFigures,
    LeaderTotals, ReplicaFactory, ReplicaSetup, ShardReplica, SnapshotDecoder, SnapshotImage, SnapshotJob, StateBox,
    Transition, TxnCount,
};
pub use role_machine::{
    BatchOf, FastPathProtocol, FollowerCore, FollowerDispatch, FollowerImages, ImageFork, LeaderCore, OutputOf,
    ReplayedExecutions, ReplicaProtocol, ReplicaStats, RoleMachine, ServeAhead, SnapshotView, WritePositions,
};
