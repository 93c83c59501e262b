//! Failover and stalled transactions (DESIGN.md rules 8 and 9): a new leader built from the
//! replicated state, `Recover` for cross-shard transactions undecided for too long, and the
//! answers to other participants' `Recover` requests.

use std::sync::Arc;

use super::agreement::{Agreement, Step};
use super::answers::{Answer, Known};
use super::follower::Handover;
use super::outcomes::Outcome;
use super::speculation::DeferredRecover;
use super::{Dispatch, LeaderConfig, LeaderOutput, Pending, ShardLeader, StalledTxn};
use crate::log::{LogEntry, LogRecord, ReplicatedLog};
use crate::msg::PeerItem;
use luigi_txn::msg::TxnError;
use luigi_txn::types::{ShardId, TimeUs, Timestamp, Txn, TxnId};

impl<L: ReplicatedLog<LogRecord>> ShardLeader<L> {
    /// A new leader over the state its replica rebuilt from the committed log (DESIGN.md,
    /// failure handling). The caller has applied every committed record, including one of
    /// the new term (the election no-op), so the handover holds everything any earlier
    /// leader made durable. The new leader admits nothing at or below the recovered floor,
    /// re-queues every prepared transaction at its logged proposal, and asks the other
    /// participants of each undecided cross-shard transaction for their state at once.
    pub fn recover(config: LeaderConfig, log: &L, handover: Handover, now: TimeUs) -> Self {
        let Handover { store, registry, answers, prepared, applied_ts, floor, recovered_floor } = handover;
        let mut l = Self::new(config, log, store, registry);
        l.now = now;
        l.answers = answers;
        l.answers.set_expiry(l.config.answer_expiry_us);
        l.answers.emulate_fifo(l.config.mutations.outcomes_fifo);
        l.admission_floor = recovered_floor;
        l.floor_committed = floor;
        l.floor_proposed = floor;
        l.watermark = applied_ts;
        l.admission_closed = applied_ts;
        l.applied_at = (now, applied_ts);
        l.max_executed_ts = applied_ts;
        l.applied_exchange.committed = applied_ts;
        l.broadcast_at = (now, 0);
        let me = l.config.shard;
        for p in prepared {
            let id = p.txn.id;
            let keys = p.txn.piece(me).expect("prepared here, so a participant");
            l.queue.insert(id, p.proposal, keys);
            if let Some(f) = l.fast.as_mut() {
                // Known here, never fast (F1 needs this leader's admission); later
                // admissions below it are not fast either (F2).
                f.moved(id, p.proposal, keys);
            }
            let mut agreement = p.txn.is_cross_shard().then(|| Agreement::new(p.txn.shards().collect()));
            let recover_at = match agreement.as_mut() {
                None => {
                    l.queue.mark_ready(id);
                    None
                }
                Some(a) => {
                    // Agreement starts again from the logged proposals (a logged DECIDE is
                    // re-derived: the final timestamp is the maximum of durable proposals).
                    assert_eq!(a.on_proposal(me, p.proposal, false), Step::Wait, "others unknown yet");
                    l.recover_queue.insert((now, id));
                    Some(now)
                }
            };
            let pending = Pending {
                txn: p.txn,
                ts: p.proposal,
                proposal: p.proposal,
                confirmed: false,
                recover_at,
                prepare_index: 0,
                arrival_delta_us: p.arrival_delta_us,
                agreement,
                aborting: None,
                admitted_us: now,
            };
            l.insert_pending(id, pending);
            l.taken_over += 1;
        }
        l
    }

