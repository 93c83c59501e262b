//! The checker: given every transaction's dispatch, answer(s) and final timestamp, and every
//! shard's final store, decide whether the run was correct.
//!
//! 1. Every submitted transaction was answered exactly once (and not `Failed`).
//! 2. Replaying every ordered transaction in (final timestamp, id) order through a plain
//!    sequential model (one [`Store`] per shard, the same [`Registry`], the same key sets)
//!    gives byte-for-byte the answers the clients saw and the stores the leaders hold.
//!    Rejected transactions are left out of the replay, so a rejected transaction that
//!    left a trace shows up as a store mismatch.
//! 3. Real time: when A was answered before B was dispatched and they share a participant
//!    shard, `ts(A) < ts(B)` (the watermark rule guarantees it); optionally for every pair.
//! 4. Strict serializability: the per-key conflict order of the replay plus the real-time
//!    order has no cycle, so one serial order explains every answer and respects real time.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;

use luigi_proto::coordinator::TxnOutcome;
use luigi_proto::msg::TxnError;
use luigi_proto::procedure::Registry;
use luigi_proto::procedures::MicroOutput;
use luigi_proto::types::{Access, ShardId, ShardPiece, Timestamp, TxnId};
use luigi_store::{Key, Store, Value};

use crate::violation::{Violation, ViolationKind};
use luigi_workloads::micro::{is_micro, micro_ops};

/// A point of the run: virtual time, and the simulator's step counter that orders events at
/// the same virtual time. "A before B" means `A < B` in (us, step) order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Moment {
    /// Virtual time, µs.
    pub us: u64,
    /// Global step counter.
    pub step: u64,
}

impl Moment {
    /// The moment `us` (step 0), for hand-made histories.
    pub fn at(us: u64) -> Self {
        Self { us, step: 0 }
    }
}

/// An answer a client got.
#[derive(Clone, Debug, PartialEq)]
pub struct AnswerRecord {
    /// When the coordinator reported it.
    pub at: Moment,
    /// What it reported.
    pub outcome: TxnOutcome,
    /// Dispatch attempts.
    pub attempts: u32,
}

/// One submitted transaction and what became of it.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnRecord {
    /// Its id.
    pub id: TxnId,
    /// Procedure name.
    pub procedure: String,
    /// Procedure arguments.
    pub args: Vec<u8>,
    /// Participants with their key sets.
    pub pieces: Vec<ShardPiece>,
    /// When it was submitted to the coordinator (dispatched).
    pub dispatched: Moment,
    /// Every answer the client got (exactly one in a correct run).
    pub answers: Vec<AnswerRecord>,
}

impl TxnRecord {
    /// Its key set on `shard`, if `shard` participates.
    pub fn piece(&self, shard: ShardId) -> Option<&luigi_proto::types::KeySet> {
        self.pieces.iter().find(|p| p.shard == shard).map(|p| &p.keys)
    }

    /// Final timestamp, if it was ordered.
    pub fn ts(&self) -> Option<Timestamp> {
        match self.answers.first().map(|a| &a.outcome) {
            Some(TxnOutcome::Ordered { ts, .. }) => Some(*ts),
            _ => None,
        }
    }
}

/// Every transaction of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// In submission order.
    pub txns: Vec<TxnRecord>,
}

/// Optional checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckOptions {
    /// Require `ts(A) < ts(B)` for every real-time ordered pair, not only for pairs that
    /// share a shard.
    pub realtime_across_shards: bool,
}

/// What the checker counted in a correct history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckSummary {
    /// Transactions ordered (committed or aborted by their procedure).
    pub ordered: u64,
    /// Ordered with every participant's procedure succeeding.
    pub committed: u64,
    /// Ordered with some participant's procedure failing (its writes undone there).
    pub proc_aborted: u64,
    /// Rejected at admission.
    pub rejected: u64,
    /// Largest final timestamp.
    pub max_ts: Timestamp,
    /// Conflict edges in the serialization graph.
    pub conflict_edges: u64,
}

/// Checks `history` against the leaders' final `stores` (indexed by shard id) using the
/// procedures of `registry`.
pub fn check(
    history: &History,
    registry: &Registry,
    stores: &[&Store],
    options: CheckOptions,
) -> Result<CheckSummary, Violation> {
    check_with_orphans(history, &BTreeMap::new(), registry, stores, options)
}

