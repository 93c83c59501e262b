//! The Raft cluster model's checks: the oracle of what each group committed, every execution
//! against it (rule 4), every reply (rule 7), and the end-of-run checks (Raft safety,
//! durability of every answer, orphans, the checker's replay).

use std::collections::BTreeMap;

use luigi_node::ReplicaNode;
use luigi_protocol::log::LogRecord;
use luigi_store::Store;
use luigi_txn::msg::{TxnError, TxnReply};
use luigi_txn::types::{Protocol, ShardId, Timestamp, TxnId};

use super::baseline::BaseOracle;
use super::config::without_population;
use super::replicas::{luigi_watermark, serving_pending, SimReplica};
use super::{shards_of, FailoverReport, RaftGroups, Rule4Later};
use crate::checker::History;
use crate::engine::{Core, Step};
use crate::hosted::check_run;
use crate::log::{check_rule4, Durable};
use crate::violation::{Violation, ViolationKind};

/// How a run's answers are checked at the end (by protocol).
enum Checked {
    /// Luigi: replayed in the order of the answered timestamps.
    Timestamps,
    /// OCC, 2PL: replayed in the serial order derived from the logs (this history and these
    /// orphans carry it as their timestamps).
    Derived(History, BTreeMap<TxnId, Option<Timestamp>>),
    /// Direct: not transactional, durability only.
    DurabilityOnly,
}

/// Each converged group's serving leader's store, adding the Luigi leaders' recovery and
/// fast-path counters to `report`.
pub(super) fn leader_stores<'r>(replicas: &'r [Vec<SimReplica>], report: &mut FailoverReport) -> Vec<&'r Store> {
    let mut stores = Vec::new();
    for group in replicas {
        let leader = group
            .iter()
            .filter_map(|n| n.node.as_ref().map(ReplicaNode::replica))
            .find(|r| r.is_serving())
            .expect("converged");
        stores.push(leader.store());
        if let Some(stats) = leader.leader_figures().and_then(|f| f.agreement) {
            report.recover_sent += stats.recover_sent;
            report.recover_kept += stats.recover_kept;
            report.recover_acknowledged += stats.recover_acknowledged;
            report.fast_proposals += stats.fast_proposals;
            report.early_answers += stats.early_answers;
        }
    }
    stores
}