    /// Takes over what this replica's fast-path recovery round (R3) appended after the state
    /// it handed over: `PREPARE`s of its own term, not committed yet (DESIGN.md, "the fast
    /// path", serving before they commit). Each is pending here like one of this leader's
    /// admissions (its answer waits for its position, rule 14; a cross-shard one announces
    /// its proposal with that position) but never fast (F1 needs an admission), and nothing
    /// is admitted at or below it. Its own floor promise, proposed on winning, may be there
    /// too; other records are not expected there and are left alone.
    pub fn take_over_tail(&mut self, log: &mut L, tail: Vec<LogEntry>) {
        let me = self.config.shard;
        for entry in tail {
            let (txn, ts, arrival_delta_us) = match entry.record {
                LogRecord::Prepare { txn, ts, arrival_delta_us, .. } => (txn, ts, arrival_delta_us),
                // Its own promise, proposed on winning and not committed yet: not renewed
                // before it is due.
                LogRecord::Floor { ts } => {
                    self.floor_proposed = self.floor_proposed.max(ts);
                    continue;
                }
                LogRecord::Decide { .. }
                | LogRecord::Abort { .. }
                | LogRecord::Refuse { .. }
                | LogRecord::Applied { .. }
                | LogRecord::PeerApplied { .. } => continue,
            };
            let id = txn.id;
            let Some(keys) = txn.piece(me).cloned() else { continue };
            if self.pending.contains_key(&id) {
                continue;
            }
            self.admission_floor = self.admission_floor.max(ts);
            self.queue.insert(id, ts, &keys);
            if let Some(f) = self.fast.as_mut() {
                f.moved(id, ts, &keys);
            }
            let cross = txn.is_cross_shard();
            if !cross {
                self.queue.mark_ready(id);
            }
            let others: Vec<ShardId> = txn.shards().filter(|s| *s != me).collect();
            let agreement = cross.then(|| Agreement::new(txn.shards().collect()));
            let pending = Pending {
                txn,
                ts,
                proposal: ts,
                confirmed: false,
                recover_at: None,
                prepare_index: entry.index,
                arrival_delta_us,
                agreement,
                aborting: None,
                admitted_us: self.now,
            };
            self.insert_pending(id, pending);
            self.taken_over += 1;
            let at = self.uncommitted(entry.index);
            for shard in others {
                self.queue_peer(shard, PeerItem::Propose { id, ts, at, fast: false });
            }
            if cross {
                self.on_proposal(log, id, me, ts);
            }
        }
    }

    /// Transactions pending here for at least `recover_after_us` (a normal agreement takes a
    /// few one-way delays), oldest first, at most `max` of them. A cross-shard transaction
    /// stays here while another participant cannot answer (no majority there); each one
    /// holds this shard's watermark below its timestamp.
    pub fn stalled(&self, now: TimeUs, max: usize) -> Vec<StalledTxn> {
        let min_age_us = self.config.recover_after_us;
        let mut out: Vec<StalledTxn> = self
            .pending
            .iter()
            .filter(|(_, p)| now.saturating_sub(p.admitted_us) >= min_age_us)
            .map(|(id, p)| StalledTxn {
                id: *id,
                shards: p.txn.shards().collect(),
                age_us: now - p.admitted_us,
                durable: self.uncommitted(p.prepare_index).is_none(),
            })
            .collect();
        out.sort_by(|a, b| b.age_us.cmp(&a.age_us).then(a.id.cmp(&b.id)));
        out.truncate(max);
        out
    }

    /// Sends `Recover` for every stalled transaction and asks again one period later.
    pub(super) fn recover_stalled(&mut self, now: TimeUs) {
        let me = self.config.shard;
        while let Some(&(at, id)) = self.recover_queue.first() {
            if at > now {
                break;
            }
            self.recover_queue.pop_first();
            let next = now.saturating_add(self.config.recover_after_us);
            let p = self.pending.get_mut(&id).expect("recovery deadlines belong to pending transactions");
            debug_assert!(p.agreement.as_ref().is_some_and(|a| !a.is_decided()));
            p.recover_at = Some(next);
            let (txn, ts) = (p.txn.clone(), p.proposal);
            self.recover_queue.insert((next, id));
            for shard in txn.shards().filter(|s| *s != me) {
                self.stats.recover_sent += 1;
                self.queue_peer(shard, PeerItem::Recover { txn: txn.clone(), ts });
            }
        }
    }

    pub(super) fn cancel_recovery(&mut self, id: TxnId) {
        if let Some(at) = self.pending.get_mut(&id).and_then(|p| p.recover_at.take()) {
            self.recover_queue.remove(&(at, id));
        }
    }

