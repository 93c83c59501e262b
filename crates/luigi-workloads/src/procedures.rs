//! Built-in procedures: the micro benchmark's read/write transaction, a bank transfer used
//! by invariant tests, and the generic key-value transaction behind `luigi get/put/scan/txn`.
//! Workload crates register more (TPC-C, YCSB) in the same registry.

use std::sync::Arc;

use luigi_store::{table_key, Key, ScanOrder, Value};
use serde::{Deserialize, Serialize};

use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::{prefix_successor, ProcCtx, ProcError, Procedure, Registry};
use luigi_txn::types::{ShardId, ShardPiece};

use crate::table_pieces::{declared_exactly, table_pieces, PointKey};

/// Table id of the micro benchmark's keys.
pub const MICRO_TABLE: u16 = 1;
/// Table id of bank accounts.
pub const BANK_TABLE: u16 = 2;
/// Table id of the generic key-value table (see [`Kv`]).
pub const KV_TABLE: u16 = 3;

/// Registers every built-in procedure.
/// A registry holding just the built-in procedures.
pub fn builtins() -> Registry {
    let mut r = Registry::new();
    register_builtins(&mut r);
    r
}

/// Registers the built-in procedures (micro, transfer, key-value) into `registry`.
pub fn register_builtins(registry: &mut Registry) {
    registry.register(Micro::NAME, Arc::new(Micro));
    registry.register(Transfer::NAME, Arc::new(Transfer));
    registry.register(Kv::NAME, Arc::new(Kv));
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
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
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
                    let mut value = None;
                    ctx.get_with(&key, &mut |v| value = v.map(|v| v.try_into().map(u64::from_le_bytes)))?;
                    let value = value.transpose().map_err(|_| ProcError::NotAnInteger(key.clone()))?;
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
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
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

/// The store key of user key `key` in the key-value table: the table prefix, then the bytes.
pub fn kv_key(key: &[u8]) -> Key {
    let mut k = kv_table_prefix();
    k.extend_from_slice(key);
    k
}

/// The key-value table's prefix.
pub fn kv_table_prefix() -> Key {
    table_key(KV_TABLE, &[])
}

/// One operation of a key-value transaction. Keys and values are the user's bytes (the
/// table prefix is added on the server).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvOp {
    /// Read `key`.
    Get {
        /// The key (not empty).
        key: Vec<u8>,
    },
    /// Write `value` under `key`.
    Put {
        /// The key (not empty).
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Remove `key`.
    Delete {
        /// The key (not empty).
        key: Vec<u8>,
    },
    /// Up to `limit` entries whose key starts with `prefix` (empty: the whole table), in key
    /// order, from every shard.
    Scan {
        /// The prefix.
        prefix: Vec<u8>,
        /// Most entries returned.
        limit: u32,
    },
}

impl KvOp {
    /// The key of a point operation (`None` for a scan).
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            KvOp::Get { key } | KvOp::Put { key, .. } | KvOp::Delete { key } => Some(key),
            KvOp::Scan { .. } => None,
        }
    }
}

/// What one operation returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvResult {
    /// A get: the value, if the key exists.
    Value(Option<Value>),
    /// A put.
    Written,
    /// A delete: whether the key existed.
    Deleted(bool),
    /// A scan: (user key, value) in key order.
    Entries(Vec<(Vec<u8>, Value)>),
}

impl KvResult {
    /// True when this is the kind of result `op` gives.
    pub fn answers(&self, op: &KvOp) -> bool {
        match self {
            KvResult::Value(_) => matches!(op, KvOp::Get { .. }),
            KvResult::Written => matches!(op, KvOp::Put { .. }),
            KvResult::Deleted(_) => matches!(op, KvOp::Delete { .. }),
            KvResult::Entries(_) => matches!(op, KvOp::Scan { .. }),
        }
    }
}

/// What a key-value transaction returns on one shard: (operation index, result) for the
/// operations that shard ran, in operation order.
pub type KvOutput = Vec<(u32, KvResult)>;

