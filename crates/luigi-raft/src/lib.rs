//! The replicated log of one Luigi shard's replica group.
//!
//! Replication is Raft, which is Multi-Paxos with a strong leader: one elected leader per term
//! orders every record, a record is committed once a majority stores it, and a new leader is
//! always one whose log holds every committed record. We use tikv's `raft` crate (raft-rs)
//! 0.7, driven through its `RawNode`, with pre-vote and check-quorum on.
//!
//! The parts:
//!
//! - [`RaftLog`]: the sans-I/O core (no threads, sockets, clocks or files). It implements the
//!   protocol-neutral seam [`luigi_txn::log::ReplicatedLog`]: `propose` on the leader returns the
//!   record's log index (or [`luigi_txn::log::LogError::NotLeader`]), `take_committed` hands
//!   back committed records in log order on every replica. Raft's own entries (a new leader's
//!   no-op, which raft-rs appends on election and commits like any entry; conf changes) are
//!   skipped, so indexes of taken records increase but are not consecutive. The log holds
//!   bytes, as raft-rs's does ([`RaftLog::propose_bytes`], [`RaftLog::take_committed_bytes`]);
//!   the seam is its typed view, offered for every [`Record`] type (Luigi's
//!   `luigi_protocol::log::LogRecord`, a baseline's prepare and commit records): postcard
//!   on `propose`, decoded on `take_committed` (a record that does not decode is a fatal
//!   [`RaftError::BadEntry`], never a panic).
//! - [`disk::DiskStorage`]: the durable shell helper (file I/O through `luigi-wal`) that
//!   persists what [`Ready`] asks for and recovers a [`RecoveredState`] at restart, with the
//!   fast path's accept log ([`accepts`]: opaque records group-committed with the Raft log's
//!   sync, which is why it lives beside the disk and not with a protocol).
//!
//! It knows no protocol: the replica layer every protocol shares over this log (the seam with
//! the node, the role machine) is `luigi-replica`, and each protocol's replica lives in its
//! own crate (Luigi's `luigi_protocol::replica`, the baselines' `luigi_baseline::replica`).
//!
//! # Driving a replica
//!
//! Every event (a timer tick, a message in, a proposal) is followed by draining the readies:
//!
//! ```text
//! on timer:      log.tick()
//! on message:    log.step_bytes(&bytes)          // errors: drop the message, log it
//! then, and after every propose:
//! while let Some(rd) = log.ready()? {
//!     send(rd.messages)                          // 1. may leave before persisting
//!     disk.persist(&rd)?                         // 2. snapshot, entries (truncating a
//!                                                //    conflicting suffix), hard state, fsync
//!     if let Some(s) = &rd.snapshot { restore_state_machine(&s.data) }
//!     send(rd.persisted_messages)                // 3. only after 2 is durable
//!     log.advance(rd.number)                     // 4. may produce more work: loop
//! }
//! log.take_committed(&mut out)                   // 5. apply, in order
//! ```
//!
//! `tick`, `step` and `propose` may be called at any time, also while a ready is being
//! persisted (raft-rs's async-ready mode), and several readies may be persisted as one group
//! commit ([`disk::DiskStorage::write`] each, then one [`disk::DiskStorage::sync`]) as long as
//! none of their `persisted_messages` leaves before the sync and `advance` gets the last
//! number. Messages travel as bytes ([`encode_message`] / [`decode_message`]); the transport
//! may drop, delay, duplicate or reorder them.
//!
//! # Determinism
//!
//! Same config (including the seed), same recovered state and same sequence of calls give the
//! same behaviour: see [`RaftLog`] for how the election timeouts are seeded.

pub mod accepts;
pub mod codec;
pub mod disk;
mod node;
mod rng;
mod store;

pub use codec::{decode_message, encode_message, DecodeError, HardState, PersistEntry};
pub use node::{
    OutMessage, RaftConfig, RaftError, RaftLog, Ready, Record, RecoveredState, Replay, Role, RoleChange, SnapshotData,
    REJOIN_CONTEXT,
};
/// The raft-rs message and entry types, for shells that want them.
pub use raft::eraftpb;
