//! The Raft model's checks of the baselines (`occ`, `2pl`, `direct`: `luigi-baseline`), which
//! replace Luigi's (watermarks, timestamps, rule 4) explicitly by protocol:
//!
//! - **the oracle** applies each shard's committed records, as they become known, to a
//!   [`ShardState`] of its own: where each transaction was installed (the index of its `Local`
//!   record, or of the `Commit` of its prepared piece), at most once per shard;
//! - **single-shard reads** log only a barrier their answer waits for: a serving leader reports
//!   each run at its barrier's index, and the reply it sends for it is remembered (by the message's hash), so the
//!   execution the client's answer came from is known; its log prefix must be the final one
//!   (the entry at that index has the same term in the final log);
//! - **after the run** (every fault healed, the cluster converged): no serving leader has a
//!   prepared piece left or anything else in its care (2PL executions hold locks, prepared
//!   pieces hold locks: none may be left; "a new leader must finish or abort every prepared
//!   transaction it finds in its log"); then, for OCC and 2PL, the serial order is derived
//!   from the final logs and real time ([`derive_order`]) and the checker replays it; for
//!   `direct`, which is not transactional (no atomicity, no isolation), only durability is
//!   checked: every piece answered `Ok` was installed (or was a read) on its shard, every piece
//!   answered with an error was not, and every replica holds the same store.

use std::collections::{BTreeMap, HashMap};

use luigi_baseline::{BaseRecord, ShardState};
use luigi_protocol::log::LogEntry;
use luigi_store::Store;
use luigi_txn::client_core::TxnOutcome;
use luigi_txn::msg::{ServerMsg, TxnReply};
use luigi_txn::types::{ShardId, Timestamp, TxnId};

use super::{shards_of, RaftGroups};
use crate::checker::{derive_order, History, Placement, Placements};
use crate::engine::Core;
use crate::net::{Node, SimMsg};
use crate::violation::{Violation, ViolationKind};

/// What a baseline shard's group has committed, applied.
pub(super) struct BaseOracle {
    state: ShardState,
    /// Where each transaction was installed: the index of the record.
    pub(super) installed: BTreeMap<TxnId, u64>,
    /// Every committed record of each transaction: (index, what it is), for reports.
    records: HashMap<TxnId, Vec<(u64, String)>>,
}

impl BaseOracle {
    pub(super) fn new(shard: ShardId) -> Self {
        // The store only collects the writes; their placement is what the checks need.
        BaseOracle { state: ShardState::new(shard, Store::new()), installed: BTreeMap::new(), records: HashMap::new() }
    }

    /// Applies the committed entry at `index` (its payload `data`).
    pub(super) fn apply(&mut self, index: u64, data: &[u8]) -> Result<(), String> {
        let record: BaseRecord = postcard::from_bytes(data).map_err(|e| format!("does not decode: {e}"))?;
        let what = match &record {
            BaseRecord::Local { .. } => "Local".to_string(),
            BaseRecord::Prepare { .. } => "Prepare".to_string(),
            BaseRecord::Commit { .. } => "Commit".to_string(),
            BaseRecord::Barrier { .. } => "Barrier".to_string(),
            BaseRecord::Abort { reason, .. } => format!("Abort({reason})"),
        };
        self.records.entry(record.id()).or_default().push((index, what));
        self.state.apply(&LogEntry { index, record });
        for (id, at) in self.state.take_executed() {
            if let Some(first) = self.installed.insert(id, at) {
                return Err(format!("{id:?} is installed twice in the committed log: at {first} and at {at}"));
            }
        }
        Ok(())
    }
}

/// Where the baselines' single-shard reads ran.
#[derive(Default)]
pub(super) struct ReadLedger {
    /// Every read a serving leader ran: (shard, transaction) → (index, its term) per run.
    pub(super) runs: HashMap<(ShardId, TxnId), Vec<(u64, u64)>>,
    /// The reply each read produced, by (sender, message hash): (shard, index, term).
    pub(super) replies: HashMap<(Node, u64), (ShardId, u64, u64)>,
}