/// The generic key-value transaction: a list of [`KvOp`]s, atomically, over one or more shards.
/// Each shard runs the point operations whose keys it owns, and every scan (on its part of the
/// table), in operation order, so a read sees the transaction's earlier writes.
///
/// Declared keys (built by [`kv_pieces`]): each point key exactly (read or write), plus the
/// table prefix on every participant, as a read when the transaction only has point
/// operations and as a write when it scans (a scan then involves every shard). The prefix
/// works like an intention lock: point operations on different keys share it as readers and
/// do not conflict, while a scan conflicts with every point operation and scan of the table on
/// that shard, so scans are serialized with the writes they could see. A shard runs a point
/// operation when its key is declared there exactly, a scan when the prefix is declared.
/// When the client reads at a snapshot (Luigi's read-only path, DESIGN.md rule 23), a
/// transaction without writes declares the prefix as a read even when it scans: a snapshot
/// needs no lock, and declaring no write is what sends it there.
pub struct Kv;

impl Kv {
    /// Registered name.
    pub const NAME: &'static str = "kv";
}

/// Encodes the arguments of a [`Kv`] transaction.
pub fn kv_args(ops: &[KvOp]) -> Vec<u8> {
    postcard::to_stdvec(ops).expect("a Vec of plain enums always encodes")
}

fn check_kv_ops(ops: &[KvOp]) -> Result<(), String> {
    if ops.is_empty() {
        return Err("a key-value transaction needs at least one operation".into());
    }
    if ops.iter().any(|op| op.key().is_some_and(<[u8]>::is_empty)) {
        return Err("keys must not be empty".into());
    }
    Ok(())
}

/// The per-shard pieces (declared keys) of a [`Kv`] transaction, see [`Kv`];
/// `scans_at_snapshot`: the client reads transactions without writes at a snapshot.
///
/// # Errors
/// No operation, or an empty key.
pub fn kv_pieces(p: &dyn Partitioner, ops: &[KvOp], scans_at_snapshot: bool) -> Result<Vec<ShardPiece>, String> {
    check_kv_ops(ops)?;
    let points = ops.iter().filter_map(|op| {
        let (write, key) = match op {
            KvOp::Get { key } => (false, key),
            KvOp::Put { key, .. } | KvOp::Delete { key } => (true, key),
            KvOp::Scan { .. } => return None,
        };
        let key = kv_key(key);
        Some(PointKey { shard: p.shard_of(&key), key, write })
    });
    let scans = ops.iter().any(|op| matches!(op, KvOp::Scan { .. }));
    Ok(table_pieces(points, p.shards(), &kv_table_prefix(), scans, scans_at_snapshot))
}

/// Combines every shard's [`KvOutput`] into one result per operation, in operation order
/// (a scan's entries from all shards, merged in key order and cut to its limit).
///
/// # Errors
/// An output does not decode, or an operation has no result (not every shard answered).
pub fn kv_merge(ops: &[KvOp], outputs: &[(ShardId, Vec<u8>)]) -> Result<Vec<KvResult>, String> {
    let merged = gather_outputs("kv", ops.len(), outputs, |first: &mut KvResult, more| {
        let (KvResult::Entries(all), KvResult::Entries(more)) = (first, more) else { return false };
        all.extend(more);
        true
    })?;
    merged
        .into_iter()
        .zip(ops)
        .enumerate()
        .map(|(i, (result, op))| match (result, op) {
            (Some(KvResult::Entries(mut entries)), KvOp::Scan { limit, .. }) => {
                entries.sort();
                entries.truncate(*limit as usize);
                Ok(KvResult::Entries(entries))
            }
            (Some(result), op) if result.answers(op) => Ok(result),
            (Some(result), op) => Err(format!("operation {i} ({op:?}) got a result of another kind: {result:?}")),
            (None, _) => Err(format!("no shard ran operation {i}")),
        })
        .collect()
}

