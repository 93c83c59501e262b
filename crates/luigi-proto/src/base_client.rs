//! The client core of the baseline protocols ([`Protocol::Occ`], [`Protocol::TwoPl`] and
//! [`Protocol::Direct`]), sans I/O. It produces the very outputs of Luigi's
//! [`Coordinator`](crate::coordinator::Coordinator) ([`CoordOutput`], [`Completion`],
//! [`TxnOutcome`]), so one shell (the runtime client, the simulator) drives either.
//!
//! **Where a transaction goes.** OCC and 2PL: the whole transaction goes to the leader of its
//! first participant shard (its two-phase-commit coordinator) only, which answers with one
//! reply per participant shard once the outcome is durable. Direct: the transaction goes to
//! every participant's leader, each runs its own piece at once and answers for its shard.
//! Watermarks play no role: a baseline answers only once durable.
//!
//! **What a client is told.** Every transaction ends with one [`CoordOutput::Done`]:
//!
//! - [`TxnOutcome::Ordered`] once every participant has a final reply, with each one's
//!   result (committed when all are `Ok`);
//! - for OCC and 2PL, a protocol abort ([`TxnError::Aborted`]: a lock conflict, a failed
//!   validation, a lost coordinator) is final as soon as one reply says so (nothing is
//!   installed anywhere): it is reported as `Ordered` with every participant's result
//!   `Err(TxnError::Aborted)` (see [`TxnOutcome::protocol_abort`]). The caller may submit the
//!   business transaction again, as a new transaction;
//! - [`TxnOutcome::Rejected`] when every participant refused it;
//! - [`TxnOutcome::Unknown`] after `max_attempts` sends without a complete answer (or too
//!   many "not the leader" answers). As with Luigi's coordinator the id is kept and asked
//!   about (every retry timeout) until answered, then reported with
//!   [`CoordOutput::Resolved`]; until then it holds `acked_below` down, so at most
//!   [`UNRESOLVED_MAX`] may wait (see [`BaseClient::can_submit`]).
//!
//! Retries always resend the same dispatch (same [`TxnId`]): a server that has it answers
//! from what it stored rather than running it twice.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::coordinator::{Completion, CoordOutput, TxnOutcome, NOT_LEADER_RESENDS_MAX, UNRESOLVED_MAX};
use crate::msg::{ClientMsg, ServerMsg, TxnError, TxnReply};
use crate::types::{ClientId, Protocol, ShardId, ShardPiece, TimeUs, Txn, TxnId};
use crate::Map;

/// Knobs of a [`BaseClient`].
#[derive(Clone, Debug)]
pub struct BaseClientConfig {
    /// This client's id (unique in the cluster).
    pub client: ClientId,
    /// The cluster's protocol: [`Protocol::Occ`], [`Protocol::TwoPl`] or [`Protocol::Direct`].
    pub protocol: Protocol,
    /// A transaction without a complete answer this long after its last send is sent again.
    pub retry_timeout_us: u64,
    /// Sends (the first included) before a transaction is reported unknown.
    pub max_attempts: u32,
    /// Resend delay after a "not the leader" or "busy" answer.
    pub not_leader_retry_us: u64,
}

impl BaseClientConfig {
    /// Defaults for client `client` of a `protocol` cluster (the same as Luigi's coordinator).
    pub fn new(client: ClientId, protocol: Protocol) -> Self {
        let luigi = crate::coordinator::CoordinatorConfig::new(client);
        Self {
            client,
            protocol,
            retry_timeout_us: luigi.retry_timeout_us,
            max_attempts: luigi.max_attempts,
            not_leader_retry_us: luigi.not_leader_retry_us,
        }
    }
}

/// Whom a protocol's client sends a transaction to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Routing {
    /// The leader of the first participant shard (OCC, 2PL): it coordinates the others.
    FirstShard,
    /// Every participant's leader (direct): each answers for itself.
    EveryParticipant,
}

impl Routing {
    fn of(protocol: Protocol) -> Self {
        match protocol {
            Protocol::Occ | Protocol::TwoPl => Routing::FirstShard,
            Protocol::Direct => Routing::EveryParticipant,
            Protocol::Luigi => panic!("the Luigi protocol's client is the Coordinator, not the BaseClient"),
        }
    }
}

