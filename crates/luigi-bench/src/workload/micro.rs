//! The micro benchmark: `ops` operations per transaction over `keys` keys (uniform or Zipfian),
//! a share `read_ratio` of them reads, and a share `cross_shard_pct` of transactions spread
//! over every shard (the operations split evenly), the rest confined to one shard.

use luigi_proto::partition::Partitioner;
use luigi_proto::procedures::{micro_key, Micro, MicroOp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};

use super::{TxnSpec, Workload};

/// Micro benchmark parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct MicroConfig {
    /// Size of the key space.
    pub keys: u64,
    /// Operations per transaction.
    pub ops: u32,
    /// Share of operations that are reads, 0..=1.
    pub read_ratio: f64,
    /// Percentage of transactions that touch every shard.
    pub cross_shard_pct: u32,
    /// Zipfian skew (e.g. 0.99); `None` for uniform keys.
    pub zipf: Option<f64>,
}

impl Default for MicroConfig {
    fn default() -> Self {
        Self { keys: 100_000, ops: 10, read_ratio: 0.5, cross_shard_pct: 100, zipf: None }
    }
}

/// Draws one key number.
enum KeyDist {
    Uniform(u64),
    Zipf(Zipf<f64>),
}

/// Generator of micro transactions.
pub struct MicroWorkload {
    config: MicroConfig,
    shards: u32,
    partitioner: Box<dyn Partitioner>,
    rng: ChaCha8Rng,
    dist: KeyDist,
}

/// Redraws per key before giving up on placing it on a given shard.
const PLACEMENT_TRIES_MAX: u32 = 10_000;

impl MicroWorkload {
    /// A generator with `config` over `partitioner`'s shards, seeded with `seed`.
    pub fn new(config: MicroConfig, partitioner: Box<dyn Partitioner>, seed: u64) -> Self {
        assert!(config.keys >= u64::from(config.ops) * 2, "key space too small for distinct keys");
        assert!((0.0..=1.0).contains(&config.read_ratio));
        let dist = match config.zipf {
            Some(s) => KeyDist::Zipf(Zipf::new(config.keys, s).expect("valid zipf parameters")),
            None => KeyDist::Uniform(config.keys),
        };
        let shards = partitioner.shards();
        Self { config, shards, partitioner, rng: ChaCha8Rng::seed_from_u64(seed), dist }
    }

    fn draw(&mut self) -> u64 {
        match &self.dist {
            KeyDist::Uniform(n) => self.rng.gen_range(0..*n),
            KeyDist::Zipf(z) => z.sample(&mut self.rng) as u64 - 1,
        }
    }

    /// A key not yet in `taken` owned by `shard` (any shard when `None`).
    fn key_on(&mut self, shard: Option<u32>, taken: &[MicroOp]) -> u64 {
        for _ in 0..PLACEMENT_TRIES_MAX {
            let k = self.draw();
            let placed = shard.is_none_or(|s| self.partitioner.shard_of(&micro_key(k)) == s);
            if placed && taken.iter().all(|op| op.key != k) {
                return k;
            }
        }
        panic!("could not place a key on shard {shard:?}: key space too small or too skewed");
    }
}

impl Workload for MicroWorkload {
    fn next_txn(&mut self) -> TxnSpec {
        let cross = self.shards > 1 && self.rng.gen_range(0..100) < self.config.cross_shard_pct;
        let home = self.rng.gen_range(0..self.shards);
        let mut ops: Vec<MicroOp> = Vec::with_capacity(self.config.ops as usize);
        for i in 0..self.config.ops {
            let shard = match (self.shards, cross) {
                (1, _) => None,
                (_, true) => Some(i % self.shards),
                (_, false) => Some(home),
            };
            let key = self.key_on(shard, &ops);
            let write = (!self.rng.gen_bool(self.config.read_ratio)).then(|| self.rng.gen());
            ops.push(MicroOp { key, write });
        }
        let reads = ops.iter().filter(|o| o.write.is_none()).map(|o| micro_key(o.key)).collect();
        let writes = ops.iter().filter(|o| o.write.is_some()).map(|o| micro_key(o.key)).collect();
        let args = postcard::to_stdvec(&ops).expect("ops encode");
        TxnSpec { procedure: Micro::NAME, args, reads, writes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_proto::partition::HashPartitioner;

    fn gen(shards: u32, cross: u32) -> MicroWorkload {
        let config = MicroConfig { keys: 1000, cross_shard_pct: cross, ..MicroConfig::default() };
        MicroWorkload::new(config, Box::new(HashPartitioner::new(shards)), 7)
    }

    fn shards_of(spec: &TxnSpec, shards: u32) -> std::collections::BTreeSet<u32> {
        let p = HashPartitioner::new(shards);
        spec.reads.iter().chain(&spec.writes).map(|k| p.shard_of(k)).collect()
    }

    #[test]
    fn ten_distinct_ops_about_half_reads() {
        let mut g = gen(1, 100);
        let mut reads = 0;
        for _ in 0..1000 {
            let t = g.next_txn();
            assert_eq!(t.reads.len() + t.writes.len(), 10);
            reads += t.reads.len();
        }
        assert!((4000..6000).contains(&reads), "{reads} reads of 10000 ops");
    }

    #[test]
    fn cross_shard_share_is_respected() {
        let mut all = gen(3, 100);
        assert!((0..100).all(|_| shards_of(&all.next_txn(), 3).len() == 3));
        let mut none = gen(3, 0);
        assert!((0..100).all(|_| shards_of(&none.next_txn(), 3).len() == 1));
        let mut half = gen(3, 50);
        let cross = (0..1000).filter(|_| shards_of(&half.next_txn(), 3).len() > 1).count();
        assert!((400..600).contains(&cross), "{cross}");
    }

    #[test]
    fn same_seed_same_transactions() {
        assert_eq!(gen(2, 100).next_txn(), gen(2, 100).next_txn());
    }

    #[test]
    fn zipf_is_skewed() {
        let config = MicroConfig { keys: 1000, zipf: Some(0.99), ..MicroConfig::default() };
        let mut g = MicroWorkload::new(config, Box::new(HashPartitioner::new(1)), 1);
        let hot = (0..1000)
            .filter(|_| g.next_txn().reads.iter().chain(&g.next_txn().writes).any(|k| *k == micro_key(0)))
            .count();
        assert!(hot > 100, "key 0 should be hot, seen in {hot} of 1000");
    }
}
