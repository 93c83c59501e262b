//! YCSB's operations as one stored procedure, registered under one name per kind of
//! transaction (`ycsb.read`, `ycsb.update`, `ycsb.insert`, `ycsb.scan`, `ycsb.rmw`): the
//! load driver and the reports group transactions by procedure name, so each operation type
//! gets its own figures.
//!
//! Declared keys ([`ycsb_pieces`]), as the key-value table's (`procedures::Kv`): each point
//! key exactly, plus the usertable's prefix on every participant, as a read for point
//! operations and as a write on every shard for a scan. The prefix is an intention lock:
//! point operations on different records share it and do not conflict, a scan conflicts
//! with every operation of the table on its shards (so it is serialized with the inserts
//! and updates it could see). A scan runs through [`ProcCtx::scan`] over the prefix.
//!
//! When the client reads at a snapshot (Luigi's read-only path, DESIGN.md rule 23), a
//! transaction of reads and scans only declares the prefix as a read on every shard: a
//! snapshot is complete for every key at its timestamp, so it needs no lock, and declaring no
//! write is what sends it there. A scan in a transaction that writes keeps the lock.

use std::sync::Arc;

use luigi_store::{Key, ScanOrder, Value};
use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::{prefix_successor, ProcCtx, ProcError, Procedure, Registry};
use luigi_txn::types::{ShardId, ShardPiece};
use serde::{Deserialize, Serialize};

use super::keys::{record_key, table_prefix};
use crate::procedures::gather_outputs;
use crate::table_pieces::{declared_exactly, table_pieces, PointKey};

/// One YCSB operation. Records are named by number ([`record_key`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum YcsbOp {
    /// Read every field of a record.
    Read {
        /// Record number.
        record: u64,
    },
    /// Overwrite one field of an existing record (YCSB's `writeallfields=false`).
    Update {
        /// Record number.
        record: u64,
        /// Field index.
        field: u32,
        /// Its new bytes (one field's length).
        value: Vec<u8>,
    },
    /// Insert a new record (refused if it exists).
    Insert {
        /// Record number.
        record: u64,
        /// The whole row (every field, concatenated).
        row: Vec<u8>,
    },
    /// Read up to `count` records in key order from the record's key on (YCSB's scan).
    Scan {
        /// Record number of the start key.
        start: u64,
        /// Most records read.
        count: u32,
    },
    /// Read a record, then overwrite one of its fields.
    ReadModifyWrite {
        /// Record number.
        record: u64,
        /// Field index.
        field: u32,
        /// Its new bytes.
        value: Vec<u8>,
    },
}

/// The kinds of YCSB operation, each a procedure name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    /// [`YcsbOp::Read`].
    Read,
    /// [`YcsbOp::Update`].
    Update,
    /// [`YcsbOp::Insert`].
    Insert,
    /// [`YcsbOp::Scan`].
    Scan,
    /// [`YcsbOp::ReadModifyWrite`].
    ReadModifyWrite,
}

impl OpKind {
    /// Every kind.
    pub const ALL: [OpKind; 5] = [OpKind::Read, OpKind::Update, OpKind::Insert, OpKind::Scan, OpKind::ReadModifyWrite];

    /// The procedure name of transactions of this kind.
    pub fn procedure(self) -> &'static str {
        match self {
            OpKind::Read => "ycsb.read",
            OpKind::Update => "ycsb.update",
            OpKind::Insert => "ycsb.insert",
            OpKind::Scan => "ycsb.scan",
            OpKind::ReadModifyWrite => "ycsb.rmw",
        }
    }
}

impl YcsbOp {
    /// Its kind.
    pub fn kind(&self) -> OpKind {
        match self {
            YcsbOp::Read { .. } => OpKind::Read,
            YcsbOp::Update { .. } => OpKind::Update,
            YcsbOp::Insert { .. } => OpKind::Insert,
            YcsbOp::Scan { .. } => OpKind::Scan,
            YcsbOp::ReadModifyWrite { .. } => OpKind::ReadModifyWrite,
        }
    }

    /// The record a point operation touches (`None` for a scan).
    pub fn record(&self) -> Option<u64> {
        match self {
            YcsbOp::Read { record }
            | YcsbOp::Update { record, .. }
            | YcsbOp::Insert { record, .. }
            | YcsbOp::ReadModifyWrite { record, .. } => Some(*record),
            YcsbOp::Scan { .. } => None,
        }
    }
}

/// What one operation returned on one shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum YcsbResult {
    /// A read or the read of a read-modify-write: the row (`None`: no such record).
    Row(Option<Value>),
    /// An update or insert.
    Written,
    /// A scan's part on this shard: (store key, row) in key order.
    Rows(Vec<(Key, Value)>),
}

/// A YCSB transaction's output on one shard: (operation index, result).
pub type YcsbOutput = Vec<(u32, YcsbResult)>;

/// The YCSB procedure (one body for every kind).
pub struct Ycsb;

/// Registers [`Ycsb`] under every kind's name.
pub fn register_ycsb(registry: &mut Registry) {
    for kind in OpKind::ALL {
        registry.register(kind.procedure(), Arc::new(Ycsb));
    }
}

