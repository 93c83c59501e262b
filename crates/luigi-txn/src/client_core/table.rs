//! The in-flight table every client core keeps, and the retry rules written once for every
//! protocol: which transactions are in flight and which sequence numbers they hold back
//! (`acked_below`), the "not the leader" / "busy" resend rule, the timeout resends and their
//! bound (attempts, then [`TxnOutcome::Unknown`], then [`ClientOutput::Resolved`] once the
//! outcome is learned), the early resend after a lost link, and the `Done` / `Resolved` an
//! outcome goes out as. What differs between protocols is their [`FlightPolicy`]: when a
//! participant's answer counts (no dispatch goes to it any more) and where a dispatch goes;
//! when a transaction is complete stays in each protocol's own reply handling.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::client_core::{ClientOutput, Completion, TxnOutcome, NOT_LEADER_RESENDS_MAX, UNRESOLVED_MAX};
use crate::msg::{ClientMsg, TxnError, TxnReply};
use crate::types::{ClientId, ShardId, ShardPiece, TimeUs, Txn, TxnId};
use crate::Map;

/// The retry knobs of a client core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryKnobs {
    /// A transaction without a complete answer this long after its last send is sent again.
    pub retry_timeout_us: u64,
    /// Sends (the first included) before a transaction is reported unknown.
    pub max_attempts: u32,
    /// Resend delay after a "not the leader" or "busy" answer, or a lost link.
    pub not_leader_retry_us: u64,
}

/// Why pieces cannot make a transaction: none, two for one shard, or a shard the cluster
/// lacks. Refused before anything is numbered or sent (the shells' callers get it as their
/// input error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidPieces(pub String);

/// What the caller was told of a transaction still in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reported {
    /// Reported [`TxnOutcome::Unknown`]: its real outcome goes out as `Resolved`.
    Unknown,
    /// Reported a definite outcome (a refusal) before every participant answered: the rest
    /// only waits for the others, so that nothing unanswered is acknowledged.
    Rejected,
}

/// Where a protocol sends a transaction's dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DispatchTo {
    /// Every participant whose answer does not count yet (Luigi, direct).
    EachWaiting,
    /// The first participant shard only, while any answer is missing: it coordinates the
    /// others (OCC, 2PL).
    FirstShard,
}

/// A protocol's share of the retry rules.
pub trait FlightPolicy<X> {
    /// Participant `slot`'s answer counts: no dispatch goes to it any more.
    fn settled(&self, flight: &Flight<X>, slot: usize) -> bool;

    /// Where the dispatch goes.
    fn dispatch_to(&self) -> DispatchTo;

    /// Every participant's answer counts: the outcome is settled and waits only for the
    /// protocol's commit rule, so running out of attempts does not make it unknown.
    fn all_settled(&self, flight: &Flight<X>) -> bool {
        (0..flight.replies.len()).all(|slot| self.settled(flight, slot))
    }
}

/// One transaction in flight.
#[derive(Debug)]
pub struct Flight<X> {
    /// The transaction (the same one every resend carries).
    pub txn: Arc<Txn>,
    /// When it was submitted (client clock).
    pub submitted_us: TimeUs,
    /// Dispatches sent by timeout (1 = no retry).
    pub attempts: u32,
    /// One slot per participant, in `txn.pieces` order: its answer (never "not the leader"
    /// or "busy": nothing was stored there).
    pub replies: Vec<Option<TxnReply>>,
    /// It asked for the fast path (its dispatches go to every replica).
    pub asked_fast: bool,
    /// What the caller was told already, if anything.
    pub reported: Option<Reported>,
    /// The protocol's own state of it (Luigi: the followers' fast-path accepts).
    pub extra: X,
    /// When the waiting participants get the dispatch again.
    retry_at_us: TimeUs,
    /// The next resend answers a "not the leader" (not counted as an attempt).
    leader_wait: bool,
    /// Resends caused by "not the leader" answers so far (bounded separately).
    leader_waits: u32,
}

impl<X> Flight<X> {
    /// The most agreement rounds any answer needed.
    pub fn rounds(&self) -> u8 {
        self.replies.iter().flatten().map(|r| r.rounds).max().unwrap_or(0)
    }

    /// Resends after a "not the leader" or "busy" answer or a lost link so far: with none,
    /// every dispatch of a first attempt left when it was submitted.
    pub fn resends(&self) -> u32 {
        self.leader_waits
    }
}

