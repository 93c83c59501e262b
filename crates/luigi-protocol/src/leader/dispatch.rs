//! Client admission on the leader (DESIGN.md rule 3): a dispatch is answered from the answer
//! table, refused (durably, with a `Refuse` record) or admitted with a proposal and a
//! `PREPARE`; the per-client and per-shard pending bounds are enforced here.

use std::sync::Arc;

use super::admissible::{Admission, Inadmissible};
use super::admission;
use super::agreement::Agreement;
use super::answers::{Answer, Known, ANSWERS_PER_CLIENT_MAX};
use super::{LeaderOutput, Pending, Refusing, ShardLeader};
use crate::log::{LogError, LogIndex, LogRecord, ReplicatedLog};
use crate::msg::PeerItem;
use luigi_txn::msg::TxnError;
use luigi_txn::types::{ClientId, ShardId, TimeUs, Timestamp, Txn, TxnId};

/// A dispatch as the leader takes it in: the transaction and what its message said about it.
pub(super) struct Dispatch {
    /// The transaction.
    pub txn: Arc<Txn>,
    /// Server clock at arrival minus the client's send clock (echoed in every answer to it).
    pub arrival_delta_us: i64,
    /// The client holds every answer below this sequence number.
    pub acked_below: u64,
    /// The client asks for the fast path (rule 16).
    pub asked_fast: bool,
}

impl<L: ReplicatedLog<LogRecord>> ShardLeader<L> {
    /// A client's dispatch (or a recovering participant's, through `Recover`): answered from
    /// the answer table, refused, or admitted with a proposal (rule 3).
    pub(super) fn on_dispatch(&mut self, log: &mut L, now: TimeUs, d: Dispatch, out: &mut Vec<LeaderOutput>) {
        if self.answered_before(&d.txn, d.arrival_delta_us, out)
            || self.refused_by_others(log, &d.txn, d.arrival_delta_us, out)
            || self.turned_away(log, now, &d.txn, d.arrival_delta_us, out)
        {
            return;
        }
        self.admit(log, now, d, out);
    }

    /// Rule 3.1: a retry of a transaction pending, being refused or answered here. Returns
    /// whether it was one (and answered it, or lets its answer follow).
    fn answered_before(&mut self, txn: &Txn, arrival_delta_us: i64, out: &mut Vec<LeaderOutput>) -> bool {
        let id = txn.id;
        if self.pending.contains_key(&id) || self.refusing.contains_key(&id) {
            // A retry of a transaction still in progress: its answer will follow.
            self.stats.duplicates += 1;
            return true;
        }
        match self.answers.known(id) {
            Known::Unknown => false,
            Known::Acknowledged => {
                self.stats.duplicates += 1;
                self.reply_now(id, 0, Err(TxnError::Forgotten), arrival_delta_us, 0, out);
                true
            }
            Known::Answered(answer) => {
                self.stats.duplicates += 1;
                if answer.ts <= self.admission_closed {
                    let a = answer.clone();
                    self.reply_now(id, a.ts, a.outcome, a.arrival_delta_us, a.rounds, out);
                } // else: still in `unanswered`, the reply goes out when admission closes past it.
                true
            }
        }
    }

    /// Rule 3.4: an agreement item for `txn` was dropped here, or another participant
    /// refused it first: refused (logged) without a proposal. Returns whether it was.
    fn refused_by_others(
        &mut self,
        log: &mut L,
        txn: &Txn,
        arrival_delta_us: i64,
        out: &mut Vec<LeaderOutput>,
    ) -> bool {
        let id = txn.id;
        if self.early_dropped.remove(&id) {
            // Refuse it (and tell the others) rather than prepare a transaction that would
            // wait forever for that item.
            self.early.remove(&id);
            let why = format!("shard {} dropped its agreement messages (buffer full)", self.config.shard);
            self.refuse(log, txn, why, arrival_delta_us, out);
            return true;
        }
        if let Some(reason) = self.early.get(&id).and_then(|e| e.refused.clone()) {
            // Another participant refused it first; it will never be prepared anywhere.
            self.early.remove(&id);
            self.refuse(log, txn, reason, arrival_delta_us, out);
            return true;
        }
        false
    }

