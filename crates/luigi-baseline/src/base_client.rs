//! The client core of the baseline protocols ([`Protocol::Occ`], [`Protocol::TwoPl`] and
//! [`Protocol::Direct`]), sans I/O. It produces the very outputs of Luigi's
//! [`Coordinator`](luigi_protocol::coordinator::Coordinator) ([`ClientOutput`], [`Completion`],
//! [`TxnOutcome`]), so one shell (the runtime client, the simulator) drives either.
//!
//! **Where a transaction goes.** OCC and 2PL: the whole transaction goes to the leader of its
//! first participant shard (its two-phase-commit coordinator) only, which answers with one
//! reply per participant shard once the outcome is durable. Direct: the transaction goes to
//! every participant's leader, each runs its own piece at once and answers for its shard.
//! Watermarks play no role: a baseline answers only once durable.
//!
//! **What a client is told.** Every transaction ends with one [`ClientOutput::Done`]:
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
//!   [`ClientOutput::Resolved`]; until then it holds `acked_below` down, so at most
//!   [`UNRESOLVED_MAX`](luigi_txn::client_core::UNRESOLVED_MAX) may wait (see [`ClientCore::can_submit`]).
//!
//! Retries always resend the same dispatch (same [`TxnId`]): a server that has it answers
//! from what it stored rather than running it twice.

use std::sync::Arc;

use luigi_txn::client_core::{
    ClientCore, ClientCounters, DispatchTo, Flight, FlightPolicy, FlightsView, InFlightTable, InvalidPieces, RetryKnobs,
};
use luigi_txn::client_core::{ClientOutput, TxnOutcome};
use luigi_txn::msg::{ServerMsg, TxnError, TxnReply};
use luigi_txn::types::{ClientId, Protocol, ShardId, ShardPiece, TimeUs, Txn, TxnId};

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
    /// The cluster's shard count (`u32::MAX` by default: any shard id is taken).
    pub shards: u32,
}

impl BaseClientConfig {
    /// Defaults for client `client` of a `protocol` cluster (the same as Luigi's coordinator).
    pub fn new(client: ClientId, protocol: Protocol) -> Self {
        let luigi = luigi_protocol::coordinator::CoordinatorConfig::new(client);
        Self {
            client,
            protocol,
            retry_timeout_us: luigi.retry_timeout_us,
            max_attempts: luigi.max_attempts,
            not_leader_retry_us: luigi.not_leader_retry_us,
            shards: luigi.shards,
        }
    }
}

/// Where a baseline's dispatch goes, and when an answer counts: once it is there (a baseline
/// answers only once durable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Routing(DispatchTo);

impl Routing {
    fn of(protocol: Protocol) -> Self {
        match protocol {
            // The leader of the first participant shard coordinates the others.
            Protocol::Occ | Protocol::TwoPl => Routing(DispatchTo::FirstShard),
            // Every participant's leader answers for itself.
            Protocol::Direct => Routing(DispatchTo::EachWaiting),
            Protocol::Luigi => panic!("the Luigi protocol's client is the Coordinator, not the BaseClient"),
        }
    }
}

impl FlightPolicy<()> for Routing {
    fn settled(&self, flight: &Flight<()>, slot: usize) -> bool {
        flight.replies[slot].is_some()
    }

    fn dispatch_to(&self) -> DispatchTo {
        self.0
    }
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
    flights: InFlightTable<()>,
    aborted: u64,
}

impl BaseClient {
    /// A client with `config`. Panics for [`Protocol::Luigi`] (its client is the
    /// [`Coordinator`](luigi_protocol::coordinator::Coordinator)).
    pub fn new(config: BaseClientConfig) -> Self {
        let routing = Routing::of(config.protocol);
        let knobs = RetryKnobs {
            retry_timeout_us: config.retry_timeout_us,
            max_attempts: config.max_attempts,
            not_leader_retry_us: config.not_leader_retry_us,
        };
        Self { flights: InFlightTable::new(config.client, config.shards, knobs), config, routing, aborted: 0 }
    }

    /// Counters.
    pub fn stats(&self) -> BaseClientStats {
        let c = self.flights.counts();
        BaseClientStats {
            submitted: c.submitted,
            retries: c.retries,
            aborted: self.aborted,
            unknown: c.unknown,
            resolved: c.resolved,
        }
    }

    fn on_reply(&mut self, now: TimeUs, reply: TxnReply, out: &mut Vec<ClientOutput>) {
        let id = reply.id;
        let Some(slot) = self.flights.on_reply(now, &reply) else { return };
        let flight = self.flights.get_mut(id).expect("answered in flight");
        if let Err(TxnError::Aborted(why)) = &reply.outcome {
            match self.routing.0 {
                // The coordinator decided for the whole transaction: nothing is installed
                // anywhere, whatever the other participants' replies would say.
                DispatchTo::FirstShard => {
                    let results =
                        flight.txn.pieces.iter().map(|p| (p.shard, Err(TxnError::Aborted(why.clone())))).collect();
                    self.aborted += 1;
                    self.finish(id, TxnOutcome::Ordered { ts: reply.ts, results }, reply.rounds, out);
                    return;
                }
                // Each shard answers for itself: one shard's abort is its own result.
                DispatchTo::EachWaiting => {}
            }
        }
        // A duplicate (a resend's second answer) keeps the first.
        if flight.replies[slot].is_none() {
            flight.replies[slot] = Some(reply);
        }
        if flight.replies.iter().all(Option::is_some) {
            let replies: Vec<&TxnReply> = flight.replies.iter().flatten().collect();
            let ts = replies.iter().map(|r| r.ts).max().expect("at least one participant");
            let refusal =
                |r: &&TxnReply| if let Err(TxnError::Rejected(why)) = &r.outcome { Some(why.clone()) } else { None };
            let refusals: Vec<String> = replies.iter().filter_map(refusal).collect();
            let outcome = if refusals.len() == replies.len() {
                // Executed nowhere. A partial refusal is not one: the others' results stand.
                TxnOutcome::Rejected(refusals.into_iter().next().expect("at least one participant"))
            } else {
                TxnOutcome::Ordered { ts, results: replies.iter().map(|r| (r.shard, r.outcome.clone())).collect() }
            };
            let rounds = flight.rounds();
            self.finish(id, outcome, rounds, out);
        }
    }

