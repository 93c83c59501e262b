//! Check 2: replaying the ordered transactions through a sequential model.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use luigi_store::{Key, Store, Value};
use luigi_txn::client_core::TxnOutcome;
use luigi_txn::msg::TxnError;
use luigi_txn::procedure::Registry;
use luigi_txn::types::{Access, ShardId, ShardPiece, Timestamp};
use luigi_workloads::procedures::MicroOutput;

use super::History;
use crate::violation::{Violation, ViolationKind};
use luigi_workloads::micro::{is_micro, micro_ops};

/// A conflict edge of the serialization graph: `from` precedes `to` (indexes into history).
pub(super) type Edge = (usize, usize);

#[derive(Default)]
struct KeyState {
    last_write: Option<usize>,
    reads_since_write: Vec<usize>,
}

/// Check 2, from the `initial` stores (one per shard, like `stores`); returns the conflict
/// edges.
pub(super) fn replay(
    history: &History,
    ordered: &[usize],
    orphans: &[(usize, Timestamp)],
    registry: &Registry,
    initial: &[Store],
    stores: &[&Store],
) -> Result<Vec<Edge>, Violation> {
    let mut order: Vec<(Timestamp, usize)> = ordered
        .iter()
        .map(|&i| (history.txns[i].ts().expect("ordered"), i))
        .chain(orphans.iter().map(|&(i, ts)| (ts, i)))
        .collect();
    // A snapshot read comes after the read-write transactions at its timestamp (rule 23).
    order.sort_by_key(|&(ts, i)| (ts, history.txns[i].read_only(), history.txns[i].id));
    if initial.len() != stores.len() {
        let msg = format!("{} initial stores for {} shards", initial.len(), stores.len());
        return Err(Violation::new(ViolationKind::Invariant, msg));
    }
    let mut r = Replay { history, registry, model: initial.to_vec(), keys: HashMap::new(), edges: Vec::new() };
    for &(ts, i) in &order {
        r.replay_txn(ts, i)?;
    }
    r.compare_stores(stores)?;
    Ok(r.edges)
}

/// The sequential model as the replay goes, and the conflicts it found.
struct Replay<'h> {
    history: &'h History,
    registry: &'h Registry,
    /// Each shard's store after the transactions replayed so far.
    model: Vec<Store>,
    keys: HashMap<(ShardId, Key), KeyState>,
    edges: Vec<Edge>,
}

