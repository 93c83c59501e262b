//! TPC-C (see `docs/TPCC.md`): the nine tables, the spec's population, the five transactions
//! as stored procedures, a seeded generator, partitioning by warehouse and the twelve
//! consistency conditions.
//!
//! API stub: the implementation follows behind these signatures.

use std::str::FromStr;
use std::sync::Arc;

use luigi_proto::partition::Partitioner;
use luigi_proto::procedure::Registry;
use luigi_proto::types::ShardId;
use luigi_store::{Key, Store, Value};
use serde::{Deserialize, Serialize};

use crate::{TxnGenerator, TxnSpec, Workload};

/// The server-side parameters: what the population and the partitioning depend on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpccConfig {
    /// Warehouses, numbered from 1; warehouse `w` lives on shard `(w - 1) % shards`.
    pub warehouses: u32,
    /// Shrinks items, customers and orders (1.0 = the spec's sizes), for tests.
    #[serde(default = "default_scale")]
    pub scale: f64,
    /// Seed of the population and of the NURand constants.
    #[serde(default = "default_seed")]
    pub seed: u64,
}

fn default_scale() -> f64 {
    1.0
}

fn default_seed() -> u64 {
    0x7cc
}

impl Default for TpccConfig {
    fn default() -> Self {
        Self { warehouses: 1, scale: default_scale(), seed: default_seed() }
    }
}

/// The transaction mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mix {
    /// 45 % NewOrder, 43 % Payment, 4 % each OrderStatus, Delivery, StockLevel.
    #[default]
    Standard,
    /// NewOrder only.
    NewOrder,
}

impl FromStr for Mix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "standard" => Ok(Mix::Standard),
            "new-order" => Ok(Mix::NewOrder),
            other => Err(format!("unknown mix '{other}' (standard or new-order)")),
        }
    }
}

/// The client-side parameters: what the generators draw.
#[derive(Clone, Debug, PartialEq)]
pub struct TpccLoad {
    /// The mix.
    pub mix: Mix,
    /// Percentage of NewOrder lines supplied by another warehouse (spec: 1).
    pub remote_item_pct: f64,
    /// Percentage of Payments to a customer of another warehouse (spec: 15).
    pub remote_payment_pct: f64,
}

impl Default for TpccLoad {
    fn default() -> Self {
        Self { mix: Mix::Standard, remote_item_pct: 1.0, remote_payment_pct: 15.0 }
    }
}

/// One consistency condition's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionResult {
    /// Its number in clause 3.3.2 (1-12).
    pub number: u8,
    /// What it states, in one line.
    pub statement: &'static str,
    /// True when it holds everywhere it was checked.
    pub passed: bool,
    /// How many instances (warehouses, districts, orders, lines, customers) were checked.
    pub checked: u64,
    /// The first violations, when it failed.
    pub detail: String,
}

/// TPC-C over a number of shards.
#[derive(Clone, Debug)]
pub struct TpccWorkload {
    config: TpccConfig,
    load: TpccLoad,
    shards: u32,
}

impl TpccWorkload {
    /// The workload, if the parameters are valid for `shards` shards.
    pub fn new(config: TpccConfig, load: TpccLoad, shards: u32) -> Result<Self, String> {
        Ok(Self { config, load, shards })
    }

    /// The server-side parameters.
    pub fn config(&self) -> &TpccConfig {
        &self.config
    }

    /// The client-side parameters.
    pub fn load(&self) -> &TpccLoad {
        &self.load
    }

    /// The `tpcc.check` transaction: read-only, over every shard.
    pub fn check_txn(&self) -> TxnSpec {
        todo!("tpcc check transaction")
    }

    /// The twelve conditions, from the outputs of a committed [`TpccWorkload::check_txn`].
    pub fn evaluate(&self, outputs: &[(ShardId, Vec<u8>)]) -> Result<Vec<ConditionResult>, String> {
        let _ = outputs;
        todo!("tpcc evaluate")
    }

    /// The twelve conditions over the stores of every shard (`stores[s]` is shard `s`'s).
    pub fn conditions(&self, stores: &[&Store]) -> Result<Vec<ConditionResult>, String> {
        let _ = stores;
        todo!("tpcc conditions")
    }
}

impl Workload for TpccWorkload {
    fn name(&self) -> &'static str {
        "tpcc"
    }

    fn register(&self, registry: &mut Registry) {
        let _ = registry;
        todo!("tpcc procedures")
    }

    fn partitioner(&self) -> Arc<dyn Partitioner> {
        todo!("tpcc partitioner {}", self.shards)
    }

    fn generator(&self, seed: u64) -> Box<dyn TxnGenerator> {
        let _ = seed;
        todo!("tpcc generator")
    }

    fn population(&self, seed: u64, shard: ShardId) -> Vec<(Key, Value)> {
        let _ = (seed, shard);
        todo!("tpcc population")
    }

    fn check(&self, _seed: u64, stores: &[&Store]) -> Result<(), String> {
        let failed: Vec<_> = self.conditions(stores)?.into_iter().filter(|c| !c.passed).collect();
        match failed.first() {
            None => Ok(()),
            Some(c) => Err(format!("TPC-C condition {} failed: {}", c.number, c.detail)),
        }
    }
}
