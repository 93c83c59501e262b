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
    /// The ranges the procedure scanned (its declared keys name them only by prefix).
    scanned: Vec<ScannedRange>,
}

/// A range a snapshot read scanned: from `start` (included) to `end` (excluded; empty: no end).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScannedRange {
    /// First key.
    pub start: Key,
    /// Past the last key.
    pub end: Key,
}

/// What a read-only procedure returned at a snapshot, and the ranges it scanned: a leader
/// serving it ahead of its commits then names the positions of the uncommitted writes that
/// could fall in them, not only of its declared keys' (DESIGN.md rule 23 (e)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotAnswer {
    /// The procedure's result.
    pub result: Result<Vec<u8>, ProcError>,
    /// The ranges it scanned.
    pub scanned: Vec<ScannedRange>,
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
        Ok(SnapshotCtx { store, keys, shard, ts, scanned: Vec::new() })
    }

    /// Runs `procedure` on this view.
    pub fn run(&mut self, procedure: &dyn Procedure, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        procedure.execute(self, args)
    }

    /// The ranges the procedure run so far scanned.
    pub fn into_scanned(self) -> Vec<ScannedRange> {
        self.scanned
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

    fn get_with(&mut self, key: &[u8], read: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), ProcError> {
        check_access(self.keys, key, Access::Read, self.shard)?;
        read(self.store.get_at(key, self.ts)?.map(Vec::as_slice));
        Ok(())
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
        self.scanned.push(ScannedRange { start: start.to_vec(), end: end.to_vec() });
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
        r.register(
            "borrow",
            Arc::new(Scripted(|ctx| {
                let mut out = Vec::new();
                ctx.get_with(b"k", &mut |v| out = v.unwrap_or_default().to_vec())?;
                Ok(out)
            })),
        );
        r
    }

    #[test]
    fn a_snapshot_read_sees_the_writes_at_or_below_it_and_a_write_is_refused() {
        let r = registry();
        let mut store = Store::new();
        let keys = KeySet::new(vec![], vec![b"k".to_vec(), b"n".to_vec()]);
        r.execute_at("write", &[], &mut store, &keys, 0, 10).unwrap();
        assert_eq!(r.read_at("read", &[], &store, &keys, 0, 9).result, Ok(vec![]));
        assert_eq!(r.read_at("read", &[], &store, &keys, 0, 10).result, Ok(b"w".to_vec()));
        assert_eq!(r.read_at("borrow", &[], &store, &keys, 0, 9).result, Ok(vec![]), "a borrowed read, as a read");
        assert_eq!(r.read_at("borrow", &[], &store, &keys, 0, 10).result, Ok(b"w".to_vec()));
        assert_eq!(
            r.read_at("write", &[], &store, &keys, 0, 10).result,
            Err(ProcError::WriteInReadOnly(b"k".to_vec()))
        );
        assert!(matches!(r.read_at("add", &[], &store, &keys, 0, 10).result, Err(ProcError::WriteInReadOnly(_))));
        assert_eq!(store.get(b"k"), Some(&b"w".to_vec()), "a refused write leaves the store as it was");
        store.forget_below(20);
        assert_eq!(
            r.read_at("read", &[], &store, &keys, 0, 19).result,
            Err(ProcError::SnapshotTooOld { requested: 19, oldest: 20 })
        );
        let undeclared = KeySet::default();
        assert!(matches!(
            r.read_at("read", &[], &store, &undeclared, 0, 30).result,
            Err(ProcError::KeyNotDeclared { .. })
        ));
    }

    /// A leader serving a read ahead of its commits names the positions of the writes that
    /// could fall in the ranges a read scanned (rule 23 (e)): the answer lists them.
    #[test]
    fn the_answer_lists_the_ranges_the_procedure_scanned() {
        let mut r = registry();
        r.register(
            "scan",
            Arc::new(Scripted(|ctx| {
                let rows = ctx.scan(b"k", b"l", 10, ScanOrder::Ascending)?;
                Ok(rows.into_iter().flat_map(|(_, v)| v).collect())
            })),
        );
        let mut store = Store::new();
        let keys = KeySet::new(vec![], vec![b"k".to_vec(), b"n".to_vec()]);
        r.execute_at("write", &[], &mut store, &keys, 0, 10).unwrap();
        let read = KeySet::new(vec![b"k".to_vec()], vec![]);
        let scan = r.read_at("scan", &[], &store, &read, 0, 10);
        let range = ScannedRange { start: b"k".to_vec(), end: b"l".to_vec() };
        assert_eq!(scan, SnapshotAnswer { result: Ok(b"w".to_vec()), scanned: vec![range] });
        let get = r.read_at("read", &[], &store, &read, 0, 10);
        assert_eq!(get, SnapshotAnswer { result: Ok(b"w".to_vec()), scanned: vec![] });
        let missing = r.read_at("nope", &[], &store, &read, 0, 10);
        assert!(missing.scanned.is_empty() && matches!(missing.result, Err(ProcError::UnknownProcedure(_))));
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
        assert_eq!(r.read_at("read", &[], &store, &keys, 0, 25).result, Ok(b"w".to_vec()));
        assert_eq!(r.read_at("read", &[], &store, &keys, 0, 5).result, Ok(vec![]));
    }
}
