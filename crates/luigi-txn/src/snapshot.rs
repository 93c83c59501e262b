//! A read-only transaction's view of one shard's store at a snapshot timestamp (DESIGN.md
//! rule 23): the same [`ProcCtx`] a procedure runs on, reading the values as of the snapshot
//! and refusing every write.

use luigi_store::{Key, ScanOrder, Store, TooOld, Value};

use crate::procedure::{check_access, check_scan, ProcCtx, ProcError, Procedure};
use crate::types::{Access, KeySet, ShardId, Timestamp};

/// A read-only view of `store` as of snapshot `ts`, restricted to declared keys.
pub struct SnapshotCtx<'a> {
    store: &'a Store,
    keys: &'a KeySet,
    shard: ShardId,
    ts: Timestamp,
}

impl From<TooOld> for ProcError {
    fn from(e: TooOld) -> Self {
        ProcError::SnapshotTooOld { requested: e.requested, oldest: e.oldest }
    }
}

impl<'a> SnapshotCtx<'a> {
    /// The view of `store` at `ts`; [`ProcError::SnapshotTooOld`] when the store no longer
    /// keeps the versions of `ts` (checked once here: the store does not change while the
    /// view lives).
    pub fn new(store: &'a Store, keys: &'a KeySet, shard: ShardId, ts: Timestamp) -> Result<Self, ProcError> {
        if ts < store.oldest_snapshot() {
            return Err(TooOld { requested: ts, oldest: store.oldest_snapshot() }.into());
        }
        Ok(SnapshotCtx { store, keys, shard, ts })
    }

    /// Runs `procedure` on this view.
    pub fn run(&mut self, procedure: &dyn Procedure, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        procedure.execute(self, args)
    }
}

impl ProcCtx for SnapshotCtx<'_> {
    fn shard(&self) -> ShardId {
        self.shard
    }

    fn keys(&self) -> &KeySet {
        self.keys
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError> {
        check_access(self.keys, key, Access::Read, self.shard)?;
        Ok(self.store.get_at(key, self.ts)?.cloned())
    }

    fn put(&mut self, key: Key, _value: Value) -> Result<(), ProcError> {
        Err(ProcError::WriteInReadOnly(key))
    }

    fn insert(&mut self, key: Key, _value: Value) -> Result<(), ProcError> {
        Err(ProcError::WriteInReadOnly(key))
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError> {
        Err(ProcError::WriteInReadOnly(key.to_vec()))
    }

    fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        order: ScanOrder,
    ) -> Result<Vec<(Key, Value)>, ProcError> {
        check_scan(self.keys, start, end, self.shard)?;
        Ok(self.store.scan_at(start, end, limit, order, self.ts)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procedure::tests::Scripted;
    use crate::procedure::Registry;
    use crate::types::KeySet;
    use std::sync::Arc;

    fn registry() -> Registry {
        let mut r = Registry::new();
        r.register("read", Arc::new(Scripted(|ctx| Ok(ctx.get(b"k")?.unwrap_or_default()))));
        r.register("write", Arc::new(Scripted(|ctx| ctx.put(b"k".to_vec(), b"w".to_vec()).map(|()| vec![]))));
        r.register("add", Arc::new(Scripted(|ctx| ctx.add_i64(b"n", 1).map(|_| vec![]))));
        r
    }

    #[test]
    fn a_snapshot_read_sees_the_writes_at_or_below_it_and_a_write_is_refused() {
        let r = registry();
        let mut store = Store::new();
        let keys = KeySet::new(vec![], vec![b"k".to_vec(), b"n".to_vec()]);
        r.execute_at("write", &[], &mut store, &keys, 0, 10).unwrap();
        assert_eq!(r.read_at("read", &[], &store, &keys, 0, 9), Ok(vec![]));
        assert_eq!(r.read_at("read", &[], &store, &keys, 0, 10), Ok(b"w".to_vec()));
        assert_eq!(r.read_at("write", &[], &store, &keys, 0, 10), Err(ProcError::WriteInReadOnly(b"k".to_vec())));
        assert!(matches!(r.read_at("add", &[], &store, &keys, 0, 10), Err(ProcError::WriteInReadOnly(_))));
        assert_eq!(store.get(b"k"), Some(&b"w".to_vec()), "a refused write leaves the store as it was");
        store.forget_below(20);
        assert_eq!(
            r.read_at("read", &[], &store, &keys, 0, 19),
            Err(ProcError::SnapshotTooOld { requested: 19, oldest: 20 })
        );
        let undeclared = KeySet::default();
        assert!(matches!(r.read_at("read", &[], &store, &undeclared, 0, 30), Err(ProcError::KeyNotDeclared { .. })));
    }

    #[test]
    fn a_failed_timestamped_transaction_leaves_no_version_behind() {
        let mut r = registry();
        r.register(
            "write_then_fail",
            Arc::new(Scripted(|ctx| {
                ctx.put(b"k".to_vec(), b"doomed".to_vec())?;
                Err(ProcError::UserAbort("no".into()))
            })),
        );
        let mut store = Store::new();
        let keys = KeySet::new(vec![], vec![b"k".to_vec(), b"n".to_vec()]);
        r.execute_at("write", &[], &mut store, &keys, 0, 10).unwrap();
        assert!(r.execute_at("write_then_fail", &[], &mut store, &keys, 0, 20).is_err());
        assert_eq!(store.history_stats().versions, 1, "only the version the write at 10 replaced");
        assert_eq!(r.read_at("read", &[], &store, &keys, 0, 25), Ok(b"w".to_vec()));
        assert_eq!(r.read_at("read", &[], &store, &keys, 0, 5), Ok(vec![]));
    }
}
