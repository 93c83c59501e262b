//! Answers from the leaders and the commit rule (DESIGN.md rule 7): a transaction is told
//! to the caller once every participant answered and the watched watermarks passed its
//! timestamp, or at once when a participant refused it; it is forgotten (acknowledged) only
//! once every participant answered.

use super::fast::{Accept, FanOutPolicy};
use super::headroom::lateness_us;
use super::submit::{fast_settled, settled};
use super::{CommitRule, CoordStats, Coordinator, CoordinatorConfig, FlightState};
use luigi_txn::client_core::{ClientOutput, TxnOutcome};
use luigi_txn::client_core::{InFlightTable, Reported};
use luigi_txn::msg::{ServerMsg, TxnError, TxnReply};
use luigi_txn::types::{ShardId, TimeUs, Timestamp, TxnId};

impl Coordinator {
    /// Handles a message from a leader.
    pub fn on_message(&mut self, now: TimeUs, msg: ServerMsg, out: &mut Vec<ClientOutput>) {
        match msg {
            ServerMsg::Pong { shard, arrival_delta_us, sent_us, watermark } => {
                self.owd_sample(now, shard, arrival_delta_us, now.saturating_sub(sent_us));
                self.note_watermark(shard, watermark);
            }
            ServerMsg::Watermark { shard, watermark } => {
                self.note_watermark(shard, watermark);
                let waiting: Vec<TxnId> = self.awaiting_watermark.iter().copied().collect();
                for id in waiting {
                    self.try_complete_txn(id, out);
                }
                self.complete_reads(out);
            }
            ServerMsg::Reply(reply) => self.on_reply(now, reply, out),
            ServerMsg::Status(_) => {} // an operator query's answer; the coordinator sends none
            ServerMsg::Progress(report) => {
                if self.progress.on_report(&report) {
                    self.retry_waiting(out);
                }
            }
            ServerMsg::Promise { shard, term, floor } => {
                let promise = self.promises.entry(shard).or_default();
                if (term, floor) > *promise {
                    *promise = (term, floor);
                    self.retry_waiting(out);
                }
            }
            ServerMsg::FastAccept { shard, replica, term, id, ts, order } => {
                self.on_accept(shard, id, Accept { replica, term, ts, order }, out)
            }
            ServerMsg::SnapshotRead(reply) => self.on_snapshot_read(now, reply, out),
        }
    }

    /// A follower's fast-path accept of `id` on `shard`.
    fn on_accept(&mut self, shard: ShardId, id: TxnId, accept: Accept, out: &mut Vec<ClientOutput>) {
        let Some(flight) = self.flights.get_mut(id) else { return };
        let Some(slot) = flight.txn.pieces.iter().position(|p| p.shard == shard) else { return };
        let n = self.config.group_sizes.get(shard as usize).copied().unwrap_or(0);
        flight.extra.accepts[slot].note(accept, n);
        self.try_complete_txn(id, out);
    }

    /// Tries again every transaction waiting for a watermark or a proof.
    fn retry_waiting(&mut self, out: &mut Vec<ClientOutput>) {
        let waiting: Vec<TxnId> = self.awaiting_watermark.iter().copied().collect();
        for id in waiting {
            self.try_complete_txn(id, out);
        }
        self.prove_reads(out);
        self.complete_reads(out);
    }

    /// Rule 7's commit rule for a transaction at `ts` over `participants`: every shard it
    /// waits on has passed `ts`, by its watermark or by `answered_past(shard)` (what the
    /// participant's own answer proves), or, for a shard that does not take part, by a floor
    /// promise that passes it over (rule 15). The read-write and the read-only paths both
    /// answer by it.
    pub(super) fn commit_rule_passed(
        &self,
        ts: Timestamp,
        participants: impl Iterator<Item = ShardId> + Clone,
        answered_past: impl Fn(ShardId) -> bool,
    ) -> bool {
        let passed = |shard: ShardId| self.watermarks.get(&shard).is_some_and(|w| *w >= ts) || answered_past(shard);
        match self.config.commit_rule {
            CommitRule::Participants => participants.clone().all(passed),
            CommitRule::AllShards { shards } => {
                (0..shards).all(|s| passed(s) || (!participants.clone().any(|p| p == s) && self.passed_over(s, ts)))
            }
        }
    }

