//! The simulated workload: `micro` transactions (run as [`sim-micro`](crate::procedure), which
//! carries the transaction id) over a small key space, so that transactions conflict often,
//! with write values unique per (transaction, operation) so that the checker can tell every
//! write apart. A share of them is cross-shard: 2 to all shards, at least one operation on
//! each, the others spread over them.

use std::collections::BTreeMap;

use luigi_proto::procedures::{micro_key, MicroOp};
use luigi_proto::types::{ClientId, KeySet, ShardId, ShardPiece, TxnId};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::config::SimConfig;
use crate::procedure;

/// One generated transaction, ready for `Coordinator::submit`.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnSpec {
    /// Procedure name.
    pub procedure: String,
    /// Encoded arguments.
    pub args: Vec<u8>,
    /// The operations behind `args`.
    pub ops: Vec<MicroOp>,
    /// Participants, sorted by shard.
    pub pieces: Vec<ShardPiece>,
}

/// The shard that owns micro key number `key` among `shards` shards.
pub fn shard_of(key: u64, shards: u32) -> ShardId {
    (key % u64::from(shards)) as ShardId
}

/// The value written by operation `op` of transaction `id`: unique per (transaction,
/// operation) and never zero.
pub fn write_value(id: TxnId, op: usize) -> u64 {
    (id.client << 44) ^ (id.seq << 8) ^ (op as u64 + 1)
}

/// Builds the participants of a micro transaction: its keys grouped by owning shard.
pub fn pieces_for(ops: &[MicroOp], shards: u32) -> Vec<ShardPiece> {
    let mut by_shard: BTreeMap<ShardId, (Vec<_>, Vec<_>)> = BTreeMap::new();
    for op in ops {
        let (reads, writes) = by_shard.entry(shard_of(op.key, shards)).or_default();
        match op.write {
            Some(_) => writes.push(micro_key(op.key)),
            None => reads.push(micro_key(op.key)),
        }
    }
    by_shard
        .into_iter()
        .map(|(shard, (reads, writes))| ShardPiece { shard, keys: KeySet::new(reads, writes) })
        .collect()
}

/// Draws transactions from a seeded generator.
pub struct Workload {
    rng: ChaCha8Rng,
    shards: u32,
    keys: u64,
    max_ops: usize,
    read_ratio: f64,
    cross_shard_ratio: f64,
}

impl Workload {
    /// A generator for `config`'s workload drawing from `rng`.
    pub fn new(config: &SimConfig, rng: ChaCha8Rng) -> Self {
        Self {
            rng,
            shards: config.shards,
            keys: config.keys,
            max_ops: config.max_ops,
            read_ratio: config.read_ratio,
            cross_shard_ratio: config.cross_shard_ratio,
        }
    }

    /// A uniformly drawn key owned by `shard`: `shard`, `shard + shards`, ... below `keys`.
    fn key_on(&mut self, shard: ShardId) -> u64 {
        let shards = u64::from(self.shards);
        let owned = (self.keys - u64::from(shard)).div_ceil(shards);
        u64::from(shard) + shards * self.rng.gen_range(0..owned)
    }

    /// The next transaction, for client `client`'s transaction `seq`.
    pub fn next(&mut self, client: ClientId, seq: u64) -> TxnSpec {
        let id = TxnId { client, seq };
        let mut n = self.rng.gen_range(1..=self.max_ops);
        let cross = self.shards > 1 && self.rng.gen_bool(self.cross_shard_ratio);
        // The participants: one home shard, or 2..=shards distinct ones.
        let width = if cross { self.rng.gen_range(2..=self.shards) } else { 1 };
        let mut all: Vec<ShardId> = (0..self.shards).collect();
        for i in 0..width as usize {
            let j = self.rng.gen_range(i..all.len());
            all.swap(i, j);
        }
        let chosen = &all[..width as usize];
        n = n.max(chosen.len());
        // The first operations cover every participant; the rest land anywhere among them.
        let mut shard_of_op: Vec<ShardId> = chosen.to_vec();
        while shard_of_op.len() < n {
            shard_of_op.push(chosen[self.rng.gen_range(0..chosen.len())]);
        }
        for i in (1..n).rev() {
            let j = self.rng.gen_range(0..=i);
            shard_of_op.swap(i, j);
        }
        let ops: Vec<MicroOp> = shard_of_op
            .into_iter()
            .enumerate()
            .map(|(i, shard)| {
                let key = self.key_on(shard);
                let write = if self.rng.gen_bool(self.read_ratio) { None } else { Some(write_value(id, i)) };
                MicroOp { key, write }
            })
            .collect();
        let args = procedure::encode_args(id, &ops);
        let pieces = pieces_for(&ops, self.shards);
        TxnSpec { procedure: procedure::NAME.to_string(), args, ops, pieces }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn single_shard_transactions_stay_on_one_shard() {
        let config = SimConfig::new(3).shards(3).keys(10);
        let mut w = Workload::new(&config, ChaCha8Rng::seed_from_u64(3));
        for seq in 1..200 {
            let t = w.next(1, seq);
            assert_eq!(t.pieces.len(), 1, "{t:?}");
            assert!(t.ops.iter().all(|o| o.key < 10));
            let shard = t.pieces[0].shard;
            assert!(t.ops.iter().all(|o| shard_of(o.key, 3) == shard));
            assert!((1..=10).contains(&t.ops.len()));
        }
    }

    #[test]
    fn cross_shard_transactions_touch_two_to_all_shards() {
        let config = SimConfig::new(3).shards(5).keys(12).cross_shard(1.0);
        let mut w = Workload::new(&config, ChaCha8Rng::seed_from_u64(3));
        let mut widths = std::collections::BTreeSet::new();
        for seq in 1..400 {
            let t = w.next(1, seq);
            assert!((2..=5).contains(&t.pieces.len()), "{t:?}");
            assert!(t.ops.len() >= t.pieces.len(), "an operation on every participant: {t:?}");
            assert!(t.ops.len() <= 10, "{t:?}");
            widths.insert(t.pieces.len());
            assert_eq!(procedure::decode_args(&t.args), Some((TxnId { client: 1, seq }, t.ops.clone())));
        }
        assert_eq!(widths.into_iter().collect::<Vec<_>>(), vec![2, 3, 4, 5]);
    }

    #[test]
    fn write_values_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for client in 1..5 {
            for seq in 1..300 {
                for op in 0..10 {
                    assert!(seen.insert(write_value(TxnId { client, seq }, op)));
                }
            }
        }
    }

    #[test]
    fn pieces_group_keys_by_shard() {
        let ops = [
            MicroOp { key: 0, write: None },
            MicroOp { key: 3, write: Some(1) },
            MicroOp { key: 1, write: None },
            MicroOp { key: 0, write: Some(2) },
        ];
        let p = pieces_for(&ops, 2);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].keys, KeySet::new(vec![], vec![micro_key(0)]));
        assert_eq!(p[1].keys, KeySet::new(vec![micro_key(1)], vec![micro_key(3)]));
    }
}
