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
//!
//! Protocols without timestamps (the OCC and 2PL baselines) get a serial order derived from
//! their shards' committed logs and real time first (`derive`, [`derive_order`]), fed to the
//! same checks as their timestamps.
//!
//! Split by concern: `history` (what the simulator records), `replay` (check 2: the
//! sequential model), `realtime` (check 3), `serial` (check 4); checks 1 and the driver are
//! here.

mod derive;
mod history;
mod realtime;
mod replay;
mod serial;

pub use derive::{derive_order, Placement, Placements};
pub use history::{AnswerRecord, CheckOptions, CheckSummary, History, Moment, TxnRecord};
pub(crate) use replay::show_key;

use std::collections::{BTreeMap, HashSet};

use luigi_store::Store;
use luigi_txn::client_core::TxnOutcome;
use luigi_txn::procedure::Registry;
use luigi_txn::types::{ShardId, Timestamp, TxnId};

use realtime::real_time;
use replay::{replay, Edge};
use serial::serializable;

use crate::violation::{Violation, ViolationKind};

/// Checks `history` against the leaders' final `stores` (indexed by shard id) using the
/// procedures of `registry`, every shard starting empty.
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
    let empty = vec![Store::new(); stores.len()];
    check_from(history, orphans, registry, &empty, stores, options)
}

/// [`check_with_orphans`] for shards that started from `initial` (a workload's population,
/// `initial[s]` being shard `s`'s): the replay starts from them. Whatever the workload, the
/// replay runs every ordered transaction (committed, or rolled back by its procedure on some
/// participant) and every executed orphan in (final timestamp, id) order, each participant's
/// piece on its shard's model store with its declared key set, and requires every answered
/// output to equal the replayed one and every final store to equal its model.
pub fn check_from(
    history: &History,
    orphans: &BTreeMap<TxnId, Option<Timestamp>>,
    registry: &Registry,
    initial: &[Store],
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
    let graph = replay(history, &ordered, &executed_orphans, registry, initial, stores)?;
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
        let answer = the_answer(rec, shards)?;
        if counts_answer(rec, answer, summary)? {
            ordered.push(i);
        }
    }
    Ok(ordered)
}

/// The one answer of `rec` (answered once, after its dispatch, naming shards the cluster has).
fn the_answer(rec: &TxnRecord, shards: usize) -> Result<&AnswerRecord, Violation> {
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
    Ok(answer)
}

/// Counts `rec`'s answer in `summary`; returns whether it was ordered (with a result from
/// each participant, at a non-zero timestamp).
fn counts_answer(rec: &TxnRecord, answer: &AnswerRecord, summary: &mut CheckSummary) -> Result<bool, Violation> {
    match &answer.outcome {
        TxnOutcome::Ordered { ts, results } => {
            let mut got: Vec<ShardId> = results.iter().map(|(s, _)| *s).collect();
            let mut want: Vec<ShardId> = rec.pieces.iter().map(|p| p.shard).collect();
            got.sort_unstable();
            want.sort_unstable();
            if got != want {
                return Err(Violation::new(
                    ViolationKind::ResultMismatch,
                    format!("txn {:?} has results from shards {got:?} but its participants are {want:?}", rec.id),
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
            Ok(true)
        }
        TxnOutcome::Rejected(_) => {
            summary.rejected += 1;
            Ok(false)
        }
        // A shell records only definite answers (an unknown one must be resolved).
        TxnOutcome::Unknown(why) => Err(Violation::new(
            ViolationKind::Failed,
            format!("txn {:?} ended unknown after {} attempts: {why}", rec.id, answer.attempts),
        )),
    }
}
