//! YCSB: the core workloads A-F (brianfrankcooper/YCSB, `workloads/workload[a-f]`) and the
//! K2 read/update mixes of seed 003, over a `usertable` of `records` rows of `field_count`
//! fields of `field_length` bytes (YCSB's defaults: 1 000 records as its workload files
//! load, 10 fields of 100 bytes).
//!
//! - Keys: `user` + FNV-hashed record number ([`keys`], YCSB's `insertorder=hashed`),
//!   hash-partitioned over the shards (`HashPartitioner`).
//! - Procedures ([`procedure`]): one body, registered under one name per operation type, so
//!   reports give figures per type; every protocol runs it through `ProcCtx`, scans through
//!   `ProcCtx::scan`.
//! - Generator ([`generator`]): a transaction is `ops_per_txn` operations of one type drawn
//!   from the mix; request distributions ([`dist`]) uniform, scrambled Zipfian (0.99) or
//!   latest, as YCSB draws them.
//! - Population: every record `0..records` on the shard that owns it, fields drawn from the
//!   seed ([`keys::initial_row`]).
//! - Check: every row is a usertable row on its owning shard, of the row's length; every
//!   loaded record is still there (YCSB never deletes).

pub mod dist;
pub mod generator;
pub mod keys;
pub mod procedure;

use std::sync::Arc;

use luigi_store::{Key, Store, Value};
use luigi_txn::partition::{HashPartitioner, Partitioner};
use luigi_txn::procedure::Registry;
use luigi_txn::types::ShardId;
use serde::{Deserialize, Serialize};

pub use dist::{Distribution, InsertCounter, KeyChooser, Zipfian};
pub use generator::YcsbGenerator;
pub use procedure::{register_ycsb, ycsb_args, ycsb_merge, ycsb_pieces, OpKind, Ycsb, YcsbOp, YcsbResult};

use crate::{TxnGenerator, Workload};

/// Most records of a usertable (each row is held by every replica of its shard, in memory).
pub const MAX_RECORDS: u64 = 10_000_000;
/// Most bytes of a row (`field_count * field_length`).
pub const MAX_ROW_BYTES: u64 = 64 << 10;
/// Most operations per transaction.
pub const MAX_OPS_PER_TXN: u32 = 1_000;
/// Most bytes a transaction's operations may carry (a transaction's arguments are at most
/// 4 MiB).
pub const MAX_TXN_BYTES: u64 = 2 << 20;
/// Longest scan (YCSB's `maxscanlength` defaults to 100).
pub const MAX_SCAN_LENGTH: u32 = 10_000;

/// The server-side parameters: the usertable's shape and the population's seed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YcsbConfig {
    /// Records loaded (`recordcount`), numbered `0..records`.
    #[serde(default = "default_records")]
    pub records: u64,
    /// Fields per record (`fieldcount`).
    #[serde(default = "default_field_count")]
    pub field_count: u32,
    /// Bytes per field (`fieldlength`).
    #[serde(default = "default_field_length")]
    pub field_length: u32,
    /// Seed of the population.
    #[serde(default = "default_seed")]
    pub seed: u64,
}

fn default_records() -> u64 {
    1_000
}
fn default_field_count() -> u32 {
    10
}
fn default_field_length() -> u32 {
    100
}
fn default_seed() -> u64 {
    0x9c5b
}

impl Default for YcsbConfig {
    fn default() -> Self {
        Self {
            records: default_records(),
            field_count: default_field_count(),
            field_length: default_field_length(),
            seed: default_seed(),
        }
    }
}

impl YcsbConfig {
    /// Bytes of a row.
    pub fn row_bytes(&self) -> u64 {
        u64::from(self.field_count) * u64::from(self.field_length)
    }

    /// Checks the ranges (the first problem, naming the parameter).
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_RECORDS).contains(&self.records) {
            return Err(format!("records {} out of 1..={MAX_RECORDS}", self.records));
        }
        if self.field_count == 0 || self.field_length == 0 {
            return Err("field_count and field_length must be at least 1".into());
        }
        if self.row_bytes() > MAX_ROW_BYTES {
            return Err(format!(
                "a row of {} bytes (field_count x field_length) over {MAX_ROW_BYTES}",
                self.row_bytes()
            ));
        }
        Ok(())
    }
}

/// The operation proportions of a workload, in percent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    /// Reads.
    pub read: u32,
    /// Updates.
    pub update: u32,
    /// Inserts.
    pub insert: u32,
    /// Scans.
    pub scan: u32,
    /// Read-modify-writes.
    pub rmw: u32,
}