/// [`check`] for a run in which some clients died: `orphans` names the transactions that
/// were never answered because their coordinator died, each with the final timestamp it was
/// executed at (`None`: never ordered, so it must have left no trace). An executed orphan
/// takes part in the replay (its effects must be in the stores, in timestamp order; there
/// is no answer to compare) and in the conflict order; having no answer, it is left out of
/// the real-time checks.
pub fn check_with_orphans(
    history: &History,
    orphans: &BTreeMap<TxnId, Option<Timestamp>>,
    registry: &Registry,
    stores: &[&Store],
    options: CheckOptions,
) -> Result<CheckSummary, Violation> {
    let mut summary = CheckSummary::default();
    let ordered = answered_exactly_once(history, orphans, stores.len(), &mut summary)?;
    let executed_orphans: Vec<(usize, Timestamp)> = history
        .txns
        .iter()
        .enumerate()
        .filter_map(|(i, rec)| orphans.get(&rec.id).copied().flatten().map(|ts| (i, ts)))
        .collect();
    let graph = replay(history, &ordered, &executed_orphans, registry, stores)?;
    let is_orphan = |i: usize| orphans.contains_key(&history.txns[i].id);
    let graph: Vec<Edge> = graph.into_iter().filter(|&(a, b)| !is_orphan(a) && !is_orphan(b)).collect();
    summary.conflict_edges = graph.len() as u64;
    summary.max_ts = ordered.iter().map(|&i| history.txns[i].ts().expect("ordered")).max().unwrap_or(0);
    real_time(history, &ordered, options)?;
    serializable(history, &ordered, &graph)?;
    Ok(summary)
}

/// Check 1; returns the indexes of the ordered transactions.
fn answered_exactly_once(
    history: &History,
    orphans: &BTreeMap<TxnId, Option<Timestamp>>,
    shards: usize,
    summary: &mut CheckSummary,
) -> Result<Vec<usize>, Violation> {
    let mut ids = HashSet::new();
    let mut ordered = Vec::new();
    for (i, rec) in history.txns.iter().enumerate() {
        if !ids.insert(rec.id) {
            return Err(Violation::new(
                ViolationKind::Invariant,
                format!("transaction id {:?} was submitted twice", rec.id),
            ));
        }
        if orphans.contains_key(&rec.id) {
            if !rec.answers.is_empty() {
                return Err(Violation::new(
                    ViolationKind::Invariant,
                    format!("txn {:?} of a dead client was answered: {:?}", rec.id, rec.answers[0].outcome),
                ));
            }
            continue;
        }
        let answer = match rec.answers.as_slice() {
            [] => {
                return Err(Violation::new(
                    ViolationKind::Unanswered,
                    format!("txn {:?} (dispatched at {} us) was never answered", rec.id, rec.dispatched.us),
                ))
            }
            [one] => one,
            [first, second, ..] => {
                return Err(Violation::new(
                    ViolationKind::DuplicateAnswer,
                    format!(
                        "txn {:?} was answered {} times: first {:?} at {} us, then {:?} at {} us",
                        rec.id,
                        rec.answers.len(),
                        first.outcome,
                        first.at.us,
                        second.outcome,
                        second.at.us
                    ),
                ))
            }
        };
        if answer.at < rec.dispatched {
            return Err(Violation::new(
                ViolationKind::Invariant,
                format!("txn {:?} answered at {:?} before its dispatch at {:?}", rec.id, answer.at, rec.dispatched),
            ));
        }
        for piece in &rec.pieces {
            if piece.shard as usize >= shards {
                return Err(Violation::new(
                    ViolationKind::Invariant,
                    format!("txn {:?} names shard {} but there are {shards} shards", rec.id, piece.shard),
                ));
            }
        }
        match &answer.outcome {
            TxnOutcome::Ordered { ts, results } => {
                let mut got: Vec<ShardId> = results.iter().map(|(s, _)| *s).collect();
                let mut want: Vec<ShardId> = rec.pieces.iter().map(|p| p.shard).collect();
                got.sort_unstable();
                want.sort_unstable();
                if got != want {
                    return Err(Violation::new(
                        ViolationKind::ResultMismatch,
                        format!(
                            "txn {:?} has results from shards {got:?} but its participants \
                             are {want:?}",
                            rec.id
                        ),
                    ));
                }
                if *ts == 0 {
                    return Err(Violation::new(
                        ViolationKind::Invariant,
                        format!("txn {:?} was ordered at timestamp 0", rec.id),
                    ));
                }
                summary.ordered += 1;
                if answer.outcome.is_committed() {
                    summary.committed += 1;
                } else {
                    summary.proc_aborted += 1;
                }
                ordered.push(i);
            }
            TxnOutcome::Rejected(_) => summary.rejected += 1,
            // A shell records only definite answers (an unknown one must be resolved).
            TxnOutcome::Unknown(why) => {
                return Err(Violation::new(
                    ViolationKind::Failed,
                    format!("txn {:?} ended unknown after {} attempts: {why}", rec.id, answer.attempts),
                ))
            }
        }
    }
    Ok(ordered)
}

