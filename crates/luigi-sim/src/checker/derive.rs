//! A serial order for protocols without timestamps (the OCC and 2PL baselines), fed to the
//! checker as if it were the transactions' timestamps.
//!
//! The order is a topological order of a graph over every committed transaction (and every
//! executed orphan):
//!
//! - **per shard, log order of conflicting pairs**: where each transaction took effect in the
//!   shard's final committed log ([`Placement`]: the index of the record that installed it, or
//!   for a single-shard read, which logs nothing, the last index its leader had logged when it
//!   ran: after every install at or below it, before the later ones), restricted to pairs that
//!   conflict on the shard's declared keys (the baselines' lock unit: declared-key hashes,
//!   reads against writes);
//! - **real time**: A answered before B was dispatched puts A before B.
//!
//! A cycle means no serial order explains both the logs and real time: the run was not
//! strictly serializable ([`ViolationKind::NotSerializable`]). Otherwise each transaction's
//! position (from 1) becomes its timestamp in the [`History`] returned, where every
//! transaction answered with an error (a protocol abort, a procedure's abort: the baselines
//! roll the whole transaction back) or refused is rejected, so it must have left no trace:
//! the replay, which runs in that order, then compares every answer and every final store
//! byte for byte, and checks real time and serializability once more.
//!
//! Before the order, atomicity and durability: a committed answer must have taken effect on
//! every participant, a transaction answered otherwise on none, and an orphan (its client
//! died) on all of its participants or none.

use std::collections::{BTreeMap, HashMap};

use luigi_txn::client_core::TxnOutcome;
use luigi_txn::keyhash::key_hash;
use luigi_txn::types::{ShardId, Timestamp, TxnId};

use super::serial::{add_real_time, topological_order};
use super::History;
use crate::violation::{Violation, ViolationKind};

/// Where a transaction took effect in one shard's final committed log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Placement {
    /// The record at this index installed its piece (a `Local` record, or the `Commit` of its
    /// prepared piece).
    Installed(u64),
    /// A single-shard read (nothing logged): it ran on a leader whose log ended at this index
    /// (everything at or below it committed before it was answered).
    ReadAt(u64),
}

impl Placement {
    /// Its sort key in the shard's order: an install at `i` before a read at `i`.
    fn key(self) -> (u64, u8) {
        match self {
            Placement::Installed(i) => (i, 0),
            Placement::ReadAt(i) => (i, 1),
        }
    }
}

/// Every shard's placements (index = shard id): where each transaction took effect there.
pub type Placements = Vec<BTreeMap<TxnId, Placement>>;

/// The serial order of a run without timestamps: `history` with every committed
/// transaction's timestamp replaced by its position in the order (and every other answer
/// made a rejection), and the orphans with their positions (executed) or `None`.
///
/// # Errors
/// A committed answer that did not take effect on a participant, an aborted or refused one
/// that did, an orphan on some participants only, an answered read that cannot be placed
/// (`placements` lacks it), or a cycle in the order.
pub fn derive_order(
    history: &History,
    orphans: &BTreeMap<TxnId, Option<Timestamp>>,
    placements: &Placements,
) -> Result<(History, BTreeMap<TxnId, Option<Timestamp>>), Violation> {
    let nodes = took_effect(history, orphans, placements)?;
    let succ = conflicts_in_log_order(history, placements, &nodes);
    let is_orphan = |i: usize| orphans.contains_key(&history.txns[i].id);
    let answered: Vec<usize> = nodes.iter().copied().filter(|&i| !is_orphan(i)).collect();
    let order = topological(history, &nodes, &answered, succ)?;
    Ok(with_positions(history, orphans, &order))
}

/// The transactions (indices into `history`) that took effect: the graph's nodes. Checks
/// atomicity and durability on the way: a committed answer took effect on every participant,
/// one answered otherwise on none, an orphan on all or none.
fn took_effect(
    history: &History,
    orphans: &BTreeMap<TxnId, Option<Timestamp>>,
    placements: &Placements,
) -> Result<Vec<usize>, Violation> {
    let placed = |shard: ShardId, id: TxnId| placements.get(shard as usize).and_then(|p| p.get(&id)).copied();
    let mut nodes: Vec<usize> = Vec::new();
    for (i, rec) in history.txns.iter().enumerate() {
        let shards: Vec<ShardId> = rec.pieces.iter().map(|p| p.shard).collect();
        let here: Vec<(ShardId, Option<Placement>)> = shards.iter().map(|&s| (s, placed(s, rec.id))).collect();
        let installed: Vec<ShardId> =
            here.iter().filter(|(_, p)| matches!(p, Some(Placement::Installed(_)))).map(|(s, _)| *s).collect();
        if orphans.contains_key(&rec.id) {
            if !installed.is_empty() && installed.len() != shards.len() {
                let msg = format!(
                    "orphan {:?} (its client died) was installed on shards {installed:?} of its participants \
                     {shards:?}: not atomic",
                    rec.id
                );
                return Err(Violation::new(ViolationKind::Execution, msg));
            }
            if !installed.is_empty() {
                nodes.push(i);
            }
            continue;
        }
        match rec.answers.first().map(|a| &a.outcome) {
            Some(outcome @ TxnOutcome::Ordered { .. }) if outcome.is_committed() => {
                if let Some((s, _)) = here.iter().find(|(_, p)| p.is_none()) {
                    let msg = format!(
                        "{:?} was answered committed, but it took effect nowhere in shard {s}'s final committed \
                         log (participants {shards:?}, installed on {installed:?})",
                        rec.id
                    );
                    return Err(Violation::new(ViolationKind::NotDurable, msg));
                }
                nodes.push(i);
            }
            Some(outcome @ (TxnOutcome::Ordered { .. } | TxnOutcome::Rejected(_))) => {
                if !installed.is_empty() {
                    let msg = format!(
                        "{:?} was answered {outcome:?}, but shards {installed:?} installed it: an aborted or \
                         refused transaction left a trace",
                        rec.id
                    );
                    return Err(Violation::new(ViolationKind::Execution, msg));
                }
            }
            // Unanswered or unknown: the checker reports it.
            Some(TxnOutcome::Unknown(_)) | None => {}
        }
    }
    Ok(nodes)
}

