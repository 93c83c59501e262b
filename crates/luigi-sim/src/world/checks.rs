//! The ideal-log world's checks: each execution against the committed logs (rule 4), every
//! reply (rule 7), and after the run that exactly the ordered transactions executed, in
//! timestamp order per key, with the followers agreeing.

use std::collections::HashMap;

use luigi_protocol::leader::follower::Follower;
use luigi_protocol::leader::LeaderStats;
use luigi_protocol::log::LogEntry;
use luigi_store::{Key, Store};
use luigi_txn::msg::TxnReply;
use luigi_txn::types::{Access, KeySet, Protocol, ShardId, Timestamp, TxnId};

use super::IdealLog;
use crate::checker;
use crate::engine::{Core, Step};
use crate::hosted::check_run;
use crate::log::{check_rule4, Durable};
use crate::violation::{Violation, ViolationKind};
use crate::{Latency, RunReport};

impl IdealLog {
    /// Shard `shard` just executed `id`: it must be a participant that has not executed it
    /// before, and (rule 4) every participant must durably hold its final timestamp.
    pub(super) fn on_executed(&mut self, core: &mut Core<'_>, shard: ShardId, id: TxnId) -> Step {
        core.trace(|| format!("L{shard} executes {id:?}"));
        core.fold(0xe8ec_u64 ^ u64::from(shard));
        core.fold(id.seq ^ (id.client << 40));
        let Some(&i) = core.cs.index.get(&id) else {
            return Err(core.violation(
                ViolationKind::Execution,
                format!("shard {shard} executed {id:?}, which was never submitted"),
            ));
        };
        let shards: Vec<ShardId> = core.cs.history.txns[i].pieces.iter().map(|p| p.shard).collect();
        if !shards.contains(&shard) {
            return Err(core.violation(
                ViolationKind::Execution,
                format!("shard {shard} executed {id:?}, whose participants are {shards:?}"),
            ));
        }
        if !self.executed.insert((id, shard)) {
            return Err(core.violation(ViolationKind::Execution, format!("shard {shard} executed {id:?} twice")));
        }
        self.executions[shard as usize].push(id);
        if core.config.check_durable_decisions {
            self.check_durable(core, shard, id, &shards)?;
        }
        Ok(())
    }

    /// DESIGN.md rule 4 at the moment `shard` executes `id` (see [`check_rule4`]), over the
    /// participants' logs.
    pub(super) fn check_durable(&mut self, core: &Core<'_>, shard: ShardId, id: TxnId, shards: &[ShardId]) -> Step {
        let now = core.now;
        let durable: Vec<(ShardId, Durable)> =
            shards.iter().map(|&p| (p, self.leaders[p as usize].leader.log_mut().durable(id, now))).collect();
        check_rule4(&format!("shard {shard}"), shard, id, None, &durable)
            .map_err(|msg| core.violation(ViolationKind::NotDurable, msg))
    }

    /// Checks a reply as the leader sends it.
    pub(super) fn check_reply(&mut self, core: &mut Core<'_>, shard: ShardId, r: &TxnReply) -> Step {
        core.cs.replies.check_reply(shard, r).map_err(|(kind, msg)| core.violation(kind, msg))
    }

    /// After the run: exactly the ordered transactions were executed, once on each
    /// participant, and on every shard conflicting ones executed in final-timestamp order and
    /// in the order of the shard's own committed log.
    pub(super) fn check_executions(&mut self, core: &Core<'_>) -> Step {
        self.check_only_ordered_executed(core)?;
        self.check_ordered_executed_everywhere(core)?;
        for shard in 0..core.config.shards {
            self.check_execution_order(core, shard)?;
        }
        Ok(())
    }

