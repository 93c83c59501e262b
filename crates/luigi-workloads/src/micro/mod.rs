//! The micro benchmark: transactions of reads and writes of 8-byte values over a key space of
//! `keys` keys (uniform or Zipfian), a share of them cross-shard.
//!
//! - Procedures: the built-in [`Micro`] (defined in `luigi_protocol::procedures`, where every
//!   server registers it) and [`TaggedMicro`] (`micro` with the transaction id in front of
//!   its arguments, which the simulator uses to observe executions).
//! - Partitioning: [`MicroPartitioner`], hash ([`Placement::Hash`], what the runtime's clients
//!   use) or key number modulo the shard count ([`Placement::Modulo`], the simulator's: every
//!   shard owns keys as soon as `keys >= shards`).
//! - Generator: [`MicroGenerator`], shaped by [`MicroConfig`] (the bench's fixed `ops`
//!   distinct keys spread over every shard, or the simulator's `1..=ops` keys over 2 to all
//!   shards).
//! - Population: empty unless [`MicroConfig::populate`] is set, then every key holds a value
//!   drawn from the seed ([`initial_value`]).
//! - Check ([`check_stores`]): every stored row is a micro key below `keys`, stored on the
//!   shard that owns it, holding an 8-byte value; with a population, every key is still
//!   present (micro never deletes). The values themselves depend on the history and are
//!   checked by whoever knows it (the simulator's checker replays the history).

mod generator;
mod tagged;

use std::sync::Arc;

pub use crate::procedures::{micro_key, Micro, MicroOp, MicroOutput, MICRO_TABLE};
use luigi_store::{Key, Store, Value};
use luigi_txn::keyhash::stable_key_hash;
use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::Registry;
use luigi_txn::types::ShardId;

pub use generator::{micro_pieces, MicroGenerator, PLACEMENT_TRIES_MAX};
pub use tagged::{decode_tagged_args, encode_tagged_args, is_micro, micro_ops, split_tagged_args, TaggedMicro};

use crate::{TxnGenerator, Workload};

/// Most operations per transaction with distinct keys: keys are kept distinct by comparing
/// each new key with the ones already drawn (quadratic in `ops`).
pub const MAX_OPS: u32 = 1_000;
/// Largest key space: the Zipf generator (`rand_distr::Zipf`) computes in `f64`, exact for
/// integers up to 2^53.
pub const MAX_KEYS: u64 = 1 << 53;
/// Largest Zipf exponent. `rand_distr::Zipf` accepts any exponent >= 0 but takes infinity
/// (its normalisation becomes NaN). Past about 3 nearly every draw is one of the hottest few
/// keys and a transaction of 10 distinct keys is out of reach in [`PLACEMENT_TRIES_MAX`]
/// draws.
pub const MAX_ZIPF: f64 = 3.0;

/// How micro keys are assigned to shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The stable hash (FNV-1a) of the store key modulo the shard count, as `HashPartitioner`
    /// (and the runtime's clients) do.
    Hash,
    /// Key number `k` lives on shard `k % shards`.
    Modulo,
}

/// How the operations of a cross-shard transaction are spread over shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// Operation `i` on shard `i % shards`: every shard when there are enough operations.
    EveryShard,
    /// Between 2 and all shards (uniformly), at least one operation on each, the others
    /// spread over them at random.
    Random,
}

/// The micro workload's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct MicroConfig {
    /// Size of the key space (key numbers `0..keys`).
    pub keys: u64,
    /// Operations per transaction (the most, with `vary_ops`).
    pub ops: u32,
    /// Draw the number of operations uniformly from `1..=ops` instead of exactly `ops`.
    pub vary_ops: bool,
    /// Share of operations that are reads, 0..=1.
    pub read_ratio: f64,
    /// Share of transactions that are cross-shard, 0..=1 (with one shard, none is).
    pub cross_shard: f64,
    /// How a cross-shard transaction's operations are spread.
    pub spread: Spread,
    /// Zipfian skew (e.g. 0.99); `None` for uniform keys.
    pub zipf: Option<f64>,
    /// Keep a transaction's keys distinct (otherwise a key may repeat, e.g. read then written).
    pub distinct_keys: bool,
    /// How keys map to shards.
    pub placement: Placement,
    /// Start with every key holding a value drawn from the seed (else with empty stores,
    /// where a key never written reads as absent). Building it costs `keys` steps per shard.
    pub populate: bool,
}

