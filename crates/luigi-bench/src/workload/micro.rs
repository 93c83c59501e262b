//! The micro benchmark: `ops` operations per transaction over `keys` keys (uniform or Zipfian),
//! a share `read_ratio` of them reads, and a share `cross_shard_pct` of transactions spread
//! over every shard (the operations split evenly), the rest confined to one shard.

use anyhow::{anyhow, bail, ensure};
use luigi_proto::partition::{HashPartitioner, Partitioner};
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

/// Most operations per transaction: a transaction's keys are kept distinct by comparing each
/// new key with the ones already drawn (quadratic in `ops`), and a micro transaction is a few
/// keys, not a bulk load.
pub const MAX_OPS: u32 = 1_000;
/// Largest key space: the Zipf generator (`rand_distr::Zipf`) computes in `f64`, exact for
/// integers up to 2^53.
pub const MAX_KEYS: u64 = 1 << 53;
/// Largest Zipf exponent. `rand_distr::Zipf` accepts any exponent >= 0 and rejects NaN, but
/// takes infinity (its normalisation becomes NaN: a debug assertion fails, and a release build
/// loops forever drawing). Past about 3 nearly every draw is one of the hottest few keys and a
/// transaction of the default 10 operations cannot find 10 distinct keys in
/// [`PLACEMENT_TRIES_MAX`] draws (at 3 the 10th distinct key takes about 220 draws).
pub const MAX_ZIPF: f64 = 3.0;
/// Operations drawn by the check that transactions can be drawn at all ([`MicroConfig::validate`]).
const DRAW_CHECK_OPS: u32 = 20_000;
/// Seed of the draw check: that of the first load thread.
const DRAW_CHECK_SEED: u64 = 0x5eed;

impl MicroConfig {
    /// Checks every parameter, naming the `luigi bench micro` option and the value in one
    /// line: the ranges first, then, for a cluster of `shards` shards, that transactions can
    /// actually be drawn (a sample of them is generated): with a small key space, many shards
    /// or a strong skew, the workload may not find `ops` distinct keys on the shards a
    /// transaction must touch.
    pub fn validate(&self, shards: u32) -> anyhow::Result<()> {
        self.check_ranges()?;
        ensure!(shards >= 1, "a micro benchmark needs a cluster of at least 1 shard");
        let mut workload = MicroWorkload::new(self.clone(), Box::new(HashPartitioner::new(shards)), DRAW_CHECK_SEED);
        for _ in 0..(DRAW_CHECK_OPS / self.ops).max(1) {
            if let Err(e) = workload.next_txn() {
                let zipf = self.zipf.map(|s| format!(", --zipf {s:?}")).unwrap_or_default();
                bail!(
                    "invalid --keys {} with --ops {}{zipf} over {shards} shard(s): {e}; raise --keys or lower --ops{}",
                    self.keys,
                    self.ops,
                    if self.zipf.is_some() { " or --zipf" } else { "" }
                );
            }
        }
        Ok(())
    }