#[derive(Debug)]
struct InFlight {
    txn: Arc<Txn>,
    submitted_us: TimeUs,
    /// When the dispatch is sent again.
    retry_at_us: TimeUs,
    /// The next resend answers a "not the leader" (not counted as an attempt).
    leader_wait: bool,
    /// Resends caused by "not the leader" answers so far (bounded separately).
    leader_waits: u32,
    attempts: u32,
    /// One slot per participant, in `txn.pieces` order: its final reply.
    replies: Vec<Option<TxnReply>>,
    /// Reported [`TxnOutcome::Unknown`] already: its outcome goes out as `Resolved`.
    reported_unknown: bool,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BaseClientStats {
    /// Transactions submitted.
    pub submitted: u64,
    /// Dispatches sent again after a timeout.
    pub retries: u64,
    /// Transactions the protocol aborted ([`TxnError::Aborted`]).
    pub aborted: u64,
    /// Transactions reported unknown.
    pub unknown: u64,
    /// Of those, the ones whose outcome was learned later.
    pub resolved: u64,
}

/// The client state machine of one client of a baseline cluster.
pub struct BaseClient {
    config: BaseClientConfig,
    routing: Routing,
    next_seq: u64,
    in_flight: Map<TxnId, InFlight>,
    in_flight_seqs: BTreeSet<u64>,
    stats: BaseClientStats,
}

impl BaseClient {
    /// A client with `config`. Panics for [`Protocol::Luigi`] (its client is the
    /// [`Coordinator`](crate::coordinator::Coordinator)).
    pub fn new(config: BaseClientConfig) -> Self {
        let routing = Routing::of(config.protocol);
        Self {
            config,
            routing,
            next_seq: 1,
            in_flight: Map::default(),
            in_flight_seqs: BTreeSet::new(),
            stats: BaseClientStats::default(),
        }
    }

    /// This client's id.
    pub fn client(&self) -> ClientId {
        self.config.client
    }

    /// The protocol it speaks.
    pub fn protocol(&self) -> Protocol {
        self.config.protocol
    }

    /// Counters.
    pub fn stats(&self) -> BaseClientStats {
        self.stats
    }

    /// Transactions submitted and not answered yet (no `Done`).
    pub fn in_flight(&self) -> usize {
        self.in_flight.values().filter(|f| !f.reported_unknown).count()
    }

    /// Transactions reported unknown whose outcome is still being asked about.
    pub fn unresolved(&self) -> usize {
        self.in_flight.values().filter(|f| f.reported_unknown).count()
    }

    /// False while [`UNRESOLVED_MAX`] transactions are unresolved: the shell should hold new
    /// submissions until some resolve (each holds the acknowledgement of every later one).
    pub fn can_submit(&self) -> bool {
        self.unresolved() < UNRESOLVED_MAX
    }

    /// Starts a transaction calling `procedure(args)` over `pieces` (one per participant).
    pub fn submit(
        &mut self,
        now: TimeUs,
        procedure: &str,
        args: Vec<u8>,
        mut pieces: Vec<ShardPiece>,
        out: &mut Vec<CoordOutput>,
    ) -> TxnId {
        assert!(!pieces.is_empty(), "a transaction needs at least one participant");
        pieces.sort_by_key(|p| p.shard);
        assert!(pieces.windows(2).all(|w| w[0].shard < w[1].shard), "one piece per participant shard");
        let id = TxnId { client: self.config.client, seq: self.next_seq };
        self.next_seq += 1;
        // The baselines order nothing by it; any non-zero value will do (Luigi's servers
        // take 0 for "no timestamp").
        let ts = now.max(1);
        let txn = Arc::new(Txn { id, procedure: procedure.to_string(), args, pieces, ts });
        let slots = txn.pieces.len();
        let flight = InFlight {
            txn,
            submitted_us: now,
            retry_at_us: now + self.config.retry_timeout_us,
            leader_wait: false,
            leader_waits: 0,
            attempts: 1,
            replies: vec![None; slots],
            reported_unknown: false,
        };
        self.in_flight_seqs.insert(id.seq);
        self.stats.submitted += 1;
        self.send_dispatch(now, &flight, out);
        self.in_flight.insert(id, flight);
        id
    }

    /// Handles a message from a server. Watermarks, pongs and status answers carry nothing a
    /// baseline client needs.
    pub fn on_message(&mut self, now: TimeUs, msg: ServerMsg, out: &mut Vec<CoordOutput>) {
        match msg {
            ServerMsg::Reply(reply) => self.on_reply(now, reply, out),
            ServerMsg::Pong { .. }
            | ServerMsg::Watermark { .. }
            | ServerMsg::Status(_)
            | ServerMsg::Progress(_)
            | ServerMsg::Promise { .. }
            | ServerMsg::FastAccept { .. } => {}
        }
    }