impl Default for MicroConfig {
    /// The bench's defaults: 10 distinct keys of 100 000, half reads, every transaction over
    /// every shard, hash placement, no population.
    fn default() -> Self {
        Self {
            keys: 100_000,
            ops: 10,
            vary_ops: false,
            read_ratio: 0.5,
            cross_shard: 1.0,
            spread: Spread::EveryShard,
            zipf: None,
            distinct_keys: true,
            placement: Placement::Hash,
            populate: false,
        }
    }
}

impl MicroConfig {
    /// Checks the parameters' ranges for a cluster of `shards` shards (the first problem).
    /// That transactions can actually be drawn is a matter of luck with distinct keys over a
    /// small or skewed key space; draw a sample to find out.
    pub fn check(&self, shards: u32) -> Result<(), String> {
        let share = |x: f64| (0.0..=1.0).contains(&x);
        if shards == 0 {
            return Err("at least 1 shard".into());
        }
        if self.ops == 0 {
            return Err("a transaction needs at least 1 operation".into());
        }
        if self.keys == 0 || self.keys > MAX_KEYS {
            return Err(format!("keys {} out of 1..=2^53", self.keys));
        }
        if self.distinct_keys && self.ops > MAX_OPS {
            return Err(format!("ops {} over {MAX_OPS} with distinct keys", self.ops));
        }
        if self.distinct_keys && self.keys < 2 * u64::from(self.ops) {
            return Err(format!("keys {} below twice ops {} with distinct keys", self.keys, self.ops));
        }
        if self.placement == Placement::Modulo && self.keys < u64::from(shards) {
            return Err(format!("keys ({}) must be >= shards ({shards}) so every shard owns a key", self.keys));
        }
        if !share(self.read_ratio) {
            return Err(format!("read_ratio {:?} not a share from 0 to 1", self.read_ratio));
        }
        if !share(self.cross_shard) {
            return Err(format!("cross_shard {:?} not a share from 0 to 1", self.cross_shard));
        }
        if let Some(s) = self.zipf {
            if !(s.is_finite() && (0.0..=MAX_ZIPF).contains(&s)) {
                return Err(format!("zipf {s:?} not from 0 to {MAX_ZIPF}"));
            }
        }
        Ok(())
    }
}

/// The micro workload's partitioner (see [`Placement`]). Keys of other tables are hashed.
#[derive(Clone, Copy, Debug)]
pub struct MicroPartitioner {
    shards: u32,
    placement: Placement,
}

impl MicroPartitioner {
    /// Partitions over `shards` shards.
    pub fn new(shards: u32, placement: Placement) -> Self {
        assert!(shards > 0, "at least one shard");
        Self { shards, placement }
    }

    /// The shard that owns key number `k`.
    pub fn shard_of_key(&self, k: u64) -> ShardId {
        match self.placement {
            Placement::Modulo => (k % u64::from(self.shards)) as ShardId,
            Placement::Hash => self.shard_of(&micro_key(k)),
        }
    }
}

impl Partitioner for MicroPartitioner {
    fn shards(&self) -> u32 {
        self.shards
    }

    fn shard_of(&self, key: &[u8]) -> ShardId {
        match (self.placement, micro_key_number(key)) {
            (Placement::Modulo, Some(k)) => (k % u64::from(self.shards)) as ShardId,
            _ => (stable_key_hash(key) % u64::from(self.shards)) as ShardId,
        }
    }
}