impl Replay<'_> {
    /// Replays transaction `i` (at `ts`) on each of its participants, comparing the answer
    /// it got (an orphan has none) with the model's, and notes its conflicts.
    fn replay_txn(&mut self, ts: Timestamp, i: usize) -> Result<(), Violation> {
        let history = self.history;
        let rec = &history.txns[i];
        let results = match rec.answers.first().map(|a| &a.outcome) {
            Some(TxnOutcome::Ordered { results, .. }) => Some(results),
            Some(TxnOutcome::Rejected(_) | TxnOutcome::Unknown(_)) => {
                unreachable!("ordered transactions have an ordered outcome")
            }
            None => None, // an orphan: no answer to compare
        };
        for piece in &rec.pieces {
            let shard = piece.shard;
            let expected = self
                .registry
                .execute(&rec.procedure, &rec.args, &mut self.model[shard as usize], &piece.keys, shard)
                .map_err(TxnError::from);
            let got = match results {
                Some(results) => {
                    results.iter().find(|(s, _)| *s == shard).map(|(_, r)| r).expect("participants checked")
                }
                None => &expected,
            };
            if *got != expected {
                let mut msg = format!(
                    "txn {:?} (ts {ts}) on shard {shard}: the leader answered {}, but the \
                     sequential replay in timestamp order gives {}.\n  its operations: {}",
                    rec.id,
                    render_result(&rec.procedure, got),
                    render_result(&rec.procedure, &expected),
                    render_args(&rec.procedure, &rec.args),
                );
                msg.push_str(&explain_reads(history, &rec.procedure, got, &expected));
                msg.push_str(&predecessors(history, &self.keys, shard, piece));
                return Err(Violation::new(ViolationKind::ResultMismatch, msg));
            }
            self.note_conflicts(i, piece);
        }
        Ok(())
    }

    /// The conflict edges from transaction `i`'s `piece`: after the last write of each key it
    /// touches, and (for a write) after the reads since.
    fn note_conflicts(&mut self, i: usize, piece: &ShardPiece) {
        for (key, access) in piece.keys.entries() {
            let state = self.keys.entry((piece.shard, key.clone())).or_default();
            match access {
                Access::Read => {
                    if let Some(w) = state.last_write {
                        self.edges.push((w, i));
                    }
                    state.reads_since_write.push(i);
                }
                Access::Write => {
                    if let Some(w) = state.last_write {
                        self.edges.push((w, i));
                    }
                    self.edges.extend(state.reads_since_write.drain(..).map(|r| (r, i)));
                    state.last_write = Some(i);
                }
            }
        }
    }

    /// Every leader's final store is the model's.
    fn compare_stores(&self, stores: &[&Store]) -> Result<(), Violation> {
        for (shard, (model, actual)) in self.model.iter().zip(stores).enumerate() {
            if model != *actual {
                let shard = shard as ShardId;
                let mut msg = format!(
                    "shard {shard}: the leader's final store (hash {:#x}, {} keys) differs from the \
                     sequential replay in timestamp order (hash {:#x}, {} keys); {}",
                    actual.state_hash(),
                    actual.len(),
                    model.state_hash(),
                    model.len(),
                    first_difference(model, actual),
                );
                if let Some((key, _)) = differing_key(model, actual) {
                    if let Some(w) = self.keys.get(&(shard, key)).and_then(|s| s.last_write) {
                        let w = &self.history.txns[w];
                        let _ = write!(msg, "; last writer in timestamp order: {:?} at ts {:?}", w.id, w.ts());
                    }
                }
                return Err(Violation::new(ViolationKind::StateMismatch, msg));
            }
        }
        Ok(())
    }
}

/// Describes, for a mismatch, the transactions before this one on its keys.
fn predecessors(
    history: &History,
    keys: &HashMap<(ShardId, Key), KeyState>,
    shard: ShardId,
    piece: &ShardPiece,
) -> String {
    let mut s = String::new();
    for (key, access) in piece.keys.entries() {
        let Some(state) = keys.get(&(shard, key.clone())) else {
            let _ = write!(s, "\n  key {}: first access ({access:?})", show_key(key));
            continue;
        };
        let w = state.last_write.map(|w| {
            let w = &history.txns[w];
            format!("{:?}@ts{}", w.id, w.ts().unwrap_or(0))
        });
        let _ = write!(
            s,
            "\n  key {} ({access:?}): last write before it in ts order: {}; reads since: {}",
            show_key(key),
            w.unwrap_or_else(|| "none".into()),
            state.reads_since_write.len()
        );
    }
    s
}