/// Counters of the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlightCounts {
    /// Transactions submitted.
    pub submitted: u64,
    /// Dispatches sent again after a timeout.
    pub retries: u64,
    /// Dispatches sent again after a "not the leader" or "busy" answer or a lost link.
    pub resends: u64,
    /// Transactions reported unknown after running out of attempts or leader waits.
    pub unknown: u64,
    /// Transactions reported unknown whose outcome was learned later.
    pub resolved: u64,
}

/// The transactions a client has in flight, and the retry rules.
#[derive(Debug)]
pub struct InFlightTable<X> {
    client: ClientId,
    /// The cluster's shard count: pieces name shards below it.
    shards: u32,
    knobs: RetryKnobs,
    next_seq: u64,
    flights: Map<TxnId, Flight<X>>,
    /// The sequence numbers of `flights`: the smallest is `acked_below`.
    seqs: BTreeSet<u64>,
    counts: FlightCounts,
}

impl<X> InFlightTable<X> {
    /// An empty table for `client` of a cluster of `shards` shards.
    pub fn new(client: ClientId, shards: u32, knobs: RetryKnobs) -> Self {
        Self {
            client,
            shards,
            knobs,
            next_seq: 1,
            flights: Map::default(),
            seqs: BTreeSet::new(),
            counts: FlightCounts::default(),
        }
    }

    /// The client's id.
    pub fn client(&self) -> ClientId {
        self.client
    }

    /// Counters.
    pub fn counts(&self) -> FlightCounts {
        self.counts
    }

    /// Nothing in flight (answered or not).
    pub fn is_empty(&self) -> bool {
        self.flights.is_empty()
    }

    /// Transaction `id`, if in the table.
    pub fn get(&self, id: TxnId) -> Option<&Flight<X>> {
        self.flights.get(&id)
    }

    /// Transaction `id`, if in the table.
    pub fn get_mut(&mut self, id: TxnId) -> Option<&mut Flight<X>> {
        self.flights.get_mut(&id)
    }

    /// Every transaction in the table, in no particular order.
    pub fn flights(&self) -> impl Iterator<Item = (&TxnId, &Flight<X>)> {
        self.flights.iter()
    }

    /// Transactions submitted and not answered yet (no `Done`).
    pub fn in_flight(&self) -> usize {
        self.flights.values().filter(|f| f.reported.is_none()).count()
    }

    /// Transactions answered (unknown, or rejected by some participant) that still wait for
    /// a participant's answer before they can be acknowledged.
    pub fn unresolved(&self) -> usize {
        self.flights.values().filter(|f| f.reported.is_some()).count()
    }

    /// False while [`UNRESOLVED_MAX`] transactions are unresolved: the shell should hold new
    /// submissions until some resolve (each holds the acknowledgement of every later one).
    pub fn can_submit(&self) -> bool {
        self.unresolved() < UNRESOLVED_MAX
    }

    /// Every sequence number below it is acknowledged: the smallest still in the table.
    pub fn acked_below(&self) -> u64 {
        self.seqs.first().copied().unwrap_or(self.next_seq)
    }

    /// Sorts `pieces` by shard and numbers a new transaction over them; refuses (numbering
    /// nothing) pieces without a participant, with two for one shard, or naming a shard the
    /// cluster lacks.
    pub fn issue(&mut self, pieces: &mut [ShardPiece]) -> Result<TxnId, InvalidPieces> {
        if pieces.is_empty() {
            return Err(InvalidPieces("it names no key, so no shard takes part".into()));
        }
        pieces.sort_by_key(|p| p.shard);
        if let Some(w) = pieces.windows(2).find(|w| w[0].shard == w[1].shard) {
            return Err(InvalidPieces(format!("two pieces name shard {}", w[0].shard)));
        }
        let last = pieces[pieces.len() - 1].shard;
        if last >= self.shards {
            return Err(InvalidPieces(format!("a piece names shard {last}; the cluster has {}", self.shards)));
        }
        let id = TxnId { client: self.client, seq: self.next_seq };
        self.next_seq += 1;
        Ok(id)
    }