    /// The range of each parameter, alone or with another.
    fn check_ranges(&self) -> anyhow::Result<()> {
        ensure!(self.ops >= 1, "invalid --ops 0: a transaction needs at least 1 operation");
        ensure!(self.ops <= MAX_OPS, "invalid --ops {}: at most {MAX_OPS} operations per transaction", self.ops);
        ensure!(self.keys >= 1, "invalid --keys 0: the key space needs at least 1 key");
        ensure!(self.keys <= MAX_KEYS, "invalid --keys {}: at most 2^53 = {MAX_KEYS} keys", self.keys);
        ensure!(
            self.keys >= 2 * u64::from(self.ops),
            "invalid --keys {} with --ops {}: the key space must hold at least twice --ops keys ({}) so that a \
             transaction finds distinct keys",
            self.keys,
            self.ops,
            2 * u64::from(self.ops)
        );
        ensure!(
            (0.0..=1.0).contains(&self.read_ratio),
            "invalid --read-ratio {:?}: a share of the operations, from 0 to 1",
            self.read_ratio
        );
        ensure!(
            self.cross_shard_pct <= 100,
            "invalid --cross-shard {}: a percentage, from 0 to 100",
            self.cross_shard_pct
        );
        if let Some(s) = self.zipf {
            ensure!(
                s.is_finite() && (0.0..=MAX_ZIPF).contains(&s),
                "invalid --zipf {s:?}: the Zipf exponent must be a finite number from 0 (uniform) to {MAX_ZIPF}"
            );
        }
        Ok(())
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
    ///
    /// Panics on parameters [`MicroConfig::validate`] rejects.
    pub fn new(config: MicroConfig, partitioner: Box<dyn Partitioner>, seed: u64) -> Self {
        if let Err(e) = config.check_ranges() {
            panic!("{e}");
        }
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
    fn key_on(&mut self, shard: Option<u32>, taken: &[MicroOp]) -> anyhow::Result<u64> {
        for _ in 0..PLACEMENT_TRIES_MAX {
            let k = self.draw();
            let placed = shard.is_none_or(|s| self.partitioner.shard_of(&micro_key(k)) == s);
            if placed && taken.iter().all(|op| op.key != k) {
                return Ok(k);
            }
        }
        let on = shard.map(|s| format!(" on shard {s}")).unwrap_or_default();
        let distinct = match taken.len() {
            0 => String::new(),
            n => format!(" distinct from the {n} already drawn"),
        };
        Err(anyhow!("no key{on}{distinct} in {PLACEMENT_TRIES_MAX} draws (key space too small or too skewed)"))
    }
}

impl Workload for MicroWorkload {
    fn next_txn(&mut self) -> anyhow::Result<TxnSpec> {
        let cross = self.shards > 1 && self.rng.gen_range(0..100) < self.config.cross_shard_pct;
        let home = self.rng.gen_range(0..self.shards);
        let mut ops: Vec<MicroOp> = Vec::with_capacity(self.config.ops as usize);
        for i in 0..self.config.ops {
            let shard = match (self.shards, cross) {
                (1, _) => None,
                (_, true) => Some(i % self.shards),
                (_, false) => Some(home),
            };
            let key = self.key_on(shard, &ops)?;
            let write = (!self.rng.gen_bool(self.config.read_ratio)).then(|| self.rng.gen());
            ops.push(MicroOp { key, write });
        }
        let reads = ops.iter().filter(|o| o.write.is_none()).map(|o| micro_key(o.key)).collect();
        let writes = ops.iter().filter(|o| o.write.is_some()).map(|o| micro_key(o.key)).collect();
        let args = postcard::to_stdvec(&ops).expect("ops encode");
        Ok(TxnSpec { procedure: Micro::NAME, args, reads, writes })
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
            let t = g.next_txn().unwrap();
            assert_eq!(t.reads.len() + t.writes.len(), 10);
            reads += t.reads.len();
        }
        assert!((4000..6000).contains(&reads), "{reads} reads of 10000 ops");
    }

    #[test]
    fn cross_shard_share_is_respected() {
        let mut all = gen(3, 100);
        assert!((0..100).all(|_| shards_of(&all.next_txn().unwrap(), 3).len() == 3));
        let mut none = gen(3, 0);
        assert!((0..100).all(|_| shards_of(&none.next_txn().unwrap(), 3).len() == 1));
        let mut half = gen(3, 50);
        let cross = (0..1000).filter(|_| shards_of(&half.next_txn().unwrap(), 3).len() > 1).count();
        assert!((400..600).contains(&cross), "{cross}");
    }

    #[test]
    fn same_seed_same_transactions() {
        assert_eq!(gen(2, 100).next_txn().unwrap(), gen(2, 100).next_txn().unwrap());
    }

    #[test]
    fn zipf_is_skewed() {
        let config = MicroConfig { keys: 1000, zipf: Some(0.99), ..MicroConfig::default() };
        let mut g = MicroWorkload::new(config, Box::new(HashPartitioner::new(1)), 1);
        let hot = (0..1000)
            .filter(|_| {
                g.next_txn().unwrap().reads.iter().chain(&g.next_txn().unwrap().writes).any(|k| *k == micro_key(0))
            })
            .count();
        assert!(hot > 100, "key 0 should be hot, seen in {hot} of 1000");
    }

    /// The error `config` gets over `shards` shards (panics if it is accepted).
    fn rejected(config: MicroConfig, shards: u32) -> String {
        let e = config.validate(shards).expect_err("accepted");
        let msg = format!("{e:#}");
        assert_eq!(msg.lines().count(), 1, "one line: {msg}");
        msg
    }

    #[test]
    fn defaults_and_edges_are_accepted() {
        for shards in [1, 2, 64] {
            MicroConfig::default().validate(shards).unwrap();
        }
        let edges = [
            MicroConfig { read_ratio: 0.0, cross_shard_pct: 0, ..MicroConfig::default() },
            MicroConfig { read_ratio: 1.0, cross_shard_pct: 100, ..MicroConfig::default() },
            MicroConfig { zipf: Some(0.0), ..MicroConfig::default() },
            MicroConfig { zipf: Some(0.99), ..MicroConfig::default() },
            MicroConfig { zipf: Some(1.0), ..MicroConfig::default() },
            MicroConfig { zipf: Some(MAX_ZIPF), ..MicroConfig::default() },
            MicroConfig { keys: 2, ops: 1, ..MicroConfig::default() },
            MicroConfig { keys: MAX_KEYS, ..MicroConfig::default() },
            MicroConfig { keys: 1_000_000, ops: MAX_OPS, ..MicroConfig::default() },
        ];
        for config in edges {
            config.validate(1).unwrap_or_else(|e| panic!("{config:?}: {e}"));
        }
    }

    #[test]
    fn ops_must_be_from_1_to_the_maximum() {
        let msg = rejected(MicroConfig { ops: 0, ..MicroConfig::default() }, 1);
        assert!(msg.contains("invalid --ops 0"), "{msg}");
        let msg = rejected(MicroConfig { ops: MAX_OPS + 1, ..MicroConfig::default() }, 1);
        assert!(msg.contains("invalid --ops 1001") && msg.contains("at most 1000"), "{msg}");
    }

    #[test]
    fn keys_must_be_positive_bounded_and_twice_ops() {
        let msg = rejected(MicroConfig { keys: 0, ..MicroConfig::default() }, 1);
        assert!(msg.contains("invalid --keys 0"), "{msg}");
        let msg = rejected(MicroConfig { keys: MAX_KEYS + 1, ..MicroConfig::default() }, 1);
        assert!(msg.contains("invalid --keys 9007199254740993") && msg.contains("2^53"), "{msg}");
        let msg = rejected(MicroConfig { keys: 19, ops: 10, ..MicroConfig::default() }, 1);
        assert!(msg.contains("invalid --keys 19 with --ops 10") && msg.contains("(20)"), "{msg}");
    }

    #[test]
    fn read_ratio_must_be_a_share() {
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let msg = rejected(MicroConfig { read_ratio: bad, ..MicroConfig::default() }, 1);
            assert!(msg.contains(&format!("invalid --read-ratio {bad:?}")) && msg.contains("from 0 to 1"), "{msg}");
        }
    }

