//! The ideal-log configuration's checks after the run, over each shard's node and its
//! committed log (the oracle of `checks.rs`): every coordinator saw the same timestamp from
//! every participant; exactly the ordered transactions executed, once on each participant and
//! in final-timestamp and log order per key; a follower replaying each committed log rebuilds
//! its leader's store; then the model's own end-of-run checks and the [`RunReport`].

use std::collections::HashMap;

use luigi_node::ReplicaNode;
use luigi_protocol::leader::follower::Follower;
use luigi_protocol::leader::LeaderStats;
use luigi_protocol::log::{LogEntry, LogRecord};
use luigi_protocol::replica::leader_stats;
use luigi_store::Key;
use luigi_txn::types::{Access, KeySet, Protocol, ShardId, Timestamp, TxnId};

use super::checks::leader_stores;
use super::RaftGroups;
use crate::checker;
use crate::engine::{Core, Step};
use crate::hosted::check_run;
use crate::log::Durable;
use crate::violation::{Violation, ViolationKind};
use crate::{Latency, RunReport};

impl RaftGroups<'_> {
    /// The end-of-run checks of the ideal-log configuration (coordinators, executions,
    /// followers, then the model's: committed prefixes, rule 4 left for the end, every answer
    /// durable, the checker's replay) and its report.
    pub(super) fn finish_ideal(mut self, mut core: Core<'_>) -> Result<RunReport, Violation> {
        let retries = check_coordinators(&core)?;
        self.check_committed_prefixes(core.now)?;
        self.check_rule4_later(&core)?;
        self.luigi_durability(&mut core)?;
        self.check_executions(&core)?;
        self.check_followers(&core)?;
        let (cross_shard, cross_differed) = self.count_cross_shard(&core);
        let leaders = self.leader_stats_sum();
        let busy_wakes = self.busy_wakes;
        let stores = leader_stores(&self.replicas, &mut self.report);
        let summary =
            check_run(core.config, &core.cs.history, &core.cs.orphans, &stores).map_err(|v| v.at(core.now))?;
        let mut latencies: Vec<u64> =
            core.cs.history.txns.iter().map(|t| t.answers[0].at.us - t.dispatched.us).collect();
        latencies.sort_unstable();
        let net = core.net_stats();
        Ok(RunReport {
            seed: core.config.seed,
            txns: core.config.txns,
            committed: summary.committed,
            read_only: core.cs.history.read_only_answered(),
            proc_aborted: summary.proc_aborted,
            rejected: summary.rejected,
            retries,
            bumped: leaders.bumped,
            duplicates: leaders.duplicates,
            cross_shard,
            cross_differed,
            leaders,
            peer_batches: net.peer_batches,
            busy_wakes,
            end_us: core.answered_at,
            events: core.events,
            messages: core.delivered,
            dropped: net.dropped,
            max_ts: summary.max_ts,
            conflict_edges: summary.conflict_edges,
            latency: Latency::of_sorted(&latencies),
            shard_hashes: stores.iter().map(|s| s.state_hash()).collect(),
            trace_hash: core.trace_hash,
        })
    }

    /// Shard `s`'s node (its only replica, up: nothing crashes in this configuration).
    fn shard_node(&self, s: ShardId) -> &ReplicaNode {
        self.replicas[s as usize][0].node.as_ref().expect("the ideal-log configuration never crashes a node")
    }

    /// What shard `s`'s committed log holds of `id`.
    fn durable(&self, s: ShardId, id: TxnId) -> Durable {
        self.oracle[s as usize].durable.get(&id).copied().unwrap_or_default()
    }

    /// Every shard's serving leader's counters, summed.
    fn leader_stats_sum(&self) -> LeaderStats {
        (0..self.replicas.len() as ShardId)
            .filter_map(|s| self.shard_node(s).replica().leader_figures())
            .filter_map(|f| leader_stats(&f))
            .fold(LeaderStats::default(), add_stats)
    }

    /// Exactly the ordered transactions were executed, once on each participant, and on
    /// every shard conflicting ones executed in final-timestamp order and in the order of the
    /// shard's own committed log.
    fn check_executions(&self, core: &Core<'_>) -> Step {
        self.check_only_ordered_executed(core)?;
        self.check_ordered_executed_everywhere(core)?;
        for shard in 0..core.config.shards {
            self.check_execution_order(core, shard)?;
        }
        Ok(())
    }

    fn executions(&self, s: ShardId) -> &[TxnId] {
        self.ideal.as_ref().map_or(&[], |i| &i.executions[s as usize])
    }

    /// Nothing rejected or aborted left a trace: whatever a shard executed was ordered.
    fn check_only_ordered_executed(&self, core: &Core<'_>) -> Step {
        for shard in 0..core.config.shards {
            for id in self.executions(shard) {
                let rec = &core.cs.history.txns[core.cs.index[id]];
                if rec.ts().is_none() {
                    return Err(core.violation(
                        ViolationKind::Execution,
                        format!(
                            "{id:?} was executed on shard {shard} but its client was told {:?}: a rejected \
                             or aborted transaction left a trace",
                            rec.answers.first().map(|a| &a.outcome)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every transaction answered as ordered was aborted nowhere and executed on each of its
    /// participants.
    fn check_ordered_executed_everywhere(&self, core: &Core<'_>) -> Step {
        for rec in &core.cs.history.txns {
            // A snapshot read executes nowhere: it reads (rule 23).
            if rec.ts().is_none() || rec.read_only() {
                continue;
            }
            for p in &rec.pieces {
                if self.durable(p.shard, rec.id).aborted {
                    return Err(core.violation(
                        ViolationKind::Execution,
                        format!("{:?} was answered as ordered although shard {} logged its ABORT", rec.id, p.shard),
                    ));
                }
            }
            if let Some(p) = rec.pieces.iter().find(|p| !self.executions(p.shard).contains(&rec.id)) {
                return Err(core.violation(
                    ViolationKind::Execution,
                    format!("{:?} was answered as ordered but never executed on shard {}", rec.id, p.shard),
                ));
            }
        }
        Ok(())
    }

    /// On `shard`, conflicting transactions executed in final-timestamp order, and (if the
    /// run checks it) in the order of the shard's committed log.
    fn check_execution_order(&self, core: &Core<'_>, shard: ShardId) -> Step {
        let mut execs = Vec::new();
        for &id in self.executions(shard) {
            let rec = &core.cs.history.txns[core.cs.index[&id]];
            let ts = rec.ts().expect("checked above");
            let log_ts = self.durable(shard, id).ts().unwrap_or(ts);
            let keys = rec.piece(shard).expect("participant checked at execution");
            execs.push(Exec { id, by_final: (ts, id), by_log: (log_ts, id), keys });
        }
        let describe =
            |e: &Exec| format!("{:?} (final ts {}, ts in shard {shard}'s log {})", e.id, e.by_final.0, e.by_log.0);
        if let Some(Inversion { earlier: a, later: b, key, access }) = first_inversion(&execs, |e| e.by_final) {
            let msg = format!(
                "on shard {shard}, {} executed before {}, which conflicts with it on key {} \
                 ({access:?}), but has the smaller final timestamp",
                describe(&execs[a]),
                describe(&execs[b]),
                checker::show_key(key)
            );
            return Err(core.violation(ViolationKind::ExecutionOrder, msg));
        }
        if !core.config.check_log_order {
            return Ok(());
        }
        if let Some(Inversion { earlier: a, later: b, key, access }) = first_inversion(&execs, |e| e.by_log) {
            let msg = format!(
                "timestamp inversion on shard {shard}: {} executed before {}, which conflicts with it \
                 on key {} ({access:?}), but shard {shard}'s committed log orders them the other \
                 way round, so a replica or a new leader replaying that log would run them in the \
                 opposite order",
                describe(&execs[a]),
                describe(&execs[b]),
                checker::show_key(key)
            );
            return Err(core.violation(ViolationKind::ExecutionOrder, msg));
        }
        Ok(())
    }

    /// Cross-shard transactions submitted, and those whose participants' committed proposals
    /// differed (the ones that needed the second round).
    fn count_cross_shard(&self, core: &Core<'_>) -> (u64, u64) {
        let (mut cross, mut differed) = (0, 0);
        for rec in &core.cs.history.txns {
            if rec.pieces.len() < 2 {
                continue;
            }
            cross += 1;
            let proposals: Vec<Option<Timestamp>> =
                rec.pieces.iter().map(|p| self.durable(p.shard, rec.id).prepared).collect();
            if proposals.iter().all(Option::is_some) && proposals.iter().any(|p| *p != proposals[0]) {
                differed += 1;
            }
        }
        (cross, differed)
    }

    /// Replays every shard's committed log into a fresh follower and requires it to rebuild
    /// exactly the leader's store (DESIGN.md rule 5: execution is a deterministic function of
    /// the ordered log). The converged leader has nothing pending, so everything it holds
    /// prepared is decided and executed: a final `Applied` marker past every timestamp stands
    /// for the one its next tick would log.
    fn check_followers(&self, core: &Core<'_>) -> Step {
        for shard in 0..core.config.shards {
            let node = self.shard_node(shard);
            let records = node
                .log()
                .replay()
                .and_then(|r| r.records::<LogRecord>())
                .map_err(|e| core.violation(ViolationKind::Invariant, format!("shard {shard}'s log: {e}")))?;
            let mut follower = Follower::new(shard, core.config.initial(shard), core.config.registry());
            for entry in &records {
                follower.apply(entry);
            }
            let index = records.last().map_or(0, |e| e.index) + 1;
            follower.apply(&LogEntry { index, record: LogRecord::Applied { ts: Timestamp::MAX } });
            let leader_store = node.replica().store();
            if follower.queued_len() != 0 || follower.store() != leader_store {
                return Err(core.violation(
                    ViolationKind::StateMismatch,
                    format!(
                        "shard {shard}: a follower replaying the {} committed records rebuilds a different \
                         store ({} keys, hash {:x}, {} transactions still queued) than the leader's ({} keys, \
                         hash {:x})",
                        records.len(),
                        follower.store().len(),
                        follower.store().state_hash(),
                        follower.queued_len(),
                        leader_store.len(),
                        leader_store.state_hash()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Every client is Luigi's coordinator and saw no participants answer with different
/// timestamps; returns their retries.
fn check_coordinators(core: &Core<'_>) -> Result<u64, Violation> {
    let mut retries = 0;
    for (id, c) in (1..).zip(&core.cs.nodes) {
        // The ideal-log configuration runs Luigi only (`crate::run` refuses the baselines).
        match c.coord.protocol() {
            Protocol::Luigi => {}
            Protocol::Occ | Protocol::TwoPl | Protocol::Direct => {
                let msg = format!("client {id} is not Luigi's coordinator in the ideal-log configuration");
                return Err(core.violation(ViolationKind::Config, msg));
            }
        }
        let stats = c.coord.counters();
        retries += stats.flights.retries;
        if stats.ts_mismatch != 0 {
            return Err(core.violation(
                ViolationKind::TimestampMismatch,
                format!(
                    "client {} saw {} transactions whose participants answered with \
                     different timestamps",
                    id, stats.ts_mismatch
                ),
            ));
        }
    }
    Ok(retries)
}

fn add_stats(a: LeaderStats, b: LeaderStats) -> LeaderStats {
    LeaderStats {
        admitted: a.admitted + b.admitted,
        bumped: a.bumped + b.bumped,
        bumped_late: a.bumped_late + b.bumped_late,
        bumped_floor: a.bumped_floor + b.bumped_floor,
        bumped_conflict: a.bumped_conflict + b.bumped_conflict,
        executed: a.executed + b.executed,
        rejected: a.rejected + b.rejected,
        malformed: a.malformed + b.malformed,
        ahead_of_clock: a.ahead_of_clock + b.ahead_of_clock,
        expired: a.expired + b.expired,
        duplicates: a.duplicates + b.duplicates,
        cross_decided: a.cross_decided + b.cross_decided,
        cross_differed: a.cross_differed + b.cross_differed,
        aborted: a.aborted + b.aborted,
        early_overflow: a.early_overflow + b.early_overflow,
        recover_sent: a.recover_sent + b.recover_sent,
        recover_forgotten: a.recover_forgotten + b.recover_forgotten,
        recover_acknowledged: a.recover_acknowledged + b.recover_acknowledged,
        recover_kept: a.recover_kept + b.recover_kept,
        outcomes_full: a.outcomes_full + b.outcomes_full,
        fast_proposals: a.fast_proposals + b.fast_proposals,
        early_answers: a.early_answers + b.early_answers,
        fast_asked: a.fast_asked + b.fast_asked,
        fast_ineligible: a.fast_ineligible + b.fast_ineligible,
        fast_unclean: a.fast_unclean + b.fast_unclean,
        fast_marked: a.fast_marked + b.fast_marked,
    }
}

/// One execution on one shard, for the order check.
struct Exec<'k> {
    id: TxnId,
    /// (final timestamp, id): the order the clients were promised.
    by_final: (Timestamp, TxnId),
    /// (timestamp in this shard's committed log, id): the order a replica would replay.
    by_log: (Timestamp, TxnId),
    keys: &'k KeySet,
}

/// An execution as a key's order sees it: its position, then its index into the executions
/// (compared in that order).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Placed {
    pos: (Timestamp, TxnId),
    exec: usize,
}

/// Per key, the last write and the latest read since it.
#[derive(Default)]
struct KeyOrder {
    last_write: Option<Placed>,
    max_read: Option<Placed>,
}

/// Two conflicting executions whose positions are not increasing in execution order.
struct Inversion<'k> {
    /// Index into the executions of the one executed earlier.
    earlier: usize,
    /// Index of the one executed later.
    later: usize,
    /// The key they conflict on.
    key: &'k Key,
    /// The later one's access to it.
    access: Access,
}

/// The first pair of conflicting executions, in execution order, whose positions under `pos`
/// are not increasing.
fn first_inversion<'k>(execs: &[Exec<'k>], pos: impl Fn(&Exec<'k>) -> (Timestamp, TxnId)) -> Option<Inversion<'k>> {
    let mut keys: HashMap<&Key, KeyOrder> = HashMap::new();
    for (i, e) in execs.iter().enumerate() {
        let me = pos(e);
        for (key, access) in e.keys.entries() {
            let k = keys.entry(key).or_default();
            let mut ahead = k.last_write;
            if access == Access::Write {
                ahead = ahead.max(k.max_read);
            }
            if let Some(Placed { pos: p, exec: j }) = ahead {
                if p >= me {
                    return Some(Inversion { earlier: j, later: i, key, access });
                }
            }
            let placed = Placed { pos: me, exec: i };
            match access {
                Access::Read => k.max_read = k.max_read.max(Some(placed)),
                Access::Write => {
                    k.last_write = Some(placed);
                    k.max_read = None;
                }
            }
        }
    }
    None
}
