//! A participant's side of a cross-shard transaction: execute the piece (writes buffered),
//! prepare it (lock, validate, log its writes durably, vote), install or drop it on the
//! decision, and tell a resolver what it durably knows.

use std::sync::Arc;

use luigi_protocol::log::ReplicatedLog;
use luigi_txn::msg::TxnError;
use luigi_txn::procedure::TxnCtx;
use luigi_txn::types::{ShardId, Txn, TxnId};

use super::{lock_keys, status_of, BaseLeader, Execution, Wait};
use crate::msg::{BaseItem, BaseOutput, BaseState};
use crate::record::BaseRecord;
use crate::Mode;

impl<L: ReplicatedLog<BaseRecord>> BaseLeader<L> {
    /// Round 1: run this shard's piece of `txn` on the current state, writes buffered.
    pub(super) fn on_execute(&mut self, from: ShardId, txn: Arc<Txn>, acked_below: u64) {
        let me = self.config.shard;
        let id = txn.id;
        let Some(keys) = txn.piece(me).cloned() else {
            let why = TxnError::Rejected(format!("shard {me} is not a participant"));
            return self.send(from, BaseItem::Executed { id, outcome: Err(why) });
        };
        if let Some(e) = self.executions.get(&id) {
            // The same request again: the same answer.
            let outcome = e.output.clone();
            return self.send(from, BaseItem::Executed { id, outcome });
        }
        // Known durably here (an earlier attempt under the same id): the coordinator must
        // resolve, not execute it again. Still in the log's way: it asks again after a round.
        match status_of(&self.state, &self.preparing, &self.tombstoning, id) {
            Ok(Some(state)) => return self.send(from, BaseItem::StatusIs { id, state }),
            Err(()) => return,
            Ok(None) => {}
        }
        if self.executions.len() >= self.config.executions_max {
            let why = TxnError::Busy(format!("{} pieces executed and not prepared", self.executions.len()));
            return self.send(from, BaseItem::Executed { id, outcome: Err(why) });
        }
        let (read_locks, write_locks) = lock_keys(&keys);
        // No-wait: a key locked by a transaction being committed (or, under 2PL, by any other
        // transaction) aborts this one at once.
        let locked = match self.config.mode {
            Mode::TwoPl => self.locks.try_lock(id, &read_locks, &write_locks),
            Mode::Occ | Mode::Direct => self.locks.conflict(id, &read_locks, &write_locks).map_or(Ok(()), Err),
        };
        if let Err(h) = locked {
            self.stats.lock_conflicts += 1;
            let why = TxnError::Aborted(format!("shard {me}: a key (hash {h:016x}) is locked"));
            return self.send(from, BaseItem::Executed { id, outcome: Err(why) });
        }
        let versions = read_locks.iter().chain(&write_locks).map(|h| (*h, self.versions.get(*h))).collect();
        let procedure = self.registry.get(&txn.procedure);
        let (writes, output) = match procedure {
            Some(procedure) => {
                let mut ctx = TxnCtx::new(self.state.store_mut(), &keys, me);
                let result = ctx.execute(procedure.as_ref(), &txn.args);
                let writes = ctx.writes();
                ctx.rollback();
                (writes, result.map_err(TxnError::Proc))
            }
            None => (Vec::new(), Err(TxnError::Rejected(format!("unknown procedure '{}'", txn.procedure)))),
        };
        let locked = self.config.mode == Mode::TwoPl;
        if output.is_err() {
            if locked {
                self.locks.release(id, &read_locks, &write_locks);
            }
            return self.send(from, BaseItem::Executed { id, outcome: output });
        }
        self.send(from, BaseItem::Executed { id, outcome: output.clone() });
        let at_us = self.now_us;
        let execution =
            Execution { txn, writes, output, read_locks, write_locks, versions, locked, acked_below, at_us };
        self.executions.insert(id, execution);
    }

    /// Round 2: lock (OCC), validate (OCC) and log the piece; vote once the log has it.
    pub(super) fn on_prepare(&mut self, log: &mut L, from: ShardId, id: TxnId) {
        let me = self.config.shard;
        let Some(e) = self.executions.remove(&id) else {
            match status_of(&self.state, &self.preparing, &self.tombstoning, id) {
                // Asked again: the same vote (once the log has it).
                Ok(Some(BaseState::Prepared { .. } | BaseState::Committed { .. })) => {
                    self.send(from, BaseItem::Vote { id, outcome: Ok(()) })
                }
                Ok(Some(BaseState::Aborted)) => {
                    self.send(from, BaseItem::Vote { id, outcome: Err(format!("shard {me}: aborted")) })
                }
                Err(()) => {}
                // Never executed here, or dropped (expired, or executed under an earlier leader).
                Ok(None) => self.refuse_for_good(log, from, id, format!("shard {me}: no execution to prepare")),
            }
            return;
        };
        if self.config.mode == Mode::Occ {
            if let Err(h) = self.locks.try_lock(id, &e.read_locks, &e.write_locks) {
                self.stats.lock_conflicts += 1;
                return self.refuse_for_good(log, from, id, format!("shard {me}: a key (hash {h:016x}) is locked"));
            }
            if let Some((h, _)) = e.versions.iter().find(|(h, v)| self.versions.get(*h) != *v) {
                self.stats.validation_failures += 1;
                self.locks.release(id, &e.read_locks, &e.write_locks);
                let why = format!("shard {me}: validation failed (key hash {h:016x} changed)");
                return self.refuse_for_good(log, from, id, why);
            }
        }
        let record = BaseRecord::Prepare {
            id,
            shards: e.txn.shards().collect(),
            writes: e.writes,
            output: e.output.unwrap_or_default(),
            read_locks: e.read_locks.clone(),
            write_locks: e.write_locks.clone(),
            acked_below: e.acked_below,
        };
        match self.log_record(log, record) {
            Ok(index) => {
                self.preparing.insert(id);
                self.prepared_since.insert(id, self.now_us);
                self.wait_for(index, Wait::Peer { to: from, item: BaseItem::Vote { id, outcome: Ok(()) } });
            }
            // Nothing logged: no vote (the coordinator times out and resolves).
            Err(err) => {
                tracing::debug!(?id, ?err, "prepare not logged");
                self.locks.release(id, &e.read_locks, &e.write_locks);
            }
        }
    }