    #[test]
    fn cross_shard_must_be_a_percentage() {
        let msg = rejected(MicroConfig { cross_shard_pct: 101, ..MicroConfig::default() }, 2);
        assert!(msg.contains("invalid --cross-shard 101") && msg.contains("0 to 100"), "{msg}");
    }

    #[test]
    fn zipf_must_be_finite_and_in_range() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -0.001, MAX_ZIPF + 0.001, 1e300] {
            let msg = rejected(MicroConfig { zipf: Some(bad), ..MicroConfig::default() }, 1);
            assert!(msg.contains(&format!("invalid --zipf {bad:?}")) && msg.contains("from 0 (uniform) to 3"), "{msg}");
        }
    }

    #[test]
    fn transactions_that_cannot_be_drawn_are_refused_up_front() {
        // 20 keys over 64 shards: some shard owns none of them, yet a cross-shard transaction
        // of 10 operations needs a key on each of shards 0 to 9 (and a one-shard one, 10).
        let small = MicroConfig { keys: 20, ops: 10, cross_shard_pct: 100, ..MicroConfig::default() };
        small.validate(1).unwrap();
        let msg = rejected(small, 64);
        assert!(
            msg.contains("invalid --keys 20 with --ops 10 over 64 shard(s)") && msg.contains("raise --keys"),
            "{msg}"
        );
        // The hottest keys take nearly every draw: 10 distinct keys on one shard are out of reach.
        let skewed = MicroConfig { zipf: Some(MAX_ZIPF), cross_shard_pct: 0, ..MicroConfig::default() };
        let msg = rejected(skewed, 64);
        assert!(msg.contains("--zipf 3.0 over 64 shard(s)") && msg.contains("or --zipf"), "{msg}");
        assert!(msg.contains("in 10000 draws"), "{msg}");
    }

    #[test]
    fn a_workload_that_cannot_place_a_key_is_an_error_not_a_panic() {
        let config = MicroConfig { keys: 20, ops: 10, ..MicroConfig::default() };
        let mut g = MicroWorkload::new(config, Box::new(HashPartitioner::new(64)), 1);
        let e = (0..100).find_map(|_| g.next_txn().err()).expect("some transaction cannot be placed");
        assert!(e.to_string().contains("no key on shard") && e.to_string().contains("in 10000 draws"), "{e}");
    }
}
