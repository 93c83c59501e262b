//! Stored procedures: the server-side code a transaction runs on each participant shard.
//!
//! A procedure is written against [`ProcCtx`], the operations a transaction may perform on
//! one shard. Luigi runs it over a [`TxnCtx`]: that shard's store, restricted to the keys the
//! transaction declared for the shard (a declared key may be a prefix that stands for a
//! range), with every write undone if the procedure returns an error, so a failed or
//! user-aborted procedure leaves no trace. Another protocol can run the same body over its
//! own context (e.g. an optimistic one that fetches remote reads and buffers writes).
//! Execution must be a deterministic function of the state read and the arguments: followers
//! and new leaders replay it.
//!
//! Granularity rule: conflicts are detected on declared keys, so for any given table every
//! procedure must declare either whole rows or the same prefix level (e.g. "district d's
//! orders"), never a mix.

use crate::Map;
use std::sync::Arc;

use luigi_store::{Key, ScanOrder, Store, Value};
use serde::{Deserialize, Serialize};

use crate::types::{Access, KeySet, ShardId, Timestamp};

/// Why a procedure did not commit its writes on a shard.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum ProcError {
    /// No procedure is registered under this name.
    #[error("unknown procedure '{0}'")]
    UnknownProcedure(String),
    /// The arguments could not be decoded or are invalid.
    #[error("bad arguments: {0}")]
    BadArgs(String),
    /// The procedure touched a key outside the declared key set.
    #[error("key {key:?} was not declared for {access:?} on shard {shard}")]
    KeyNotDeclared {
        /// The key.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::blob()"))]
        key: Vec<u8>,
        /// The access it needed.
        access: Access,
        /// The shard.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
    },
    /// `insert` found the key already present.
    #[error("key {0:?} already exists")]
    DuplicateKey(Vec<u8>),
    /// A value did not have the expected encoding (e.g. an integer of 8 bytes).
    #[error("value under {0:?} is not an 8-byte integer")]
    NotAnInteger(Vec<u8>),
    /// The procedure chose to abort (e.g. TPC-C's invalid item); its writes are undone.
    #[error("aborted by procedure: {0}")]
    UserAbort(String),
    /// The procedure tried to write in a read-only transaction (a read at a snapshot,
    /// DESIGN.md rule 23): nothing was written. (Not drawn by the fuzzers' `Arbitrary`:
    /// the drawn vocabulary, and so the simulator's traces, stay as they were.)
    #[cfg_attr(feature = "arbitrary", proptest(skip))]
    #[error("read-only transaction tried to write key {0:?}")]
    WriteInReadOnly(Vec<u8>),
    /// The snapshot asked for is older than the versions the replica keeps.
    #[cfg_attr(feature = "arbitrary", proptest(skip))]
    #[error("snapshot {requested} is older than the oldest version kept ({oldest})")]
    SnapshotTooOld {
        /// The snapshot timestamp asked for.
        requested: u64,
        /// The oldest snapshot the replica serves now.
        oldest: u64,
    },
}

/// A stored procedure. Implementations must be deterministic.
pub trait Procedure: Send + Sync {
    /// Runs the procedure's part on the shard behind `ctx`; the returned bytes go to the client.
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError>;
}

/// What a procedure may do on one shard: the operations of [`TxnCtx`], as a trait so that the
/// same procedure body runs over any protocol's context.
///
/// Contract for implementations: only declared keys are accessible ([`ProcError::KeyNotDeclared`]
/// otherwise: a read needs the key declared, a write needs it declared as a write), a
/// procedure reads its own earlier writes, and writes take effect only if the whole procedure
/// succeeds (the caller undoes or discards them on error). Reads take `&mut self` so that a
/// context may fetch or record them.
pub trait ProcCtx {
    /// The shard this part runs on.
    fn shard(&self) -> ShardId;

    /// The keys declared on this shard.
    fn keys(&self) -> &KeySet;

