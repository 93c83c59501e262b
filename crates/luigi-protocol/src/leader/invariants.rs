//! What must hold of a leader's state after every step (every public entry point has
//! returned). The simulator checks it after each event; the unit tests after each call.
//! Each check names the rule it protects.

use super::agreement::Agreement;
use super::{ShardLeader, EARLY_DROPPED_MAX};
use crate::log::{LogRecord, ReplicatedLog};
use luigi_txn::types::ClientId;
#[cfg(test)]
use luigi_txn::types::Timestamp;
use luigi_txn::Map;

impl<L: ReplicatedLog<LogRecord>> ShardLeader<L> {
    /// Checks the invariants that hold between steps, and describes the first one broken:
    ///
    /// - the watermark is at most the committed floor promise, the last `Applied` marker at
    ///   most the watermark (rules 6 and 7), and the watermark below the timestamp of every
    ///   pending transaction (rule 7: nothing at or below it is still to run);
    /// - the hold queue holds exactly the pending transactions, each at its current
    ///   timestamp and ready exactly when it is decided (rules 4, 5 and 14: a single-shard
    ///   transaction from its admission, whether or not its `PREPARE` committed yet), and
    ///   its own indexes agree;
    /// - pending transactions have no stored answer, no refusal in progress and no buffered
    ///   early agreement items; every executed, unanswered transaction has its answer stored
    ///   at its timestamp, above the watermark (rule 7, exactly once);
    /// - per-client pending counts match the pending transactions;
    /// - stalled-transaction deadlines belong to durable, undecided cross-shard transactions
    ///   and match theirs (rule 9); moves awaiting their `DECIDE` belong to pending,
    ///   unconfirmed transactions, from their logged proposal (rules 4 and 6);
    /// - the early buffers are within their bounds;
    /// - counters add up: every transaction admitted or taken over is executed, aborted or
    ///   still pending.
    ///
    /// Linear in the pending transactions and their keys: for tests and the simulator.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_watermark()?;
        self.queue.check_invariants().map_err(|e| self.broken(format!("hold queue: {e}")))?;
        self.check_pending()?;
        self.check_unanswered()?;
        self.check_agreement_state()?;
        self.check_bounds_and_counters()
    }

    fn broken(&self, what: String) -> String {
        format!("shard {} leader: {what}", self.config.shard)
    }

    fn check_watermark(&self) -> Result<(), String> {
        let w = self.watermark;
        if w > self.floor_committed {
            return Err(self.broken(format!("watermark {w} above the committed floor {}", self.floor_committed)));
        }
        if self.applied_at.1 > w {
            return Err(self.broken(format!("Applied marker {} above the watermark {w}", self.applied_at.1)));
        }
        for (id, p) in &self.pending {
            // A leader that took over queues a cross-shard transaction at its logged proposal
            // until agreement re-derives the final timestamp, which is above the watermark;
            // an earlier leader's marker may have passed that proposal once its DECIDE had
            // committed. Everything else is admitted above the watermark and only moves up.
            let rederiving = p.ts == p.proposal && p.agreement.as_ref().is_some_and(|a| a.final_ts().is_none());
            if p.ts <= w && !rederiving {
                return Err(self.broken(format!("watermark {w} passed pending {id:?} at {}", p.ts)));
            }
        }
        let closed = self.admission_closed;
        if closed < w || closed > self.floor_committed {
            return Err(self.broken(format!(
                "admission closed at {closed}, outside the watermark {w} and the committed floor {}",
                self.floor_committed
            )));
        }
        Ok(())
    }

    fn check_pending(&self) -> Result<(), String> {
        if self.queue.len() != self.pending.len() {
            let (q, p) = (self.queue.len(), self.pending.len());
            return Err(self.broken(format!("{q} transactions in the hold queue, {p} pending")));
        }
        let mut per_client: Map<ClientId, usize> = Map::default();
        for (id, p) in &self.pending {
            *per_client.entry(id.client).or_default() += 1;
            let decided = p.agreement.as_ref().is_none_or(Agreement::is_decided);
            let ready = decided;
            match self.queue.position(*id) {
                None => return Err(self.broken(format!("pending {id:?} is not in the hold queue"))),
                Some((ts, r)) if ts != p.ts || r != ready => {
                    return Err(self.broken(format!(
                        "pending {id:?} at {} (ready: {ready}) is queued at {ts} (ready: {r})",
                        p.ts
                    )));
                }
                Some(_) => {}
            }
            if self.answers.get(*id).is_some() {
                return Err(self.broken(format!("pending {id:?} already has an answer")));
            }
            if self.refusing.contains_key(id) || self.early.contains_key(id) {
                return Err(self.broken(format!("pending {id:?} is also being refused or buffered early")));
            }
        }
        if per_client != self.pending_per_client {
            return Err(self.broken(format!(
                "pending count per client {:?}, counted {:?}",
                sorted(&self.pending_per_client),
                sorted(&per_client)
            )));
        }
        Ok(())
    }

    fn check_unanswered(&self) -> Result<(), String> {
        for &(ts, id) in &self.unanswered {
            if ts <= self.admission_closed {
                return Err(self.broken(format!("{id:?} at {ts} not answered though admission closed past it")));
            }
            if self.pending.contains_key(&id) {
                return Err(self.broken(format!("{id:?} is both executed and pending")));
            }
            match self.answers.get(id) {
                Some(a) if a.ts == ts => {}
                other => return Err(self.broken(format!("executed {id:?} at {ts} has answer {other:?}"))),
            }
        }
        Ok(())
    }

    fn check_agreement_state(&self) -> Result<(), String> {
        let mut deadlines = 0;
        for (id, p) in &self.pending {
            let Some(at) = p.recover_at else { continue };
            deadlines += 1;
            if !self.recover_queue.contains(&(at, *id)) {
                return Err(self.broken(format!("{id:?}'s recovery deadline {at} is not queued")));
            }
            let undecided = p.agreement.as_ref().is_some_and(|a| !a.is_decided());
            if self.uncommitted(p.prepare_index).is_some() || !undecided {
                return Err(self.broken(format!("{id:?} has a recovery deadline but is not durable and undecided")));
            }
        }
        if deadlines != self.recover_queue.len() {
            let queued = self.recover_queue.len();
            return Err(self.broken(format!("{queued} recovery deadlines queued, {deadlines} pending")));
        }
        for &(old, id) in &self.undecided_moves {
            match self.pending.get(&id) {
                Some(p) if !p.confirmed && p.proposal == old && old <= p.ts => {}
                Some(p) => {
                    return Err(self.broken(format!(
                        "{id:?} moved from {old} awaits its DECIDE, but it has proposal {}, ts {}, confirmed {}",
                        p.proposal, p.ts, p.confirmed
                    )));
                }
                None => {
                    return Err(self.broken(format!("{id:?} moved from {old} awaits its DECIDE but is not pending")))
                }
            }
        }
        Ok(())
    }

    fn check_bounds_and_counters(&self) -> Result<(), String> {
        if self.early.len() > self.config.max_early || self.early_dropped.len() > EARLY_DROPPED_MAX {
            let (e, d) = (self.early.len(), self.early_dropped.len());
            return Err(self.broken(format!("early buffers over their bounds: {e} buffered, {d} dropped")));
        }
        if self.spec.unproven_len() > self.config.max_early {
            return Err(self.broken(format!("{} proposals held for proof, over the bound", self.spec.unproven_len())));
        }
        let (accepts, marked) = self.fast_peers.len();
        if accepts > self.config.max_early || marked > self.config.max_early {
            return Err(self.broken(format!("{accepts} peer accepts and {marked} marked proposals, over the bound")));
        }
        if self.early_candidates.len() > self.config.max_early {
            return Err(self.broken(format!("{} early-answer candidates, over the bound", self.early_candidates.len())));
        }
        // Rule 14: an answer waits for a position only while that position is not committed.
        if self.spec.answers_len() > 0 && self.spec.min_answer_position() <= Some(self.committed_index) {
            return Err(self.broken(format!("an answer waits for a committed position ({})", self.committed_index)));
        }
        let s = &self.stats;
        let came = s.admitted + self.taken_over;
        let went = s.executed + s.aborted + self.pending.len() as u64;
        if came != went {
            return Err(self.broken(format!(
                "{} admitted + {} taken over != {} executed + {} aborted + {} pending",
                s.admitted,
                self.taken_over,
                s.executed,
                s.aborted,
                self.pending.len()
            )));
        }
        if s.bumped > s.admitted || s.malformed > s.rejected {
            return Err(self.broken(format!("counters out of step: {s:?}")));
        }
        Ok(())
    }
}

