//! `luigi bench micro`'s workload options: `ops` operations per transaction over `keys` keys
//! (uniform or Zipfian), a share `read_ratio` of them reads, and a share `cross_shard_pct` of
//! transactions spread over every shard (the operations split evenly), the rest confined to
//! one shard. The workload itself (generator, partitioner, procedures) is
//! `luigi_workloads::micro`; these options are checked here with messages naming the
//! command-line option and value refused.

use anyhow::{bail, ensure};
use luigi_workloads::micro::{MicroConfig, MicroGenerator, MicroWorkload};
pub use luigi_workloads::micro::{MAX_KEYS, MAX_OPS, MAX_ZIPF, PLACEMENT_TRIES_MAX};
use luigi_workloads::TxnGenerator;

/// Micro benchmark options, as given on the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct MicroOptions {
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

impl Default for MicroOptions {
    fn default() -> Self {
        let c = MicroConfig::default();
        Self { keys: c.keys, ops: c.ops, read_ratio: c.read_ratio, cross_shard_pct: 100, zipf: c.zipf }
    }
}

/// Operations drawn by the check that transactions can be drawn at all ([`MicroOptions::validate`]).
const DRAW_CHECK_OPS: u32 = 20_000;
/// Seed of the draw check: that of the first load thread.
const DRAW_CHECK_SEED: u64 = 0x5eed;

impl MicroOptions {
    /// The workload's parameters: the bench's shape (exactly `ops` distinct keys, hash
    /// placement as the runtime's clients use, cross-shard transactions over every shard).
    pub fn config(&self) -> MicroConfig {
        MicroConfig {
            keys: self.keys,
            ops: self.ops,
            read_ratio: self.read_ratio,
            cross_shard: f64::from(self.cross_shard_pct) / 100.0,
            zipf: self.zipf,
            ..MicroConfig::default()
        }
    }

    /// The workload over `shards` shards (the options must be valid).
    pub fn workload(&self, shards: u32) -> anyhow::Result<MicroWorkload> {
        MicroWorkload::new(self.config(), shards).map_err(|e| anyhow::anyhow!("invalid micro workload: {e}"))
    }

