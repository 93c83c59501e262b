//! The fault injectors of the replicated world: random crashes, isolations and Raft-only
//! partitions, majority losses, and coordinators that die after a partial dispatch.

use super::*;

impl FailoverWorld<'_> {
    pub(super) fn fault(&mut self, action: FaultAction) -> Step {
        self.trace_hash = fold(fold(self.trace_hash, self.now), 0xfa_u64);
        match action {
            FaultAction::Random => self.random_fault(),
            FaultAction::Restart(s, i) => {
                self.last_repair_us = self.now;
                if self.replicas[s as usize][i as usize].node.is_none() {
                    self.restart(s, i)?;
                }
                Ok(())
            }
            FaultAction::LoseMajority(outage) => self.lose_majority(outage),
            FaultAction::Heal(s, i) => {
                self.last_repair_us = self.now;
                self.trace(|| format!("R{s}.{i} healed"));
                let node = &mut self.replicas[s as usize][i as usize];
                node.isolated = false;
                node.raft_cut = false;
                self.links_up(s, i)
            }
        }
    }

    pub(super) fn random_fault(&mut self) -> Step {
        if self.quiescing || self.now > self.faults.faults_until_us {
            return Ok(());
        }
        let next = self.now + self.faults.fault_gap.sample(&mut self.fault_rng).max(1);
        self.schedule_fault(next, FaultAction::Random);
        let s = self.fault_rng.gen_range(0..self.config.shards);
        let kind = self.fault_rng.gen_range(0..5u32);
        let random = self.fault_rng.gen_range(0..self.n);
        let down = self.faults.down.sample(&mut self.fault_rng).max(1);
        // Faults stay a minority of each group (one of 3, two of 5), so it keeps a majority.
        let faulty = self.replicas[s as usize].iter().filter(|r| r.faulty()).count() as u32;
        if faulty >= (self.n - 1) / 2 {
            return Ok(());
        }
        let leader = (0..self.n).find(|&i| self.serving(s, i)).unwrap_or(random);
        self.trace_hash = fold(self.trace_hash, u64::from(kind) << 32 | u64::from(s));
        match kind {
            0 => self.crash(s, leader, down),
            1 => self.crash(s, random, down),
            2 | 3 => {
                let target = if kind == 2 { leader } else { random };
                self.trace(|| format!("R{s}.{target} isolated for {down} us"));
                self.replicas[s as usize][target as usize].isolated = true;
                self.links_down(s, target, false)?;
                self.report.cuts += 1;
                self.schedule_fault(self.now + down, FaultAction::Heal(s, target));
                Ok(())
            }
            _ => {
                self.trace(|| format!("R{s}.{leader} cut from its group for {down} us"));
                self.replicas[s as usize][leader as usize].raft_cut = true;
                self.links_down(s, leader, true)?;
                self.report.cuts += 1;
                self.schedule_fault(self.now + down, FaultAction::Heal(s, leader));
                Ok(())
            }
        }
    }

    /// Crashes a majority of `outage.shard` (its serving leader first, then the lowest
    /// numbered others) for `outage.down_us`: the shard has no quorum, so it elects nobody
    /// and commits nothing until they restart.
    pub(super) fn lose_majority(&mut self, outage: Outage) -> Step {
        let s = outage.shard;
        let majority = self.n / 2 + 1;
        self.trace(|| format!("shard {s} loses its majority for {} us", outage.down_us));
        self.report.outages += 1;
        let (mut victims, others): (Vec<u32>, Vec<u32>) = (0..self.n).partition(|&i| self.serving(s, i));
        victims.extend(others);
        for i in victims.into_iter().take(majority as usize) {
            self.crash(s, i, outage.down_us)?;
        }
        Ok(())
    }

    pub(super) fn coordinator_dies(&self) -> bool {
        let alive = self.cs.nodes.iter().filter(|c| !c.dead).count();
        self.faults.kill == Some(KillPoint::CoordinatorPartial)
            && self.kills_left > 0
            && self.now >= self.next_kill_ok_at
            && alive > 1
            && !self.quiescing
    }

    pub(super) fn kill_client(&mut self, id: ClientId) -> Step {
        self.trace(|| format!("c{id} dies"));
        self.trace_hash = fold(fold(self.trace_hash, 0xc1d), id);
        self.kills_left -= 1;
        self.report.kills += 1;
        self.next_kill_ok_at = self.now + self.faults.kill_gap_us;
        let node = self.client(id)?;
        node.dead = true;
        let lost: Vec<TxnId> =
            self.cs.history.txns.iter().filter(|t| t.id.client == id && t.answers.is_empty()).map(|t| t.id).collect();
        for t in lost {
            self.orphans.insert(t, None);
        }
        self.schedule_wake(Node::Client(id), None);
        Ok(())
    }
}