    /// Rules 3.2-3.4, 22 and 7's expiry: a transaction this shard does not know is refused
    /// if it is malformed, stamped past the clock horizon, old enough to have expired, over
    /// its client's bounds or over the shard's. Returns whether it was turned away.
    fn turned_away(
        &mut self,
        log: &mut L,
        now: TimeUs,
        txn: &Txn,
        arrival_delta_us: i64,
        out: &mut Vec<LeaderOutput>,
    ) -> bool {
        let id = txn.id;
        let ahead = match self.admission().check(txn, now) {
            Ok(()) => None,
            Err(Inadmissible::AheadOfClock(reason)) => Some(reason),
            Err(Inadmissible::Malformed(reason)) => {
                // Every participant refuses it alike: nothing to log, nobody to tell.
                tracing::warn!(shard = self.config.shard, txn = ?id, %reason, "refused a malformed transaction");
                self.stats.rejected += 1;
                self.stats.malformed += 1;
                self.reply_now(id, 0, Err(TxnError::Rejected(reason)), arrival_delta_us, 0, out);
                return true;
            }
        };
        if self.answers.is_expired(txn.ts, self.watermark) {
            // Unknown here and that old: its client may have expired here with its answer
            // after it executed (or the client's clock is far behind). Not admitted.
            self.stats.expired += 1;
            let why = format!(
                "transaction {id:?} is stamped more than {} s below shard {}'s watermark: if it \
                 ran, its answer expired (outcome no longer known); if it is new, the client's \
                 clock is behind",
                self.answers.expiry_us() / 1_000_000,
                self.config.shard
            );
            self.reply_now(id, 0, Err(TxnError::Expired(why)), arrival_delta_us, 0, out);
            return true;
        }
        if let Some(why) = self.client_busy(id.client).or_else(|| self.outcomes_full(txn)) {
            // Transient: not stored, the client asks again soon.
            self.reply_now(id, 0, Err(TxnError::Busy(why)), arrival_delta_us, 0, out);
            return true;
        }
        if let Some(reason) = ahead {
            // Depends on this replica's clock: logged, and the others told (rule 22).
            tracing::warn!(shard = self.config.shard, txn = ?id, %reason, "refused a transaction stamped ahead");
            self.stats.ahead_of_clock += 1;
            self.refuse(log, txn, reason, arrival_delta_us, out);
            return true;
        }
        if let Err(reason) = self.validate(txn) {
            self.refuse(log, txn, reason, arrival_delta_us, out);
            return true;
        }
        false
    }

    /// Why `client` must wait before this shard takes another transaction of it: too many
    /// answers it has not acknowledged, or too many transactions pending (rule 3.3).
    fn client_busy(&self, client: ClientId) -> Option<String> {
        let shard = self.config.shard;
        let kept = self.answers.kept_for(client);
        if kept >= ANSWERS_PER_CLIENT_MAX {
            // The client's next dispatches acknowledge what it has received.
            return Some(format!(
                "client {client} has {kept} answers on shard {shard} it has not acknowledged (at most {ANSWERS_PER_CLIENT_MAX})"
            ));
        }
        let pending = self.pending_per_client.get(&client).copied().unwrap_or(0);
        (pending >= self.config.max_pending_per_client)
            .then(|| format!("client {client} has {pending} transactions pending on shard {shard}"))
    }

    /// Why a cross-shard `txn` must wait: the outcomes kept for the other participants'
    /// recoveries, with the transactions that may add one, are at `outcomes_max` (they go as
    /// the others report their markers; `leader::outcomes`).
    fn outcomes_full(&mut self, txn: &Txn) -> Option<String> {
        if !txn.is_cross_shard() {
            return None;
        }
        let kept = self.answers.outcomes().len();
        let max = self.config.outcomes_max;
        if kept + self.pending.len() + self.refusing.len() < max {
            return None;
        }
        self.stats.outcomes_full += 1;
        let shard = self.config.shard;
        Some(format!(
            "shard {shard} keeps {kept} cross-shard outcomes for other shards' recoveries (with pending ones, at most {max})"
        ))
    }

    /// Rule 3.5: logs `PREPARE` at the proposal and takes the transaction in: queued,
    /// pending, its proposal announced to the other participants.
    fn admit(&mut self, log: &mut L, now: TimeUs, d: Dispatch, out: &mut Vec<LeaderOutput>) {
        let keys = d.txn.piece(self.config.shard).expect("validated");
        let floor = self.watermark.max(self.admission_floor);
        // Above what clients were told (rule 7) too; with a clock that never goes back that
        // is below `now` already, so the cause of a bump below is still told by `floor`.
        let proposal = admission::propose(d.txn.ts, now, floor.max(self.admission_closed), &self.floors, keys);
        if let Some(why) = self.beyond_expiry(&d.txn, proposal) {
            return self.refuse(log, &d.txn, why, d.arrival_delta_us, out);
        }
        let Some(prepare_index) = self.log_prepare(log, &d, proposal, out) else { return };
        match admission::bump_cause(d.txn.ts, proposal, floor, &self.floors, keys) {
            None => {}
            Some(admission::BumpCause::Late) => self.stats.bumped_late += 1,
            Some(admission::BumpCause::Floor) => self.stats.bumped_floor += 1,
            Some(admission::BumpCause::Conflict) => self.stats.bumped_conflict += 1,
        }
        self.take_in(log, now, d, proposal, prepare_index);
    }

