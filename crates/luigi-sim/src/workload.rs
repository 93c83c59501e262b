//! The simulated workload: the micro workload of `luigi_workloads` in the shape
//! [`SimConfig::micro`] gives it (a small key space, so that transactions conflict often; a
//! share cross-shard, over 2 to all shards), run as [`sim-micro`](crate::procedure), which
//! carries the transaction id, with write values unique per (transaction, operation) so that
//! the checker can tell every write apart.

use luigi_txn::types::{ClientId, ShardPiece, TxnId};
use luigi_workloads::micro::{micro_pieces, MicroGenerator, MicroOp};
use rand_chacha::ChaCha8Rng;

use crate::config::{RetiredShard, SimConfig};
use crate::procedure;

/// One generated transaction, ready for `Coordinator::submit`.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnSpec {
    /// Procedure name.
    pub procedure: String,
    /// Encoded arguments.
    pub args: Vec<u8>,
    /// The operations behind `args` (for traces).
    pub ops: Vec<MicroOp>,
    /// Participants, sorted by shard.
    pub pieces: Vec<ShardPiece>,
}

/// The value written by operation `op` of transaction `id`: unique per (transaction,
/// operation) and never zero.
pub fn write_value(id: TxnId, op: usize) -> u64 {
    (id.client << 44) ^ (id.seq << 8) ^ (op as u64 + 1)
}

/// Draws transactions from a seeded generator.
pub struct Workload {
    generator: MicroGenerator,
    retired: Option<RetiredShard>,
}

/// Draws made for one transaction that must avoid a retired shard before giving up.
const RETIRED_DRAWS_MAX: u32 = 10_000;

impl Workload {
    /// A generator for `config`'s workload (which must be valid) drawing from `rng`.
    pub fn new(config: &SimConfig, rng: ChaCha8Rng) -> Self {
        Self { generator: MicroGenerator::from_rng(config.micro(), config.shards, rng), retired: config.retired_shard }
    }

    /// The next transaction, for client `client`'s transaction `seq`; an error if it must
    /// avoid a retired shard and [`RETIRED_DRAWS_MAX`] draws did not.
    pub fn next(&mut self, client: ClientId, seq: u64) -> Result<TxnSpec, String> {
        let retired = self.retired.filter(|r| seq >= r.from_seq);
        for _ in 0..RETIRED_DRAWS_MAX {
            let spec = self.draw(client, seq);
            match retired {
                Some(r) if spec.pieces.iter().any(|p| p.shard == r.shard) => continue,
                Some(_) | None => return Ok(spec),
            }
        }
        Err(format!("{RETIRED_DRAWS_MAX} draws for transaction {seq} of client {client} all touched the retired shard"))
    }

    fn draw(&mut self, client: ClientId, seq: u64) -> TxnSpec {
        let id = TxnId { client, seq };
        let ops = self
            .generator
            .next_ops(Some(&|op| write_value(id, op)))
            .expect("modulo placement with repeatable keys always finds a key on a shard");
        let pieces = micro_pieces(self.generator.partitioner(), &ops);
        let args = procedure::encode_args(id, &ops);
        TxnSpec { procedure: procedure::NAME.to_string(), args, ops, pieces }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn ops(t: &TxnSpec, id: TxnId) -> Vec<MicroOp> {
        assert_eq!(procedure::decode_args(&t.args), Some((id, t.ops.clone())));
        t.ops.clone()
    }

    #[test]
    fn single_shard_transactions_stay_on_one_shard() {
        let config = SimConfig::new(3).shards(3).keys(10);
        let mut w = Workload::new(&config, ChaCha8Rng::seed_from_u64(3));
        for seq in 1..200 {
            let t = w.next(1, seq).expect("no retired shard");
            assert_eq!(t.pieces.len(), 1, "{t:?}");
            let ops = ops(&t, TxnId { client: 1, seq });
            assert!(ops.iter().all(|o| o.key < 10 && o.key % 3 == u64::from(t.pieces[0].shard)));
            assert!((1..=10).contains(&ops.len()));
        }
    }

    #[test]
    fn cross_shard_transactions_touch_two_to_all_shards_with_unique_values() {
        let config = SimConfig::new(3).shards(5).keys(12).cross_shard(1.0);
        let mut w = Workload::new(&config, ChaCha8Rng::seed_from_u64(3));
        let mut widths = std::collections::BTreeSet::new();
        for seq in 1..400 {
            let t = w.next(1, seq).expect("no retired shard");
            let id = TxnId { client: 1, seq };
            let ops = ops(&t, id);
            assert!((2..=5).contains(&t.pieces.len()), "{t:?}");
            assert!(ops.len() >= t.pieces.len() && ops.len() <= 10, "{t:?}");
            for (i, op) in ops.iter().enumerate() {
                assert!(op.write.is_none_or(|v| v == write_value(id, i)));
            }
            widths.insert(t.pieces.len());
        }
        assert_eq!(widths.into_iter().collect::<Vec<_>>(), vec![2, 3, 4, 5]);
    }

    #[test]
    fn a_retired_shard_is_touched_only_before_its_sequence_number() {
        let config = SimConfig::new(3).shards(4).keys(40).cross_shard(0.8).retire_shard(0, 50);
        let mut w = Workload::new(&config, ChaCha8Rng::seed_from_u64(3));
        let touches = |t: &TxnSpec| t.pieces.iter().any(|p| p.shard == 0);
        let before = (1..50).filter(|&seq| touches(&w.next(1, seq).expect("drawn"))).count();
        assert!(before > 10, "shard 0 touched by only {before} of the first 49");
        for seq in 50..500 {
            let t = w.next(1, seq).expect("drawn");
            assert!(!touches(&t), "transaction {seq} touches the retired shard: {t:?}");
        }
        // A shard every transaction must touch cannot be avoided: a clear error, not a loop.
        let one = SimConfig::new(3).shards(1).keys(4).retire_shard(0, 1);
        let mut w = Workload::new(&one, ChaCha8Rng::seed_from_u64(3));
        assert!(w.next(1, 1).unwrap_err().contains("retired shard"));
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
}
