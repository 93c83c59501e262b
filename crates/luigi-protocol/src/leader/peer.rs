//! Cross-shard agreement with the other participant leaders (DESIGN.md rule 4): the
//! `Propose`, `Confirm`, `Executed` and `Refuse` items, the `PREPARE`, `DECIDE` and `ABORT`
//! records as they commit, agreement items that arrive before their dispatch, and the
//! outgoing batches.

use super::agreement::{Agreement, Step};
use super::{Early, LeaderOutput, ShardLeader, EARLY_DROPPED_MAX};
use crate::log::{LogRecord, ReplicatedLog};
use crate::msg::{PeerBatch, PeerItem};
use luigi_txn::msg::TxnError;
use luigi_txn::progress::{LogPos, ProgressReport};
use luigi_txn::types::{ShardId, Timestamp, TxnId};

impl<L: ReplicatedLog<LogRecord>> ShardLeader<L> {
    /// Shard `shard` has a new leader, which may have missed agreement items sent to the old
    /// one (lost with its connection): re-send this shard's proposal, and its confirmation
    /// if its `DECIDE` is committed, of every pending transaction shared with `shard`. The
    /// recovery of stalled transactions would ask later; this saves the wait.
    pub fn peer_leader_changed(&mut self, shard: ShardId) {
        let me = self.config.shard;
        if shard == me {
            return;
        }
        self.applied_to_new_leader(shard);
        let mut items = Vec::new();
        for (id, p) in &self.pending {
            let shared = p.agreement.as_ref().is_some_and(|a| a.shards().contains(&shard));
            if !shared {
                continue;
            }
            let at = self.uncommitted(p.prepare_index);
            items.push(PeerItem::Propose { id: *id, ts: p.proposal, at, fast: false });
            if p.confirmed {
                items.push(PeerItem::Confirm { id: *id, ts: p.ts });
            }
        }
        for item in items {
            self.queue_peer(shard, item);
        }
    }

    /// A `PREPARE` committed. Its proposal went out at admission (rule 14); a cross-shard
    /// transaction still undecided is now recovered if it stays so for too long (rule 10).
    pub(super) fn on_prepared(&mut self, id: TxnId) {
        let Some(p) = self.pending.get_mut(&id) else { return };
        if p.agreement.as_ref().is_some_and(|a| !a.is_decided()) {
            let at = self.now.saturating_add(self.config.recover_after_us);
            p.recover_at = Some(at);
            self.recover_queue.insert((at, id));
        }
    }

    /// Shard `from` announced its proposal `ts` for `id`, with the position of its `PREPARE`
    /// if that may not be committed yet: used once `from`'s progress proves it (rule 14), or,
    /// when marked `fast`, once every follower of `from` accepted it there (rule 18).
    pub(super) fn on_announced(
        &mut self,
        log: &mut L,
        id: TxnId,
        from: ShardId,
        ts: Timestamp,
        at: Option<LogPos>,
        fast: bool,
    ) {
        let trust = self.config.mutations.trust_unproven_proposals;
        match at {
            Some(at) if !trust && !self.progress.proven(from, at) => {
                if !self.spec.hold_proposal(from, at, id, ts, self.config.max_early) {
                    self.stats.early_overflow += 1;
                    return;
                }
                if !fast || self.fast.is_none() {
                    return;
                }
                let usable = self.config.mutations.fast_trusts_marked_proposals
                    || self.fast_peers.on_marked(from, at, id, ts, self.group_size(from), self.config.max_early);
                if usable {
                    self.use_marked(log, from, at, id);
                } else if self.fast_peers.marked(id, from).is_some() {
                    self.early_candidate(id, ts);
                }
            }
            _ => self.on_proposal(log, id, from, ts),
        }
    }

    /// A follower of shard `from` accepted `id` (rule 17): a marked proposal it completes
    /// is used now (rule 18).
    pub(super) fn on_peer_accept(&mut self, log: &mut L, from: ShardId, accept: (u32, u64, Timestamp), id: TxnId) {
        if self.fast.is_none() {
            return;
        }
        let size = self.group_size(from);
        if let Some(at) = self.fast_peers.on_accept(from, accept, id, size, self.config.max_early) {
            self.use_marked(log, from, at, id);
        }
    }

    /// Uses `from`'s held proposal for `id` at `at` before its proof (rule 18).
    fn use_marked(&mut self, log: &mut L, from: ShardId, at: LogPos, id: TxnId) {
        if let Some(ts) = self.spec.take_held(from, at, id) {
            self.stats.fast_proposals += 1;
            self.on_proposal(log, id, from, ts);
        }
    }

