//! Tests of the TPC-C workload, at small scales (0.01-0.05) unless stated.

mod conditions;
mod generator;
mod population;
mod transactions;

use luigi_store::Store;
use luigi_txn::procedure::{ProcError, Registry};
use luigi_txn::types::ShardId;
use serde::de::DeserializeOwned;

use super::rows::{decode, encode};
use super::{TpccConfig, TpccLoad, TpccWorkload};
use crate::{TxnSpec, Workload};

/// The workload with `warehouses` warehouses over `shards` shards at `scale`.
fn workload(warehouses: u32, shards: u32, scale: f64) -> TpccWorkload {
    let config = TpccConfig { warehouses, scale, seed: 42 };
    TpccWorkload::new(config, TpccLoad::default(), shards).unwrap()
}

/// A workload and its populated stores.
struct Fixture {
    wl: TpccWorkload,
    registry: Registry,
    stores: Vec<Store>,
}

impl Fixture {
    fn new(warehouses: u32, shards: u32, scale: f64) -> Self {
        let wl = workload(warehouses, shards, scale);
        let stores = (0..shards).map(|s| wl.populate(0, s)).collect();
        Self { registry: wl.registry(), wl, stores }
    }

    /// Runs `spec` like the servers do: every participant runs the procedure on its store
    /// with its key set. If one participant fails, all must fail with the same error.
    fn run(&mut self, spec: &TxnSpec) -> Result<Vec<(ShardId, Vec<u8>)>, ProcError> {
        let mut outputs = Vec::new();
        let mut errors = Vec::new();
        for piece in &spec.pieces {
            let store = &mut self.stores[piece.shard as usize];
            match self.registry.execute(&spec.procedure, &spec.args, store, &piece.keys, piece.shard) {
                Ok(out) => outputs.push((piece.shard, out)),
                Err(e) => errors.push(e),
            }
        }
        match errors.first() {
            None => Ok(outputs),
            Some(first) => {
                assert!(
                    outputs.is_empty(),
                    "{}: some participants committed, others failed: {errors:?}",
                    spec.procedure
                );
                assert!(errors.iter().all(|e| e == first), "{}: participants disagree: {errors:?}", spec.procedure);
                Err(first.clone())
            }
        }
    }

    /// Runs `spec`, which must have exactly one output, and decodes it.
    fn run_one<T: DeserializeOwned>(&mut self, spec: &TxnSpec) -> T {
        let outputs = self.run(spec).unwrap();
        assert_eq!(outputs.len(), 1, "{}: one participant expected", spec.procedure);
        postcard::from_bytes(&outputs[0].1).unwrap()
    }

    fn store_of(&mut self, w: u32) -> &mut Store {
        let shard = self.wl.tpcc_partitioner().shard_of_warehouse(w);
        &mut self.stores[shard as usize]
    }

    /// The row under `key` in warehouse `w`'s store.
    fn row<T: DeserializeOwned>(&mut self, w: u32, key: &[u8]) -> T {
        let value =
            self.store_of(w).get(key).unwrap_or_else(|| panic!("no row {}", super::keys::describe(key))).clone();
        decode(key, &value).unwrap()
    }

    fn set_row<T: serde::Serialize>(&mut self, w: u32, key: Vec<u8>, row: &T) {
        self.store_of(w).put(key, encode(row));
    }

    fn hashes(&self) -> Vec<u64> {
        self.stores.iter().map(Store::state_hash).collect()
    }

    fn conditions(&self) -> Vec<super::ConditionResult> {
        let stores: Vec<&Store> = self.stores.iter().collect();
        self.wl.conditions(&stores).unwrap()
    }

    fn assert_conditions_hold(&self) {
        for c in self.conditions() {
            assert!(c.passed, "condition {} ({}) failed: {}", c.number, c.statement, c.detail);
            assert!(c.checked > 0, "condition {} checked nothing", c.number);
        }
    }
}
