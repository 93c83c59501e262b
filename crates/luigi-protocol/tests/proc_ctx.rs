//! The same procedure body over two [`ProcCtx`] implementations: Luigi's [`TxnCtx`] (in place,
//! with undo; reached through `Registry::execute`) and a test-only buffered context (reads
//! from a snapshot, writes buffered and applied only on success, as an optimistic protocol
//! would). Outputs and final states must match.

use std::collections::BTreeMap;

use luigi_store::{Key, ScanOrder, Store, Value};
use luigi_txn::procedure::{check_access, check_scan, ProcCtx, ProcError, Procedure};
use luigi_txn::types::{Access, KeySet, ShardId};
use luigi_workloads::procedures::{
    account_key, kv_args, kv_key, micro_key, Kv, KvOp, Micro, MicroOp, Transfer, TransferArgs,
};

/// Reads a snapshot, buffers writes (`None`: deleted).
struct BufferedCtx<'a> {
    snapshot: &'a Store,
    keys: &'a KeySet,
    shard: ShardId,
    writes: BTreeMap<Key, Option<Value>>,
}

impl<'a> BufferedCtx<'a> {
    fn new(snapshot: &'a Store, keys: &'a KeySet, shard: ShardId) -> Self {
        Self { snapshot, keys, shard, writes: BTreeMap::new() }
    }

    /// The snapshot with the buffered writes applied.
    fn commit(self) -> Store {
        let mut store = self.snapshot.clone();
        for (k, v) in self.writes {
            match v {
                Some(v) => store.put(k, v),
                None => store.delete(&k),
            };
        }
        store
    }
}

impl ProcCtx for BufferedCtx<'_> {
    fn shard(&self) -> ShardId {
        self.shard
    }

    fn keys(&self) -> &KeySet {
        self.keys
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError> {
        check_access(self.keys, key, Access::Read, self.shard)?;
        Ok(match self.writes.get(key) {
            Some(buffered) => buffered.clone(),
            None => self.snapshot.get(key).cloned(),
        })
    }

    fn put(&mut self, key: Key, value: Value) -> Result<(), ProcError> {
        check_access(self.keys, &key, Access::Write, self.shard)?;
        self.writes.insert(key, Some(value));
        Ok(())
    }

    fn insert(&mut self, key: Key, value: Value) -> Result<(), ProcError> {
        check_access(self.keys, &key, Access::Write, self.shard)?;
        if self.get(&key)?.is_some() {
            return Err(ProcError::DuplicateKey(key));
        }
        self.put(key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError> {
        check_access(self.keys, key, Access::Write, self.shard)?;
        let old = self.get(key)?;
        self.writes.insert(key.to_vec(), None);
        Ok(old)
    }

    fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        order: ScanOrder,
    ) -> Result<Vec<(Key, Value)>, ProcError> {
        check_scan(self.keys, start, end, self.shard)?;
        let mut merged: BTreeMap<Key, Value> =
            self.snapshot.scan(start, end, usize::MAX, ScanOrder::Ascending).into_iter().collect();
        for (k, v) in self.writes.range(start.to_vec()..end.to_vec()) {
            match v {
                Some(v) => merged.insert(k.clone(), v.clone()),
                None => merged.remove(k),
            };
        }
        let all: Vec<(Key, Value)> = match order {
            ScanOrder::Ascending => merged.into_iter().collect(),
            ScanOrder::Descending => merged.into_iter().rev().collect(),
        };
        Ok(all.into_iter().take(limit).collect())
    }
}

/// Runs `procedure` over both contexts from `store` and checks they agree; returns the result.
fn both(
    name: &str,
    procedure: &dyn Procedure,
    args: &[u8],
    store: &Store,
    keys: &KeySet,
) -> Result<Vec<u8>, ProcError> {
    let mut in_place = store.clone();
    let direct = luigi_workloads::procedures::builtins().execute(name, args, &mut in_place, keys, 0);
    let mut buffered = BufferedCtx::new(store, keys, 0);
    let via_buffer = procedure.execute(&mut buffered, args);
    assert_eq!(direct, via_buffer, "{name}: same result over both contexts");
    let after = if via_buffer.is_ok() { buffered.commit() } else { store.clone() };
    assert_eq!(in_place, after, "{name}: same final state over both contexts");
    direct
}

#[test]
fn builtins_give_the_same_result_over_a_buffered_context() {
    let mut store = Store::new();
    store.put(account_key(1), 100i64.to_le_bytes().to_vec());
    store.put(micro_key(5), 55u64.to_le_bytes().to_vec());
    for k in ["a", "b", "c"] {
        store.put(kv_key(k.as_bytes()), k.as_bytes().to_vec());
    }

    let transfer = TransferArgs { from: 1, to: 2, amount: 30 };
    let keys = KeySet::new(vec![], vec![account_key(1), account_key(2)]);
    both(Transfer::NAME, &Transfer, &postcard::to_stdvec(&transfer).unwrap(), &store, &keys).unwrap();

    let ops = vec![
        MicroOp { key: 5, write: None },
        MicroOp { key: 5, write: Some(9) },
        MicroOp { key: 5, write: None },
        MicroOp { key: 6, write: None },
    ];
    let keys = KeySet::new(vec![micro_key(6)], vec![micro_key(5)]);
    both(Micro::NAME, &Micro, &postcard::to_stdvec(&ops).unwrap(), &store, &keys).unwrap();

    // A scan sees the transaction's own put and delete.
    let ops = vec![
        KvOp::Put { key: b"bb".to_vec(), value: b"new".to_vec() },
        KvOp::Delete { key: b"a".to_vec() },
        KvOp::Scan { prefix: vec![], limit: 10 },
        KvOp::Get { key: b"c".to_vec() },
    ];
    let keys = KeySet::new(vec![kv_key(b"c")], vec![kv_key(b"bb"), kv_key(b"a"), kv_key(b"")]);
    both(Kv::NAME, &Kv, &kv_args(&ops), &store, &keys).unwrap();
}

#[test]
fn failures_leave_the_same_state_over_both_contexts() {
    let mut store = Store::new();
    store.put(micro_key(1), b"not an integer".to_vec());
    // Writes key 2, then fails reading key 1: TxnCtx undoes, the buffer is discarded.
    let ops = vec![MicroOp { key: 2, write: Some(7) }, MicroOp { key: 1, write: None }];
    let keys = KeySet::new(vec![micro_key(1)], vec![micro_key(2)]);
    let err = both(Micro::NAME, &Micro, &postcard::to_stdvec(&ops).unwrap(), &store, &keys).unwrap_err();
    assert_eq!(err, ProcError::NotAnInteger(micro_key(1)));
    // An undeclared write is refused by both.
    let transfer = TransferArgs { from: 1, to: 2, amount: 5 };
    let keys = KeySet::new(vec![account_key(1)], vec![account_key(2)]);
    let err = both(Transfer::NAME, &Transfer, &postcard::to_stdvec(&transfer).unwrap(), &store, &keys).unwrap_err();
    assert!(matches!(err, ProcError::KeyNotDeclared { access: Access::Write, .. }), "{err:?}");
}
