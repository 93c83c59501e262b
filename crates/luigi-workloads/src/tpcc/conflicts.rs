//! What the coarse declarations of `docs/TPCC.md` cost: a generated stream of transactions
//! is executed in order on populated stores of every shard through a [`RecordingCtx`], and
//! each transaction is compared with the `window - 1` transactions before it (the ones that
//! could be in flight with it):
//!
//! - on **declared** keys, by the leader's rule: the same declared key (a row or a prefix,
//!   compared as bytes) in both, written by at least one;
//! - on the rows **actually touched**: the same row read or written by both, written by at
//!   least one. A scan counts the rows it returned (gaps and phantoms are not counted, so
//!   this is a lower bound of what any exact scheme would have to order).
//!
//! The difference between the two counts is what declaring units instead of rows adds.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use luigi_store::{Key, ScanOrder, Store, Value};
use luigi_txn::procedure::{ProcCtx, ProcError, TxnCtx};
use luigi_txn::types::{Access, KeySet, ShardId};

use super::generator::TpccGenerator;
use super::procedures::{lookup, Env};
use super::TpccWorkload;
use crate::{TxnGenerator, TxnSpec, Workload};

/// A context that records the keys a procedure actually reads and writes through `inner`.
pub struct RecordingCtx<'a> {
    inner: &'a mut dyn ProcCtx,
    /// Every key touched, with the strongest access.
    pub touched: HashMap<Key, Access>,
}

impl<'a> RecordingCtx<'a> {
    /// Records what goes through `inner`.
    pub fn new(inner: &'a mut dyn ProcCtx) -> Self {
        Self { inner, touched: HashMap::new() }
    }

    fn note(&mut self, key: &[u8], access: Access) {
        merge(&mut self.touched, key, access);
    }
}

fn merge(map: &mut HashMap<Key, Access>, key: &[u8], access: Access) {
    match map.get_mut(key) {
        Some(a) => *a = if access == Access::Write { Access::Write } else { *a },
        None => {
            map.insert(key.to_vec(), access);
        }
    }
}

impl ProcCtx for RecordingCtx<'_> {
    fn shard(&self) -> ShardId {
        self.inner.shard()
    }

    fn keys(&self) -> &KeySet {
        self.inner.keys()
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError> {
        let value = self.inner.get(key)?;
        self.note(key, Access::Read);
        Ok(value)
    }

    fn put(&mut self, key: Key, value: Value) -> Result<(), ProcError> {
        self.note(&key, Access::Write);
        self.inner.put(key, value)
    }

    fn insert(&mut self, key: Key, value: Value) -> Result<(), ProcError> {
        self.note(&key, Access::Write);
        self.inner.insert(key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Value>, ProcError> {
        self.note(key, Access::Write);
        self.inner.delete(key)
    }

    fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        order: ScanOrder,
    ) -> Result<Vec<(Key, Value)>, ProcError> {
        let rows = self.inner.scan(start, end, limit, order)?;
        for (key, _) in &rows {
            self.note(key, Access::Read);
        }
        Ok(rows)
    }
}

/// Conflicts of one procedure's transactions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcedureConflicts {
    /// Transactions of this procedure.
    pub txns: u64,
    /// Of which conflict with an earlier transaction of the window on declared keys.
    pub declared: u64,
    /// Of which conflict with an earlier transaction of the window on touched rows.
    pub actual: u64,
}

/// The result of [`measure_conflicts`].
#[derive(Clone, Debug, PartialEq)]
pub struct ConflictStats {
    /// Transactions executed (each StockLevel step counts as one).
    pub txns: u64,
    /// The window: each transaction is compared with the `window - 1` before it.
    pub window: usize,
    /// Transactions that conflict with one of them on declared keys.
    pub declared: u64,
    /// Transactions that conflict with one of them on the rows actually touched.
    pub actual: u64,
    /// Transactions that conflict on touched rows with one whose declarations they do not
    /// conflict with: 0 as long as every procedure declares each table at the same level
    /// (a touched row lies under a declared key of that level in both).
    pub undetected: u64,
    /// The same counts per procedure.
    pub by_procedure: BTreeMap<String, ProcedureConflicts>,
}

impl ConflictStats {
    /// Share of transactions conflicting on declared keys.
    pub fn declared_share(&self) -> f64 {
        self.declared as f64 / self.txns.max(1) as f64
    }