impl Mix {
    /// (kind, weight) of every kind.
    pub fn weights(&self) -> [(OpKind, u32); 5] {
        [
            (OpKind::Read, self.read),
            (OpKind::Update, self.update),
            (OpKind::Insert, self.insert),
            (OpKind::Scan, self.scan),
            (OpKind::ReadModifyWrite, self.rmw),
        ]
    }
}

/// A named workload: YCSB's core workloads and the K2 mixes of seed 003.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreWorkload {
    /// 50 % read, 50 % update, zipfian.
    A,
    /// 95 % read, 5 % update, zipfian.
    B,
    /// 100 % read, zipfian.
    C,
    /// 95 % read, 5 % insert, latest.
    D,
    /// 95 % scan, 5 % insert, zipfian.
    E,
    /// 50 % read, 50 % read-modify-write, zipfian.
    F,
    /// K2's {95, 5}: 95 % read, 5 % update.
    K2Read95,
    /// K2's {50, 50}: 50 % read, 50 % update.
    K2Read50,
}

impl CoreWorkload {
    /// Every workload.
    pub const ALL: [CoreWorkload; 8] = [
        CoreWorkload::A,
        CoreWorkload::B,
        CoreWorkload::C,
        CoreWorkload::D,
        CoreWorkload::E,
        CoreWorkload::F,
        CoreWorkload::K2Read95,
        CoreWorkload::K2Read50,
    ];

    /// Its name on the command line (`a`..`f`, `k2-95-5`, `k2-50-50`).
    pub fn name(self) -> &'static str {
        match self {
            CoreWorkload::A => "a",
            CoreWorkload::B => "b",
            CoreWorkload::C => "c",
            CoreWorkload::D => "d",
            CoreWorkload::E => "e",
            CoreWorkload::F => "f",
            CoreWorkload::K2Read95 => "k2-95-5",
            CoreWorkload::K2Read50 => "k2-50-50",
        }
    }

    /// Its operation proportions.
    pub fn mix(self) -> Mix {
        let none = Mix { read: 0, update: 0, insert: 0, scan: 0, rmw: 0 };
        match self {
            CoreWorkload::A | CoreWorkload::K2Read50 => Mix { read: 50, update: 50, ..none },
            CoreWorkload::B | CoreWorkload::K2Read95 => Mix { read: 95, update: 5, ..none },
            CoreWorkload::C => Mix { read: 100, ..none },
            CoreWorkload::D => Mix { read: 95, insert: 5, ..none },
            CoreWorkload::E => Mix { scan: 95, insert: 5, ..none },
            CoreWorkload::F => Mix { read: 50, rmw: 50, ..none },
        }
    }

    /// Its request distribution in YCSB's workload files (the K2 mixes: zipfian, YCSB's
    /// default; seed 003 runs both).
    pub fn default_dist(self) -> Distribution {
        match self {
            CoreWorkload::D => Distribution::Latest,
            CoreWorkload::A
            | CoreWorkload::B
            | CoreWorkload::C
            | CoreWorkload::E
            | CoreWorkload::F
            | CoreWorkload::K2Read95
            | CoreWorkload::K2Read50 => Distribution::Zipfian,
        }
    }
}

impl std::str::FromStr for CoreWorkload {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        CoreWorkload::ALL.into_iter().find(|w| w.name() == lower).ok_or_else(|| {
            let names: Vec<&str> = CoreWorkload::ALL.iter().map(|w| w.name()).collect();
            format!("unknown YCSB workload '{s}' (one of {})", names.join(", "))
        })
    }
}

/// The client-side parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YcsbLoad {
    /// Operation proportions.
    pub mix: Mix,
    /// Request distribution.
    pub dist: Distribution,
    /// Operations per transaction (all of one type).
    pub ops_per_txn: u32,
    /// Longest scan (`maxscanlength`); a scan's length is uniform from 1 to it.
    pub max_scan_length: u32,
    /// The client reads transactions without writes at a snapshot (Luigi's read-only path):
    /// scans among reads then declare the table's prefix as a read, not as a lock
    /// ([`ycsb_pieces`]).
    pub scans_at_snapshot: bool,
}

impl YcsbLoad {
    /// `workload`'s load with its own distribution, one operation per transaction, scans of
    /// at most 100.
    pub fn of(workload: CoreWorkload) -> Self {
        Self {
            mix: workload.mix(),
            dist: workload.default_dist(),
            ops_per_txn: 1,
            max_scan_length: 100,
            scans_at_snapshot: false,
        }
    }