    /// A participant asks what this shard knows of `txn` (it logged proposal `ts`).
    pub(super) fn on_recover(
        &mut self,
        log: &mut L,
        txn: Arc<Txn>,
        from: ShardId,
        ts: Timestamp,
        out: &mut Vec<LeaderOutput>,
    ) {
        let id = txn.id;
        if self.refusing.contains_key(&id) {
            return; // `Refuse` goes to every participant once its record commits
        }
        if let Some(p) = self.pending.get(&id) {
            let (confirmed, proposal, current) = (p.confirmed, p.proposal, p.ts);
            let at = self.uncommitted(p.prepare_index);
            self.queue_peer(from, PeerItem::Propose { id, ts: proposal, at, fast: false });
            if confirmed {
                self.queue_peer(from, PeerItem::Confirm { id, ts: current });
            }
            self.on_proposal(log, id, from, ts);
            return;
        }
        if from == self.config.shard || txn.piece(from).is_none() {
            return; // not a participant: nothing it may ask
        }
        match self.answers.known(id) {
            Known::Answered(a) if a.is_refusal() => {
                let reason = match &a.outcome {
                    Err(TxnError::Rejected(reason)) => reason.clone(),
                    other => unreachable!("a refusal is Rejected, not {other:?}"),
                };
                self.queue_peer(from, PeerItem::Refuse { id, reason });
            }
            Known::Answered(&Answer { ts: final_ts, .. }) => self.tell_executed(txn, from, ts, final_ts),
            Known::Acknowledged | Known::Unknown => self.recover_from_outcomes(log, txn, from, ts, out),
        }
    }

    /// Answers `Recover` for a transaction whose answer is not in the table: from the kept
    /// outcomes (kept while `from` may need them, `leader::outcomes`), else it never ran here.
    fn recover_from_outcomes(
        &mut self,
        log: &mut L,
        txn: Arc<Txn>,
        from: ShardId,
        ts: Timestamp,
        out: &mut Vec<LeaderOutput>,
    ) {
        let id = txn.id;
        match self.answers.outcomes().get(id).cloned() {
            Some(Outcome::Executed(final_ts)) => {
                self.stats.recover_kept += 1;
                self.tell_executed(txn, from, ts, final_ts);
            }
            Some(Outcome::Refused { reason, .. }) => {
                self.stats.recover_kept += 1;
                self.queue_peer(from, PeerItem::Refuse { id, reason });
            }
            None if matches!(self.answers.known(id), Known::Acknowledged) => {
                // Answered and acknowledged, and no outcome kept: this shard aborted it, or
                // `from` is past it (a delayed request).
                self.stats.recover_forgotten += 1;
                self.queue_peer(from, PeerItem::Acknowledged { id });
            }
            None if self.answers.is_expired(txn.ts, self.watermark) => {
                // Unknown and that old: it may have run here with every participant past it
                // since (a delayed request), or never; not admitted, and nothing inferred.
                self.stats.recover_forgotten += 1;
                self.queue_peer(from, PeerItem::Acknowledged { id });
            }
            None => {
                // Never dispatched here (its coordinator died, or the dispatch is late):
                // prepare it now; a late dispatch is then a duplicate.
                // Not asked for the fast path: the leader's path alone (rule 14).
                let dispatch = Dispatch { txn, arrival_delta_us: 0, acked_below: 0, asked_fast: false };
                self.on_dispatch(log, self.now, dispatch, out);
                self.on_proposal(log, id, from, ts);
            }
        }
    }

    /// Executed here at its final timestamp: the maximum of every proposal, confirmed. A
    /// speculative execution is told only once its position commits (rule 14): the
    /// execution, and with it this shard's PREPARE, could still be lost.
    fn tell_executed(&mut self, txn: Arc<Txn>, from: ShardId, ts: Timestamp, final_ts: Timestamp) {
        let id = txn.id;
        match self.spec.answer_position(id) {
            Some(position) => {
                let deferred = DeferredRecover { txn, from, ts };
                if !self.spec.defer_recover(position, deferred, self.config.max_early) {
                    self.stats.early_overflow += 1; // asked again a period later
                }
            }
            None => self.queue_peer(from, PeerItem::Executed { id, ts: final_ts }),
        }
    }

    /// Another participant answered `Recover` with `Acknowledged`: it keeps no outcome of
    /// this transaction (it acknowledged or aborted it, or never saw it and it is too old to
    /// admit). A participant keeps a cross-shard outcome until this shard has applied past
    /// it, so a participant that executed or refused it does not say so while this shard
    /// still needs the answer (DESIGN.md rule 9). Nothing is inferred from it
    /// (a client that broke its promise would make that unsafe); it is counted, and the
    /// transaction stays visible in [`ShardLeader::stalled`] while recovery keeps asking.
    pub(super) fn on_acknowledged(&mut self, id: TxnId) {
        if self.pending.get(&id).is_some_and(|p| p.agreement.as_ref().is_some_and(|a| !a.is_decided())) {
            self.stats.recover_acknowledged += 1;
        }
    }
}