/// The key number of a micro store key (`None` for any other key).
pub fn micro_key_number(key: &[u8]) -> Option<u64> {
    let (table, rest) = key.split_first_chunk::<2>()?;
    let number: [u8; 8] = rest.try_into().ok()?;
    (u16::from_be_bytes(*table) == MICRO_TABLE).then(|| u64::from_be_bytes(number))
}

/// The value key number `k` starts with in the population of `seed` (splitmix64).
pub fn initial_value(seed: u64, k: u64) -> u64 {
    let mut z = seed ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The micro workload over `shards` shards.
#[derive(Clone, Debug)]
pub struct MicroWorkload {
    config: MicroConfig,
    partitioner: MicroPartitioner,
}

impl MicroWorkload {
    /// The workload of `config` over `shards` shards, if [`MicroConfig::check`] accepts it.
    pub fn new(config: MicroConfig, shards: u32) -> Result<Self, String> {
        config.check(shards)?;
        let partitioner = MicroPartitioner::new(shards, config.placement);
        Ok(Self { config, partitioner })
    }

    /// The parameters.
    pub fn config(&self) -> &MicroConfig {
        &self.config
    }

    /// The key numbers shard `shard` owns, in order.
    fn owned(&self, shard: ShardId) -> Box<dyn Iterator<Item = u64> + '_> {
        match self.config.placement {
            Placement::Modulo => {
                Box::new((u64::from(shard)..self.config.keys).step_by(self.partitioner.shards as usize))
            }
            Placement::Hash => {
                Box::new((0..self.config.keys).filter(move |k| self.partitioner.shard_of_key(*k) == shard))
            }
        }
    }
}

impl Workload for MicroWorkload {
    fn name(&self) -> &'static str {
        "micro"
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(Micro::NAME, Arc::new(Micro));
        registry.register(TaggedMicro::NAME, Arc::new(TaggedMicro));
    }

    fn partitioner(&self) -> Arc<dyn Partitioner> {
        Arc::new(self.partitioner)
    }

    fn generator(&self, seed: u64) -> Box<dyn TxnGenerator> {
        Box::new(MicroGenerator::new(self.config.clone(), self.partitioner.shards, seed))
    }

    fn population(&self, seed: u64, shard: ShardId) -> Vec<(Key, Value)> {
        if !self.config.populate {
            return Vec::new();
        }
        self.owned(shard).map(|k| (micro_key(k), initial_value(seed, k).to_le_bytes().to_vec())).collect()
    }

    fn check(&self, _seed: u64, stores: &[&Store]) -> Result<(), String> {
        check_stores(&self.config, &self.partitioner, stores)?;
        if self.config.populate {
            for (shard, store) in stores.iter().enumerate() {
                if let Some(k) = self.owned(shard as ShardId).find(|k| store.get(&micro_key(*k)).is_none()) {
                    return Err(format!("shard {shard} lost key {k} of its population"));
                }
            }
        }
        Ok(())
    }
}

/// The history-independent part of the micro check: `stores[s]` (shard `s`'s store) holds
/// only micro keys below `config.keys`, each on the shard `partitioner` assigns it, each with
/// an 8-byte value.
pub fn check_stores(config: &MicroConfig, partitioner: &MicroPartitioner, stores: &[&Store]) -> Result<(), String> {
    if stores.len() != partitioner.shards as usize {
        return Err(format!("{} stores for {} shards", stores.len(), partitioner.shards));
    }
    for (shard, store) in stores.iter().enumerate() {
        for (key, value) in store.iter() {
            let k = micro_key_number(key).ok_or_else(|| format!("shard {shard} holds a foreign key {key:?}"))?;
            if k >= config.keys {
                return Err(format!("shard {shard} holds key {k}, outside the key space of {}", config.keys));
            }
            let owner = partitioner.shard_of_key(k);
            if owner != shard as ShardId {
                return Err(format!("shard {shard} holds key {k}, which shard {owner} owns"));
            }
            if value.len() != 8 {
                return Err(format!("shard {shard}: key {k} holds {} bytes, not an 8-byte integer", value.len()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