    /// The highest timestamp some shard passed, by its watermark or a floor promise: no
    /// transaction above it can pass the commit rule on a shard it does not take part in.
    pub(super) fn commit_rule_reach(&self) -> Timestamp {
        let floors = self.promises.values().map(|(_, floor)| *floor);
        self.watermarks.values().copied().chain(floors).max().unwrap_or(0)
    }

    /// Rule 15: `shard` admits nothing at or below `ts` any more, whatever its watermark says:
    /// its leader of some term promised a committed floor at or above `ts`, and a majority of
    /// its replicas have moved past that term (that leader commits nothing more; every later
    /// one admits above the floor).
    fn passed_over(&self, shard: ShardId, ts: Timestamp) -> bool {
        let Some(&(term, floor)) = self.promises.get(&shard) else { return false };
        floor >= ts && (self.config.mutations.pass_over_without_term_change || self.progress.moved_past(shard, term))
    }

    pub(super) fn note_watermark(&mut self, shard: ShardId, watermark: Timestamp) {
        let w = self.watermarks.entry(shard).or_default();
        *w = (*w).max(watermark);
    }

    pub(super) fn on_reply(&mut self, now: TimeUs, reply: TxnReply, out: &mut Vec<ClientOutput>) {
        let shard = reply.shard;
        self.note_watermark(shard, reply.watermark);
        // The table drops what is not a participant's answer in flight, and applies the
        // "not the leader" / "busy" resend rule (nothing was stored there).
        let Some(slot) = self.flights.on_reply(now, &reply) else { return };
        let flight = self.flights.get_mut(reply.id).expect("answered in flight");
        // Only a first attempt's answer that was not refused says how long the way was.
        let first = flight.attempts == 1 && !matches!(reply.outcome, Err(TxnError::Rejected(_)));
        let rtt_us = now.saturating_sub(flight.submitted_us);
        let sample = first.then_some(reply.arrival_delta_us);
        let late = |stamped_us| (stamped_us, lateness_us(reply.arrival_delta_us, flight.txn.ts, flight.submitted_us));
        // Lateness counts from the submission: only for a dispatch sent then (no resend).
        let lateness = flight.extra.headroom_us.filter(|_| first && flight.resends() == 0).map(late);
        let id = reply.id;
        // A proven answer stays: a later one can only come from a retry or a stale leader.
        // An early answer (rule 21) never replaces a regular one.
        let regular = flight.replies[slot].as_ref().is_some_and(|r| !r.early);
        if !settled(&self.progress, &self.config, flight, slot) && (!reply.early || !regular) {
            flight.replies[slot] = Some(reply);
        }
        if let Some(delta_us) = sample {
            self.owd_sample(now, shard, delta_us, rtt_us);
        }
        if let Some((stamped_us, lateness_us)) = lateness {
            self.note_lateness(now, shard, stamped_us, lateness_us, rtt_us);
        }
        self.try_complete_txn(id, out);
    }

    /// A first dispatch to `shard` stamped with `stamped_us` of headroom arrived
    /// `lateness_us` after its timestamp (rule 1's adaptive headroom). Like a delay sample,
    /// it counts only when its round trip was within the resend timeout: an answer that
    /// waited in a buffer through a partition says nothing about the way.
    fn note_lateness(&mut self, now: TimeUs, shard: ShardId, stamped_us: u64, lateness_us: i64, rtt_us: u64) {
        if rtt_us > self.config.retry_timeout_us {
            return;
        }
        self.stats.late_arrivals += u64::from(lateness_us > 0);
        self.headroom.on_arrival(now, shard, stamped_us, lateness_us);
    }