impl RaftGroups<'_> {
    /// Folds the entries replica `i` knows committed into the shard's oracle, checking that
    /// they agree with what other replicas reported committed.
    pub(super) fn update_oracle(&mut self, core: &Core<'_>, s: ShardId, i: u32) -> Step {
        let log = self.replicas[s as usize][i as usize].node.as_ref().expect("up").log();
        let commit = log.commit_index();
        let oracle = &mut self.oracle[s as usize];
        let known = oracle.entries.len() as u64;
        let check = commit.min(known);
        // Compacted entries are gone from memory (the snapshot's own index keeps its term).
        if check > 0 && check >= log.snapshot_index() {
            let term = log.term_at(check);
            if term != Some(oracle.entries[(check - 1) as usize].0) {
                let msg = format!(
                    "R{s}.{i} has term {term:?} at committed index {check}, but the group committed term {} there",
                    oracle.entries[(check - 1) as usize].0
                );
                return Err(core.violation(ViolationKind::Invariant, msg));
            }
        }
        for index in known + 1..=commit {
            let Some(e) = log.entry(index) else {
                let msg = format!("R{s}.{i} reports index {index} committed but does not hold it");
                return Err(Violation::new(ViolationKind::Invariant, msg));
            };
            oracle.entries.push((e.term, crate::hash::fnv1a(&e.data) ^ u64::from(e.entry_type as u32)));
            if e.entry_type as i32 != 0 || e.data.is_empty() {
                continue;
            }
            match core.config.protocol {
                Protocol::Luigi => {}
                Protocol::Occ | Protocol::TwoPl | Protocol::Direct => {
                    let base = oracle.base.get_or_insert_with(|| BaseOracle::new(s));
                    base.apply(index, &e.data).map_err(|why| {
                        Violation::new(ViolationKind::Execution, format!("shard {s}: committed entry {index}: {why}"))
                    })?;
                    continue;
                }
            }
            let Ok(record) = postcard::from_bytes::<LogRecord>(&e.data) else {
                return Err(Violation::new(
                    ViolationKind::Invariant,
                    format!("shard {s}: entry {index} does not decode"),
                ));
            };
            match record {
                LogRecord::Prepare { txn, ts, .. } => {
                    let d = oracle.durable.entry(txn.id).or_default();
                    d.prepares += 1;
                    d.prepared.get_or_insert(ts);
                }
                LogRecord::Decide { id, ts } => {
                    let d = oracle.durable.entry(id).or_default();
                    d.decided = d.decided.max(Some(ts));
                }
                LogRecord::Abort { id } => oracle.durable.entry(id).or_default().aborted = true,
                LogRecord::Refuse { id, .. } => oracle.durable.entry(id).or_default().refused = true,
                LogRecord::Floor { .. } | LogRecord::Applied { .. } | LogRecord::PeerApplied { .. } => {}
            }
        }
        Ok(())
    }

    /// Replica `i` of shard `s` executed `id` (reported at `ts`): once per state machine, as a
    /// participant, and (Luigi, rule 4) only once every participant durably holds its final
    /// timestamp. A baseline's serving leader also reports the single-shard reads it runs (at
    /// the last index it logged): those may run again (a retry), and are noted for placing
    /// the answered one in the shard's order.
    pub(super) fn on_executed(
        &mut self,
        core: &mut Core<'_>,
        s: ShardId,
        i: u32,
        shard: ShardId,
        id: TxnId,
        ts: Timestamp,
    ) -> Step {
        core.trace(|| format!("R{s}.{i} executes {id:?}"));
        core.fold(0xe8ec_u64 ^ self.addr(s, i).code());
        core.fold(id.seq ^ (id.client << 40));
        if id.client == super::HOSTILE_CLIENT {
            let msg = format!("R{s}.{i} executed {id:?}, a hostile dispatch its leader refuses (rule 22)");
            return Err(core.violation(ViolationKind::Execution, msg));
        }
        let Some(&k) = core.cs.index.get(&id) else {
            return Err(core.violation(ViolationKind::Execution, format!("R{s}.{i} executed {id:?}, never submitted")));
        };
        let shards = shards_of(&core.cs.history.txns[k]);
        if shard != s || !shards.contains(&s) {
            return Err(core.violation(
                ViolationKind::Execution,
                format!("R{s}.{i} executed {id:?} as shard {shard}; its participants are {shards:?}"),
            ));
        }
        match core.config.protocol {
            Protocol::Luigi => {}
            Protocol::Occ | Protocol::TwoPl | Protocol::Direct => {
                if let Some(term) = self.read_at(s, i, id, ts) {
                    core.trace(|| format!("R{s}.{i} read {id:?} at index {ts}"));
                    self.note_read(s, i, id, ts, term);
                    return Ok(());
                }
            }
        }
        if !self.replicas[s as usize][i as usize].exec_seen.insert(id) {
            return Err(core
                .violation(ViolationKind::Execution, format!("R{s}.{i} executed {id:?} twice in one state machine")));
        }
        if let Some(ideal) = self.ideal.as_mut() {
            ideal.executed(s, id);
        }
        match core.config.protocol {
            Protocol::Luigi => {}
            // Rule 4 is Luigi's agreement; a baseline installs a cross-shard piece only on its
            // decision, which its answers' durability check at the end covers.
            Protocol::Occ | Protocol::TwoPl | Protocol::Direct => return Ok(()),
        }
        if !core.config.check_durable_decisions {
            return Ok(());
        }
        let durable = self.durable_of(id, &shards);
        // Another participant's PREPARE stored on a majority of its group (what its progress
        // reports proved) is committed before any of its replicas knows it: the check waits
        // for the final logs then.
        if durable.iter().any(|(p, d)| *p != s && d.prepares == 0 && !d.aborted) {
            self.rule4_later.push(Rule4Later { who: format!("R{s}.{i}"), shard: s, id, ts });
            return Ok(());
        }
        check_rule4(&format!("R{s}.{i}"), s, id, Some(ts), &durable)
            .map_err(|msg| core.violation(ViolationKind::NotDurable, msg))
    }

    /// What each of `shards`' committed logs holds of `id`.
    fn durable_of(&self, id: TxnId, shards: &[ShardId]) -> Vec<(ShardId, Durable)> {
        shards.iter().map(|&p| (p, self.oracle[p as usize].durable.get(&id).copied().unwrap_or_default())).collect()
    }

    /// Rule 4 for the executions that ran before another participant's commit was known, over
    /// the final logs: the proposals they relied on were committed.
    pub(super) fn check_rule4_later(&mut self, core: &Core<'_>) -> Step {
        for Rule4Later { who, shard: s, id, ts } in std::mem::take(&mut self.rule4_later) {
            let shards = shards_of(&core.cs.history.txns[core.cs.index[&id]]);
            check_rule4(&format!("{who} (checked at the end)"), s, id, Some(ts), &self.durable_of(id, &shards))
                .map_err(|msg| core.violation(ViolationKind::NotDurable, msg))?;
        }
        Ok(())
    }

    pub(super) fn check_reply(&mut self, core: &mut Core<'_>, shard: ShardId, r: &TxnReply) -> Step {
        if let Err(TxnError::NotLeader { .. }) = &r.outcome {
            return Ok(()); // nothing was ordered
        }
        core.cs.replies.check_reply(shard, r).map_err(|(kind, msg)| core.violation(kind, msg))
    }

    /// The checks at the end of a converged run, and its report.
    pub(super) fn finish_checks(mut self, mut core: Core<'_>) -> Result<FailoverReport, Violation> {
        self.check_committed_prefixes(core.now)?;
        let derived = self.protocol_checks(&mut core)?;
        let alive = self.replicas.iter().flatten().filter_map(|n| n.node.as_ref());
        self.report.clock_handovers = alive.map(|n| n.clock().stats().handovers).sum();
        let stores = leader_stores(&self.replicas, &mut self.report);
        let (committed, rejected) = self.check_workload(&core, &derived, &stores)?;
        self.report.shard_hashes = stores.iter().map(|s| s.state_hash()).collect();
        self.check_every_store(&core)?;
        self.report.committed = committed;
        self.report.read_only = core.cs.history.read_only_answered();
        self.report.rejected = rejected;
        self.report.txns = core.cs.submitted;
        self.report.orphans = core.cs.orphans.len() as u64;
        self.report.unknown = core.cs.unknown;
        let counters = || core.cs.nodes.iter().map(|c| c.coord.counters());
        self.report.retries = counters().map(|c| c.flights.retries).sum();
        self.report.fast_commits = counters().map(|c| c.fast).sum();
        self.report.fanned_out = counters().map(|c| c.fanned_out).sum();
        self.report.early_commits = counters().map(|c| c.early).sum();
        self.report.late_arrivals = counters().map(|c| c.late_arrivals).sum();
        self.report.headroom_us_sum = counters().map(|c| c.headroom_us_sum).fold(0, u64::saturating_add);
        self.report.events = core.events;
        self.report.messages = core.delivered;
        self.report.trace_hash = core.trace_hash;
        Ok(self.report)
    }

    /// Raft safety: every replica's committed prefix is the group's.
    pub(super) fn check_committed_prefixes(&mut self, now: u64) -> Step {
        for (s, group) in self.replicas.iter_mut().enumerate() {
            let oracle = &self.oracle[s];
            for (i, node) in group.iter_mut().enumerate() {
                let log = node.node.as_ref().expect("healed").log();
                let commit = log.commit_index();
                for index in log.snapshot_index().max(1)..=commit.min(oracle.entries.len() as u64) {
                    let term = log.term_at(index);
                    if term != Some(oracle.entries[(index - 1) as usize].0) {
                        return Err(Violation::new(
                            ViolationKind::Invariant,
                            format!("R{s}.{i}: committed entry {index} has term {term:?}, the group's has another"),
                        )
                        .at(now));
                    }
                }
            }
        }
        Ok(())
    }

    /// What is checked, by protocol: Luigi's answers against its committed records, then
    /// the replay in timestamp order; OCC's and 2PL's in the serial order derived from
    /// their logs; direct's durability only (it is not transactional).
    fn protocol_checks(&mut self, core: &mut Core<'_>) -> Result<Checked, Violation> {
        Ok(match core.config.protocol {
            Protocol::Luigi => {
                self.check_rule4_later(core)?;
                self.luigi_durability(core)?;
                Checked::Timestamps
            }
            Protocol::Occ | Protocol::TwoPl => {
                self.check_nothing_left(core)?;
                let (history, orphans) = self.derived_history(core)?;
                self.report.orphans_executed = orphans.values().filter(|ts| ts.is_some()).count() as u64;
                Checked::Derived(history, orphans)
            }
            Protocol::Direct => {
                self.check_nothing_left(core)?;
                Checked::DurabilityOnly
            }
        })
    }

    /// The workload's checks over the leaders' final `stores` (as committed and rejected
    /// counts), in the way `derived` says.
    fn check_workload(&self, core: &Core<'_>, derived: &Checked, stores: &[&Store]) -> Result<(u64, u64), Violation> {
        // The workload's model knows nothing of the synthetic population.
        let modelled: Vec<Store> = if self.faults.population_bytes > 0 {
            stores.iter().map(|s| without_population(s)).collect()
        } else {
            Vec::new()
        };
        let checked: Vec<&Store> = if modelled.is_empty() { stores.to_vec() } else { modelled.iter().collect() };
        Ok(match derived {
            Checked::Timestamps => {
                let summary =
                    check_run(core.config, &core.cs.history, &core.cs.orphans, &checked).map_err(|v| v.at(core.now))?;
                (summary.committed, summary.rejected)
            }
            Checked::Derived(history, orphans) => {
                let summary = check_run(core.config, history, orphans, &checked).map_err(|v| v.at(core.now))?;
                (summary.committed, summary.rejected)
            }
            // Direct: no replay, no workload check (neither atomic nor isolated).
            Checked::DurabilityOnly => self.check_direct(core)?,
        })
    }

    /// Every replica holds the replayed state, not only the leaders checked.
    fn check_every_store(&self, core: &Core<'_>) -> Step {
        for (s, group) in self.replicas.iter().enumerate() {
            for (i, node) in group.iter().enumerate() {
                let hash = node.node.as_ref().map(|n| n.replica().store().state_hash());
                if hash != Some(self.report.shard_hashes[s]) {
                    let msg = format!(
                        "R{s}.{i}'s final store (hash {hash:?}) differs from its leader's, which the replay \
                         rebuilt (hash {:#x})",
                        self.report.shard_hashes[s]
                    );
                    return Err(core.violation(ViolationKind::StateMismatch, msg));
                }
            }
        }
        Ok(())
    }

    /// Luigi: nothing answered is lost (every ordered answer is durable on every participant
    /// at the answered timestamp), and each orphan was executed iff prepared everywhere and
    /// aborted nowhere.
    pub(super) fn luigi_durability(&mut self, core: &mut Core<'_>) -> Step {
        // Nothing answered is lost: every ordered answer is durable on every participant at
        // the answered timestamp.
        for rec in &core.cs.history.txns {
            let Some(ts) = rec.ts() else { continue };
            if rec.read_only() {
                continue; // a snapshot read writes no record (rule 23)
            }
            let durable: Vec<(ShardId, Durable)> = shards_of(rec)
                .into_iter()
                .map(|p| (p, self.oracle[p as usize].durable.get(&rec.id).copied().unwrap_or_default()))
                .collect();
            let final_ts = durable.iter().filter_map(|(_, d)| d.prepared).max();
            if let Some((p, d)) =
                durable.iter().find(|(_, d)| d.prepared.is_none() || d.aborted || d.refused || d.prepares > 1)
            {
                return Err(core.violation(
                    ViolationKind::NotDurable,
                    format!("{:?} was answered at ts {ts}, but shard {p}'s committed log has {d:?}", rec.id),
                ));
            }
            if final_ts != Some(ts) {
                return Err(core.violation(
                    ViolationKind::TimestampMismatch,
                    format!("{:?} was answered at ts {ts}, the committed proposals give {final_ts:?}", rec.id),
                ));
            }
        }
        // Orphans: executed iff prepared everywhere and aborted nowhere.
        let ids: Vec<TxnId> = core.cs.orphans.keys().copied().collect();
        for id in ids {
            let rec = &core.cs.history.txns[core.cs.index[&id]];
            let durable: Vec<Durable> = shards_of(rec)
                .into_iter()
                .map(|p| self.oracle[p as usize].durable.get(&id).copied().unwrap_or_default())
                .collect();
            let executed = durable.iter().all(|d| d.prepared.is_some() && !d.aborted);
            let ts = durable.iter().filter_map(|d| d.prepared).max();
            if executed {
                self.report.orphans_executed += 1;
            }
            core.cs.orphans.insert(id, if executed { ts } else { None });
        }
        Ok(())
    }

    pub(super) fn not_converged(&mut self, core: &Core<'_>) -> Violation {
        let mut msg = format!(
            "the healed cluster did not converge within {} us (one serving leader per shard, nothing pending, \
             equal stores on every replica)",
            self.faults.settle_us
        );
        for (s, group) in self.replicas.iter_mut().enumerate() {
            for (i, node) in group.iter_mut().enumerate() {
                match node.node.as_ref().map(|n| (n.replica(), n.log())) {
                    None => msg.push_str(&format!("; R{s}.{i}: down")),
                    Some((r, log)) => msg.push_str(&format!(
                        "; R{s}.{i}: serving={} pending={} store={:#x} keys={} log={:?}",
                        r.is_serving(),
                        serving_pending(r).unwrap_or(0),
                        r.store().state_hash(),
                        r.store().len(),
                        log
                    )),
                }
            }
        }
        core.violation(ViolationKind::Stuck, msg)
    }

    /// Every replica's state, for a stuck run's report.
    pub(super) fn describe_replicas(&mut self) -> String {
        let mut msg = String::new();
        for (s, group) in self.replicas.iter_mut().enumerate() {
            for (i, node) in group.iter_mut().enumerate() {
                let state = match node.node.as_ref().map(|n| (n.replica(), n.log())) {
                    None => "down".to_string(),
                    Some((r, log)) => format!(
                        "serving={} watermark={:?} pending={:?} {:?}",
                        r.is_serving(),
                        luigi_watermark(r),
                        serving_pending(r),
                        log
                    ),
                };
                msg.push_str(&format!(
                    "; R{s}.{i}{}: {state}",
                    node.cut.map(|c| format!(" ({:?} cut, {:?})", c.kind, c.mode)).unwrap_or_default()
                ));
            }
        }
        msg
    }
}