    fn on_reply(&mut self, now: TimeUs, reply: TxnReply, out: &mut Vec<CoordOutput>) {
        let id = reply.id;
        let Some(flight) = self.in_flight.get_mut(&id) else {
            return; // a duplicate answer to a finished transaction
        };
        let Some(slot) = flight.txn.pieces.iter().position(|p| p.shard == reply.shard) else {
            return; // not a participant: ignore rather than trust it
        };
        if matches!(reply.outcome, Err(TxnError::NotLeader { .. } | TxnError::Busy(_))) {
            // Nothing was stored there: ask again soon (the shell's routes follow the hint).
            flight.retry_at_us = flight.retry_at_us.min(now + self.config.not_leader_retry_us);
            flight.leader_wait = true;
            return;
        }
        if let Err(TxnError::Aborted(why)) = &reply.outcome {
            match self.routing {
                // The coordinator decided for the whole transaction: nothing is installed
                // anywhere, whatever the other participants' replies would say.
                Routing::FirstShard => {
                    let results =
                        flight.txn.pieces.iter().map(|p| (p.shard, Err(TxnError::Aborted(why.clone())))).collect();
                    let (ts, rounds) = (reply.ts, reply.rounds);
                    self.stats.aborted += 1;
                    self.finish(id, TxnOutcome::Ordered { ts, results }, rounds, out);
                    return;
                }
                // Each shard answers for itself: one shard's abort is its own result.
                Routing::EveryParticipant => {}
            }
        }
        // A duplicate (a resend's second answer) keeps the first.
        if flight.replies[slot].is_none() {
            flight.replies[slot] = Some(reply);
        }
        if flight.replies.iter().all(Option::is_some) {
            let replies: Vec<&TxnReply> = flight.replies.iter().flatten().collect();
            let ts = replies.iter().map(|r| r.ts).max().expect("at least one participant");
            let rounds = replies.iter().map(|r| r.rounds).max().expect("at least one participant");
            let refusal =
                |r: &&TxnReply| if let Err(TxnError::Rejected(why)) = &r.outcome { Some(why.clone()) } else { None };
            let refusals: Vec<String> = replies.iter().filter_map(refusal).collect();
            let outcome = if refusals.len() == replies.len() {
                // Executed nowhere. A partial refusal is not one: the others' results stand.
                TxnOutcome::Rejected(refusals.into_iter().next().expect("at least one participant"))
            } else {
                TxnOutcome::Ordered { ts, results: replies.iter().map(|r| (r.shard, r.outcome.clone())).collect() }
            };
            self.finish(id, outcome, rounds, out);
        }
    }

    /// Tells the caller the definite `outcome` of `id` (`Done`, or `Resolved` after an earlier
    /// `Unknown`) and forgets it: later dispatches acknowledge it.
    fn finish(&mut self, id: TxnId, outcome: TxnOutcome, rounds: u8, out: &mut Vec<CoordOutput>) {
        debug_assert!(!matches!(outcome, TxnOutcome::Unknown(_)), "a finished transaction has a definite outcome");
        let flight = self.in_flight.remove(&id).expect("finishing an in-flight transaction");
        assert!(self.in_flight_seqs.remove(&id.seq), "{id:?} was held back");
        let completion = Completion {
            id,
            submitted_us: flight.submitted_us,
            attempts: flight.attempts,
            rounds,
            fast: false,
            asked_fast: false,
            outcome,
        };
        if flight.reported_unknown {
            self.stats.resolved += 1;
            out.push(CoordOutput::Resolved(completion));
        } else {
            out.push(CoordOutput::Done(completion));
        }
    }

    /// Resends the dispatches that timed out (or met a "not the leader"), and reports as
    /// unknown those out of attempts (still asked about afterwards, every retry timeout).
    pub fn tick(&mut self, now: TimeUs, out: &mut Vec<CoordOutput>) {
        let due: Vec<TxnId> = self.in_flight.iter().filter(|(_, f)| now >= f.retry_at_us).map(|(id, _)| *id).collect();
        for id in due {
            let flight = self.in_flight.get_mut(&id).expect("listed");
            let mut gave_up = None;
            if flight.leader_wait {
                flight.leader_wait = false;
                flight.leader_waits += 1;
                if flight.leader_waits > NOT_LEADER_RESENDS_MAX && !flight.reported_unknown {
                    gave_up = Some(format!("no leader after {} resends", flight.leader_waits - 1));
                }
            } else if flight.attempts >= self.config.max_attempts && !flight.reported_unknown {
                gave_up = Some(format!("no complete answer after {} attempts", flight.attempts));
            } else {
                flight.attempts += 1;
                self.stats.retries += 1;
            }
            if let Some(why) = gave_up {
                flight.reported_unknown = true;
                self.stats.unknown += 1;
                let completion = Completion {
                    id,
                    submitted_us: flight.submitted_us,
                    attempts: flight.attempts,
                    rounds: 0,
                    fast: false,
                    asked_fast: false,
                    outcome: TxnOutcome::Unknown(why),
                };
                out.push(CoordOutput::Done(completion));
            }
            flight.retry_at_us = now + self.config.retry_timeout_us;
            let flight = &self.in_flight[&id];
            self.send_dispatch(now, flight, out);
        }
    }

