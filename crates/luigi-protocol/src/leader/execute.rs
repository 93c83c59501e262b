//! Release from the hold queue and execution (DESIGN.md rules 5 and 14): a released
//! transaction runs its procedure on this shard's piece, its answer is stored (sent once the
//! watermark passes it, with the log position it depends on), and the execution is reported
//! as a [`LeaderOutput::Executed`] effect.

use super::agreement::Agreement;
use super::answers::Answer;
use super::{LeaderOutput, ShardLeader};
use crate::log::{LogRecord, ReplicatedLog};
use luigi_txn::msg::TxnError;
use luigi_txn::types::{TimeUs, TxnId};

impl<L: ReplicatedLog<LogRecord>> ShardLeader<L> {
    /// Releases from the hold queue, in (timestamp, id) order, every transaction that may run
    /// at `now`, and executes each.
    pub(super) fn release_and_execute(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        let mut released = Vec::new();
        let ignore_conflicts = self.config.mutations.release_ignores_conflicts;
        self.queue.release(now, &mut released, ignore_conflicts);
        for id in released {
            if let Some(p) = self.pending.get(&id) {
                self.held_us = self.held_us.saturating_add(now.saturating_sub(p.admitted_us));
            }
            self.execute(id, out);
        }
    }

    /// Runs a released transaction's piece, stores its answer and reports the execution.
    pub(super) fn execute(&mut self, id: TxnId, out: &mut Vec<LeaderOutput>) {
        let p = self.remove_pending(id).expect("released transactions are pending");
        assert!(
            p.agreement.as_ref().is_none_or(Agreement::is_decided),
            "executing an undecided cross-shard transaction"
        );
        let shard = self.config.shard;
        let keys = p.txn.piece(shard).expect("participant");
        // At its final timestamp: the versions it replaces serve snapshot reads (rule 23).
        let outcome = self
            .registry
            .execute_at(&p.txn.procedure, &p.txn.args, &mut self.store, keys, shard, p.ts)
            .map_err(TxnError::from);
        // Speculative (rule 14): what it read may rest on records not committed yet.
        let committed = self.committed_index;
        let position = self.spec.position_for(keys, p.prepare_index, committed);
        self.spec.executed(id, keys, position, committed);
        self.floors.record_release(keys, p.ts);
        match self.fast.as_mut().and_then(|f| f.executed(id, p.ts, keys)) {
            Some(true) => self.stats.fast_marked += 1,
            Some(false) => self.stats.fast_unclean += 1,
            None => {}
        }
        self.stats.executed += 1;
        self.procedure_commits.committed(&p.txn.procedure);
        self.max_executed_ts = self.max_executed_ts.max(p.ts);
        let rounds = p.agreement.as_ref().map_or(0, Agreement::rounds);
        self.answers.insert(id, Answer { ts: p.ts, outcome, arrival_delta_us: p.arrival_delta_us, rounds }, p.txn.ts);
        if p.txn.is_cross_shard() {
            let shards: Vec<_> = p.txn.shards().collect();
            self.answers.executed_cross(shard, id, p.ts, &shards);
        }
        self.unanswered.insert((p.ts, id));
        out.push(LeaderOutput::Executed { shard, id, ts: p.ts });
    }
}