    /// How `key` may be accessed here (`None`: not declared on this shard).
    fn access(&self, key: &[u8]) -> Option<Access> {
        self.keys().access(key)
    }

    /// Reads `key`.
    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError>;

    /// Reads `key` as [`ProcCtx::get`] does and hands its value to `read` borrowed, for a
    /// caller that only decodes it: a context over a store lends the stored bytes (no copy,
    /// no allocation; the default copies through `get`).
    fn get_with(&mut self, key: &[u8], read: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), ProcError> {
        let value = self.get(key)?;
        read(value.as_deref());
        Ok(())
    }

    /// Writes `value` under `key`.
    fn put(&mut self, key: Key, value: Value) -> Result<(), ProcError>;

    /// Writes `value` under a key that must not exist yet ([`ProcError::DuplicateKey`]).
    fn insert(&mut self, key: Key, value: Value) -> Result<(), ProcError>;

    /// Deletes `key`, returning its old value.
    fn delete(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError>;

    /// Up to `limit` entries with `start <= key < end` in `order`. The whole range must lie
    /// under one declared prefix (so concurrent inserts into it conflict with this scan).
    fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        order: ScanOrder,
    ) -> Result<Vec<(Key, Value)>, ProcError>;

    /// Reads `key` as a little-endian i64 (absent = 0).
    fn get_i64(&mut self, key: &[u8]) -> Result<i64, ProcError> {
        let mut value = Ok(0);
        self.get_with(key, &mut |v| value = v.map_or(Ok(0), |v| decode_i64(key, v)))?;
        value
    }

    /// Adds `delta` to the integer under `key` (absent = 0) and returns the new value.
    fn add_i64(&mut self, key: &[u8], delta: i64) -> Result<i64, ProcError> {
        require_write(self.keys(), key, self.shard())?;
        let new = self.get_i64(key)?.wrapping_add(delta);
        self.put(key.to_vec(), new.to_le_bytes().to_vec())?;
        Ok(new)
    }

    /// Replaces the value under `key` with `new` only if it currently equals `expected`
    /// (`None`: absent). Returns whether it did.
    fn update_if(&mut self, key: &[u8], expected: Option<&[u8]>, new: Value) -> Result<bool, ProcError> {
        require_write(self.keys(), key, self.shard())?;
        if self.get(key)?.as_deref() != expected {
            return Ok(false);
        }
        self.put(key.to_vec(), new)?;
        Ok(true)
    }
}

/// Checks that `keys` lets a procedure access `key` as `needed` on `shard`: a read needs the
/// key (or a prefix of it) declared, a write needs it declared as a write. Every [`ProcCtx`]
/// implementation applies this rule.
pub fn check_access(keys: &KeySet, key: &[u8], needed: Access, shard: ShardId) -> Result<(), ProcError> {
    match (keys.access(key), needed) {
        (Some(Access::Write), _) | (Some(Access::Read), Access::Read) => Ok(()),
        (Some(Access::Read), Access::Write) | (None, _) => {
            Err(ProcError::KeyNotDeclared { key: key.to_vec(), access: needed, shard })
        }
    }
}

fn require_write(keys: &KeySet, key: &[u8], shard: ShardId) -> Result<(), ProcError> {
    check_access(keys, key, Access::Write, shard)
}

/// Checks that the scan range `start..end` lies under one prefix declared in `keys` (see
/// [`ProcCtx::scan`]).
pub fn check_scan(keys: &KeySet, start: &[u8], end: &[u8], shard: ShardId) -> Result<(), ProcError> {
    let covered = keys.entries().any(|(prefix, _)| {
        start.starts_with(prefix) && (end.starts_with(prefix) || prefix_successor(prefix).as_deref() == Some(end))
    });
    if covered {
        Ok(())
    } else {
        Err(ProcError::KeyNotDeclared { key: start.to_vec(), access: Access::Read, shard })
    }
}

