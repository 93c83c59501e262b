//! Built-in procedures: the micro benchmark's read/write transaction and a bank transfer used
//! by invariant tests. Workload crates register more (TPC-C, YCSB) in the same registry.

use std::sync::Arc;

use luigi_store::{table_key, Key};
use serde::{Deserialize, Serialize};

use crate::procedure::{ProcError, Procedure, Registry, TxnCtx};

/// Table id of the micro benchmark's keys.
pub const MICRO_TABLE: u16 = 1;
/// Table id of bank accounts.
pub const BANK_TABLE: u16 = 2;

/// Registers every built-in procedure.
pub fn register_builtins(registry: &mut Registry) {
    registry.register(Micro::NAME, Arc::new(Micro));
    registry.register(Transfer::NAME, Arc::new(Transfer));
}

/// The store key of micro-benchmark key number `k`.
pub fn micro_key(k: u64) -> Key {
    table_key(MICRO_TABLE, &[k])
}

/// One operation of a micro transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MicroOp {
    /// Key number (see [`micro_key`]).
    pub key: u64,
    /// `Some(v)`: write `v`; `None`: read.
    pub write: Option<u64>,
}

/// What a micro transaction read on one shard: (key number, value) in operation order.
pub type MicroOutput = Vec<(u64, Option<u64>)>;

/// The micro benchmark's transaction: a list of reads and writes of 8-byte values. Each shard
/// runs the operations whose keys it owns (the ones declared in its key set).
pub struct Micro;

impl Micro {
    /// Registered name.
    pub const NAME: &'static str = "micro";
}

impl Procedure for Micro {
    fn execute(&self, ctx: &mut TxnCtx<'_>, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let ops: Vec<MicroOp> = postcard::from_bytes(args).map_err(|e| ProcError::BadArgs(format!("micro: {e}")))?;
        let mut out: MicroOutput = Vec::new();
        for op in ops {
            let key = micro_key(op.key);
            if ctx.access(&key).is_none() {
                continue; // owned by another participant
            }
            match op.write {
                Some(v) => ctx.put(key, v.to_le_bytes().to_vec())?,
                None => {
                    let value = ctx.get(&key)?;
                    let value = value
                        .map(|v| v.try_into().map(u64::from_le_bytes))
                        .transpose()
                        .map_err(|_| ProcError::NotAnInteger(key.clone()))?;
                    out.push((op.key, value));
                }
            }
        }
        postcard::to_stdvec(&out).map_err(|e| ProcError::BadArgs(format!("micro output: {e}")))
    }
}

/// The store key of bank account `a`.
pub fn account_key(a: u64) -> Key {
    table_key(BANK_TABLE, &[a])
}

/// Arguments of a bank transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferArgs {
    /// Debited account.
    pub from: u64,
    /// Credited account.
    pub to: u64,
    /// Amount moved.
    pub amount: i64,
}

/// Moves money between two accounts (possibly on two shards). The total over all accounts is
/// invariant, which fault tests check. Each shard applies the side it owns.
pub struct Transfer;

impl Transfer {
    /// Registered name.
    pub const NAME: &'static str = "bank.transfer";
}

impl Procedure for Transfer {
    fn execute(&self, ctx: &mut TxnCtx<'_>, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let a: TransferArgs = postcard::from_bytes(args).map_err(|e| ProcError::BadArgs(format!("transfer: {e}")))?;
        let mut balances = Vec::new();
        for (account, delta) in [(a.from, -a.amount), (a.to, a.amount)] {
            let key = account_key(account);
            if ctx.access(&key).is_some() {
                balances.push((account, ctx.add_i64(&key, delta)?));
            }
        }
        postcard::to_stdvec(&balances).map_err(|e| ProcError::BadArgs(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::KeySet;
    use luigi_store::Store;

    #[test]
    fn micro_runs_only_its_own_keys() {
        let r = Registry::with_builtins();
        let ops = vec![
            MicroOp { key: 1, write: Some(10) },
            MicroOp { key: 2, write: None },
            MicroOp { key: 1, write: None },
            MicroOp { key: 3, write: Some(30) },
        ];
        // This shard owns keys 1 and 2 only.
        let keys = KeySet::new(vec![micro_key(2)], vec![micro_key(1)]);
        let mut store = Store::new();
        let out = r.execute(Micro::NAME, &postcard::to_stdvec(&ops).unwrap(), &mut store, &keys, 0).unwrap();
        let out: MicroOutput = postcard::from_bytes(&out).unwrap();
        assert_eq!(out, vec![(2, None), (1, Some(10))]);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn micro_rejects_garbage_arguments() {
        let r = Registry::with_builtins();
        let err = r.execute(Micro::NAME, &[0xff, 0xff, 0xff], &mut Store::new(), &KeySet::default(), 0).unwrap_err();
        assert!(matches!(err, ProcError::BadArgs(_)));
    }
}