    /// Tells the caller the definite `outcome` of `id` (`Done`, or `Resolved` after an earlier
    /// `Unknown`) and forgets it: later dispatches acknowledge it.
    fn finish(&mut self, id: TxnId, outcome: TxnOutcome, rounds: u8, out: &mut Vec<ClientOutput>) {
        debug_assert!(!matches!(outcome, TxnOutcome::Unknown(_)), "a finished transaction has a definite outcome");
        self.flights.report(id, outcome, rounds, false, out);
        self.flights.forget(id);
    }
}

impl ClientCore for BaseClient {
    fn client(&self) -> ClientId {
        self.config.client
    }

    fn protocol(&self) -> Protocol {
        self.config.protocol
    }

    /// Starts a transaction calling `procedure(args)` over `pieces` (one per participant).
    fn submit(
        &mut self,
        now: TimeUs,
        procedure: &str,
        args: Vec<u8>,
        mut pieces: Vec<ShardPiece>,
        out: &mut Vec<ClientOutput>,
    ) -> Result<TxnId, InvalidPieces> {
        let id = self.flights.issue(&mut pieces)?;
        // The baselines order nothing by it; any non-zero value will do (Luigi's servers
        // take 0 for "no timestamp").
        let ts = now.max(1);
        let txn = Arc::new(Txn { id, procedure: procedure.to_string(), args, pieces, ts });
        self.flights.open(&self.routing, now, txn, false, (), out);
        Ok(id)
    }

    /// Handles a message from a server. Watermarks, pongs and status answers carry nothing a
    /// baseline client needs.
    fn on_message(&mut self, now: TimeUs, msg: ServerMsg, out: &mut Vec<ClientOutput>) {
        match msg {
            ServerMsg::Reply(reply) => self.on_reply(now, reply, out),
            ServerMsg::Pong { .. }
            | ServerMsg::Watermark { .. }
            | ServerMsg::Status(_)
            | ServerMsg::Progress(_)
            | ServerMsg::Promise { .. }
            | ServerMsg::FastAccept { .. }
            | ServerMsg::SnapshotRead(_) => {} // it sends none: the baselines serve none
        }
    }

    /// Resends the dispatches that timed out (or met a "not the leader"), and reports as
    /// unknown those out of attempts (still asked about afterwards, every retry timeout).
    fn tick(&mut self, now: TimeUs, out: &mut Vec<ClientOutput>) {
        self.flights.tick(&self.routing, now, out, |flights, id, why, out| {
            flights.report(id, TxnOutcome::Unknown(why), 0, false, out);
            true
        });
    }

    fn next_deadline(&self) -> Option<TimeUs> {
        self.flights.next_retry()
    }

    /// The shell lost its connection to the replica it sends `shard`'s messages to: the
    /// dispatches waiting on `shard` are sent again soon, to whichever replica the shell
    /// picks next, instead of after the full retry timeout.
    fn shard_unreachable(&mut self, now: TimeUs, shard: ShardId) {
        self.flights.shard_unreachable(&self.routing, now, shard);
    }

    fn table(&self) -> &dyn FlightsView {
        &self.flights
    }

    /// Checks the invariants that hold between steps, and describes the first one broken:
    /// the in-flight table's (see [`InFlightTable::check_invariants`]), and
    ///
    /// - no reply slot holds, for OCC and 2PL, a protocol abort (that finishes the
    ///   transaction);
    /// - no transaction in flight has every reply (it would have been finished).
    fn check_invariants(&self) -> Result<(), String> {
        self.flights.check_invariants("base client")?;
        let broken = |what: String| format!("client {} base client: {what}", self.config.client);
        for (id, f) in self.flights.flights() {
            for (piece, reply) in f.txn.pieces.iter().zip(&f.replies) {
                let aborted = reply.as_ref().is_some_and(|r| matches!(r.outcome, Err(TxnError::Aborted(_))));
                let final_abort = match self.routing.0 {
                    DispatchTo::FirstShard => aborted,
                    DispatchTo::EachWaiting => false,
                };
                if final_abort {
                    return Err(broken(format!("{id:?}'s slot for shard {} holds {reply:?}", piece.shard)));
                }
            }
            if f.replies.iter().all(Option::is_some) {
                return Err(broken(format!("{id:?} has every reply but is still in flight")));
            }
        }
        Ok(())
    }

    fn counters(&self) -> ClientCounters {
        ClientCounters { flights: self.flights.counts(), ..ClientCounters::default() }
    }

    fn stats_line(&self) -> String {
        format!("{:?}", self.stats())
    }
}

#[cfg(test)]
mod tests;