/// Procedures by name, shared by every shard of a server.
#[derive(Clone, Default)]
pub struct Registry {
    procedures: Map<String, Arc<dyn Procedure>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `procedure` under `name`, replacing any previous one.
    pub fn register(&mut self, name: &str, procedure: Arc<dyn Procedure>) {
        self.procedures.insert(name.to_string(), procedure);
    }

    /// The procedure registered under `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Procedure>> {
        self.procedures.get(name).cloned()
    }

    /// True when `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.procedures.contains_key(name)
    }

    /// Runs `name` on `store` restricted to `keys`; on error every write is rolled back.
    pub fn execute(
        &self,
        name: &str,
        args: &[u8],
        store: &mut Store,
        keys: &KeySet,
        shard: ShardId,
    ) -> Result<Vec<u8>, ProcError> {
        TxnCtx::new(store, keys, shard).execute(self.procedure(name)?, args)
    }

    /// As [`Registry::execute`] for a transaction at timestamp `ts`: its writes keep the
    /// values they replace for reads at snapshots below `ts` (DESIGN.md rule 23).
    pub fn execute_at(
        &self,
        name: &str,
        args: &[u8],
        store: &mut Store,
        keys: &KeySet,
        shard: ShardId,
        ts: Timestamp,
    ) -> Result<Vec<u8>, ProcError> {
        TxnCtx::at(store, keys, shard, ts).execute(self.procedure(name)?, args)
    }

    /// Runs `name` read-only on `store` as of snapshot `ts`, restricted to `keys`: a write is
    /// [`ProcError::WriteInReadOnly`], a snapshot older than the versions kept
    /// [`ProcError::SnapshotTooOld`]. The answer lists the ranges the procedure scanned.
    pub fn read_at(
        &self,
        name: &str,
        args: &[u8],
        store: &Store,
        keys: &KeySet,
        shard: ShardId,
        ts: Timestamp,
    ) -> crate::snapshot::SnapshotAnswer {
        let ctx =
            self.procedure(name).and_then(|p| Ok((p, crate::snapshot::SnapshotCtx::new(store, keys, shard, ts)?)));
        match ctx {
            Ok((procedure, mut ctx)) => {
                let result = ctx.run(procedure, args);
                crate::snapshot::SnapshotAnswer { result, scanned: ctx.into_scanned() }
            }
            Err(e) => crate::snapshot::SnapshotAnswer { result: Err(e), scanned: Vec::new() },
        }
    }

    fn procedure(&self, name: &str) -> Result<&dyn Procedure, ProcError> {
        let procedure = self.procedures.get(name).ok_or_else(|| ProcError::UnknownProcedure(name.to_string()))?;
        Ok(procedure.as_ref())
    }

    /// What running `name` on `store` restricted to `keys` would return, leaving `store` as
    /// it was (every write is rolled back): a leader's early answer (DESIGN.md rule 21).
    pub fn dry_run(
        &self,
        name: &str,
        args: &[u8],
        store: &mut Store,
        keys: &KeySet,
        shard: ShardId,
    ) -> Result<Vec<u8>, ProcError> {
        let procedure = self.procedure(name)?;
        let mut ctx = TxnCtx::new(store, keys, shard);
        let result = ctx.execute(procedure, args);
        ctx.rollback();
        result
    }
}

/// One transaction's view of one shard's store: Luigi's [`ProcCtx`], which reads and writes
/// the store in place and keeps an undo log.
pub struct TxnCtx<'a> {
    store: &'a mut Store,
    keys: &'a KeySet,
    shard: ShardId,
    /// The transaction's timestamp when its writes keep versions (rule 23).
    at: Option<Timestamp>,
    undo: Vec<Undo>,
}

/// How to undo one write: the key's value before it, and whether it kept a version.
struct Undo {
    key: Key,
    old: Option<Value>,
    versioned: bool,
}

impl<'a> TxnCtx<'a> {
    /// A transaction's view of `store` (shard `shard`'s) restricted to `keys`.
    pub fn new(store: &'a mut Store, keys: &'a KeySet, shard: ShardId) -> Self {
        Self { store, keys, shard, at: None, undo: Vec::new() }
    }