    /// Puts `txn` (numbered by [`InFlightTable::issue`]) in flight and sends its dispatch.
    pub fn open(
        &mut self,
        policy: &impl FlightPolicy<X>,
        now: TimeUs,
        txn: Arc<Txn>,
        asked_fast: bool,
        extra: X,
        out: &mut Vec<ClientOutput>,
    ) {
        let id = txn.id;
        let flight = Flight {
            replies: vec![None; txn.pieces.len()],
            txn,
            submitted_us: now,
            attempts: 1,
            asked_fast,
            reported: None,
            extra,
            retry_at_us: now + self.knobs.retry_timeout_us,
            leader_wait: false,
            leader_waits: 0,
        };
        self.seqs.insert(id.seq);
        self.counts.submitted += 1;
        self.send_dispatch(policy, now, &flight, out);
        self.flights.insert(id, flight);
    }

    /// A participant's answer: `Some(slot)` when it is one to record (from a participant of
    /// a transaction in flight), `None` otherwise. A "not the leader" or "busy" answer
    /// stored nothing there: the dispatch is sent again soon (the shell's routes follow the
    /// hint) rather than after the full retry timeout.
    pub fn on_reply(&mut self, now: TimeUs, reply: &TxnReply) -> Option<usize> {
        // A duplicate answer to a finished transaction, or not from a participant: ignored.
        let flight = self.flights.get_mut(&reply.id)?;
        let slot = flight.txn.pieces.iter().position(|p| p.shard == reply.shard)?;
        if matches!(reply.outcome, Err(TxnError::NotLeader { .. } | TxnError::Busy(_))) {
            flight.retry_at_us = flight.retry_at_us.min(now + self.knobs.not_leader_retry_us);
            flight.leader_wait = true;
            return None;
        }
        Some(slot)
    }

    /// Resends the dispatches that timed out (or met a "not the leader"), and reports as
    /// unknown those out of attempts or leader waits: `gave_up(table, id, why, out)` tells
    /// the caller (see [`InFlightTable::report`]) and returns false to drop the transaction
    /// at once (a test mutation), true to keep asking about it every retry timeout.
    pub fn tick<P: FlightPolicy<X>>(
        &mut self,
        policy: &P,
        now: TimeUs,
        out: &mut Vec<ClientOutput>,
        mut gave_up: impl FnMut(&mut Self, TxnId, String, &mut Vec<ClientOutput>) -> bool,
    ) {
        let due: Vec<TxnId> = self.flights.iter().filter(|(_, f)| now >= f.retry_at_us).map(|(id, _)| *id).collect();
        for id in due {
            let flight = &self.flights[&id];
            // Every answer counts and only the commit rule waits: the outcome is settled
            // (never reported unknown). An answer that does not count may be lost: asked
            // again like silence.
            let silent = !policy.all_settled(flight);
            if let Some(why) = self.count_resend(id, silent) {
                self.counts.unknown += 1;
                if !gave_up(self, id, why, out) {
                    continue;
                }
            }
            let flight = self.flights.get_mut(&id).expect("still in flight");
            flight.retry_at_us = now + self.knobs.retry_timeout_us;
            self.send_dispatch(policy, now, &self.flights[&id], out);
        }
    }

    /// Counts a due resend of `id` (`silent`: an answer is missing): an attempt, or a leader
    /// wait; and says why it is unknown now if it ran out of them (reported once).
    fn count_resend(&mut self, id: TxnId, silent: bool) -> Option<String> {
        let flight = self.flights.get_mut(&id).expect("listed");
        let fresh = flight.reported.is_none();
        if flight.leader_wait {
            flight.leader_wait = false;
            flight.leader_waits += 1;
            self.counts.resends += 1;
            if silent && flight.leader_waits > NOT_LEADER_RESENDS_MAX && fresh {
                return Some(format!("no leader after {} resends", flight.leader_waits - 1));
            }
        } else if silent && flight.attempts >= self.knobs.max_attempts && fresh {
            return Some(format!("no complete answer after {} attempts", flight.attempts));
        } else {
            flight.attempts += 1;
            self.counts.retries += 1;
        }
        None
    }

    /// The earliest time [`InFlightTable::tick`] has work to do.
    pub fn next_retry(&self) -> Option<TimeUs> {
        self.flights.values().map(|f| f.retry_at_us).min()
    }