    /// Checks the ranges against the table of `config`.
    pub fn check(&self, config: &YcsbConfig) -> Result<(), String> {
        if !(1..=MAX_OPS_PER_TXN).contains(&self.ops_per_txn) {
            return Err(format!("ops per transaction {} out of 1..={MAX_OPS_PER_TXN}", self.ops_per_txn));
        }
        let point = self.mix.read + self.mix.update + self.mix.rmw > 0;
        if point && u64::from(self.ops_per_txn) * 2 > config.records {
            return Err(format!(
                "{} operations per transaction need at least {} records (twice as many, to find distinct ones)",
                self.ops_per_txn,
                2 * self.ops_per_txn
            ));
        }
        if u64::from(self.ops_per_txn) * config.row_bytes() > MAX_TXN_BYTES {
            return Err(format!(
                "{} operations of {}-byte rows exceed {MAX_TXN_BYTES} bytes per transaction",
                self.ops_per_txn,
                config.row_bytes()
            ));
        }
        if !(1..=MAX_SCAN_LENGTH).contains(&self.max_scan_length) {
            return Err(format!("max scan length {} out of 1..={MAX_SCAN_LENGTH}", self.max_scan_length));
        }
        let weights = self.mix.weights();
        if weights.iter().map(|(_, w)| w).sum::<u32>() == 0 {
            return Err("the mix has no operation".into());
        }
        Ok(())
    }
}

/// The YCSB workload over `shards` shards.
#[derive(Clone, Debug)]
pub struct YcsbWorkload {
    config: YcsbConfig,
    load: YcsbLoad,
    partitioner: HashPartitioner,
    inserted: InsertCounter,
}

impl YcsbWorkload {
    /// The workload, if both parameter sets are in range.
    pub fn new(config: YcsbConfig, load: YcsbLoad, shards: u32) -> Result<Self, String> {
        config.check()?;
        load.check(&config)?;
        if shards == 0 {
            return Err("at least 1 shard".into());
        }
        let inserted = InsertCounter::new(config.records);
        Ok(Self { config, load, partitioner: HashPartitioner::new(shards), inserted })
    }

    /// The server-side parameters.
    pub fn config(&self) -> &YcsbConfig {
        &self.config
    }

    /// The client-side parameters.
    pub fn load(&self) -> &YcsbLoad {
        &self.load
    }

    fn owned(&self, shard: ShardId) -> impl Iterator<Item = u64> + '_ {
        (0..self.config.records).filter(move |n| self.partitioner.shard_of(&keys::record_key(*n)) == shard)
    }
}

impl Workload for YcsbWorkload {
    fn name(&self) -> &'static str {
        "ycsb"
    }

    fn register(&self, registry: &mut Registry) {
        register_ycsb(registry);
    }

    fn partitioner(&self) -> Arc<dyn Partitioner> {
        Arc::new(self.partitioner)
    }

    fn generator(&self, seed: u64) -> Box<dyn TxnGenerator> {
        let shards = self.partitioner.shards();
        Box::new(YcsbGenerator::new(self.config.clone(), self.load, shards, seed, self.inserted.clone()))
    }

    fn population(&self, seed: u64, shard: ShardId) -> Vec<(Key, Value)> {
        let YcsbConfig { field_count, field_length, .. } = self.config;
        self.owned(shard)
            .map(|n| (keys::record_key(n), keys::initial_row(seed, n, field_count, field_length)))
            .collect()
    }

    fn check(&self, _seed: u64, stores: &[&Store]) -> Result<(), String> {
        let prefix = keys::table_prefix();
        let row = self.config.row_bytes() as usize;
        for (shard, store) in stores.iter().enumerate() {
            for (key, value) in store.iter() {
                if !key.starts_with(&prefix) {
                    return Err(format!("shard {shard} holds a foreign key {key:?}"));
                }
                let owner = self.partitioner.shard_of(key);
                if owner != shard as ShardId {
                    return Err(format!("shard {shard} holds {key:?}, which shard {owner} owns"));
                }
                if value.len() != row {
                    return Err(format!("shard {shard}: {key:?} holds {} bytes, not a row of {row}", value.len()));
                }
            }
            if let Some(n) = self.owned(shard as ShardId).find(|n| store.get(&keys::record_key(*n)).is_none()) {
                return Err(format!("shard {shard} lost record {n} of its population"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