    /// Share of transactions conflicting on touched rows.
    pub fn actual_share(&self) -> f64 {
        self.actual as f64 / self.txns.max(1) as f64
    }
}

/// Two footprints conflict: a common key, written by at least one.
fn conflict(a: &HashMap<Key, Access>, b: &HashMap<Key, Access>) -> bool {
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    small.iter().any(|(k, x)| large.get(k).is_some_and(|y| x.conflicts(*y)))
}

fn declared(spec: &TxnSpec) -> HashMap<Key, Access> {
    let mut map = HashMap::new();
    for piece in &spec.pieces {
        for (key, access) in piece.keys.entries() {
            merge(&mut map, key, access);
        }
    }
    map
}

/// Executes `txns` transactions of `workload`'s generator seeded with `seed` on its
/// population (every shard), in order, and counts the transactions that conflict with one
/// of the `window - 1` before them, on declared keys and on touched rows (see the module
/// documentation). A transaction that aborts (NewOrder's 1 %) still counts with what it
/// declared and touched. Errors on any failure other than a user abort.
pub fn measure_conflicts(
    workload: &TpccWorkload,
    seed: u64,
    txns: usize,
    window: usize,
) -> Result<ConflictStats, String> {
    let config = workload.config().clone();
    let shards = workload.shards();
    let env = Arc::new(Env::new(config.clone(), shards));
    let mut stores: Vec<Store> = (0..shards).map(|s| workload.populate(config.seed, s)).collect();
    let mut generator = TpccGenerator::new(config, workload.load().clone(), shards, seed);
    let mut stats =
        ConflictStats { txns: 0, window, declared: 0, actual: 0, undetected: 0, by_procedure: BTreeMap::new() };
    let mut recent: VecDeque<(HashMap<Key, Access>, HashMap<Key, Access>)> = VecDeque::new();
    let mut pending: Option<TxnSpec> = None;
    for _ in 0..txns {
        let spec = match pending.take() {
            Some(spec) => spec,
            None => generator.next_txn().map_err(|e| e.0)?,
        };
        let procedure = lookup(&spec.procedure, &env).ok_or_else(|| format!("unknown procedure {}", spec.procedure))?;
        let mut touched = HashMap::new();
        let mut outputs = Vec::new();
        let mut aborted = false;
        for piece in &spec.pieces {
            let store = stores.get_mut(piece.shard as usize).ok_or_else(|| format!("no shard {}", piece.shard))?;
            let mut inner = TxnCtx::new(store, &piece.keys, piece.shard);
            let (result, seen) = {
                let mut recording = RecordingCtx::new(&mut inner);
                let result = procedure.execute(&mut recording, &spec.args);
                (result, recording.touched)
            };
            for (key, access) in seen {
                merge(&mut touched, &key, access);
            }
            match result {
                Ok(out) => outputs.push((piece.shard, out)),
                Err(ProcError::UserAbort(_)) => {
                    inner.rollback();
                    aborted = true;
                }
                Err(e) => return Err(format!("{} on shard {}: {e}", spec.procedure, piece.shard)),
            }
        }
        if aborted && !outputs.is_empty() {
            return Err(format!("{}: some participants aborted, others committed", spec.procedure));
        }
        let declared = declared(&spec);
        let d = recent.iter().any(|(prev, _)| conflict(prev, &declared));
        let a = recent.iter().any(|(_, prev)| conflict(prev, &touched));
        let undetected = recent
            .iter()
            .any(|(p_declared, p_touched)| conflict(p_touched, &touched) && !conflict(p_declared, &declared));
        stats.undetected += u64::from(undetected);
        let entry = stats.by_procedure.entry(spec.procedure.clone()).or_default();
        entry.txns += 1;
        entry.declared += u64::from(d);
        entry.actual += u64::from(a);
        stats.txns += 1;
        stats.declared += u64::from(d);
        stats.actual += u64::from(a);
        if window > 1 {
            if recent.len() + 1 >= window {
                recent.pop_front();
            }
            recent.push_back((declared, touched));
        }
        if !aborted {
            pending = generator.next_step(&spec, &outputs).map_err(|e| e.0)?;
        }
    }
    Ok(stats)
}