    /// Why a cross-shard proposal may not be made: a refusal elsewhere is kept for this shard
    /// until its marker passes the coordinator's timestamp plus the expiry
    /// (`leader::outcomes`), so no proposal may lie beyond that. Only a dispatch that old,
    /// or a client clock that far behind, meets this.
    fn beyond_expiry(&self, txn: &Txn, proposal: Timestamp) -> Option<String> {
        let expiry_us = self.answers.expiry_us();
        (txn.is_cross_shard() && proposal > txn.ts.saturating_add(expiry_us)).then(|| {
            format!(
                "shard {} would order it more than {} s after its timestamp",
                self.config.shard,
                expiry_us / 1_000_000
            )
        })
    }

    /// Logs the dispatch's `PREPARE` at `proposal`; where it lies in the log, or `None` (the
    /// client answered) if the log takes nothing now.
    fn log_prepare(
        &mut self,
        log: &mut L,
        d: &Dispatch,
        proposal: Timestamp,
        out: &mut Vec<LeaderOutput>,
    ) -> Option<LogIndex> {
        let record = LogRecord::Prepare {
            txn: d.txn.clone(),
            ts: proposal,
            arrival_delta_us: d.arrival_delta_us,
            acked_below: d.acked_below,
        };
        let error = match log.propose(record) {
            Ok(index) => return Some(index),
            // Not stored: this replica may lead soon (election) or another one does; the
            // coordinator retries under the same id.
            Err(LogError::NotLeader) => TxnError::NotLeader { hint: None },
            // Not stored either: the coordinator asks again soon.
            Err(e @ LogError::Backlogged(_)) => TxnError::Busy(e.to_string()),
        };
        self.reply_now(d.txn.id, 0, Err(error), d.arrival_delta_us, 0, out);
        None
    }

    /// Takes in a dispatch whose `PREPARE` is at `prepare_index`: queued at `proposal`,
    /// pending, and (rule 14) decided without waiting for the `PREPARE` to commit. A
    /// single-shard transaction is decided by its admission; a cross-shard one announces its
    /// proposal now, with the `PREPARE`'s position, and counts its own proposal at once (what
    /// it executes stays speculative until its position commits).
    fn take_in(&mut self, log: &mut L, now: TimeUs, d: Dispatch, proposal: Timestamp, prepare_index: LogIndex) {
        let Dispatch { txn, arrival_delta_us, asked_fast, .. } = d;
        let id = txn.id;
        let keys = txn.piece(self.config.shard).expect("validated");
        self.stats.admitted += 1;
        self.answers.heard(id.client, proposal);
        if proposal != txn.ts {
            self.stats.bumped += 1;
        }
        self.queue.insert(id, proposal, keys);
        let eligible = self.fast.as_mut().is_some_and(|f| f.admitted(&txn, proposal, keys, asked_fast));
        if asked_fast && self.fast.is_some() {
            self.stats.fast_asked += 1;
            self.stats.fast_ineligible += u64::from(!eligible);
        }
        let agreement = txn.is_cross_shard().then(|| Agreement::new(txn.shards().collect()));
        let cross = agreement.is_some();
        let others: Vec<_> = txn.shards().filter(|s| *s != self.config.shard).collect();
        let at = self.uncommitted(prepare_index);
        let fast = cross && eligible && at.is_some() && self.mark_proposal(log, &txn, proposal);
        let pending = Pending {
            txn,
            ts: proposal,
            proposal,
            confirmed: false,
            recover_at: None,
            prepare_index,
            arrival_delta_us,
            agreement,
            aborting: None,
            admitted_us: now,
        };
        self.insert_pending(id, pending);
        if !cross {
            self.queue.mark_ready(id);
        }
        for shard in others {
            self.queue_peer(shard, PeerItem::Propose { id, ts: proposal, at, fast });
        }
        if cross {
            self.on_proposal(log, id, self.config.shard, proposal);
        }
        self.take_early_items(log, id);
    }

    /// Agreement items for `id` that came before its dispatch, now that it is pending here.
    fn take_early_items(&mut self, log: &mut L, id: TxnId) {
        if let Some(early) = self.early.remove(&id) {
            for (shard, ts) in early.proposals {
                self.on_proposal(log, id, shard, ts);
            }
            for (shard, ts) in early.confirms {
                self.on_confirm(log, id, shard, ts);
            }
        }
    }

    /// Rule 16: a fast-eligible cross-shard proposal not known committed is marked fast, and
    /// is this leader's vote for `txn` at `proposal`, written before the proposal leaves
    /// (kept until its `PREPARE` commits, like an answer's vote). A leader whose log has
    /// moved to a later term marks nothing (V2).
    fn mark_proposal(&mut self, log: &mut L, txn: &Arc<Txn>, proposal: Timestamp) -> bool {
        if log.term() != self.term {
            return false;
        }
        let f = self.fast.as_mut().expect("only fast-eligible with the fast path");
        if !self.config.mutations.skip_leader_vote {
            let record = f.vote(txn.clone(), proposal);
            self.outbox_votes.push(record.encode());
        }
        true
    }

