//! The micro transaction generator, shared by the load driver and the simulator.

use luigi_txn::partition::{split, Partitioner};
use luigi_txn::types::{ShardId, ShardPiece};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};

use super::{micro_key, Micro, MicroConfig, MicroOp, MicroPartitioner, Placement, Spread};
use crate::{GenError, TxnGenerator, TxnSpec};

/// Redraws per key before giving up on placing it on a given shard (distinct from the keys
/// already drawn).
pub const PLACEMENT_TRIES_MAX: u32 = 10_000;

/// Draws one key number.
enum KeyDist {
    Uniform(u64),
    Zipf(Zipf<f64>),
}

/// Seeded generator of micro transactions (see [`MicroConfig`] for their shape).
pub struct MicroGenerator {
    config: MicroConfig,
    partitioner: MicroPartitioner,
    rng: ChaCha8Rng,
    dist: KeyDist,
}

/// The participants of a micro transaction: its keys grouped by the shard that owns them
/// (reads and writes of one key declare it written).
pub fn micro_pieces(partitioner: &dyn Partitioner, ops: &[MicroOp]) -> Vec<ShardPiece> {
    let reads = ops.iter().filter(|o| o.write.is_none()).map(|o| micro_key(o.key)).collect();
    let writes = ops.iter().filter(|o| o.write.is_some()).map(|o| micro_key(o.key)).collect();
    split(partitioner, reads, writes)
}

impl MicroGenerator {
    /// A generator with `config` over `shards` shards, seeded with `seed`.
    ///
    /// Panics on parameters [`MicroConfig::check`] rejects.
    pub fn new(config: MicroConfig, shards: u32, seed: u64) -> Self {
        Self::from_rng(config, shards, ChaCha8Rng::seed_from_u64(seed))
    }

    /// Like [`MicroGenerator::new`], drawing from `rng`.
    pub fn from_rng(config: MicroConfig, shards: u32, rng: ChaCha8Rng) -> Self {
        if let Err(e) = config.check(shards) {
            panic!("invalid micro workload: {e}");
        }
        let dist = match config.zipf {
            Some(s) => KeyDist::Zipf(Zipf::new(config.keys, s).expect("checked zipf parameters")),
            None => KeyDist::Uniform(config.keys),
        };
        let partitioner = MicroPartitioner::new(shards, config.placement);
        Self { config, partitioner, rng, dist }
    }

    /// The partitioner the transactions' pieces follow.
    pub fn partitioner(&self) -> &MicroPartitioner {
        &self.partitioner
    }

    fn shards(&self) -> u32 {
        self.partitioner.shards
    }

    fn draw(&mut self, shard: Option<ShardId>) -> u64 {
        match (&self.dist, shard, self.config.placement) {
            // Uniform among the keys `shard` owns: shard, shard + shards, ... below keys.
            (KeyDist::Uniform(keys), Some(s), Placement::Modulo) => {
                let shards = u64::from(self.shards());
                let owned = (keys - u64::from(s)).div_ceil(shards);
                u64::from(s) + shards * self.rng.gen_range(0..owned)
            }
            (KeyDist::Uniform(keys), _, _) => self.rng.gen_range(0..*keys),
            (KeyDist::Zipf(z), _, _) => z.sample(&mut self.rng) as u64 - 1,
        }
    }

    /// A key owned by `shard` (any shard when `None`), not in `taken` if keys are distinct.
    fn key_on(&mut self, shard: Option<ShardId>, taken: &[MicroOp]) -> Result<u64, GenError> {
        for _ in 0..PLACEMENT_TRIES_MAX {
            let k = self.draw(shard);
            let placed = shard.is_none_or(|s| self.partitioner.shard_of_key(k) == s);
            if placed && (!self.config.distinct_keys || taken.iter().all(|op| op.key != k)) {
                return Ok(k);
            }
        }
        let on = shard.map(|s| format!(" on shard {s}")).unwrap_or_default();
        let distinct = match taken.len() {
            0 => String::new(),
            n => format!(" distinct from the {n} already drawn"),
        };
        Err(GenError(format!(
            "no key{on}{distinct} in {PLACEMENT_TRIES_MAX} draws (key space too small or too skewed)"
        )))
    }

    /// The shard of each operation of the next transaction (`None`: any shard).
    fn layout(&mut self) -> Vec<Option<ShardId>> {
        let shards = self.shards();
        let mut n = if self.config.vary_ops { self.rng.gen_range(1..=self.config.ops) } else { self.config.ops };
        let cross = shards > 1 && self.rng.gen_bool(self.config.cross_shard);
        if shards == 1 {
            return vec![None; n as usize];
        }
        if !cross {
            return vec![Some(self.rng.gen_range(0..shards)); n as usize];
        }
        match self.config.spread {
            Spread::EveryShard => (0..n).map(|i| Some(i % shards)).collect(),
            Spread::Random => {
                // 2..=shards distinct participants; the first operations cover each of them,
                // the rest land anywhere among them; then the order is shuffled.
                let width = self.rng.gen_range(2..=shards);
                let mut all: Vec<ShardId> = (0..shards).collect();
                for i in 0..width as usize {
                    let j = self.rng.gen_range(i..all.len());
                    all.swap(i, j);
                }
                let chosen = &all[..width as usize];
                n = n.max(width);
                let mut layout: Vec<ShardId> = chosen.to_vec();
                while layout.len() < n as usize {
                    layout.push(chosen[self.rng.gen_range(0..chosen.len())]);
                }
                for i in (1..layout.len()).rev() {
                    let j = self.rng.gen_range(0..=i);
                    layout.swap(i, j);
                }
                layout.into_iter().map(Some).collect()
            }
        }
    }

    /// The operations of the next transaction. Operation `i`, when a write, writes
    /// `value_of(i)`, or a random value when `value_of` is `None`.
    pub fn next_ops(&mut self, value_of: Option<&dyn Fn(usize) -> u64>) -> Result<Vec<MicroOp>, GenError> {
        let layout = self.layout();
        let mut ops: Vec<MicroOp> = Vec::with_capacity(layout.len());
        for (i, shard) in layout.into_iter().enumerate() {
            let key = self.key_on(shard, &ops)?;
            let write = match self.rng.gen_bool(self.config.read_ratio) {
                true => None,
                false => Some(value_of.map_or_else(|| self.rng.gen(), |f| f(i))),
            };
            ops.push(MicroOp { key, write });
        }
        Ok(ops)
    }
}

impl TxnGenerator for MicroGenerator {
    /// A [`Micro`] transaction with random write values.
    fn next_txn(&mut self) -> Result<TxnSpec, GenError> {
        let ops = self.next_ops(None)?;
        let args = postcard::to_stdvec(&ops).expect("micro operations always encode");
        let pieces = micro_pieces(&self.partitioner, &ops);
        Ok(TxnSpec { procedure: Micro::NAME.to_string(), args, pieces })
    }
}