    /// The shell lost its link to the replica it sends `shard`'s messages to (the leader may
    /// have died): dispatches still waiting on `shard` are sent again soon, to whichever
    /// replica the shell picks next, instead of after the full retry timeout.
    pub fn shard_unreachable(&mut self, policy: &impl FlightPolicy<X>, now: TimeUs, shard: ShardId) {
        let soon = now + self.knobs.not_leader_retry_us;
        for flight in self.flights.values_mut() {
            if targets(policy, flight).contains(&shard) && flight.retry_at_us > soon {
                flight.retry_at_us = soon;
                flight.leader_wait = true;
            }
        }
    }

    fn send_dispatch(
        &self,
        policy: &impl FlightPolicy<X>,
        now: TimeUs,
        flight: &Flight<X>,
        out: &mut Vec<ClientOutput>,
    ) {
        let acked_below = self.acked_below();
        for shard in targets(policy, flight) {
            let msg =
                ClientMsg::Dispatch { txn: flight.txn.clone(), sent_us: now, acked_below, fast: flight.asked_fast };
            out.push(ClientOutput::Send { shard, msg });
        }
    }

    /// Tells the caller `outcome` of `id` (`rounds`, `fast`: see [`Completion`]): `Done`, or
    /// `Resolved` after an earlier `Unknown`. Returns what had been reported before. The
    /// transaction stays until [`InFlightTable::forget`].
    pub fn report(
        &mut self,
        id: TxnId,
        outcome: TxnOutcome,
        rounds: u8,
        fast: bool,
        out: &mut Vec<ClientOutput>,
    ) -> Option<Reported> {
        let flight = self.flights.get_mut(&id).expect("reporting an in-flight transaction");
        let earlier = flight.reported;
        flight.reported = Some(match outcome {
            TxnOutcome::Unknown(_) => Reported::Unknown,
            TxnOutcome::Ordered { .. } | TxnOutcome::Rejected(_) => Reported::Rejected,
        });
        let completion = Completion {
            id,
            submitted_us: flight.submitted_us,
            attempts: flight.attempts,
            resends: flight.leader_waits,
            rounds,
            fast,
            asked_fast: flight.asked_fast,
            read_only: false,
            outcome,
        };
        match earlier {
            None => out.push(ClientOutput::Done(completion)),
            Some(Reported::Unknown) => {
                self.counts.resolved += 1;
                out.push(ClientOutput::Resolved(completion));
            }
            Some(Reported::Rejected) => unreachable!("a definite outcome is reported once"),
        }
        earlier
    }

    /// Every participant answered `id` (or its outcome is settled): it leaves, and later
    /// dispatches acknowledge it.
    pub fn forget(&mut self, id: TxnId) -> Flight<X> {
        let flight = self.flights.remove(&id).expect("forgetting an in-flight transaction");
        assert!(self.seqs.remove(&id.seq), "{id:?} was held back");
        flight
    }

    /// Checks what holds of the table between steps, and describes the first thing broken
    /// (`who` names the core in the message):
    ///
    /// - `acked_below` rests on the transactions in flight: their sequence numbers are
    ///   exactly the ones held back (nothing unanswered is acknowledged), each is this
    ///   client's and was issued;
    /// - each has one piece per participant, sorted, and one reply slot per piece, holding
    ///   only that participant's answer to it (never "not the leader" or "busy").
    pub fn check_invariants(&self, who: &str) -> Result<(), String> {
        let broken = |what: String| format!("client {} {who}: {what}", self.client);
        if self.seqs.len() != self.flights.len() {
            let (s, f) = (self.seqs.len(), self.flights.len());
            return Err(broken(format!("{s} sequence numbers held back for {f} transactions in flight")));
        }
        for (id, f) in &self.flights {
            if id.client != self.client || id.seq >= self.next_seq || !self.seqs.contains(&id.seq) {
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
                if r.id != *id || r.shard != piece.shard || retryable {
                    return Err(broken(format!("{id:?}'s slot for shard {} holds {reply:?}", piece.shard)));
                }
            }
        }
        Ok(())
    }
}

/// The shards `flight`'s dispatch goes to now (see [`DispatchTo`]).
fn targets<X>(policy: &impl FlightPolicy<X>, flight: &Flight<X>) -> Vec<ShardId> {
    let mut waiting = (0..flight.replies.len()).filter(|&slot| !policy.settled(flight, slot));
    match policy.dispatch_to() {
        DispatchTo::EachWaiting => waiting.map(|slot| flight.txn.pieces[slot].shard).collect(),
        DispatchTo::FirstShard => waiting.next().map(|_| flight.txn.pieces[0].shard).into_iter().collect(),
    }
}