    /// What this replica checks every transaction against (rule 3.2 and rule 22), the same
    /// check a follower makes before it accepts one on the fast path.
    pub fn admission(&self) -> Admission<'_> {
        Admission::new(&self.config, &self.registry)
    }

    /// Checks a well-formed dispatch against this shard's state; a refusal here is durable
    /// (see [`ShardLeader::refuse`]).
    pub(super) fn validate(&self, _txn: &Txn) -> Result<(), String> {
        let shard = self.config.shard;
        if self.pending.len() >= self.config.max_pending {
            return Err(format!("shard {shard} has {} transactions pending", self.pending.len()));
        }
        Ok(())
    }

    /// Refuses a dispatch for good: a `Refuse` record is logged, and once it commits the
    /// refusal is stored as the transaction's answer (followers store it too), so a retry
    /// still on its way, or sent to a later leader, gets the same answer instead of being
    /// admitted after the client was told it never would be. Then the other participants are
    /// told, so they abort it rather than wait forever for this shard's proposal, and the
    /// client is answered. If the log takes nothing now, nothing is stored and the client is
    /// told to try again.
    pub(super) fn refuse(
        &mut self,
        log: &mut L,
        txn: &Txn,
        reason: String,
        arrival_delta_us: i64,
        out: &mut Vec<LeaderOutput>,
    ) {
        let id = txn.id;
        let me = self.config.shard;
        let others: Vec<_> = txn.shards().filter(|s| *s != me).collect();
        let record =
            LogRecord::Refuse { id, reason: reason.clone(), arrival_delta_us, ts: txn.ts, others: others.clone() };
        match log.propose(record) {
            Ok(_) => {
                self.stats.rejected += 1;
                self.refusing.insert(id, Refusing { others, reason, arrival_delta_us });
            }
            Err(LogError::NotLeader) => {
                self.reply_now(id, 0, Err(TxnError::NotLeader { hint: None }), arrival_delta_us, 0, out);
            }
            Err(e @ LogError::Backlogged(_)) => {
                self.reply_now(id, 0, Err(TxnError::Busy(e.to_string())), arrival_delta_us, 0, out);
            }
        }
    }

    /// A `Refuse` record committed: store the refusal (and keep it for the other
    /// participants), tell the others, answer the client.
    pub(super) fn on_refuse_logged(
        &mut self,
        id: TxnId,
        reason: String,
        arrival_delta_us: i64,
        ts: Timestamp,
        others: &[ShardId],
        out: &mut Vec<LeaderOutput>,
    ) {
        self.store_refusal(id, reason.clone(), arrival_delta_us, ts);
        // Kept for the other participants' recoveries (`leader::outcomes`).
        self.answers.refused_cross(id, reason.clone(), ts, others);
        // Not ours (an earlier leader's, committed before this one took over): stored only.
        let Some(r) = self.refusing.remove(&id) else { return };
        for shard in r.others {
            self.queue_peer(shard, PeerItem::Refuse { id, reason: r.reason.clone() });
        }
        self.reply_now(id, 0, Err(TxnError::Rejected(r.reason)), r.arrival_delta_us, 0, out);
    }

    /// Stores the refusal of `id`, a transaction stamped `ts` (kept until its client expires
    /// past `ts`).
    pub(super) fn store_refusal(&mut self, id: TxnId, reason: String, arrival_delta_us: i64, ts: Timestamp) {
        self.answers.insert(id, Answer::refusal(reason, arrival_delta_us), ts);
    }

    /// Answered here, or refused and waiting for the `Refuse` record: agreement items for it
    /// are not buffered.
    pub(super) fn insert_pending(&mut self, id: TxnId, p: Pending) {
        *self.pending_per_client.entry(id.client).or_default() += 1;
        let old = self.pending.insert(id, p);
        assert!(old.is_none(), "{id:?} pending twice");
    }

    pub(super) fn remove_pending(&mut self, id: TxnId) -> Option<Pending> {
        let p = self.pending.remove(&id)?;
        let count = self.pending_per_client.get_mut(&id.client).expect("counted when inserted");
        *count -= 1;
        if *count == 0 {
            self.pending_per_client.remove(&id.client);
        }
        Some(p)
    }

    pub(super) fn forget_acked(&mut self, client: ClientId, acked_below: u64) {
        // Answers not yet sent stay (they cannot have been received).
        self.answers.forget_acked(client, acked_below, self.watermark);
    }
}
