//! Local [`ProcCtx`] implementations with the same access rules as Luigi's `TxnCtx`
//! ([`check_access`], [`check_scan`]): a read-only one over a borrowed store (the check over
//! local stores) and one that writes in place with an undo log (the conflict measurement
//! wraps it in a recording context, which `Registry::execute` does not allow).

use luigi_proto::procedure::{check_access, check_scan, ProcCtx, ProcError, Procedure};
use luigi_proto::types::{Access, KeySet, ShardId};
use luigi_store::{Key, ScanOrder, Store, Value};

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

/// A context writing `store` in place, keeping an undo log ([`StoreCtx::run`] rolls back on
/// error, as `Registry::execute` does).
pub struct StoreCtx<'a> {
    store: &'a mut Store,
    keys: &'a KeySet,
    shard: ShardId,
    undo: Vec<(Key, Option<Value>)>,
}

impl<'a> StoreCtx<'a> {
    /// A context over `store` (shard `shard`'s) restricted to `keys`.
    pub fn new(store: &'a mut Store, keys: &'a KeySet, shard: ShardId) -> Self {
        Self { store, keys, shard, undo: Vec::new() }
    }

    /// Undoes every write made through this context.
    pub fn rollback(&mut self) {
        while let Some((key, old)) = self.undo.pop() {
            match old {
                Some(v) => self.store.put(key, v),
                None => self.store.delete(&key),
            };
        }
    }

    /// Runs `procedure` here, rolling back its writes on error.
    pub fn execute(&mut self, procedure: &dyn Procedure, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let result = procedure.execute(self, args);
        if result.is_err() {
            self.rollback();
        }
        result
    }
}

impl ProcCtx for StoreCtx<'_> {
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

    fn put(&mut self, key: Key, value: Value) -> Result<(), ProcError> {
        check_access(self.keys, &key, Access::Write, self.shard)?;
        let old = self.store.put_slice(&key, value);
        self.undo.push((key, old));
        Ok(())
    }

    fn insert(&mut self, key: Key, value: Value) -> Result<(), ProcError> {
        check_access(self.keys, &key, Access::Write, self.shard)?;
        if self.store.get(&key).is_some() {
            return Err(ProcError::DuplicateKey(key));
        }
        self.put(key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError> {
        check_access(self.keys, key, Access::Write, self.shard)?;
        let old = self.store.delete(key);
        if old.is_some() {
            self.undo.push((key.to_vec(), old.clone()));
        }
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
        Ok(self.store.scan(start, end, limit, order))
    }
}