fn sorted(m: &Map<ClientId, usize>) -> Vec<(ClientId, usize)> {
    let mut v: Vec<_> = m.iter().map(|(c, n)| (*c, *n)).collect();
    v.sort_unstable();
    v
}

/// State corruptions for the tests that prove [`ShardLeader::check_invariants`] catches them.
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub(super) enum Corruption {
    /// The watermark jumps to this timestamp (past whatever is pending there).
    Watermark(Timestamp),
    /// A client's pending count is off by one.
    ClientCount(ClientId),
    /// The oldest pending transaction disappears from the hold queue only.
    DropFromQueue,
    /// The stored answer of an executed, unanswered transaction is lost.
    LoseAnswer,
    /// Admission closes at this timestamp (past what the committed floor promise allows).
    AdmissionClosed(Timestamp),
}

#[cfg(test)]
impl<L: ReplicatedLog<LogRecord>> ShardLeader<L> {
    /// Breaks the state as `c` says (tests only).
    pub(super) fn corrupt(&mut self, c: Corruption) {
        match c {
            Corruption::Watermark(ts) => self.watermark = ts,
            Corruption::AdmissionClosed(ts) => self.admission_closed = ts,
            Corruption::ClientCount(client) => *self.pending_per_client.entry(client).or_default() += 1,
            Corruption::DropFromQueue => {
                let oldest = self.pending.keys().min().copied().expect("something pending");
                self.queue.remove(oldest);
            }
            Corruption::LoseAnswer => {
                let &(_, id) = self.unanswered.first().expect("something unanswered");
                // Forgetting with the watermark at the maximum drops even unsent answers.
                self.answers.forget_acked(id.client, id.seq + 1, Timestamp::MAX);
            }
        }
    }
}