impl RaftGroups<'_> {
    /// If replica `i` of shard `s` serves and its report of `id` at `ts` is not the install of
    /// `id` by the record at `ts` (a `Local` or a `Commit` of `id`), it is a single-shard read
    /// that ran when `ts` was the last index logged: returns the term of that entry.
    pub(super) fn read_at(&self, s: ShardId, i: u32, id: TxnId, ts: Timestamp) -> Option<u64> {
        let node = self.replicas[s as usize][i as usize].node.as_ref()?;
        let replica = node.replica();
        if !replica.is_serving() {
            return None; // a follower reports the installs of committed records only
        }
        if ts == 0 {
            return Some(0);
        }
        let log = node.log();
        let installs = log
            .entry(ts)
            .and_then(|e| postcard::from_bytes::<BaseRecord>(&e.data).ok())
            .is_some_and(|r| matches!(r, BaseRecord::Local { id: x, .. } | BaseRecord::Commit { id: x } if x == id));
        if installs {
            return None;
        }
        Some(log.term_at(ts).unwrap_or(0))
    }

    /// Notes a read of `id` by replica `i` of shard `s` at `index` (of term `term`).
    pub(super) fn note_read(&mut self, s: ShardId, i: u32, id: TxnId, index: u64, term: u64) {
        self.reads.runs.entry((s, id)).or_default().push((index, term));
        self.replicas[s as usize][i as usize].reads.entry(id).or_default().push_back((index, term));
    }

    /// Replica `i` of shard `s` sends `msg`, the reply `r`: if it answers a read it ran (the
    /// oldest one not answered: a leader answers its reads in the order they ran), the reply
    /// is remembered with the read's place.
    pub(super) fn bind_read_reply(&mut self, s: ShardId, i: u32, r: &TxnReply, msg: &ServerMsg) {
        if r.outcome.is_err() || r.shard != s {
            return;
        }
        let reads = &mut self.replicas[s as usize][i as usize].reads;
        let Some((index, term)) = reads.get_mut(&r.id).and_then(|q| q.pop_front()) else { return };
        if reads.get(&r.id).is_some_and(|q| q.is_empty()) {
            reads.remove(&r.id);
        }
        let hash = SimMsg::ToClient(msg.clone()).hash();
        self.reads.replies.entry((Node::Replica(s, i), hash)).or_insert((s, index, term));
    }

    /// No serving leader has anything left in its care once the cluster converged: no
    /// prepared piece (every one a new leader found in its log was finished or aborted), no
    /// execution holding 2PL locks, no coordination or resolution.
    pub(super) fn check_nothing_left(&self, core: &Core<'_>) -> Result<(), Violation> {
        for (s, group) in self.replicas.iter().enumerate() {
            for (i, r) in group.iter().enumerate() {
                let Some(leader) = r.node.as_ref().and_then(|n| n.replica().leader_figures()) else {
                    continue;
                };
                let prepared = &leader.prepared;
                if !prepared.is_empty() || leader.pending != 0 || leader.locks_held != 0 {
                    let msg = format!(
                        "R{s}.{i} serves the healed, converged shard with prepared pieces left {prepared:?} (holding \
                         their locks) and {} transactions in its care: a prepared transaction was never finished or \
                         aborted ({} keys locked)",
                        leader.pending, leader.locks_held
                    );
                    return Err(core.violation(ViolationKind::Stuck, msg));
                }
            }
        }
        Ok(())
    }

    /// Every shard's placements: its installs, and the answered single-shard reads at the
    /// index their leader had logged (checked to be in the final log).
    fn placements(&self, core: &Core<'_>) -> Result<Placements, Violation> {
        let mut placements: Placements = self
            .oracle
            .iter()
            .map(|o| {
                o.base
                    .as_ref()
                    .map(|b| b.installed.iter().map(|(id, at)| (*id, Placement::Installed(*at))).collect())
                    .unwrap_or_default()
            })
            .collect();
        for rec in &core.cs.history.txns {
            let [piece] = rec.pieces.as_slice() else { continue };
            let s = piece.shard;
            let committed = rec.answers.first().is_some_and(|a| a.outcome.is_committed());
            if !committed || placements[s as usize].contains_key(&rec.id) {
                continue;
            }
            // A committed single-shard transaction that installed nothing: a read.
            let Some(source) = core.cs.answered_by.get(&rec.id) else { continue };
            let Some(&(shard, index, term)) = self.reads.replies.get(source) else {
                let msg = format!(
                    "{:?} was answered committed by {} but installed nothing on shard {s}, and that reply answers \
                     no read its leader ran",
                    rec.id, source.0
                );
                return Err(core.violation(ViolationKind::NotDurable, msg));
            };
            let final_term =
                if index == 0 { Some(0) } else { self.oracle[s as usize].entries.get(index as usize - 1).map(|e| e.0) };
            if shard != s || final_term != Some(term) {
                let msg = format!(
                    "{:?} was answered by a read of shard {shard} at index {index} (term {term}), but the final \
                     committed log has term {final_term:?} there: the read ran on a log that did not survive",
                    rec.id
                );
                return Err(core.violation(ViolationKind::NotDurable, msg));
            }
            placements[s as usize].insert(rec.id, Placement::ReadAt(index));
        }
        Ok(placements)
    }

    /// OCC and 2PL: the history and orphans to check, in the derived serial order.
    pub(super) fn derived_history(
        &self,
        core: &Core<'_>,
    ) -> Result<(History, BTreeMap<TxnId, Option<Timestamp>>), Violation> {
        let placements = self.placements(core)?;
        derive_order(&core.cs.history, &core.cs.orphans, &placements).map_err(|mut v| {
            // Name what each participant's committed log holds of the transactions named.
            let named: Vec<&crate::checker::TxnRecord> =
                core.cs.history.txns.iter().filter(|r| v.message.contains(&format!("{:?}", r.id))).take(4).collect();
            for rec in named {
                for s in shards_of(rec) {
                    let records = self.oracle[s as usize].base.as_ref().and_then(|b| b.records.get(&rec.id));
                    v.message.push_str(&format!("\n  {:?} in shard {s}'s committed log: {records:?}", rec.id));
                }
            }
            v.at(core.now)
        })
    }

    /// `direct` (not transactional: no serial order exists to check): every piece answered
    /// `Ok` took effect on its shard (installed, or a read a serving leader ran), every piece
    /// answered with an error, and every transaction answered refused, left nothing, and an
    /// orphan's pieces count as executed where installed. Returns (committed, rejected).
    pub(super) fn check_direct(&self, core: &Core<'_>) -> Result<(u64, u64), Violation> {
        let installed = |s: ShardId, id: TxnId| {
            self.oracle[s as usize].base.as_ref().is_some_and(|b| b.installed.contains_key(&id))
        };
        let (mut committed, mut rejected) = (0, 0);
        for rec in &core.cs.history.txns {
            let results: Vec<(ShardId, bool)> = match rec.answers.first().map(|a| &a.outcome) {
                Some(TxnOutcome::Ordered { results, .. }) => results.iter().map(|(s, r)| (*s, r.is_ok())).collect(),
                Some(TxnOutcome::Rejected(_)) => shards_of(rec).into_iter().map(|s| (s, false)).collect(),
                Some(TxnOutcome::Unknown(_)) | None => continue, // the checks below report them
            };
            if results.iter().all(|(_, ok)| *ok) {
                committed += 1;
            } else {
                rejected += 1;
            }
            for (s, ok) in results {
                let read = self.reads.runs.contains_key(&(s, rec.id));
                match (ok, installed(s, rec.id)) {
                    (true, true) | (false, false) => {}
                    (true, false) if read => {}
                    (true, false) => {
                        let msg = format!("{:?}'s piece on shard {s} was answered Ok but took effect nowhere", rec.id);
                        return Err(core.violation(ViolationKind::NotDurable, msg));
                    }
                    (false, true) => {
                        let msg = format!("{:?}'s piece on shard {s} was answered with an error but installed", rec.id);
                        return Err(core.violation(ViolationKind::Execution, msg));
                    }
                }
            }
        }
        // Every transaction answered exactly once (or orphaned).
        for rec in &core.cs.history.txns {
            if rec.answers.len() != 1 && !core.cs.orphans.contains_key(&rec.id) {
                let msg = format!("{:?} was answered {} times", rec.id, rec.answers.len());
                return Err(core.violation(ViolationKind::Unanswered, msg));
            }
        }
        Ok((committed, rejected))
    }
}