    /// Nothing rejected or aborted left a trace: whatever a shard executed was ordered.
    fn check_only_ordered_executed(&self, core: &Core<'_>) -> Step {
        for (shard, execs) in self.executions.iter().enumerate() {
            for id in execs {
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
    fn check_ordered_executed_everywhere(&mut self, core: &Core<'_>) -> Step {
        let now = core.now;
        for rec in &core.cs.history.txns {
            if rec.ts().is_none() {
                continue;
            }
            for p in &rec.pieces {
                if self.leaders[p.shard as usize].leader.log_mut().durable(rec.id, now).aborted {
                    return Err(core.violation(
                        ViolationKind::Execution,
                        format!("{:?} was answered as ordered although shard {} logged its ABORT", rec.id, p.shard),
                    ));
                }
            }
            if let Some(p) = rec.pieces.iter().find(|p| !self.executed.contains(&(rec.id, p.shard))) {
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
    fn check_execution_order(&mut self, core: &Core<'_>, shard: ShardId) -> Step {
        let now = core.now;
        let mut execs = Vec::new();
        for &id in &self.executions[shard as usize] {
            let rec = &core.cs.history.txns[core.cs.index[&id]];
            let ts = rec.ts().expect("checked above");
            let log_ts = self.leaders[shard as usize].leader.log_mut().durable(id, now).ts().unwrap_or(ts);
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
    pub(super) fn count_cross_shard(&mut self, core: &Core<'_>) -> (u64, u64) {
        let now = core.now;
        let (mut cross, mut differed) = (0, 0);
        for rec in &core.cs.history.txns {
            if rec.pieces.len() < 2 {
                continue;
            }
            cross += 1;
            let proposals: Vec<Option<Timestamp>> = rec
                .pieces
                .iter()
                .map(|p| self.leaders[p.shard as usize].leader.log_mut().durable(rec.id, now).prepared)
                .collect();
            if proposals.iter().all(Option::is_some) && proposals.iter().any(|p| *p != proposals[0]) {
                differed += 1;
            }
        }
        (cross, differed)
    }
}

impl IdealLog {
    /// Replays every shard's log into a fresh follower replica and requires it to rebuild
    /// exactly the leader's store (DESIGN.md rule 5: execution is a deterministic function of
    /// the ordered log). A final `Applied` marker covers everything the leader executed.
    pub(super) fn check_followers(&mut self, core: &Core<'_>) -> Result<(), Violation> {
        for s in 0..self.leaders.len() {
            self.leaders[s].leader.mark_applied();
            let shard = s as u32;
            let mut follower = Follower::new(shard, core.config.initial(shard), core.config.registry());
            let entries: Vec<LogEntry> = self.leaders[s].leader.log_mut().all_entries().cloned().collect();
            for entry in &entries {
                follower.apply(entry);
            }
            let leader_store = self.leaders[s].leader.store();
            if follower.queued_len() != 0 || follower.store() != leader_store {
                return Err(core.violation(
                    ViolationKind::StateMismatch,
                    format!(
                        "shard {s}: a follower replaying the {} log entries rebuilds a different store \
                         ({} keys, hash {:x}, {} transactions still queued) than the leader's ({} keys, hash {:x})",
                        entries.len(),
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

impl IdealLog {
    /// The end-of-run checks (coordinators, idle leaders, executions, followers, the
    /// checker) and the report.
    pub(super) fn finish_checks(mut self, core: Core<'_>) -> Result<RunReport, Violation> {
        let retries = check_coordinators(&core)?;
        self.check_leaders_idle(&core)?;
        self.check_executions(&core)?;
        self.check_followers(&core)?;
        let (cross_shard, cross_differed) = self.count_cross_shard(&core);
        let stores: Vec<&Store> = self.leaders.iter().map(|l| l.leader.store()).collect();
        let summary =
            check_run(core.config, &core.cs.history, &core.cs.orphans, &stores).map_err(|v| v.at(core.now))?;
        let mut latencies: Vec<u64> =
            core.cs.history.txns.iter().map(|t| t.answers[0].at.us - t.dispatched.us).collect();
        latencies.sort_unstable();
        let leaders = self.leaders.iter().map(|l| l.leader.stats()).fold(LeaderStats::default(), add_stats);
        let net = core.net_stats();
        Ok(RunReport {
            seed: core.config.seed,
            txns: core.config.txns,
            committed: summary.committed,
            proc_aborted: summary.proc_aborted,
            rejected: summary.rejected,
            retries,
            bumped: leaders.bumped,
            duplicates: leaders.duplicates,
            cross_shard,
            cross_differed,
            leaders,
            peer_batches: net.peer_batches,
            busy_wakes: self.busy_wakes,
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
}

/// Every client is Luigi's coordinator and saw no participants answer with different
/// timestamps; returns their retries.
fn check_coordinators(core: &Core<'_>) -> Result<u64, Violation> {
    let mut retries = 0;
    for (id, c) in (1..).zip(&core.cs.nodes) {
        // The ideal-log model runs Luigi only (`crate::run` refuses the baselines).
        match c.coord.protocol() {
            Protocol::Luigi => {}
            Protocol::Occ | Protocol::TwoPl | Protocol::Direct => {
                let msg = format!("client {id} is not Luigi's coordinator in the ideal-log model");
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

impl IdealLog {
    /// No leader holds a transaction pending once every transaction was answered.
    fn check_leaders_idle(&self, core: &Core<'_>) -> Step {
        for (s, l) in self.leaders.iter().enumerate() {
            if l.leader.pending_len() != 0 {
                return Err(core.violation(
                    ViolationKind::Invariant,
                    format!(
                        "shard {s} still has {} transactions pending {} us after every \
                         transaction was answered",
                        l.leader.pending_len(),
                        core.now - core.answered_at
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn add_stats(a: LeaderStats, b: LeaderStats) -> LeaderStats {
    LeaderStats {
        admitted: a.admitted + b.admitted,
        bumped: a.bumped + b.bumped,
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
