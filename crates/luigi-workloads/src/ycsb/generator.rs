//! The YCSB transaction generator: each transaction is `ops_per_txn` operations of one kind,
//! the kind drawn from the workload's mix (YCSB's `DiscreteGenerator` over the
//! proportions), the records from its request distribution (distinct within a
//! transaction), update values and new rows random printable bytes, a scan's length uniform
//! from 1 to `max_scan_length`, an update's field uniform (YCSB's defaults).

use luigi_txn::partition::HashPartitioner;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::dist::{InsertCounter, KeyChooser};
use super::procedure::{ycsb_args, ycsb_pieces, OpKind, YcsbOp};
use super::{YcsbConfig, YcsbLoad};
use crate::{GenError, TxnGenerator, TxnSpec};

/// Redraws of a record before a transaction gives up finding distinct ones.
pub const DISTINCT_TRIES_MAX: u32 = 10_000;

/// Seeded generator of YCSB transactions.
pub struct YcsbGenerator {
    config: YcsbConfig,
    load: YcsbLoad,
    partitioner: HashPartitioner,
    rng: ChaCha8Rng,
    chooser: KeyChooser,
    inserted: InsertCounter,
}

impl YcsbGenerator {
    /// A generator of `load` over the usertable of `config` on `shards` shards, seeded with
    /// `seed`, taking insert numbers from `inserted` (shared by the workload's generators).
    pub fn new(config: YcsbConfig, load: YcsbLoad, shards: u32, seed: u64, inserted: InsertCounter) -> Self {
        let chooser = KeyChooser::new(load.dist, config.records, inserted.clone());
        let partitioner = HashPartitioner::new(shards);
        Self { config, load, partitioner, rng: ChaCha8Rng::seed_from_u64(seed), chooser, inserted }
    }

    /// The kind of the next transaction, by the mix's proportions.
    fn kind(&mut self) -> OpKind {
        let weights = self.load.mix.weights();
        let total: u32 = weights.iter().map(|(_, w)| w).sum();
        let mut draw = self.rng.gen_range(0..total);
        for (kind, weight) in weights {
            if draw < weight {
                return kind;
            }
            draw -= weight;
        }
        unreachable!("the draw is below the total of the weights")
    }

    fn bytes(&mut self, n: u32) -> Vec<u8> {
        (0..n).map(|_| self.rng.gen_range(b' '..=b'~')).collect()
    }

    /// A record by the request distribution, not in `taken`.
    fn record(&mut self, taken: &[YcsbOp]) -> Result<u64, GenError> {
        for _ in 0..DISTINCT_TRIES_MAX {
            let record = self.chooser.next(&mut self.rng);
            if taken.iter().all(|op| op.record() != Some(record)) {
                return Ok(record);
            }
        }
        Err(GenError(format!(
            "no record distinct from the {} already drawn in {DISTINCT_TRIES_MAX} draws (too few records or too \
             skewed for {} operations per transaction)",
            taken.len(),
            self.load.ops_per_txn
        )))
    }

    /// One operation of `kind`, its record distinct from those of `taken`.
    fn op(&mut self, kind: OpKind, taken: &[YcsbOp]) -> Result<YcsbOp, GenError> {
        let (fields, length) = (self.config.field_count, self.config.field_length);
        Ok(match kind {
            OpKind::Read => YcsbOp::Read { record: self.record(taken)? },
            OpKind::Update => {
                let record = self.record(taken)?;
                let field = self.rng.gen_range(0..fields);
                YcsbOp::Update { record, field, value: self.bytes(length) }
            }
            OpKind::ReadModifyWrite => {
                let record = self.record(taken)?;
                let field = self.rng.gen_range(0..fields);
                YcsbOp::ReadModifyWrite { record, field, value: self.bytes(length) }
            }
            OpKind::Insert => YcsbOp::Insert { record: self.inserted.next(), row: self.bytes(fields * length) },
            OpKind::Scan => {
                let start = self.chooser.next(&mut self.rng);
                YcsbOp::Scan { start, count: self.rng.gen_range(1..=self.load.max_scan_length) }
            }
        })
    }

    /// The operations of the next transaction.
    pub fn next_ops(&mut self) -> Result<Vec<YcsbOp>, GenError> {
        let kind = self.kind();
        let mut ops = Vec::with_capacity(self.load.ops_per_txn as usize);
        for _ in 0..self.load.ops_per_txn {
            let op = self.op(kind, &ops)?;
            ops.push(op);
        }
        Ok(ops)
    }
}

impl TxnGenerator for YcsbGenerator {
    fn next_txn(&mut self) -> Result<TxnSpec, GenError> {
        let ops = self.next_ops()?;
        let procedure = ops[0].kind().procedure().to_string();
        Ok(TxnSpec {
            procedure,
            args: ycsb_args(&ops),
            pieces: ycsb_pieces(&self.partitioner, &ops, self.load.scans_at_snapshot),
        })
    }
}
