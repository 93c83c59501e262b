//! The Luigi protocol, sans I/O.
//!
//! Everything here is a plain state machine: an event and the current time go in, effects
//! come out. There are no sockets, threads, clocks or unseeded randomness, so the tokio runtime
//! (`luigi-runtime`) and the deterministic simulator (`luigi-sim`) drive the very same code.
//!
//! - [`types`]: ids, key sets, the transaction.
//! - [`procedure`], [`procedures`]: stored procedures and the built-in ones.
//! - [`msg`]: what travels between clients and leaders.
//! - [`log`]: the replicated-log seam and an in-memory implementation for tests.
//! - [`coordinator`]: the client side (timestamps, dispatch, retries, commit by watermark).
//! - [`base_client`]: the client side of the baselines (OCC, 2PL, direct), same outputs.
//! - [`client_core`]: what every protocol's client is to the shells (the `ClientCore` trait)
//!   and the in-flight table that owns the retry rules once.
//! - [`leader`]: the shard leader (admission, hold queue, execution, watermark, answers).

#[cfg(feature = "arbitrary")]
pub mod arbitrary;
pub mod base_client;
pub mod client_core;
pub mod coordinator;
pub mod fast;
pub mod keyhash;
pub mod leader;
pub mod log;
pub mod msg;
pub mod owd;
pub mod partition;
pub mod procedure;
pub mod procedures;
pub mod progress;
pub mod types;

/// Hash map keyed per process ([`keyhash::KeyedState`]): its keys (ids of clients and
/// transactions) are client-chosen, so a fixed hash would let a client fill one bucket.
/// Unseeded processes (the simulator, tests) share one default seed, so their runs,
/// iteration orders included, repeat exactly. Iteration order is not the same across
/// processes: nothing another replica must agree with may depend on it.
pub type Map<K, V> = std::collections::HashMap<K, V, keyhash::KeyedState>;