    /// The earliest time [`BaseClient::tick`] has work to do.
    pub fn next_deadline(&self) -> Option<TimeUs> {
        self.in_flight.values().map(|f| f.retry_at_us).min()
    }

    /// The shell lost its connection to the replica it sends `shard`'s messages to: the
    /// dispatches waiting on `shard` are sent again soon, to whichever replica the shell
    /// picks next, instead of after the full retry timeout.
    pub fn shard_unreachable(&mut self, now: TimeUs, shard: ShardId) {
        let soon = now + self.config.not_leader_retry_us;
        let routing = self.routing;
        for flight in self.in_flight.values_mut() {
            if Self::targets(routing, flight).contains(&shard) && flight.retry_at_us > soon {
                flight.retry_at_us = soon;
                flight.leader_wait = true;
            }
        }
    }

    /// The shards `flight`'s dispatch goes to now: its coordinator (OCC, 2PL) while any reply
    /// is missing, or the participants that have not answered (direct).
    fn targets(routing: Routing, flight: &InFlight) -> Vec<ShardId> {
        let mut pending =
            flight.txn.pieces.iter().zip(&flight.replies).filter(|(_, r)| r.is_none()).map(|(p, _)| p.shard);
        match routing {
            Routing::FirstShard => pending.next().map(|_| flight.txn.pieces[0].shard).into_iter().collect(),
            Routing::EveryParticipant => pending.collect(),
        }
    }

    fn acked_below(&self) -> u64 {
        self.in_flight_seqs.first().copied().unwrap_or(self.next_seq)
    }

    fn send_dispatch(&self, now: TimeUs, flight: &InFlight, out: &mut Vec<CoordOutput>) {
        let acked_below = self.acked_below();
        for shard in Self::targets(self.routing, flight) {
            let msg = ClientMsg::Dispatch { txn: flight.txn.clone(), sent_us: now, acked_below, fast: false };
            out.push(CoordOutput::Send { shard, msg });
        }
    }

    /// Checks the invariants that hold between steps, and describes the first one broken:
    ///
    /// - `acked_below` rests on the in-flight transactions: their sequence numbers are
    ///   exactly the ones held back, each is this client's and was issued;
    /// - each transaction has one piece per participant, sorted, and one reply slot per
    ///   piece, holding only that participant's final answer to it (never "not the leader"
    ///   or "busy": nothing was stored; never, for OCC and 2PL, a protocol abort: that
    ///   finishes the transaction);
    /// - no transaction in flight has every reply (it would have been finished).
    pub fn check_invariants(&self) -> Result<(), String> {
        let broken = |what: String| format!("client {} base client: {what}", self.config.client);
        if self.in_flight_seqs.len() != self.in_flight.len() {
            let (s, f) = (self.in_flight_seqs.len(), self.in_flight.len());
            return Err(broken(format!("{s} sequence numbers held back for {f} transactions in flight")));
        }
        for (id, f) in &self.in_flight {
            if id.client != self.config.client || id.seq >= self.next_seq || !self.in_flight_seqs.contains(&id.seq) {
                return Err(broken(format!("{id:?} in flight is not held back, or not this client's issue")));
            }
            if f.txn.id != *id || f.replies.len() != f.txn.pieces.len() || f.txn.pieces.is_empty() {
                let (r, p) = (f.replies.len(), f.txn.pieces.len());
                return Err(broken(format!("{id:?} has {r} reply slots for {p} pieces")));
            }
            if !f.txn.pieces.windows(2).all(|w| w[0].shard < w[1].shard) {
                return Err(broken(format!("{id:?}'s pieces are not sorted by shard, one per shard")));
            }
            for (piece, reply) in f.txn.pieces.iter().zip(&f.replies) {
                let Some(r) = reply else { continue };
                let retryable = matches!(r.outcome, Err(TxnError::NotLeader { .. } | TxnError::Busy(_)));
                let aborted = matches!(r.outcome, Err(TxnError::Aborted(_)));
                let final_abort = match self.routing {
                    Routing::FirstShard => aborted,
                    Routing::EveryParticipant => false,
                };
                if r.id != *id || r.shard != piece.shard || retryable || final_abort {
                    return Err(broken(format!("{id:?}'s slot for shard {} holds {r:?}", piece.shard)));
                }
            }
            if f.replies.iter().all(Option::is_some) {
                return Err(broken(format!("{id:?} has every reply but is still in flight")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