    /// Logs that this shard will never prepare `id`, then votes no to `to`.
    fn refuse_for_good(&mut self, log: &mut L, to: ShardId, id: TxnId, why: String) {
        if self.tombstone(log, id, why.clone()) {
            self.after_log_peer(to, BaseItem::Vote { id, outcome: Err(why) });
        }
    }

    /// Logs a tombstone for `id` (this shard never prepares it); false if the log refused.
    fn tombstone(&mut self, log: &mut L, id: TxnId, reason: String) -> bool {
        if let Some(e) = self.executions.remove(&id) {
            if e.locked {
                self.locks.release(id, &e.read_locks, &e.write_locks);
            }
        }
        if self.state.outcome(id).is_some() {
            return true; // decided already: the tombstone adds nothing
        }
        match self.log_record(log, BaseRecord::Abort { id, reason }) {
            Ok(_) => {
                self.tombstoning.insert(id);
                true
            }
            Err(err) => {
                tracing::debug!(?id, ?err, "tombstone not logged");
                false
            }
        }
    }

    /// Sends `item` to `to` once everything logged so far is committed (see `after_log`).
    fn after_log_peer(&mut self, to: ShardId, item: BaseItem) {
        if self.last_logged <= self.committed_index {
            self.send(to, item);
        } else {
            self.wait_for(self.last_logged, Wait::Peer { to, item });
        }
    }

    /// The decision on `id`: install or drop the prepared piece (or drop its execution).
    pub(super) fn on_decide(&mut self, log: &mut L, id: TxnId, commit: bool) {
        self.prepared_since.remove(&id);
        let Some(p) = self.state.prepared().get(&id).cloned() else {
            // Not prepared here: a duplicate, or an abort of a piece executed only.
            if commit && self.state.outcome(id).is_none() {
                tracing::error!(?id, "commit of a piece never prepared here");
            }
            if !commit {
                self.on_release(id);
            }
            return;
        };
        let record =
            if commit { BaseRecord::Commit { id } } else { BaseRecord::Abort { id, reason: "aborted".into() } };
        match self.log_record(log, record) {
            Ok(_) => {
                self.locks.release(id, &p.read_locks, &p.write_locks);
                if commit {
                    for h in &p.write_locks {
                        self.versions.bump(*h);
                    }
                }
                self.unlogged_decisions.remove(&id);
            }
            // Kept prepared and locked; logged at the next tick.
            Err(err) => {
                tracing::debug!(?id, ?err, "decision not logged yet");
                self.unlogged_decisions.insert(id, commit);
            }
        }
    }

    /// `id` ended before any prepare: drop its execution (and its 2PL locks).
    pub(super) fn on_release(&mut self, id: TxnId) {
        if let Some(e) = self.executions.remove(&id) {
            if e.locked {
                self.locks.release(id, &e.read_locks, &e.write_locks);
            }
        }
    }

    /// A resolver asks what this shard durably knows of `id`.
    pub(super) fn on_status(&mut self, log: &mut L, from: ShardId, id: TxnId, out: &mut Vec<BaseOutput>) {
        match status_of(&self.state, &self.preparing, &self.tombstoning, id) {
            Ok(Some(state)) => self.send(from, BaseItem::StatusIs { id, state }),
            Err(()) => {} // in the log's way: the resolver asks again
            Ok(None) => {
                // Never prepared here: it never will be. A coordination of it still executing
                // here ends now (it could no longer prepare).
                self.abort_unprepared_coordination(id, out);
                if self.tombstone(log, id, "not prepared when a resolver asked".into()) {
                    self.after_log_peer(from, BaseItem::StatusIs { id, state: BaseState::Aborted });
                }
            }
        }
    }

    /// Pieces executed long ago and never prepared are dropped (their coordinator is gone).
    pub(super) fn expire_executions(&mut self) {
        let ttl = self.config.execution_ttl_us;
        let now = self.now_us;
        let expired: Vec<TxnId> =
            self.executions.iter().filter(|(_, e)| e.at_us + ttl <= now).map(|(id, _)| *id).collect();
        for id in expired {
            self.on_release(id);
        }
    }

    /// Decisions the log refused earlier, logged now.
    pub(super) fn log_unlogged_decisions(&mut self, log: &mut L) {
        for (id, commit) in std::mem::take(&mut self.unlogged_decisions) {
            self.on_decide(log, id, commit);
        }
    }

    /// Prepared pieces without a decision for a round get one by resolution.
    pub(super) fn resolve_stale_prepares(&mut self) {
        let due = self.now_us.saturating_sub(self.config.round_timeout_us);
        let stale: Vec<TxnId> = self
            .prepared_since
            .iter()
            .filter(|(id, since)| {
                **since <= due && !self.resolving.contains_key(id) && !self.coordinating.contains_key(id)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            let Some(p) = self.state.prepared().get(&id) else {
                self.prepared_since.remove(&id);
                continue;
            };
            if self.preparing.contains(&id) {
                continue;
            }
            let shards = p.shards.clone();
            self.prepared_since.insert(id, self.now_us);
            self.start_resolution(id, shards, None);
        }
    }
}
