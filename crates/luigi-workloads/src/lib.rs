//! Luigi's workloads, independent of the protocol that runs them and of the tool that drives
//! them (the load driver in `luigi-bench`, the deterministic simulator in `luigi-sim`, and
//! later the OCC/2PL baselines).
//!
//! A workload ([`Workload`]) provides:
//! - its stored procedures, registered into a [`Registry`] ([`Workload::register`]);
//! - its [`Partitioner`] (which shard owns a key);
//! - seeded generators of transactions ([`TxnGenerator`]), each a [`TxnSpec`]: procedure name,
//!   arguments and the keys declared per shard;
//! - a deterministic initial population ([`Workload::population`]): a function of a seed and
//!   a shard, so that every replica of a shard builds the same state without talking;
//! - a consistency check over the final state of every shard ([`Workload::check`]).
//!
//! Workloads: [`micro`], [`tpcc`] (see `docs/TPCC.md`) and [`ycsb`] (YCSB A-F and seed 003's K2
//! mixes). [`WorkloadSpec`] names a
//! workload with its server-side parameters, as a cluster file carries it.

pub mod micro;
pub mod procedures;
mod table_pieces;
pub mod tpcc;
pub mod ycsb;

use std::fmt;
use std::sync::Arc;

use luigi_store::{Key, Store, Value};
use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::Registry;
use luigi_txn::types::{ShardId, ShardPiece};

/// One transaction to run: a procedure call and the keys it declares on each participant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnSpec {
    /// Registered procedure name.
    pub procedure: String,
    /// Encoded arguments.
    pub args: Vec<u8>,
    /// Participants with their declared keys, sorted by shard (built with the workload's
    /// partitioner).
    pub pieces: Vec<ShardPiece>,
}

impl TxnSpec {
    /// True when the transaction has more than one participant.
    pub fn is_cross_shard(&self) -> bool {
        self.pieces.len() > 1
    }

    /// Every key declared as read, over all participants.
    pub fn reads(&self) -> impl Iterator<Item = &Key> {
        self.pieces.iter().flat_map(|p| &p.keys.reads)
    }

    /// Every key declared as written, over all participants.
    pub fn writes(&self) -> impl Iterator<Item = &Key> {
        self.pieces.iter().flat_map(|p| &p.keys.writes)
    }
}

/// Why a generator could not draw a transaction (e.g. a key space too small or too skewed to
/// find the keys a transaction needs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenError(pub String);

impl fmt::Display for GenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GenError {}

/// A seeded source of transactions: the same seed gives the same sequence.
///
/// A business transaction may take more than one protocol transaction (TPC-C's StockLevel
/// reads its recent items first, then their stock): the driver submits what
/// [`TxnGenerator::next_txn`] draws and, once it committed, asks [`TxnGenerator::next_step`]
/// for the step that follows, and so on until there is none. The business transaction's
/// latency runs from its first step's dispatch to its last step's answer.
pub trait TxnGenerator: Send {
    /// The next transaction, or why none can be drawn.
    fn next_txn(&mut self) -> Result<TxnSpec, GenError>;

    /// The step following `done`, which committed with `outputs` (each participant's
    /// result, by shard), or `None` when the business transaction is complete.
    fn next_step(&mut self, done: &TxnSpec, outputs: &[(ShardId, Vec<u8>)]) -> Result<Option<TxnSpec>, GenError> {
        let _ = (done, outputs);
        Ok(None)
    }
}

/// A workload with its server-side parameters (what the servers need to register its
/// procedures and build their initial state), as the `[workload]` table of a cluster file.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum WorkloadSpec {
    /// TPC-C.
    Tpcc(tpcc::TpccConfig),
    /// YCSB's usertable.
    Ycsb(ycsb::YcsbConfig),
}

impl WorkloadSpec {
    /// The seed of the population ([`Workload::population`]'s `seed`).
    pub fn seed(&self) -> u64 {
        match self {
            WorkloadSpec::Tpcc(config) => config.seed,
            WorkloadSpec::Ycsb(config) => config.seed,
        }
    }

    /// The workload over `shards` shards, with the default client-side parameters (the
    /// servers use its procedures and population, not its generators).
    pub fn build(&self, shards: u32) -> Result<Arc<dyn Workload>, String> {
        match self {
            WorkloadSpec::Tpcc(config) => {
                Ok(Arc::new(tpcc::TpccWorkload::new(config.clone(), tpcc::TpccLoad::default(), shards)?))
            }
            WorkloadSpec::Ycsb(config) => {
                let load = ycsb::YcsbLoad::of(ycsb::CoreWorkload::A);
                Ok(Arc::new(ycsb::YcsbWorkload::new(config.clone(), load, shards)?))
            }
        }
    }
}

/// A workload: procedures, partitioning, generators, initial state and a consistency check.
pub trait Workload: Send + Sync {
    /// Short name (e.g. "micro"), as reports print it.
    fn name(&self) -> &'static str;

    /// Registers the workload's procedures into `registry`.
    fn register(&self, registry: &mut Registry);

    /// Which shard owns each key; the generators' pieces follow it.
    fn partitioner(&self) -> Arc<dyn Partitioner>;

    /// A generator seeded with `seed` (e.g. one per load thread, each with its own seed).
    fn generator(&self, seed: u64) -> Box<dyn TxnGenerator>;

    /// The rows shard `shard` starts with, a deterministic function of `seed` and `shard`.
    fn population(&self, seed: u64, shard: ShardId) -> Vec<(Key, Value)>;

    /// Checks the workload's invariants over the final state, `stores[s]` being shard `s`'s
    /// store, after any history of the workload's transactions from the population of `seed`.
    fn check(&self, seed: u64, stores: &[&Store]) -> Result<(), String>;

    /// The built-in procedures plus this workload's.
    fn registry(&self) -> Registry {
        let mut registry = crate::procedures::builtins();
        self.register(&mut registry);
        registry
    }

    /// Shard `shard`'s initial store ([`Workload::population`] loaded into a store).
    fn populate(&self, seed: u64, shard: ShardId) -> Store {
        let mut store = Store::new();
        for (key, value) in self.population(seed, shard) {
            store.put(key, value);
        }
        store
    }
}