/// The graph's edges (successors by node index): per shard, the conflicting pairs among
/// `nodes` in log order.
fn conflicts_in_log_order(history: &History, placements: &Placements, nodes: &[usize]) -> Vec<Vec<usize>> {
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); history.txns.len()];
    for (shard, on_shard) in placements.iter().enumerate() {
        let shard = shard as ShardId;
        let mut events: Vec<((u64, u8), usize)> = nodes
            .iter()
            .filter_map(|&i| on_shard.get(&history.txns[i].id).map(|p| (p.key(), i)))
            .filter(|&(_, i)| history.txns[i].piece(shard).is_some())
            .collect();
        events.sort_by_key(|&(key, i)| (key, history.txns[i].id));
        let mut last_write: HashMap<u64, usize> = HashMap::new();
        let mut reads_since: HashMap<u64, Vec<usize>> = HashMap::new();
        for (_, i) in events {
            let keys = history.txns[i].piece(shard).expect("filtered");
            for h in keys.reads.iter().map(|k| key_hash(k)) {
                if let Some(&w) = last_write.get(&h) {
                    succ[w].push(i);
                }
                reads_since.entry(h).or_default().push(i);
            }
            for h in keys.writes.iter().map(|k| key_hash(k)) {
                if let Some(w) = last_write.insert(h, i) {
                    succ[w].push(i);
                }
                succ_extend(&mut succ, reads_since.remove(&h).unwrap_or_default(), i);
            }
        }
    }
    succ
}

/// `history` with each transaction of `order` stamped with its position (from 1) and every
/// other ordered answer rolled back, and the orphans with their positions (`None`: not
/// executed).
fn with_positions(
    history: &History,
    orphans: &BTreeMap<TxnId, Option<Timestamp>>,
    order: &[usize],
) -> (History, BTreeMap<TxnId, Option<Timestamp>>) {
    let mut ts_of: HashMap<usize, Timestamp> = HashMap::new();
    for (pos, &i) in order.iter().enumerate() {
        ts_of.insert(i, pos as Timestamp + 1);
    }
    let mut derived = history.clone();
    for (i, rec) in derived.txns.iter_mut().enumerate() {
        let Some(answer) = rec.answers.first_mut() else { continue };
        match (&mut answer.outcome, ts_of.get(&i)) {
            (TxnOutcome::Ordered { ts, .. }, Some(&position)) => *ts = position,
            (outcome @ TxnOutcome::Ordered { .. }, None) => {
                *outcome = TxnOutcome::Rejected(format!("rolled back: {outcome:?}"));
            }
            (TxnOutcome::Rejected(_) | TxnOutcome::Unknown(_), _) => {}
        }
    }
    let orphans = orphans
        .keys()
        .map(|id| {
            let position = history.txns.iter().position(|r| r.id == *id).and_then(|i| ts_of.get(&i).copied());
            (*id, position)
        })
        .collect();
    (derived, orphans)
}

fn succ_extend(succ: &mut [Vec<usize>], from: Vec<usize>, to: usize) {
    for r in from {
        if r != to {
            succ[r].push(to);
        }
    }
}

/// A topological order of `nodes` under `succ` (conflict edges) plus real time among
/// `answered` (compressed through a chain of time nodes, one per answer in answer order, as
/// in the serializability check); a cycle is a violation.
fn topological(
    history: &History,
    nodes: &[usize],
    answered: &[usize],
    mut succ: Vec<Vec<usize>>,
) -> Result<Vec<usize>, Violation> {
    let n = history.txns.len();
    let present = add_real_time(history, nodes, answered, &mut succ);
    let cycle = match topological_order(&succ, &present) {
        Ok(order) => return Ok(order.into_iter().filter(|&v| v < n).collect()),
        Err(cycle) => cycle,
    };
    let describe: Vec<String> = cycle
        .iter()
        .filter(|&&v| v < n)
        .map(|&v| {
            let r = &history.txns[v];
            let answered = r.answers.first().map(|a| format!("{} us", a.at.us)).unwrap_or_else(|| "never".into());
            format!(
                "{:?}(dispatched {} us, answered {answered}, shards {:?})",
                r.id,
                r.dispatched.us,
                r.pieces.iter().map(|p| p.shard).collect::<Vec<_>>()
            )
        })
        .collect();
    Err(Violation::new(
        ViolationKind::NotSerializable,
        format!(
            "the shards' committed logs (conflicting installs in log order) and the real-time order form a cycle: \
             {} (no serial order explains the run)",
            describe.join(" -> ")
        ),
    ))
}
