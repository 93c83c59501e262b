//! A read-only [`ProcCtx`] over a borrowed store, with the same access rules as Luigi's
//! `TxnCtx` ([`check_access`], [`check_scan`]): the check over local stores runs through it
//! without copying or mutably borrowing them. (Writing contexts are Luigi's `TxnCtx`.)

use luigi_store::{Key, ScanOrder, Store, Value};
use luigi_txn::procedure::{check_access, check_scan, ProcCtx, ProcError};
use luigi_txn::types::{Access, KeySet, ShardId};

/// A read-only context: every write is refused as undeclared.
pub struct ReadCtx<'a> {
    store: &'a Store,
    keys: &'a KeySet,
    shard: ShardId,
}

impl<'a> ReadCtx<'a> {
    /// Reads `store` (shard `shard`'s) restricted to `keys`.
    pub fn new(store: &'a Store, keys: &'a KeySet, shard: ShardId) -> Self {
        Self { store, keys, shard }
    }

    fn refuse<T>(&self, key: &[u8]) -> Result<T, ProcError> {
        Err(ProcError::KeyNotDeclared { key: key.to_vec(), access: Access::Write, shard: self.shard })
    }
}

impl ProcCtx for ReadCtx<'_> {
    fn shard(&self) -> ShardId {
        self.shard
    }

    fn keys(&self) -> &KeySet {
        self.keys
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError> {
        check_access(self.keys, key, Access::Read, self.shard)?;
        Ok(self.store.get(key).cloned())
    }

    fn put(&mut self, key: Key, _value: Value) -> Result<(), ProcError> {
        self.refuse(&key)
    }

    fn insert(&mut self, key: Key, _value: Value) -> Result<(), ProcError> {
        self.refuse(&key)
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError> {
        self.refuse(key)
    }

    fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        order: ScanOrder,
    ) -> Result<Vec<(Key, Value)>, ProcError> {
        check_scan(self.keys, start, end, self.shard)?;
        Ok(self.store.scan(start, end, limit, order))
    }
}