/// For micro transactions, names the writer of every value read differently by the leader and
/// by the replay (write values are unique per transaction and operation).
fn explain_reads(
    history: &History,
    procedure: &str,
    got: &Result<Vec<u8>, TxnError>,
    expected: &Result<Vec<u8>, TxnError>,
) -> String {
    let decode = |r: &Result<Vec<u8>, TxnError>| match r {
        Ok(bytes) if is_micro(procedure) => postcard::from_bytes::<MicroOutput>(bytes).ok(),
        _ => None,
    };
    let (Some(got), Some(expected)) = (decode(got), decode(expected)) else {
        return String::new();
    };
    let mut writers: HashMap<u64, (usize, usize)> = HashMap::new();
    for (i, rec) in history.txns.iter().enumerate() {
        if let Some(ops) = micro_ops(&rec.procedure, &rec.args) {
            for (op, o) in ops.iter().enumerate() {
                if let Some(v) = o.write {
                    writers.insert(v, (i, op));
                }
            }
        }
    }
    let who = |v: Option<u64>| match v {
        None => "nothing (absent)".to_string(),
        Some(v) => match writers.get(&v) {
            Some(&(i, op)) => {
                let w = &history.txns[i];
                let outcome = match w.answers.first().map(|a| &a.outcome) {
                    Some(TxnOutcome::Ordered { ts, .. }) => format!("ordered at ts {ts}"),
                    Some(TxnOutcome::Rejected(why)) => format!("answered Rejected ({why})"),
                    Some(TxnOutcome::Unknown(why)) => format!("answered Unknown ({why})"),
                    None => "never answered".to_string(),
                };
                format!("{v:#x}, written by {:?} op {op} ({outcome})", w.id)
            }
            None => format!("{v:#x}, which no transaction wrote"),
        },
    };
    let mut s = String::new();
    for ((key, g), (_, e)) in got.iter().zip(&expected) {
        if g != e {
            let _ = write!(s, "\n  read of key {key}: leader saw {}; replay saw {}", who(*g), who(*e));
        }
    }
    s
}

pub(crate) fn show_key(key: &[u8]) -> String {
    // Micro keys are table 1 followed by one big-endian u64.
    if key.len() == 10 && key[..2] == [0, 1] {
        let mut n = [0u8; 8];
        n.copy_from_slice(&key[2..]);
        return format!("micro#{}", u64::from_be_bytes(n));
    }
    format!("{key:?}")
}

fn render_result(procedure: &str, r: &Result<Vec<u8>, TxnError>) -> String {
    match r {
        Ok(bytes) if is_micro(procedure) => match postcard::from_bytes::<MicroOutput>(bytes) {
            Ok(reads) => {
                let reads: Vec<String> = reads
                    .iter()
                    .map(|(k, v)| match v {
                        Some(v) => format!("r{k}={v:#x}"),
                        None => format!("r{k}=absent"),
                    })
                    .collect();
                format!("Ok({})", reads.join(" "))
            }
            Err(_) => format!("Ok({bytes:?})"),
        },
        Ok(bytes) => format!("Ok({bytes:?})"),
        Err(e) => format!("Err({e})"),
    }
}

fn render_args(procedure: &str, args: &[u8]) -> String {
    if let Some(ops) = micro_ops(procedure, args) {
        return ops
            .iter()
            .map(|o| match o.write {
                Some(v) => format!("w{}={v:#x}", o.key),
                None => format!("r{}", o.key),
            })
            .collect::<Vec<_>>()
            .join(" ");
    }
    format!("{procedure}({args:?})")
}

/// A key whose values differ between two stores, with both values.
type Difference = (Key, (Option<Value>, Option<Value>));

fn differing_key(a: &Store, b: &Store) -> Option<Difference> {
    let mut all: BTreeMap<&Key, ()> = BTreeMap::new();
    for (k, _) in a.iter().chain(b.iter()) {
        all.insert(k, ());
    }
    all.into_keys().find_map(|k| {
        let (x, y) = (a.get(k), b.get(k));
        (x != y).then(|| (k.clone(), (x.cloned(), y.cloned())))
    })
}

fn first_difference(model: &Store, actual: &Store) -> String {
    let show = |v: &Option<Vec<u8>>| match v {
        None => "absent".to_string(),
        Some(v) if v.len() == 8 => {
            let mut n = [0u8; 8];
            n.copy_from_slice(v);
            format!("{:#x}", u64::from_le_bytes(n))
        }
        Some(v) => format!("{v:?}"),
    };
    match differing_key(model, actual) {
        Some((key, (m, a))) => {
            format!("first differing key {}: replay has {}, leader has {}", show_key(&key), show(&m), show(&a))
        }
        None => "no differing key found".into(),
    }
}