/// Gathers every shard's `(operation index, result)` pairs (a `what` procedure's outputs,
/// e.g. `kv`) into one slot per operation, in operation order; a second result for an
/// operation is folded into the first by `combine` (a scan's entries from another shard),
/// which returns false for a pair that cannot be combined.
///
/// # Errors
/// An output does not decode, names no operation, or answers one twice.
pub fn gather_outputs<R: serde::de::DeserializeOwned>(
    what: &str,
    ops: usize,
    outputs: &[(ShardId, Vec<u8>)],
    combine: impl Fn(&mut R, R) -> bool,
) -> Result<Vec<Option<R>>, String> {
    let mut merged: Vec<Option<R>> = (0..ops).map(|_| None).collect();
    for (shard, bytes) in outputs {
        let out: Vec<(u32, R)> =
            postcard::from_bytes(bytes).map_err(|e| format!("shard {shard}: undecodable {what} output: {e}"))?;
        for (i, result) in out {
            let slot = merged.get_mut(i as usize).ok_or_else(|| format!("shard {shard}: result for no operation"))?;
            match slot {
                None => *slot = Some(result),
                Some(first) => {
                    if !combine(first, result) {
                        return Err(format!("operation {i} answered twice (shard {shard})"));
                    }
                }
            }
        }
    }
    Ok(merged)
}

