//! The Luigi protocol, sans I/O.
//!
//! Everything here is a plain state machine: an event and the current time go in, effects
//! come out. There are no sockets, threads, clocks or unseeded randomness, so the tokio runtime
//! (`luigi-runtime`) and the deterministic simulator (`luigi-sim`) drive the very same code.
//! The protocol-neutral model it runs on (transactions, procedures, partitioning, the
//! client-facing messages, the client core) is `luigi-txn`.
//!
//! - [`coordinator`]: Luigi's client (timestamps, dispatch, commit by watermark), one
//!   policy over `luigi_txn::client_core`'s in-flight table.
//! - [`owd`]: the one-way-delay estimates the coordinator stamps with.
//! - [`leader`]: the shard leader and follower (admission, hold queue, execution, watermark,
//!   answers, agreement, recovery, outcome retention).
//! - [`fast`]: the fast path's order bookkeeping and a follower's accept rule.
//! - [`log`]: Luigi's log records (the replicated-log seam is `luigi_txn::log`).
//! - [`replica`]: Luigi's replica of a shard over its node's Raft log: its part of the one
//!   role machine (`luigi-replica`), its fast path on a replica, and [`replica::LuigiReplicas`],
//!   the factory a node builds it with.
//! - [`msg`]: what travels between servers: Luigi's peer batches (encoded by the protocol,
//!   opaque to the node in a `luigi_txn::peer::PeerMsg`) and the replication layer's
//!   messages (the frame every connection speaks is `luigi_runtime::wire::WireMsg`).

#[cfg(feature = "arbitrary")]
pub mod arbitrary;
pub mod coordinator;
pub mod fast;
pub mod leader;
pub mod log;
pub mod msg;
pub mod owd;
pub mod replica;