    /// As [`TxnCtx::new`] for a transaction at timestamp `ts`, whose writes keep versions.
    pub fn at(store: &'a mut Store, keys: &'a KeySet, shard: ShardId, ts: Timestamp) -> Self {
        Self { store, keys, shard, at: Some(ts), undo: Vec::new() }
    }

    /// Runs `procedure` here; on error every write it made is rolled back.
    pub fn execute(&mut self, procedure: &dyn Procedure, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        self.store.warm(self.keys.entries().map(|(k, _)| k.as_slice()));
        let result = procedure.execute(self, args);
        if result.is_err() {
            self.rollback();
        }
        result
    }

    fn check(&self, key: &[u8], needed: Access) -> Result<(), ProcError> {
        check_access(self.keys, key, needed, self.shard)
    }

    /// The writes made through this context so far, as they stand in the store: each key
    /// written (once, in the order first written) with its value now (`None`: deleted). A
    /// protocol that buffers writes (the baselines) takes them here, then calls
    /// [`TxnCtx::rollback`].
    pub fn writes(&self) -> Vec<(Key, Option<Value>)> {
        let mut seen = crate::Map::default();
        let mut out = Vec::new();
        for Undo { key, .. } in &self.undo {
            if seen.insert(key.as_slice(), ()).is_none() {
                out.push((key.clone(), self.store.get(key).cloned()));
            }
        }
        out
    }

    /// Undoes every write made through this context (a caller that ran a procedure through a
    /// wrapping context, e.g. one recording accesses, rolls back here).
    pub fn rollback(&mut self) {
        while let Some(Undo { key, old, versioned }) = self.undo.pop() {
            if versioned {
                self.store.unrecord(&key, self.at.expect("only a timestamped write keeps a version"));
            }
            match old {
                Some(v) => self.store.put(key, v),
                None => self.store.delete(&key),
            };
        }
    }
}

impl ProcCtx for TxnCtx<'_> {
    fn shard(&self) -> ShardId {
        self.shard
    }

    fn keys(&self) -> &KeySet {
        self.keys
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError> {
        self.check(key, Access::Read)?;
        Ok(self.store.get(key).cloned())
    }

    fn get_with(&mut self, key: &[u8], read: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), ProcError> {
        self.check(key, Access::Read)?;
        read(self.store.get(key).map(Vec::as_slice));
        Ok(())
    }

    fn put(&mut self, key: Key, value: Value) -> Result<(), ProcError> {
        self.check(&key, Access::Write)?;
        let (old, versioned) = match self.at {
            Some(ts) => {
                let replaced = self.store.put_at(&key, value, ts);
                (replaced.old, replaced.versioned)
            }
            None => (self.store.put_slice(&key, value), false),
        };
        self.undo.push(Undo { key, old, versioned });
        Ok(())
    }

    fn insert(&mut self, key: Key, value: Value) -> Result<(), ProcError> {
        self.check(&key, Access::Write)?;
        if self.store.get(&key).is_some() {
            return Err(ProcError::DuplicateKey(key));
        }
        self.put(key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError> {
        self.check(key, Access::Write)?;
        let (old, versioned) = match self.at {
            Some(ts) => {
                let replaced = self.store.delete_at(key, ts);
                (replaced.old, replaced.versioned)
            }
            None => (self.store.delete(key), false),
        };
        if old.is_some() {
            self.undo.push(Undo { key: key.to_vec(), old: old.clone(), versioned });
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

/// The smallest key greater than every key that starts with `prefix` (`None` if there is none).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

fn decode_i64(key: &[u8], v: &[u8]) -> Result<i64, ProcError> {
    let bytes: [u8; 8] = v.try_into().map_err(|_| ProcError::NotAnInteger(key.to_vec()))?;
    Ok(i64::from_le_bytes(bytes))
}

#[cfg(test)]
pub(crate) mod tests;