impl Procedure for Kv {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let ops: Vec<KvOp> = postcard::from_bytes(args).map_err(|e| ProcError::BadArgs(format!("kv: {e}")))?;
        check_kv_ops(&ops).map_err(|e| ProcError::BadArgs(format!("kv: {e}")))?;
        let prefix = kv_table_prefix();
        // A scan declares the prefix on every shard (a lock, or a read at a snapshot); only a
        // transaction with a scan consults this.
        let scans_here = declared_exactly(ctx.keys(), &prefix);
        let mut out: KvOutput = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            let i = i as u32;
            if let Some(key) = op.key() {
                if !declared_exactly(ctx.keys(), &kv_key(key)) {
                    continue; // owned by another participant
                }
            }
            let result = match op {
                KvOp::Get { key } => KvResult::Value(ctx.get(&kv_key(&key))?),
                KvOp::Put { key, value } => {
                    ctx.put(kv_key(&key), value)?;
                    KvResult::Written
                }
                KvOp::Delete { key } => KvResult::Deleted(ctx.delete(&kv_key(&key))?.is_some()),
                KvOp::Scan { prefix: user_prefix, limit } => {
                    if !scans_here {
                        continue;
                    }
                    let start = kv_key(&user_prefix);
                    let end = prefix_successor(&start).expect("a table key never is all 0xff");
                    let entries = ctx.scan(&start, &end, limit as usize, ScanOrder::Ascending)?;
                    KvResult::Entries(entries.into_iter().map(|(k, v)| (k[prefix.len()..].to_vec(), v)).collect())
                }
            };
            out.push((i, result));
        }
        postcard::to_stdvec(&out).map_err(|e| ProcError::BadArgs(format!("kv output: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_store::Store;
    use luigi_txn::types::KeySet;

    #[test]
    fn micro_runs_only_its_own_keys() {
        let r = crate::procedures::builtins();
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
        let r = crate::procedures::builtins();
        let err = r.execute(Micro::NAME, &[0xff, 0xff, 0xff], &mut Store::new(), &KeySet::default(), 0).unwrap_err();
        assert!(matches!(err, ProcError::BadArgs(_)));
    }
    use luigi_txn::partition::HashPartitioner;

    /// Runs `ops` as the cluster would: one store per shard, each running its own piece.
    fn run_kv(stores: &mut [Store], ops: &[KvOp]) -> Result<Vec<KvResult>, String> {
        let p = HashPartitioner::new(stores.len() as u32);
        let r = crate::procedures::builtins();
        let mut outputs = Vec::new();
        for piece in kv_pieces(&p, ops, false)? {
            let store = &mut stores[piece.shard as usize];
            let out = r.execute(Kv::NAME, &kv_args(ops), store, &piece.keys, piece.shard).map_err(|e| e.to_string())?;
            outputs.push((piece.shard, out));
        }
        kv_merge(ops, &outputs)
    }

    /// Runs read-only `ops` as a snapshot read would (rule 23), at each store's newest state.
    fn run_kv_at_snapshot(stores: &[Store], ops: &[KvOp]) -> Vec<KvResult> {
        let p = HashPartitioner::new(stores.len() as u32);
        let r = crate::procedures::builtins();
        let mut outputs = Vec::new();
        for piece in kv_pieces(&p, ops, true).unwrap() {
            assert!(piece.keys.writes.is_empty(), "{piece:?}");
            let store = &stores[piece.shard as usize];
            outputs.push((
                piece.shard,
                r.read_at(Kv::NAME, &kv_args(ops), store, &piece.keys, piece.shard, u64::MAX).result.unwrap(),
            ));
        }
        kv_merge(ops, &outputs).unwrap()
    }

    fn put(key: &str, value: &str) -> KvOp {
        KvOp::Put { key: key.into(), value: value.into() }
    }

    fn get(key: &str) -> KvOp {
        KvOp::Get { key: key.into() }
    }

    fn scan(prefix: &str, limit: u32) -> KvOp {
        KvOp::Scan { prefix: prefix.into(), limit }
    }

    #[test]
    fn kv_puts_gets_scans_and_deletes_across_shards() {
        let mut stores = vec![Store::new(), Store::new(), Store::new()];
        let keys = ["user/1", "user/2", "user/3", "user/10", "order/1"];
        let writes: Vec<KvOp> = keys.iter().map(|k| put(k, &format!("v-{k}"))).collect();
        let results = run_kv(&mut stores, &writes).unwrap();
        assert_eq!(results, vec![KvResult::Written; keys.len()]);
        assert!(stores.iter().filter(|s| !s.is_empty()).count() > 1, "the keys spread over shards");

        // A read sees the transaction's own earlier write; a missing key reads as None.
        let ops = vec![get("user/2"), put("user/2", "new"), get("user/2"), get("nope")];
        let results = run_kv(&mut stores, &ops).unwrap();
        assert_eq!(
            results,
            vec![
                KvResult::Value(Some(b"v-user/2".to_vec())),
                KvResult::Written,
                KvResult::Value(Some(b"new".to_vec())),
                KvResult::Value(None)
            ]
        );

        // A scan merges every shard's part in key order and applies the limit overall.
        let results = run_kv(&mut stores, &[scan("user/", 3), scan("", 100), scan("zzz", 5)]).unwrap();
        let KvResult::Entries(users) = &results[0] else { panic!("{results:?}") };
        let names: Vec<&[u8]> = users.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(names, vec![&b"user/1"[..], b"user/10", b"user/2"]);
        assert_eq!(users[2].1, b"new".to_vec());
        assert!(matches!(&results[1], KvResult::Entries(all) if all.len() == 5 && all[0].0 == b"order/1"));
        assert_eq!(results[2], KvResult::Entries(vec![]));
        // Read at a snapshot (declared without a lock), every shard answers the same.
        let scans = [scan("user/", 3), scan("", 100), scan("zzz", 5)];
        assert_eq!(run_kv_at_snapshot(&stores, &scans), results);

        let results = run_kv(&mut stores, &[KvOp::Delete { key: b"user/1".to_vec() }, get("user/1")]).unwrap();
        assert_eq!(results, vec![KvResult::Deleted(true), KvResult::Value(None)]);
        let results = run_kv(&mut stores, &[KvOp::Delete { key: b"user/1".to_vec() }]).unwrap();
        assert_eq!(results, vec![KvResult::Deleted(false)]);
    }

    #[test]
    fn kv_declares_the_table_prefix_as_an_intention_lock() {
        let p = HashPartitioner::new(2);
        let prefix = kv_table_prefix();
        let conflict = |a: &[ShardPiece], b: &[ShardPiece]| {
            a.iter().any(|x| {
                b.iter()
                    .filter(|y| y.shard == x.shard)
                    .any(|y| x.keys.entries().any(|(k, ax)| y.keys.entries().any(|(l, ay)| k == l && ax.conflicts(ay))))
            })
        };
        let a = (0..100).map(|i| format!("k{i}")).find(|k| p.shard_of(&kv_key(k.as_bytes())) == 0).unwrap();
        let b = (0..100).map(|i| format!("k{i}")).find(|k| *k != a && p.shard_of(&kv_key(k.as_bytes())) == 0).unwrap();
        let put_a = kv_pieces(&p, &[put(&a, "1")], false).unwrap();
        assert_eq!(put_a.len(), 1, "a point operation involves its key's shard only");
        assert_eq!(put_a[0].keys, KeySet::new(vec![prefix.clone()], vec![kv_key(a.as_bytes())]));
        let put_b = kv_pieces(&p, &[put(&b, "2")], false).unwrap();
        let get_a = kv_pieces(&p, &[get(&a)], false).unwrap();
        let scan_all = kv_pieces(&p, &[scan("", 10)], false).unwrap();
        assert_eq!(scan_all.len(), 2, "a scan involves every shard");
        assert!(!conflict(&put_a, &put_b), "different keys do not conflict");
        assert!(conflict(&put_a, &get_a), "same key, one write");
        assert!(conflict(&put_a, &scan_all) && conflict(&get_a, &scan_all), "a scan conflicts with point operations");
        // A transaction that scans and writes declares the prefix as a write only.
        let both = kv_pieces(&p, &[put(&a, "1"), scan("k", 1)], false).unwrap();
        assert!(both.iter().all(|x| x.keys.writes.contains(&prefix) && !x.keys.reads.contains(&prefix)));
        // Read at a snapshot, a scan without writes declares the prefix as a read (no lock);
        // with a write it keeps the lock.
        let at_snapshot = kv_pieces(&p, &[scan("", 10), get(&a)], true).unwrap();
        assert_eq!(at_snapshot.len(), 2);
        assert!(at_snapshot.iter().all(|x| x.keys.writes.is_empty() && x.keys.reads.contains(&prefix)));
        let both = kv_pieces(&p, &[put(&a, "1"), scan("k", 1)], true).unwrap();
        assert!(both.iter().all(|x| x.keys.writes.contains(&prefix)));
    }

    #[test]
    fn kv_refuses_empty_keys_no_operations_and_garbage() {
        let p = HashPartitioner::new(2);
        assert!(kv_pieces(&p, &[put("", "x")], false).unwrap_err().contains("empty"));
        assert!(kv_pieces(&p, &[], false).unwrap_err().contains("at least one"));
        let r = crate::procedures::builtins();
        let keys = KeySet::new(vec![kv_table_prefix()], vec![]);
        let err = r.execute(Kv::NAME, &[0xff, 0xff], &mut Store::new(), &keys, 0).unwrap_err();
        assert!(matches!(err, ProcError::BadArgs(_)));
        let err = r.execute(Kv::NAME, &kv_args(&[get("")]), &mut Store::new(), &keys, 0).unwrap_err();
        assert!(matches!(err, ProcError::BadArgs(why) if why.contains("empty")));
        assert!(kv_merge(&[get("a")], &[]).unwrap_err().contains("no shard ran operation 0"));
        let written = postcard::to_stdvec(&vec![(0u32, KvResult::Written)]).unwrap();
        assert!(kv_merge(&[get("a")], &[(0, written)]).unwrap_err().contains("another kind"));
    }
}

#[cfg(test)]
mod arbitrary_mirrors {
    //! `luigi_txn::arbitrary` cannot see the built-in procedures, so it mirrors their names,
    //! keys and argument encodings for the fuzzers: these must agree.
    use luigi_txn::arbitrary::{kv_key as kv_key_mirror, micro_key as micro_key_mirror, KvOpShape, MicroOpShape};

    use super::*;

    #[test]
    fn names_keys_and_encodings_agree() {
        assert_eq!(luigi_txn::arbitrary::MICRO_NAME, Micro::NAME);
        assert_eq!(luigi_txn::arbitrary::KV_NAME, Kv::NAME);
        for k in [0, 7, u64::MAX] {
            assert_eq!(micro_key_mirror(k), micro_key(k));
        }
        assert_eq!(kv_key_mirror(b"abc"), kv_key(b"abc"));
        let micro = vec![MicroOp { key: 3, write: Some(9) }, MicroOp { key: u64::MAX, write: None }];
        let shape = vec![MicroOpShape { key: 3, write: Some(9) }, MicroOpShape { key: u64::MAX, write: None }];
        assert_eq!(postcard::to_stdvec(&micro).unwrap(), postcard::to_stdvec(&shape).unwrap());
        let kv = vec![KvOp::Get { key: b"a".to_vec() }, KvOp::Put { key: b"b".to_vec(), value: b"v".to_vec() }];
        let shape =
            vec![KvOpShape::Get { key: b"a".to_vec() }, KvOpShape::Put { key: b"b".to_vec(), value: b"v".to_vec() }];
        assert_eq!(kv_args(&kv), postcard::to_stdvec(&shape).unwrap());
    }
}