/// A conflict edge of the serialization graph: `from` precedes `to` (indexes into history).
type Edge = (usize, usize);

#[derive(Default)]
struct KeyState {
    last_write: Option<usize>,
    reads_since_write: Vec<usize>,
}

/// Check 2; returns the conflict edges.
fn replay(
    history: &History,
    ordered: &[usize],
    orphans: &[(usize, Timestamp)],
    registry: &Registry,
    stores: &[&Store],
) -> Result<Vec<Edge>, Violation> {
    let mut order: Vec<(Timestamp, usize)> = ordered
        .iter()
        .map(|&i| (history.txns[i].ts().expect("ordered"), i))
        .chain(orphans.iter().map(|&(i, ts)| (ts, i)))
        .collect();
    order.sort_by_key(|&(ts, i)| (ts, history.txns[i].id));
    let mut model: Vec<Store> = vec![Store::new(); stores.len()];
    let mut keys: HashMap<(ShardId, Key), KeyState> = HashMap::new();
    let mut edges = Vec::new();
    for &(ts, i) in &order {
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
            let expected = registry
                .execute(&rec.procedure, &rec.args, &mut model[shard as usize], &piece.keys, shard)
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
                msg.push_str(&predecessors(history, &keys, shard, piece));
                return Err(Violation::new(ViolationKind::ResultMismatch, msg));
            }
            for (key, access) in piece.keys.entries() {
                let state = keys.entry((shard, key.clone())).or_default();
                match access {
                    Access::Read => {
                        if let Some(w) = state.last_write {
                            edges.push((w, i));
                        }
                        state.reads_since_write.push(i);
                    }
                    Access::Write => {
                        if let Some(w) = state.last_write {
                            edges.push((w, i));
                        }
                        edges.extend(state.reads_since_write.drain(..).map(|r| (r, i)));
                        state.last_write = Some(i);
                    }
                }
            }
        }
    }
    for (shard, (model, actual)) in model.iter().zip(stores).enumerate() {
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
                if let Some(w) = keys.get(&(shard, key)).and_then(|s| s.last_write) {
                    let w = &history.txns[w];
                    let _ = write!(msg, "; last writer in timestamp order: {:?} at ts {:?}", w.id, w.ts());
                }
            }
            return Err(Violation::new(ViolationKind::StateMismatch, msg));
        }
    }
    Ok(edges)
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

/// Check 3.
fn real_time(history: &History, ordered: &[usize], options: CheckOptions) -> Result<(), Violation> {
    let mut by_shard: BTreeMap<ShardId, Vec<usize>> = BTreeMap::new();
    for &i in ordered {
        for piece in &history.txns[i].pieces {
            by_shard.entry(piece.shard).or_default().push(i);
        }
    }
    for (shard, txns) in &by_shard {
        if let Some((a, b)) = realtime_inversion(history, txns) {
            return Err(realtime_violation(history, a, b, Some(*shard)));
        }
    }
    if options.realtime_across_shards {
        if let Some((a, b)) = realtime_inversion(history, ordered) {
            return Err(realtime_violation(history, a, b, None));
        }
    }
    Ok(())
}

fn answered_at(rec: &TxnRecord) -> Moment {
    rec.answers[0].at
}

/// A pair (A, B) among `txns` with A answered before B was dispatched and `ts(A) >= ts(B)`.
fn realtime_inversion(history: &History, txns: &[usize]) -> Option<(usize, usize)> {
    let mut by_dispatch = txns.to_vec();
    by_dispatch.sort_by_key(|&i| history.txns[i].dispatched);
    let mut by_answer = txns.to_vec();
    by_answer.sort_by_key(|&i| answered_at(&history.txns[i]));
    let mut next = 0;
    let mut max: Option<(Timestamp, usize)> = None;
    for &b in &by_dispatch {
        let rec_b = &history.txns[b];
        while next < by_answer.len() && answered_at(&history.txns[by_answer[next]]) < rec_b.dispatched {
            let a = by_answer[next];
            let ts = history.txns[a].ts().expect("ordered");
            if !matches!(max, Some((m, _)) if m >= ts) {
                max = Some((ts, a));
            }
            next += 1;
        }
        if let Some((ts_a, a)) = max {
            if ts_a >= rec_b.ts().expect("ordered") {
                return Some((a, b));
            }
        }
    }
    None
}