    pub(super) fn try_complete_txn(&mut self, id: TxnId, out: &mut Vec<ClientOutput>) {
        let Some(flight) = self.flights.get(id) else {
            return;
        };
        let all_answered = flight.replies.iter().all(Option::is_some);
        let rejection =
            |r: &TxnReply| if let Err(TxnError::Rejected(why)) = &r.outcome { Some(why.clone()) } else { None };
        if let Some(why) = flight.replies.iter().flatten().find_map(rejection) {
            // Definite at once (a refusal is durable and executes nowhere), but acknowledged
            // only once every participant has answered: a participant that never saw it must
            // not find it acknowledged (it would take it for one it answered).
            match flight.reported {
                None | Some(Reported::Unknown) => self.report(id, TxnOutcome::Rejected(why), out),
                Some(Reported::Rejected) => {}
            }
            if all_answered {
                self.forget(id);
            } else if let Some(f) = self.flights.get_mut(id) {
                f.reported = Some(Reported::Rejected);
            }
            return;
        }
        let expiry = |r: &TxnReply| if let Err(TxnError::Expired(why)) = &r.outcome { Some(why.clone()) } else { None };
        if let Some(why) = flight.replies.iter().flatten().find_map(expiry) {
            // A participant no longer knows it (its answers expired): the outcome can no
            // longer be learned. Once every participant has answered, none holds it pending,
            // so it may be acknowledged.
            if flight.reported.is_none() {
                self.report(id, TxnOutcome::Unknown(why), out);
            }
            if all_answered {
                self.forget(id);
            }
            return;
        }
        if !all_answered {
            return;
        }
        let replies: Vec<&TxnReply> = flight.replies.iter().flatten().collect();
        let ts = replies.iter().map(|r| r.ts).max().expect("at least one participant");
        if replies.iter().any(|r| r.ts != ts) {
            self.stats.ts_mismatch += 1;
        }
        // An early answer was sent with the clock and the committed floor promise past `ts`
        // (rule 21): its shard admits nothing at or below `ts` any more, which is what this
        // rule needs of it; it counts only in a fast commit (below, `all_settled`).
        let early = |shard: ShardId| replies.iter().any(|r| r.shard == shard && r.early);
        let covered = self.commit_rule_passed(ts, replies.iter().map(|r| r.shard), early);
        // Rule 14: every answer's position must be proven committed (a speculative result
        // could still be lost with its leader).
        let proven = self.config.mutations.trust_unproven_answers || self.all_settled(flight);
        if !covered || !proven {
            self.awaiting_watermark.insert(id); // a later watermark or progress report completes it
            return;
        }
        let results = replies.iter().map(|r| (r.shard, r.outcome.clone())).collect();
        self.report(id, TxnOutcome::Ordered { ts, results }, out);
        self.forget(id);
    }

    /// Tells the caller `outcome` (`Done`, or `Resolved` after an earlier `Unknown`).
    pub(super) fn report(&mut self, id: TxnId, outcome: TxnOutcome, out: &mut Vec<ClientOutput>) {
        let observed_ts = &mut self.reads.observed_ts;
        let tally = Tally { config: &self.config, stats: &mut self.stats, fan_out: &mut self.fan_out, observed_ts };
        report(&mut self.flights, tally, id, outcome, out);
    }

    /// Every participant answered `id`: it leaves, and later dispatches acknowledge it.
    pub(super) fn forget(&mut self, id: TxnId) {
        self.flights.forget(id);
        self.awaiting_watermark.remove(&id);
    }
}

/// What reporting an outcome updates besides the table: Luigi's counters and the fast
/// path's fan-out policy.
pub(super) struct Tally<'a> {
    pub(super) config: &'a CoordinatorConfig,
    pub(super) stats: &'a mut CoordStats,
    pub(super) fan_out: &'a mut FanOutPolicy,
    /// The highest timestamp the client has observed (a snapshot read starts no lower).
    pub(super) observed_ts: &'a mut Timestamp,
}

/// Tells the caller `outcome` of `id` through the table (`Done`, or `Resolved` after an
/// earlier `Unknown`), counting a fast commit and telling the fan-out policy how a
/// transaction that asked for the fast path ended.
pub(super) fn report(
    flights: &mut InFlightTable<FlightState>,
    tally: Tally<'_>,
    id: TxnId,
    outcome: TxnOutcome,
    out: &mut Vec<ClientOutput>,
) {
    let flight = flights.get(id).expect("reporting an in-flight transaction");
    let rounds = flight.rounds();
    let fast = matches!(outcome, TxnOutcome::Ordered { .. })
        && (0..flight.replies.len()).all(|slot| fast_settled(tally.config, flight, slot));
    let early = fast && flight.replies.iter().flatten().any(|r| r.early);
    let asked_fast = flight.asked_fast;
    if let TxnOutcome::Ordered { ts, .. } = &outcome {
        *tally.observed_ts = (*tally.observed_ts).max(*ts);
    }
    let earlier = flights.report(id, outcome, rounds, fast, out);
    tally.stats.fast += u64::from(fast);
    tally.stats.early += u64::from(early);
    if asked_fast && earlier.is_none() {
        tally.fan_out.completed(fast);
    }
}
