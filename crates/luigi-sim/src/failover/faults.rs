//! The fault injectors of the Raft cluster model: random crashes, isolations, Raft-only and
//! (with [`FaultConfig::partitions`](super::FaultConfig)) one-way and held partitions
//! (`partition.rs`), planned partitions, majority losses, hostile fast-path dispatches before
//! leader kills, and the decision that a coordinator dies after a partial dispatch (the
//! engine kills it).

use luigi_txn::types::ShardId;
use rand::Rng;

use super::config::{CutKind, CutMode};
use super::partition::ActiveCut;
use super::{FaultAction, KillPoint, Outage, RaftGroups};
use crate::engine::{local_clock, Core, Step};

impl RaftGroups<'_> {
    pub(super) fn apply_fault(&mut self, core: &mut Core<'_>, action: FaultAction) -> Step {
        let now = core.now;
        core.fold(now);
        core.fold(0xfa);
        match action {
            FaultAction::Random => self.random_fault(core),
            FaultAction::Restart(s, i) => {
                self.last_repair_us = core.now;
                if self.replicas[s as usize][i as usize].node.is_none() {
                    self.restart(core, s, i)?;
                }
                Ok(())
            }
            FaultAction::LoseMajority(outage) => self.lose_majority(core, outage),
            FaultAction::Heal(s, i) => {
                self.last_repair_us = core.now;
                core.trace(|| format!("R{s}.{i} healed"));
                self.heal_replica(core, s, i)
            }
            FaultAction::Cut(index) => {
                let planned = self.faults.cuts[index];
                let s = planned.shard;
                let target = planned.replica.or_else(|| (0..self.n).find(|&i| self.serving(s, i))).unwrap_or(0);
                let cut = ActiveCut { kind: planned.kind, mode: planned.mode };
                self.cut_replica(core, s, target, cut, planned.down_us)
            }
            FaultAction::ObserveOwd => {
                self.observe_owd(core);
                Ok(())
            }
        }
    }

    fn random_fault(&mut self, core: &mut Core<'_>) -> Step {
        if self.quiescing || core.now > self.faults.faults_until_us {
            return Ok(());
        }
        let next = core.now + self.faults.fault_gap.sample_us(&mut self.fault_rng).max(1);
        self.schedule_fault(core, next, FaultAction::Random);
        let s = self.fault_rng.gen_range(0..core.config.shards);
        // Without partitions, the draws of the runs before them (their seeds' meaning).
        let kinds: u32 = if self.faults.partitions { 10 } else { 5 };
        let kind = self.fault_rng.gen_range(0..kinds);
        let random = self.fault_rng.gen_range(0..self.n);
        let down = self.faults.down.sample_us(&mut self.fault_rng).max(1);
        // Faults stay a minority of each group (one of 3, two of 5), so it keeps a majority.
        let faulty = self.replicas[s as usize].iter().filter(|r| r.faulty()).count() as u32;
        if faulty >= (self.n - 1) / 2 {
            return Ok(());
        }
        let leader = (0..self.n).find(|&i| self.serving(s, i)).unwrap_or(random);
        core.fold(u64::from(kind) << 32 | u64::from(s));
        match kind {
            0 => self.crash(core, s, leader, down),
            1 => self.crash(core, s, random, down),
            _ => {
                let (target, kind, mode) = match kind {
                    2 => (leader, CutKind::BothWays, CutMode::Lost),
                    3 => (random, CutKind::BothWays, CutMode::Lost),
                    4 => (leader, CutKind::FromGroup, CutMode::Lost),
                    5 => (leader, CutKind::Outgoing, CutMode::Lost),
                    6 => (random, CutKind::Incoming, CutMode::Lost),
                    7 => (leader, CutKind::BothWays, CutMode::Held),
                    8 => (leader, CutKind::Incoming, CutMode::Held),
                    _ => (random, CutKind::Outgoing, CutMode::Held),
                };
                self.cut_replica(core, s, target, ActiveCut { kind, mode }, down)
            }
        }
    }

    /// Crashes a majority of `outage.shard` (its serving leader first, then the lowest
    /// numbered others) for `outage.down_us`: the shard has no quorum, so it elects nobody
    /// and commits nothing until they restart.
    fn lose_majority(&mut self, core: &mut Core<'_>, outage: Outage) -> Step {
        let s = outage.shard;
        let majority = self.n / 2 + 1;
        core.trace(|| format!("shard {s} loses its majority for {} us", outage.down_us));
        self.report.outages += 1;
        let (mut victims, others): (Vec<u32>, Vec<u32>) = (0..self.n).partition(|&i| self.serving(s, i));
        victims.extend(others);
        for i in victims.into_iter().take(majority as usize) {
            self.crash(core, s, i, outage.down_us)?;
        }
        Ok(())
    }

    /// [`FaultConfig::hostile_fast`]: the followers of `s` (every replica but the leader
    /// `leader` that is up) get the hostile dispatches on the fast path, the same ones (as a
    /// client sends them), stamped by the leader's clock.
    pub(super) fn send_hostile(&mut self, core: &mut Core<'_>, s: ShardId, leader: u32) -> Step {
        let now = local_clock(core.now, self.replicas[s as usize][leader as usize].offset_us);
        let dispatches = super::hostile_dispatches(s, core.config.shards, now, self.hostile_sent + 1);
        self.hostile_sent += dispatches.len() as u64;
        self.report.hostile_sent += dispatches.len() as u64;
        for j in (0..self.n).filter(|&j| j != leader) {
            core.trace(|| format!("R{s}.{j} gets {} hostile fast dispatches", dispatches.len()));
            let batch = dispatches.clone();
            self.call_replica(core, s, j, false, |n, local, fx| {
                for msg in batch {
                    n.on_client(local, super::HOSTILE_CLIENT, msg, fx);
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Whether the coordinator kill point applies now (to a client that just submitted a
    /// cross-shard transaction).
    pub(super) fn coordinator_dies(&self, core: &Core<'_>) -> bool {
        let alive = core.cs.nodes.iter().filter(|c| !c.dead).count();
        self.faults.kill == Some(KillPoint::CoordinatorPartial)
            && self.kills_left > 0
            && core.now >= self.next_kill_ok_at
            && alive > 1
            && !self.quiescing
    }
}