fn realtime_violation(history: &History, a: usize, b: usize, shard: Option<ShardId>) -> Violation {
    let (a, b) = (&history.txns[a], &history.txns[b]);
    let scope = match shard {
        Some(s) => format!("both on shard {s}"),
        None => "on different shards".to_string(),
    };
    Violation::new(
        ViolationKind::RealTime,
        format!(
            "txn {:?} was answered at {} us (step {}) before txn {:?} was dispatched at {} us \
             (step {}), {scope}, but ts {:?} is not below ts {:?}",
            a.id,
            answered_at(a).us,
            answered_at(a).step,
            b.id,
            b.dispatched.us,
            b.dispatched.step,
            a.ts(),
            b.ts()
        ),
    )
}

/// Check 4: the conflict edges plus the real-time order must be acyclic. Real-time edges are
/// compressed through a chain of "time" nodes, one per answer in answer order: A -> T(A),
/// T(k) -> T(k+1), and T(last answer before B's dispatch) -> B.
fn serializable(history: &History, ordered: &[usize], conflicts: &[Edge]) -> Result<(), Violation> {
    let n = history.txns.len();
    let mut by_answer = ordered.to_vec();
    by_answer.sort_by_key(|&i| answered_at(&history.txns[i]));
    let answers: Vec<Moment> = by_answer.iter().map(|&i| answered_at(&history.txns[i])).collect();
    let total = n + by_answer.len();
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); total];
    for &(from, to) in conflicts {
        succ[from].push(to);
    }
    for (k, &a) in by_answer.iter().enumerate() {
        succ[a].push(n + k);
        if k + 1 < by_answer.len() {
            succ[n + k].push(n + k + 1);
        }
    }
    for &b in ordered {
        let d = history.txns[b].dispatched;
        let before = answers.partition_point(|m| *m < d);
        if before > 0 {
            succ[n + before - 1].push(b);
        }
    }
    // Kahn's algorithm over the nodes that exist (ordered transactions and time nodes).
    let mut present = vec![false; total];
    for &i in ordered {
        present[i] = true;
    }
    for p in present.iter_mut().skip(n) {
        *p = true;
    }
    let mut indegree = vec![0usize; total];
    for s in &succ {
        for &t in s {
            indegree[t] += 1;
        }
    }
    let mut ready: VecDeque<usize> = (0..total).filter(|&v| present[v] && indegree[v] == 0).collect();
    let mut seen = 0;
    let live = present.iter().filter(|p| **p).count();
    while let Some(v) = ready.pop_front() {
        seen += 1;
        for &t in &succ[v] {
            indegree[t] -= 1;
            if indegree[t] == 0 {
                ready.push_back(t);
            }
        }
    }
    if seen == live {
        return Ok(());
    }
    // Find a cycle among the leftovers: walk predecessors that are left over.
    let mut pred: Vec<Vec<usize>> = vec![Vec::new(); total];
    for (v, s) in succ.iter().enumerate() {
        for &t in s {
            if indegree[v] > 0 && indegree[t] > 0 {
                pred[t].push(v);
            }
        }
    }
    let start =
        (0..total).find(|&v| present[v] && indegree[v] > 0).expect("a cycle leaves nodes with positive in-degree");
    let mut path = vec![start];
    let mut on_path: HashMap<usize, usize> = HashMap::from([(start, 0)]);
    let cycle = loop {
        let v = *path.last().expect("non-empty");
        let p = *pred[v].first().expect("leftover nodes have leftover predecessors");
        if let Some(&pos) = on_path.get(&p) {
            let mut c = path[pos..].to_vec();
            c.reverse();
            break c;
        }
        on_path.insert(p, path.len());
        path.push(p);
    };
    let describe: Vec<String> = cycle
        .iter()
        .filter(|&&v| v < n)
        .map(|&v| {
            let r = &history.txns[v];
            format!(
                "{:?}(ts {:?}, dispatched {} us, answered {} us, shards {:?})",
                r.id,
                r.ts(),
                r.dispatched.us,
                answered_at(r).us,
                r.pieces.iter().map(|p| p.shard).collect::<Vec<_>>()
            )
        })
        .collect();
    Err(Violation::new(
        ViolationKind::NotSerializable,
        format!(
            "the conflict order (timestamp order per key) and the real-time order form a cycle: {}",
            describe.join(" -> ")
        ),
    ))
}