    /// Checks every option, naming the `luigi bench micro` option and the value in one
    /// line: the ranges first, then, for a cluster of `shards` shards, that transactions can
    /// actually be drawn (a sample of them is generated): with a small key space, many shards
    /// or a strong skew, the workload may not find `ops` distinct keys on the shards a
    /// transaction must touch.
    pub fn validate(&self, shards: u32) -> anyhow::Result<()> {
        self.check_ranges()?;
        ensure!(shards >= 1, "a micro benchmark needs a cluster of at least 1 shard");
        self.workload(shards)?;
        let mut generator = MicroGenerator::new(self.config(), shards, DRAW_CHECK_SEED);
        for _ in 0..(DRAW_CHECK_OPS / self.ops).max(1) {
            if let Err(e) = generator.next_txn() {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The error `config` gets over `shards` shards (panics if it is accepted).
    fn rejected(config: MicroOptions, shards: u32) -> String {
        let e = config.validate(shards).expect_err("accepted");
        let msg = format!("{e:#}");
        assert_eq!(msg.lines().count(), 1, "one line: {msg}");
        msg
    }

    #[test]
    fn defaults_and_edges_are_accepted() {
        for shards in [1, 2, 64] {
            MicroOptions::default().validate(shards).unwrap();
        }
        let edges = [
            MicroOptions { read_ratio: 0.0, cross_shard_pct: 0, ..MicroOptions::default() },
            MicroOptions { read_ratio: 1.0, cross_shard_pct: 100, ..MicroOptions::default() },
            MicroOptions { zipf: Some(0.0), ..MicroOptions::default() },
            MicroOptions { zipf: Some(0.99), ..MicroOptions::default() },
            MicroOptions { zipf: Some(1.0), ..MicroOptions::default() },
            MicroOptions { zipf: Some(MAX_ZIPF), ..MicroOptions::default() },
            MicroOptions { keys: 2, ops: 1, ..MicroOptions::default() },
            MicroOptions { keys: MAX_KEYS, ..MicroOptions::default() },
            MicroOptions { keys: 1_000_000, ops: MAX_OPS, ..MicroOptions::default() },
        ];
        for config in edges {
            config.validate(1).unwrap_or_else(|e| panic!("{config:?}: {e}"));
        }
    }

    #[test]
    fn ops_must_be_from_1_to_the_maximum() {
        let msg = rejected(MicroOptions { ops: 0, ..MicroOptions::default() }, 1);
        assert!(msg.contains("invalid --ops 0"), "{msg}");
        let msg = rejected(MicroOptions { ops: MAX_OPS + 1, ..MicroOptions::default() }, 1);
        assert!(msg.contains("invalid --ops 1001") && msg.contains("at most 1000"), "{msg}");
    }

    #[test]
    fn keys_must_be_positive_bounded_and_twice_ops() {
        let msg = rejected(MicroOptions { keys: 0, ..MicroOptions::default() }, 1);
        assert!(msg.contains("invalid --keys 0"), "{msg}");
        let msg = rejected(MicroOptions { keys: MAX_KEYS + 1, ..MicroOptions::default() }, 1);
        assert!(msg.contains("invalid --keys 9007199254740993") && msg.contains("2^53"), "{msg}");
        let msg = rejected(MicroOptions { keys: 19, ops: 10, ..MicroOptions::default() }, 1);
        assert!(msg.contains("invalid --keys 19 with --ops 10") && msg.contains("(20)"), "{msg}");
    }

    #[test]
    fn read_ratio_must_be_a_share() {
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let msg = rejected(MicroOptions { read_ratio: bad, ..MicroOptions::default() }, 1);
            assert!(msg.contains(&format!("invalid --read-ratio {bad:?}")) && msg.contains("from 0 to 1"), "{msg}");
        }
    }

    #[test]
    fn cross_shard_must_be_a_percentage() {
        let msg = rejected(MicroOptions { cross_shard_pct: 101, ..MicroOptions::default() }, 2);
        assert!(msg.contains("invalid --cross-shard 101") && msg.contains("0 to 100"), "{msg}");
    }

    #[test]
    fn zipf_must_be_finite_and_in_range() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -0.001, MAX_ZIPF + 0.001, 1e300] {
            let msg = rejected(MicroOptions { zipf: Some(bad), ..MicroOptions::default() }, 1);
            assert!(msg.contains(&format!("invalid --zipf {bad:?}")) && msg.contains("from 0 (uniform) to 3"), "{msg}");
        }
    }

    #[test]
    fn transactions_that_cannot_be_drawn_are_refused_up_front() {
        // 20 keys over 64 shards: some shard owns none of them, yet a cross-shard transaction
        // of 10 operations needs a key on each of shards 0 to 9 (and a one-shard one, 10).
        let small = MicroOptions { keys: 20, ops: 10, cross_shard_pct: 100, ..MicroOptions::default() };
        small.validate(1).unwrap();
        let msg = rejected(small, 64);
        assert!(
            msg.contains("invalid --keys 20 with --ops 10 over 64 shard(s)") && msg.contains("raise --keys"),
            "{msg}"
        );
        // The hottest keys take nearly every draw: 10 distinct keys on one shard are out of reach.
        let skewed = MicroOptions { zipf: Some(MAX_ZIPF), cross_shard_pct: 0, ..MicroOptions::default() };
        let msg = rejected(skewed, 64);
        assert!(msg.contains("--zipf 3.0 over 64 shard(s)") && msg.contains("or --zipf"), "{msg}");
        assert!(msg.contains("in 10000 draws"), "{msg}");
    }
}