    fn group_size(&self, shard: ShardId) -> u32 {
        self.config.group_sizes.get(shard as usize).copied().unwrap_or(0)
    }

    /// Tells every shard sent a proposal not committed then that this log's commit has
    /// reached it (rule 14). The followers' reports usually prove it a hop earlier; this is
    /// the path that does not depend on them (lost reports, a log without followers).
    pub(super) fn report_commit(&mut self) {
        let committed = self.committed_index;
        let due: Vec<ShardId> = self.commit_owed.iter().filter(|(_, i)| **i <= committed).map(|(s, _)| *s).collect();
        for shard in due {
            self.commit_owed.remove(&shard);
            let pos = LogPos { term: self.term, index: committed };
            let report = ProgressReport { shard: self.config.shard, replica: 0, term: self.term, pos, committed: true };
            self.queue_peer(shard, PeerItem::Progress(report));
        }
    }

    /// A replica of another shard reported its progress: proposals it proves are used now.
    pub(super) fn on_progress(&mut self, log: &mut L, report: ProgressReport) {
        if report.shard == self.config.shard || !self.progress.on_report(&report) {
            return;
        }
        for (id, ts) in self.spec.proven_proposals(report.shard, &self.progress) {
            self.on_proposal(log, id, report.shard, ts);
        }
    }

    pub(super) fn on_decide_logged(&mut self, log: &mut L, id: TxnId, ts: Timestamp) {
        let shard = self.config.shard;
        if !self.pending.contains_key(&id) {
            return;
        }
        self.undecided_moves.retain(|(_, moved)| *moved != id);
        self.reposition(id, ts);
        let p = self.pending.get_mut(&id).expect("checked above");
        p.confirmed = true;
        let Some(agreement) = p.agreement.as_ref() else { return };
        self.stats.cross_differed += 1;
        let others: Vec<ShardId> = agreement.shards().iter().copied().filter(|s| *s != shard).collect();
        for s in others {
            self.queue_peer(s, PeerItem::Confirm { id, ts });
        }
        self.on_confirm(log, id, shard, ts);
    }

    pub(super) fn on_abort_logged(&mut self, id: TxnId, out: &mut Vec<LeaderOutput>) {
        self.cancel_recovery(id);
        let Some(p) = self.remove_pending(id) else { return };
        self.queue.remove(id);
        if let Some(f) = self.fast.as_mut() {
            f.dropped(id);
        }
        self.undecided_moves.retain(|(_, moved)| *moved != id);
        self.stats.aborted += 1;
        let reason = p.aborting.unwrap_or_else(|| "aborted by recovery".into());
        self.store_refusal(id, reason.clone(), p.arrival_delta_us, p.txn.ts);
        self.reply_now(id, 0, Err(TxnError::Rejected(reason)), p.arrival_delta_us, 0, out);
    }

    pub(super) fn is_answered(&self, id: TxnId) -> bool {
        self.answers.is_answered(id) || self.refusing.contains_key(&id)
    }

    pub(super) fn early_entry(&mut self, id: TxnId) -> Option<&mut Early> {
        if !self.early.contains_key(&id) && self.early.len() >= self.config.max_early {
            self.stats.early_overflow += 1;
            // Remembering dropped transactions is bounded too; past that the oldest marker
            // goes (its transaction then waits for the recovery of stalled transactions).
            if self.early_dropped.len() >= EARLY_DROPPED_MAX {
                self.early_dropped.pop_first();
            }
            self.early_dropped.insert(id);
            return None;
        }
        Some(self.early.entry(id).or_default())
    }

    pub(super) fn on_proposal(&mut self, log: &mut L, id: TxnId, from: ShardId, ts: Timestamp) {
        let skip = self.config.mutations.skip_second_round;
        if let Some(agreement) = self.pending.get_mut(&id).and_then(|p| p.agreement.as_mut()) {
            let step = agreement.on_proposal(from, ts, skip);
            self.on_step(log, id, step);
        } else if !self.pending.contains_key(&id) && !self.is_answered(id) {
            if let Some(e) = self.early_entry(id) {
                e.proposals.push((from, ts));
            }
        }
    }

    pub(super) fn on_confirm(&mut self, log: &mut L, id: TxnId, from: ShardId, ts: Timestamp) {
        if let Some(agreement) = self.pending.get_mut(&id).and_then(|p| p.agreement.as_mut()) {
            let step = agreement.on_confirm(from, ts);
            self.on_step(log, id, step);
        } else if !self.pending.contains_key(&id) && !self.is_answered(id) {
            if let Some(e) = self.early_entry(id) {
                e.confirms.push((from, ts));
            }
        }
    }

