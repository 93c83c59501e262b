//! Luigi's protocol-neutral transaction model: what every protocol (Luigi's own and the
//! baselines) and every shell (the tokio runtime, the simulator, the benchmark) share.
//!
//! - [`types`]: ids, key sets, the transaction and its pieces ([`byte_strings`]: how their
//!   byte strings are serialized).
//! - [`procedure`]: the stored-procedure API and the registry (the built-in procedures live
//!   with the workloads, `luigi_workloads::procedures`).
//! - [`partition`]: which shard owns a key; [`keyhash`]: the stable and the keyed hashes.
//! - [`log`]: the replicated-log seam every protocol's leader proposes through.
//! - [`progress`]: proof that a shard's log is committed up to a position (rule 14).
//! - [`read_only`]: a read-only transaction's piece read at a snapshot, and its answer.
//! - [`snapshot`]: a read-only view of a store at a snapshot timestamp (rule 23).
//! - [`msg`]: what travels between clients and servers, for every protocol.
//! - [`peer`]: the neutral envelope peer messages travel in (each protocol's items opaque)
//!   and the outputs a replica gives its node.
//! - [`client_core`]: what every protocol's client is to the shells (the `ClientCore` trait,
//!   its outputs) and the in-flight table that owns the retry rules once.

#[cfg(feature = "arbitrary")]
pub mod arbitrary;
pub mod byte_strings;
pub mod client_core;
pub mod keyhash;
pub mod log;
pub mod msg;
pub mod partition;
pub mod peer;
pub mod procedure;
pub mod progress;
pub mod read_only;
pub mod snapshot;
pub mod throttle;
pub mod types;

/// Hash map keyed per process ([`keyhash::KeyedState`]): its keys (ids of clients and
/// transactions) are client-chosen, so a fixed hash would let a client fill one bucket.
/// Unseeded processes (the simulator, tests) share one default seed, so their runs,
/// iteration orders included, repeat exactly. Iteration order is not the same across
/// processes: nothing another replica must agree with may depend on it.
pub type Map<K, V> = std::collections::HashMap<K, V, keyhash::KeyedState>;