/// Encodes a transaction's operations.
pub fn ycsb_args(ops: &[YcsbOp]) -> Vec<u8> {
    postcard::to_stdvec(ops).expect("plain enums always encode")
}

/// The per-shard pieces of a transaction of `ops` (see the module documentation);
/// `scans_at_snapshot`: the client reads transactions without writes at a snapshot.
pub fn ycsb_pieces(p: &dyn Partitioner, ops: &[YcsbOp], scans_at_snapshot: bool) -> Vec<ShardPiece> {
    let points = ops.iter().filter_map(|op| {
        let key = record_key(op.record()?);
        let write = match op.kind() {
            OpKind::Read => false,
            OpKind::Update | OpKind::Insert | OpKind::ReadModifyWrite => true,
            OpKind::Scan => unreachable!("a scan names no record"),
        };
        Some(PointKey { shard: p.shard_of(&key), key, write })
    });
    let scans = ops.iter().any(|op| op.kind() == OpKind::Scan);
    table_pieces(points, p.shards(), &table_prefix(), scans, scans_at_snapshot)
}

/// Overwrites field `field` of record `key` with `value` and returns the old row; refuses a
/// missing record or a field outside the row.
fn update_field(ctx: &mut dyn ProcCtx, key: &Key, field: u32, value: Vec<u8>) -> Result<Value, ProcError> {
    let Some(old) = ctx.get(key)? else {
        return Err(ProcError::UserAbort(format!("ycsb: no record {key:?} to update")));
    };
    let at = field as usize * value.len();
    let Some(slot) = old.get(at..at + value.len()) else {
        return Err(ProcError::BadArgs(format!("ycsb: field {field} of {} bytes is outside the row", value.len())));
    };
    let mut row = old.clone();
    if slot != value.as_slice() {
        row[at..at + value.len()].copy_from_slice(&value);
    }
    ctx.put(key.clone(), row)?;
    Ok(old)
}

/// Runs one operation whose key (if any) is declared here; `None` when it is not this
/// shard's to run.
fn run_op(ctx: &mut dyn ProcCtx, op: YcsbOp, scans_here: bool) -> Result<Option<YcsbResult>, ProcError> {
    if let Some(record) = op.record() {
        if !declared_exactly(ctx.keys(), &record_key(record)) {
            return Ok(None); // owned by another participant
        }
    }
    Ok(Some(match op {
        YcsbOp::Read { record } => YcsbResult::Row(ctx.get(&record_key(record))?),
        YcsbOp::Update { record, field, value } => {
            update_field(ctx, &record_key(record), field, value)?;
            YcsbResult::Written
        }
        YcsbOp::Insert { record, row } => {
            ctx.insert(record_key(record), row)?;
            YcsbResult::Written
        }
        YcsbOp::ReadModifyWrite { record, field, value } => {
            YcsbResult::Row(Some(update_field(ctx, &record_key(record), field, value)?))
        }
        YcsbOp::Scan { start, count } => {
            if !scans_here {
                return Ok(None);
            }
            let end = prefix_successor(&table_prefix()).expect("a table key never is all 0xff");
            YcsbResult::Rows(ctx.scan(&record_key(start), &end, count as usize, ScanOrder::Ascending)?)
        }
    }))
}

impl Procedure for Ycsb {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let ops: Vec<YcsbOp> = postcard::from_bytes(args).map_err(|e| ProcError::BadArgs(format!("ycsb: {e}")))?;
        // A scan declares the prefix on every shard (a lock, or a read at a snapshot); only
        // a transaction with a scan consults this.
        let scans_here = declared_exactly(ctx.keys(), &table_prefix());
        let mut out: YcsbOutput = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            if let Some(result) = run_op(ctx, op, scans_here)? {
                out.push((i as u32, result));
            }
        }
        postcard::to_stdvec(&out).map_err(|e| ProcError::BadArgs(format!("ycsb output: {e}")))
    }
}

/// Combines every shard's [`YcsbOutput`] into one result per operation, in operation order:
/// a scan's rows from every shard merged in key order and cut to its count.
///
/// # Errors
/// An output does not decode, an operation is answered twice or not at all.
pub fn ycsb_merge(ops: &[YcsbOp], outputs: &[(ShardId, Vec<u8>)]) -> Result<Vec<YcsbResult>, String> {
    let merged = gather_outputs("ycsb", ops.len(), outputs, |first: &mut YcsbResult, more| {
        let (YcsbResult::Rows(all), YcsbResult::Rows(more)) = (first, more) else { return false };
        all.extend(more);
        true
    })?;
    merged
        .into_iter()
        .zip(ops)
        .enumerate()
        .map(|(i, (result, op))| match (result, op) {
            (Some(YcsbResult::Rows(mut rows)), YcsbOp::Scan { count, .. }) => {
                rows.sort();
                rows.truncate(*count as usize);
                Ok(YcsbResult::Rows(rows))
            }
            (Some(result), _) => Ok(result),
            (None, _) => Err(format!("no shard ran operation {i}")),
        })
        .collect()
}