    pub(super) fn on_executed(&mut self, log: &mut L, id: TxnId, from: ShardId, ts: Timestamp) {
        let skip = self.config.mutations.skip_second_round;
        // Not pending: executed (or aborted) here too; nothing to learn.
        if let Some(agreement) = self.pending.get_mut(&id).and_then(|p| p.agreement.as_mut()) {
            let step = agreement.on_executed(from, ts, skip);
            self.on_step(log, id, step);
        }
    }

    pub(super) fn on_refuse(&mut self, log: &mut L, id: TxnId, reason: String) {
        if let Some(p) = self.pending.get_mut(&id) {
            // The refusing shard never proposed, so nobody can have decided it.
            assert!(!p.agreement.as_ref().is_some_and(Agreement::is_decided), "refused after decision");
            if p.aborting.is_none() {
                p.aborting = Some(reason);
                self.propose_record(log, LogRecord::Abort { id });
            }
        } else if !self.is_answered(id) {
            if let Some(e) = self.early_entry(id) {
                e.refused = Some(reason);
            }
        }
    }

    pub(super) fn on_step(&mut self, log: &mut L, id: TxnId, step: Step) {
        match step {
            Step::Wait => {}
            Step::LogDecide { final_ts } => {
                // Moved at once, so that smaller transactions pass it and the watermark is not
                // held by the DECIDE round (a new leader re-derives the same final timestamp:
                // it is the maximum of durable proposals). Followers apply in log order and the
                // DECIDE is appended now, before any later `Applied` marker; the marker is also
                // kept below the old proposal until DECIDE commits, in case the DECIDE had to
                // wait for a backlogged log while a marker went through.
                let old = self.pending[&id].ts;
                self.undecided_moves.insert((old, id));
                self.reposition(id, final_ts);
                self.propose_record(log, LogRecord::Decide { id, ts: final_ts });
            }
            Step::Decided { final_ts } => {
                self.cancel_recovery(id);
                self.reposition(id, final_ts);
                self.stats.cross_decided += 1;
                self.queue.mark_ready(id);
            }
        }
    }

    pub(super) fn reposition(&mut self, id: TxnId, ts: Timestamp) {
        let p = self.pending.get_mut(&id).expect("agreement of a pending transaction");
        assert!(ts >= p.ts, "agreement only raises timestamps");
        if ts != p.ts {
            p.ts = ts;
            self.queue.reposition(id, ts);
            if let Some(f) = self.fast.as_mut() {
                f.moved(id, ts, p.txn.piece(self.config.shard).expect("pending here, so a participant"));
            }
        }
    }

    pub(super) fn queue_peer(&mut self, shard: ShardId, item: PeerItem) {
        self.outbox.entry(shard).or_default().push(item);
    }

    pub(super) fn flush_outbox(&mut self, out: &mut Vec<LeaderOutput>) {
        // Marked proposals leave after their votes (rule 16), in batches of their own that
        // wait for the one write holding the votes; the other items leave at once (peer
        // batches may arrive in any order: a held batch is overtaken by later ones anyway).
        let mut votes = std::mem::take(&mut self.outbox_votes);
        for (shard, mut items) in std::mem::take(&mut self.outbox) {
            for item in &mut items {
                let PeerItem::Propose { at, .. } = item else { continue };
                let Some(pos) = *at else { continue };
                // Committed by now: the receiver needs no proof.
                *at = self.uncommitted(pos.index);
                if at.is_some() {
                    let awaited = self.commit_owed.entry(shard).or_default();
                    *awaited = (*awaited).max(pos.index);
                }
            }
            let (marked, unmarked): (Vec<_>, Vec<_>) =
                items.into_iter().partition(|item| matches!(item, PeerItem::Propose { fast: true, .. }));
            let batch = |items| PeerBatch { from: self.config.shard, watermark: self.watermark, items };
            if !unmarked.is_empty() {
                out.push(LeaderOutput::ToPeer { shard, batch: batch(unmarked) });
            }
            if !marked.is_empty() {
                let records = std::mem::take(&mut votes);
                out.push(LeaderOutput::ToPeerDurably { shard, batch: batch(marked), records });
            }
        }
        debug_assert!(votes.is_empty(), "every vote goes out with the marked proposals it is for");
    }
}

/// The reason a participant gave for refusing, as this leader passes it on to the client:
/// as given, or, if it gave none (a refusal says what is wrong), which shard refused.
pub(super) fn named_refusal(from: ShardId, reason: String) -> String {
    if reason.trim().is_empty() {
        format!("shard {from} refused it without a reason")
    } else {
        reason
    }
}
