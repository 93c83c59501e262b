//! The coordinator: the client-side state machine (DESIGN.md rules 1, 2 and 7). It stamps each
//! transaction with `now + max one-way delay to the participants + headroom`, sends the whole
//! transaction to every participant leader at once, retries under the same id, and answers
//! once every participant has answered with a watermark at or above the final timestamp.
//! It holds no authoritative state: losing it loses only the answers not yet delivered.
//!
//! **What a client is told, and what it acknowledges.** Every transaction ends with exactly
//! one [`CoordOutput::Done`]: [`TxnOutcome::Ordered`] (executed at its final timestamp on every
//! participant, durable), [`TxnOutcome::Rejected`] (refused by a participant: executed
//! nowhere, ever), or [`TxnOutcome::Unknown`] (no complete answer in time: it may or may not
//! execute). An unknown transaction keeps its id: the coordinator goes on asking its silent
//! participants (every `retry_timeout_us`, without limit) and reports the outcome it learns
//! with [`CoordOutput::Resolved`]. A transaction is *acknowledged* to the servers
//! (`acked_below` on later dispatches, which lets them forget its answer) only once every
//! participant has answered it. So a server that finds a transaction acknowledged knows it
//! answered it itself (see `PeerItem::Acknowledged`), and no participant is ever told to
//! forget a transaction another participant still waits for.

use std::collections::BTreeSet;

use crate::Map;
use std::sync::Arc;

use crate::msg::{ClientMsg, ServerMsg, TxnError, TxnReply};
use crate::owd::OwdEstimator;
use crate::procedure::ProcError;
use crate::types::{ClientId, ShardId, ShardPiece, TimeUs, Timestamp, Txn, TxnId};

/// Resends after "not the leader" (or "busy") answers before a transaction is reported as
/// unknown (with the default 50 ms delay: about 10 s without a leader).
pub const NOT_LEADER_RESENDS_MAX: u32 = 200;

/// Transactions reported to the caller (unknown, or rejected by one participant) whose
/// other participants have not answered yet, at most. They hold `acked_below` down, so the
/// shell stops submitting while this many are outstanding (see
/// [`Coordinator::can_submit`]).
pub const UNRESOLVED_MAX: usize = 1 << 16;

/// Knobs of a coordinator.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// This client's id (unique in the cluster).
    pub client: ClientId,
    /// Added to the one-way-delay estimate so that most dispatches arrive before their time.
    pub headroom_us: u64,
    /// One-way delay assumed for a shard before any sample was seen.
    pub initial_owd_us: u64,
    /// A participant that has not answered within this long gets the dispatch again.
    pub retry_timeout_us: u64,
    /// Attempts (first send included) before a transaction is reported failed.
    pub max_attempts: u32,
    /// Resend delay after a "not the leader" answer (an election is under way).
    pub not_leader_retry_us: u64,
    /// Which watermarks must pass a transaction's timestamp before it is answered.
    pub commit_rule: CommitRule,
    /// While anything is in flight, every shard the commit rule waits on is pinged this
    /// often: servers broadcast watermarks only to clients they heard from recently.
    pub keepalive_us: u64,
    /// Fault-injection switches for tests only. All off in production.
    pub mutations: CoordMutations,
}

/// Deliberate coordinator bugs, used only by tests that prove the checks catch them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoordMutations {
    /// Forget (and so acknowledge) a transaction as soon as it is reported unknown: the bug
    /// that let a participant that never saw it take it for answered.
    pub acknowledge_unknown: bool,
}

/// Which shards' watermarks must have passed a transaction's timestamp before the client is
/// answered (DESIGN.md rule 7, and the deviation documented in the README).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitRule {
    /// Every participant's (DESIGN.md rule 7 as written). Serializable, and real-time ordered
    /// per shard; across shards real-time order then depends on clock skew.
    Participants,
    /// Every shard of the cluster (`shards` of them): a transaction dispatched after the answer
    /// lands above every one of those watermarks, so it gets a larger timestamp on whatever
    /// shard it runs. Strictly serializable whatever the clocks do; costs at most one
    /// watermark broadcast interval when the other shards are idle.
    AllShards {
        /// Number of shards in the cluster.
        shards: u32,
    },
}

impl CoordinatorConfig {
    /// Defaults for client `client`.
    pub fn new(client: ClientId) -> Self {
        Self {
            client,
            headroom_us: 200,
            initial_owd_us: 0,
            retry_timeout_us: 2_000_000,
            max_attempts: 10,
            not_leader_retry_us: 50_000,
            commit_rule: CommitRule::Participants,
            keepalive_us: 250_000,
            mutations: CoordMutations::default(),
        }
    }
}

/// An effect of the coordinator.
#[derive(Clone, Debug, PartialEq)]
pub enum CoordOutput {
    /// Send `msg` to the leader of `shard`.
    Send {
        /// Destination shard (its current leader).
        shard: ShardId,
        /// Message.
        msg: ClientMsg,
    },
    /// A transaction finished: its one answer to the caller.
    Done(Completion),
    /// A transaction reported [`TxnOutcome::Unknown`] earlier has a known outcome now
    /// ([`TxnOutcome::Ordered`] or [`TxnOutcome::Rejected`]).
    Resolved(Completion),
}

/// A finished transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// Its id.
    pub id: TxnId,
    /// When it was submitted (coordinator clock).
    pub submitted_us: TimeUs,
    /// Dispatch attempts made (1 = no retry).
    pub attempts: u32,
    /// Agreement rounds the participants needed (0 single shard, 1 equal proposals, 2 differed).
    pub rounds: u8,
    /// What happened.
    pub outcome: TxnOutcome,
}

/// The answer to a transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum TxnOutcome {
    /// Ordered at `ts` and answered by every participant (committed, even if the procedure
    /// itself failed or aborted on some shard: see the per-shard results).
    Ordered {
        /// Final timestamp.
        ts: Timestamp,
        /// Each participant's result, by shard.
        results: Vec<(ShardId, Result<Vec<u8>, TxnError>)>,
    },
    /// Refused by a participant: executed on no participant, and never will be (the refusal
    /// is durable in that participant's log before it is sent).
    Rejected(String),
    /// No complete answer after every attempt (no leader, unreachable shard): the
    /// transaction may have executed or may still execute. The coordinator keeps its id and
    /// keeps asking; the outcome follows as [`CoordOutput::Resolved`] once learned.
    Unknown(String),
}

impl TxnOutcome {
    /// True when ordered and every participant's procedure succeeded.
    pub fn is_committed(&self) -> bool {
        matches!(self, TxnOutcome::Ordered { results, .. } if results.iter().all(|(_, r)| r.is_ok()))
    }

    /// True when ordered but some participant's procedure aborted or failed.
    pub fn is_aborted(&self) -> bool {
        matches!(self, TxnOutcome::Ordered { results, .. } if results.iter().any(|(_, r)| r.is_err()))
    }

    /// The user-abort reason, if a procedure aborted on purpose.
    pub fn user_abort(&self) -> Option<&str> {
        match self {
            TxnOutcome::Ordered { results, .. } => results.iter().find_map(|(_, r)| {
                if let Err(TxnError::Proc(ProcError::UserAbort(why))) = r {
                    Some(why.as_str())
                } else {
                    None
                }
            }),
            TxnOutcome::Rejected(_) | TxnOutcome::Unknown(_) => None,
        }
    }
}

#[derive(Debug)]
struct InFlight {
    txn: Arc<Txn>,
    submitted_us: TimeUs,
    /// When the silent participants get the dispatch again.
    retry_at_us: TimeUs,
    /// The next resend answers a "not the leader" (not counted as an attempt).
    leader_wait: bool,
    /// Resends caused by "not the leader" answers so far (bounded separately).
    leader_waits: u32,
    attempts: u32,
    /// One slot per participant, in `txn.pieces` order.
    replies: Vec<Option<TxnReply>>,
    /// Its `Done` went out already (unknown, or rejected by some participant); it stays until
    /// every participant has answered, then goes without acknowledging anything unanswered.
    reported: Option<Reported>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reported {
    /// Reported [`TxnOutcome::Unknown`]: its real outcome goes out as `Resolved`.
    Unknown,
    /// Reported [`TxnOutcome::Rejected`]: definite; the rest only waits for the others.
    Rejected,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoordStats {
    /// Transactions submitted.
    pub submitted: u64,
    /// Dispatches sent again after a timeout.
    pub retries: u64,
    /// Transactions whose participants answered with different timestamps (a protocol bug).
    pub ts_mismatch: u64,
    /// Transactions reported unknown.
    pub unknown: u64,
    /// Of those, the ones whose outcome was learned later.
    pub resolved: u64,
}

/// The coordinator state machine of one client.
pub struct Coordinator {
    config: CoordinatorConfig,
    next_seq: u64,
    owd: Map<ShardId, OwdEstimator>,
    watermarks: Map<ShardId, Timestamp>,
    in_flight: Map<TxnId, InFlight>,
    in_flight_seqs: BTreeSet<u64>,
    /// Answered by every participant, waiting for a watermark to pass the timestamp.
    awaiting_watermark: BTreeSet<TxnId>,
    /// When the shards are next pinged to stay among the clients they send watermarks to.
    keepalive_at_us: TimeUs,
    stats: CoordStats,
}

impl Coordinator {
    /// A coordinator with `config`.
    pub fn new(config: CoordinatorConfig) -> Self {
        Self {
            config,
            next_seq: 1,
            owd: Map::default(),
            watermarks: Map::default(),
            in_flight: Map::default(),
            in_flight_seqs: BTreeSet::new(),
            awaiting_watermark: BTreeSet::new(),
            keepalive_at_us: 0,
            stats: CoordStats::default(),
        }
    }

    /// This client's id.
    pub fn client(&self) -> ClientId {
        self.config.client
    }

    /// Counters.
    pub fn stats(&self) -> CoordStats {
        self.stats
    }

    /// Transactions submitted and not answered yet (no `Done`).
    pub fn in_flight(&self) -> usize {
        self.in_flight.values().filter(|f| f.reported.is_none()).count()
    }

    /// Transactions answered (unknown, or rejected by some participant) that still wait for
    /// a participant's answer before they can be acknowledged.
    pub fn unresolved(&self) -> usize {
        self.in_flight.values().filter(|f| f.reported.is_some()).count()
    }

    /// False while [`UNRESOLVED_MAX`] transactions are unresolved: the shell should hold new
    /// submissions until some resolve (each holds the acknowledgement of every later one).
    pub fn can_submit(&self) -> bool {
        self.unresolved() < UNRESOLVED_MAX
    }

    /// The current one-way-delay estimate towards `shard`'s leader.
    pub fn owd_estimate_us(&self, shard: ShardId) -> i64 {
        self.owd.get(&shard).and_then(OwdEstimator::estimate_us).unwrap_or(self.config.initial_owd_us as i64)
    }

    /// The timestamp a transaction over `shards` submitted at `now` gets.
    pub fn stamp(&self, now: TimeUs, shards: impl Iterator<Item = ShardId>) -> Timestamp {
        let owd = shards.map(|s| self.owd_estimate_us(s)).max().unwrap_or(0);
        (now as i64 + owd + self.config.headroom_us as i64).max(1) as Timestamp
    }

    /// A ping for `shard`'s leader, to seed the delay estimate before the first transaction.
    pub fn ping(&self, now: TimeUs, shard: ShardId, out: &mut Vec<CoordOutput>) {
        out.push(CoordOutput::Send { shard, msg: ClientMsg::Ping { sent_us: now } });
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
        let id = TxnId { client: self.config.client, seq: self.next_seq };
        self.next_seq += 1;
        let ts = self.stamp(now, pieces.iter().map(|p| p.shard));
        let txn = Arc::new(Txn { id, procedure: procedure.to_string(), args, pieces, ts });
        let slots = txn.pieces.len();
        let retry_at_us = now + self.config.retry_timeout_us;
        let flight = InFlight {
            txn,
            submitted_us: now,
            retry_at_us,
            leader_wait: false,
            leader_waits: 0,
            attempts: 1,
            replies: vec![None; slots],
            reported: None,
        };
        if self.in_flight.is_empty() {
            // Dispatches keep this client known to the participants for now.
            self.keepalive_at_us = now.saturating_add(self.config.keepalive_us);
        }
        self.in_flight_seqs.insert(id.seq);
        self.stats.submitted += 1;
        self.send_dispatch(now, &flight, out);
        self.in_flight.insert(id, flight);
        id
    }

    /// The shell lost its connection to the replica it sends `shard`'s messages to (the
    /// leader may have died): dispatches still waiting for `shard` are sent again soon, to
    /// whichever replica the shell picks next, instead of after the full retry timeout.
    pub fn shard_unreachable(&mut self, now: TimeUs, shard: ShardId) {
        let soon = now + self.config.not_leader_retry_us;
        for flight in self.in_flight.values_mut() {
            let waiting = flight.txn.pieces.iter().zip(&flight.replies).any(|(p, r)| p.shard == shard && r.is_none());
            if waiting && flight.retry_at_us > soon {
                flight.retry_at_us = soon;
                flight.leader_wait = true;
            }
        }
    }

    fn acked_below(&self) -> u64 {
        self.in_flight_seqs.first().copied().unwrap_or(self.next_seq)
    }

    fn send_dispatch(&self, now: TimeUs, flight: &InFlight, out: &mut Vec<CoordOutput>) {
        let acked_below = self.acked_below();
        for (piece, reply) in flight.txn.pieces.iter().zip(&flight.replies) {
            if reply.is_none() {
                out.push(CoordOutput::Send {
                    shard: piece.shard,
                    msg: ClientMsg::Dispatch { txn: flight.txn.clone(), sent_us: now, acked_below },
                });
            }
        }
    }

    /// Handles a message from a leader.
    pub fn on_message(&mut self, now: TimeUs, msg: ServerMsg, out: &mut Vec<CoordOutput>) {
        match msg {
            ServerMsg::Pong { shard, arrival_delta_us, watermark } => {
                self.owd.entry(shard).or_default().record(arrival_delta_us);
                self.note_watermark(shard, watermark);
            }
            ServerMsg::Watermark { shard, watermark } => {
                self.note_watermark(shard, watermark);
                let waiting: Vec<TxnId> = self.awaiting_watermark.iter().copied().collect();
                for id in waiting {
                    self.try_complete_txn(id, out);
                }
            }
            ServerMsg::Reply(reply) => self.on_reply(now, reply, out),
            ServerMsg::Status(_) => {} // an operator query's answer; the coordinator sends none
        }
    }

    fn note_watermark(&mut self, shard: ShardId, watermark: Timestamp) {
        let w = self.watermarks.entry(shard).or_default();
        *w = (*w).max(watermark);
    }

    fn on_reply(&mut self, now: TimeUs, reply: TxnReply, out: &mut Vec<CoordOutput>) {
        let shard = reply.shard;
        self.note_watermark(shard, reply.watermark);
        let Some(flight) = self.in_flight.get_mut(&reply.id) else {
            return; // a duplicate answer to a finished transaction
        };
        let Some(slot) = flight.txn.pieces.iter().position(|p| p.shard == shard) else {
            return; // not a participant: ignore rather than trust it
        };
        if matches!(reply.outcome, Err(TxnError::NotLeader { .. } | TxnError::Busy(_))) {
            // Nothing was stored there (an election is under way, or its log is full): ask
            // again soon rather than after the full retry timeout.
            flight.retry_at_us = flight.retry_at_us.min(now + self.config.not_leader_retry_us);
            flight.leader_wait = true;
            return;
        }
        if flight.attempts == 1 && !matches!(reply.outcome, Err(TxnError::Rejected(_))) {
            self.owd.entry(shard).or_default().record(reply.arrival_delta_us);
        }
        let id = reply.id;
        flight.replies[slot] = Some(reply);
        self.try_complete_txn(id, out);
    }

    fn try_complete_txn(&mut self, id: TxnId, out: &mut Vec<CoordOutput>) {
        let Some(flight) = self.in_flight.get(&id) else {
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
            } else if let Some(f) = self.in_flight.get_mut(&id) {
                f.reported = Some(Reported::Rejected);
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
        let passed = |shard: &ShardId| self.watermarks.get(shard).is_some_and(|w| *w >= ts);
        let covered = match self.config.commit_rule {
            CommitRule::Participants => replies.iter().all(|r| passed(&r.shard)),
            CommitRule::AllShards { shards } => (0..shards).all(|s| passed(&s)),
        };
        if !covered {
            self.awaiting_watermark.insert(id); // a later watermark completes it
            return;
        }
        let results = replies.iter().map(|r| (r.shard, r.outcome.clone())).collect();
        self.report(id, TxnOutcome::Ordered { ts, results }, out);
        self.forget(id);
    }

    /// Tells the caller `outcome` (`Done`, or `Resolved` after an earlier `Unknown`).
    fn report(&mut self, id: TxnId, outcome: TxnOutcome, out: &mut Vec<CoordOutput>) {
        let flight = self.in_flight.get_mut(&id).expect("reporting an in-flight transaction");
        let rounds = flight.replies.iter().flatten().map(|r| r.rounds).max().unwrap_or(0);
        let earlier = flight.reported;
        flight.reported = Some(match outcome {
            TxnOutcome::Unknown(_) => Reported::Unknown,
            TxnOutcome::Ordered { .. } | TxnOutcome::Rejected(_) => Reported::Rejected,
        });
        let completion =
            Completion { id, submitted_us: flight.submitted_us, attempts: flight.attempts, rounds, outcome };
        match earlier {
            None => out.push(CoordOutput::Done(completion)),
            Some(Reported::Unknown) => {
                self.stats.resolved += 1;
                out.push(CoordOutput::Resolved(completion));
            }
            Some(Reported::Rejected) => unreachable!("a definite outcome is reported once"),
        }
    }

    /// Every participant answered `id`: it leaves, and later dispatches acknowledge it.
    fn forget(&mut self, id: TxnId) {
        self.in_flight.remove(&id).expect("forgetting an in-flight transaction");
        self.awaiting_watermark.remove(&id);
        self.in_flight_seqs.remove(&id.seq);
    }

    /// The shards whose watermarks the commit rule waits on for what is in flight.
    fn watched_shards(&self) -> BTreeSet<ShardId> {
        match self.config.commit_rule {
            CommitRule::AllShards { shards } => (0..shards).collect(),
            CommitRule::Participants => self.in_flight.values().flat_map(|f| f.txn.shards()).collect(),
        }
    }

    /// Retries dispatches that timed out and reports as unknown those out of attempts (they
    /// are still asked, every retry timeout, until every participant answers); pings the
    /// watched shards while anything is in flight.
    pub fn tick(&mut self, now: TimeUs, out: &mut Vec<CoordOutput>) {
        if !self.in_flight.is_empty() && now >= self.keepalive_at_us {
            self.keepalive_at_us = now + self.config.keepalive_us;
            for shard in self.watched_shards() {
                out.push(CoordOutput::Send { shard, msg: ClientMsg::Ping { sent_us: now } });
            }
        }
        let timeout = self.config.retry_timeout_us;
        let due: Vec<TxnId> = self.in_flight.iter().filter(|(_, f)| now >= f.retry_at_us).map(|(id, _)| *id).collect();
        for id in due {
            let flight = self.in_flight.get_mut(&id).expect("listed");
            // Every participant answered and only a watermark is missing: the outcome is
            // settled, the answer waits for the commit rule (never reported unknown).
            let silent = flight.replies.iter().any(Option::is_none);
            let mut gave_up = None;
            if flight.leader_wait {
                flight.leader_wait = false;
                flight.leader_waits += 1;
                if silent && flight.leader_waits > NOT_LEADER_RESENDS_MAX && flight.reported.is_none() {
                    gave_up = Some(format!("no leader after {} resends", flight.leader_waits - 1));
                }
            } else if silent && flight.attempts >= self.config.max_attempts && flight.reported.is_none() {
                gave_up = Some(format!("no complete answer after {} attempts", flight.attempts));
            } else {
                flight.attempts += 1;
                self.stats.retries += 1;
            }
            if let Some(why) = gave_up {
                self.stats.unknown += 1;
                self.report(id, TxnOutcome::Unknown(why), out);
                if self.config.mutations.acknowledge_unknown {
                    self.forget(id);
                    continue;
                }
            }
            let flight = self.in_flight.get_mut(&id).expect("still in flight");
            flight.retry_at_us = now + timeout;
            let flight = &self.in_flight[&id];
            self.send_dispatch(now, flight, out);
        }
    }

    /// The earliest time [`Coordinator::tick`] has work to do.
    pub fn next_deadline(&self) -> Option<TimeUs> {
        let retry = self.in_flight.values().map(|f| f.retry_at_us).min()?;
        Some(retry.min(self.keepalive_at_us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::KeySet;

    /// A config without keepalive pings (tested on their own), so transcripts show only
    /// dispatches.
    fn quiet(client: ClientId) -> CoordinatorConfig {
        CoordinatorConfig { keepalive_us: TimeUs::MAX / 2, ..CoordinatorConfig::new(client) }
    }

    #[test]
    fn the_watched_shards_are_pinged_while_anything_is_in_flight() {
        let cfg = CoordinatorConfig {
            keepalive_us: 100,
            commit_rule: CommitRule::AllShards { shards: 3 },
            ..CoordinatorConfig::new(1)
        };
        let mut c = Coordinator::new(cfg);
        let mut out = Vec::new();
        c.tick(0, &mut out);
        assert!(out.is_empty(), "nothing in flight: no pings");
        let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out);
        out.clear();
        c.tick(99, &mut out);
        assert!(out.is_empty(), "the dispatch itself keeps the client known for a period");
        c.tick(100, &mut out);
        let pings = |out: &[CoordOutput]| {
            out.iter()
                .filter_map(|o| match o {
                    CoordOutput::Send { shard, msg: ClientMsg::Ping { .. } } => Some(*shard),
                    CoordOutput::Send { .. } | CoordOutput::Done(_) | CoordOutput::Resolved(_) => None,
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(pings(&out), vec![0, 1, 2], "every shard the commit rule waits on");
        out.clear();
        c.tick(150, &mut out);
        assert!(pings(&out).is_empty(), "not before the period");
        assert_eq!(c.next_deadline(), Some(200));
        c.on_message(60, reply(id, 0, 5, 5, 1), &mut out);
        for s in 1..3 {
            c.on_message(60, ServerMsg::Watermark { shard: s, watermark: 5 }, &mut out);
        }
        out.clear();
        c.tick(300, &mut out);
        assert!(pings(&out).is_empty(), "nothing in flight any more");
    }

    fn piece(shard: ShardId) -> ShardPiece {
        ShardPiece { shard, keys: KeySet::new(vec![], vec![vec![shard as u8]]) }
    }

    fn reply(id: TxnId, shard: ShardId, ts: Timestamp, watermark: Timestamp, delta: i64) -> ServerMsg {
        ServerMsg::Reply(TxnReply {
            id,
            shard,
            ts,
            outcome: Ok(vec![shard as u8]),
            watermark,
            arrival_delta_us: delta,
            rounds: 0,
        })
    }

    fn sends(out: &[CoordOutput]) -> Vec<ShardId> {
        out.iter()
            .filter_map(|o| match o {
                CoordOutput::Send { shard, .. } => Some(*shard),
                CoordOutput::Done(_) | CoordOutput::Resolved(_) => None,
            })
            .collect()
    }

    #[test]
    fn stamps_with_max_owd_plus_headroom_and_dispatches_to_all() {
        let mut c = Coordinator::new(CoordinatorConfig { headroom_us: 100, ..quiet(7) });
        let mut out = Vec::new();
        c.on_message(0, ServerMsg::Pong { shard: 0, arrival_delta_us: 1_000, watermark: 0 }, &mut out);
        c.on_message(0, ServerMsg::Pong { shard: 1, arrival_delta_us: 5_000, watermark: 0 }, &mut out);
        let id = c.submit(10_000, "p", vec![], vec![piece(1), piece(0)], &mut out);
        assert_eq!(id, TxnId { client: 7, seq: 1 });
        assert_eq!(sends(&out), vec![0, 1]);
        let CoordOutput::Send { msg: ClientMsg::Dispatch { txn, sent_us, acked_below }, .. } = &out[0] else {
            panic!("expected a dispatch")
        };
        assert_eq!(txn.ts, 10_000 + 5_000 + 100);
        assert_eq!((*sent_us, *acked_below), (10_000, 1));
    }

    #[test]
    fn answers_only_when_every_participant_watermark_passed() {
        let mut c = Coordinator::new(quiet(1));
        let mut out = Vec::new();
        let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out);
        out.clear();
        c.on_message(10, reply(id, 0, 500, 600, 5), &mut out);
        assert!(out.is_empty(), "shard 1 has not answered");
        c.on_message(10, reply(id, 1, 500, 400, 5), &mut out);
        assert!(out.is_empty(), "shard 1's watermark is below the timestamp");
        c.on_message(10, ServerMsg::Watermark { shard: 1, watermark: 499 }, &mut out);
        assert!(out.is_empty(), "still below");
        c.on_message(10, ServerMsg::Watermark { shard: 1, watermark: 500 }, &mut out);
        let [CoordOutput::Done(done)] = out.as_slice() else { panic!("expected completion, got {out:?}") };
        assert!(done.outcome.is_committed());
        assert_eq!(c.in_flight(), 0);
    }

    #[test]
    fn all_shards_rule_waits_for_non_participants() {
        let cfg = CoordinatorConfig { commit_rule: CommitRule::AllShards { shards: 3 }, ..quiet(1) };
        let mut c = Coordinator::new(cfg);
        let mut out = Vec::new();
        let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out);
        out.clear();
        c.on_message(5, reply(id, 0, 100, 100, 1), &mut out);
        c.on_message(5, ServerMsg::Watermark { shard: 1, watermark: 150 }, &mut out);
        assert!(out.is_empty(), "shard 2's watermark is unknown");
        c.on_message(5, ServerMsg::Watermark { shard: 2, watermark: 99 }, &mut out);
        assert!(out.is_empty(), "shard 2's watermark is below the timestamp");
        c.on_message(5, ServerMsg::Watermark { shard: 2, watermark: 100 }, &mut out);
        assert!(matches!(out.as_slice(), [CoordOutput::Done(d)] if d.outcome.is_committed()));
    }

    fn done(out: &[CoordOutput]) -> Option<&Completion> {
        out.iter().find_map(|o| match o {
            CoordOutput::Done(d) => Some(d),
            CoordOutput::Send { .. } | CoordOutput::Resolved(_) => None,
        })
    }

    fn resolved(out: &[CoordOutput]) -> Option<&Completion> {
        out.iter().find_map(|o| match o {
            CoordOutput::Resolved(d) => Some(d),
            CoordOutput::Send { .. } | CoordOutput::Done(_) => None,
        })
    }

    fn rejected(id: TxnId, shard: ShardId) -> ServerMsg {
        ServerMsg::Reply(TxnReply {
            id,
            shard,
            ts: 0,
            outcome: Err(TxnError::Rejected("no".into())),
            watermark: 0,
            arrival_delta_us: 0,
            rounds: 0,
        })
    }

    fn acked_below_of(out: &[CoordOutput]) -> Vec<u64> {
        out.iter()
            .filter_map(|o| match o {
                CoordOutput::Send { msg: ClientMsg::Dispatch { acked_below, .. }, .. } => Some(*acked_below),
                CoordOutput::Send { .. } | CoordOutput::Done(_) | CoordOutput::Resolved(_) => None,
            })
            .collect()
    }

    /// The bug behind a cluster-wide stall: a client gave up on a cross-shard transaction and
    /// acknowledged it, so a participant that never saw it took it for answered. An unknown
    /// outcome is reported, never acknowledged, and still asked for until it is learned.
    #[test]
    fn an_unknown_outcome_is_never_acknowledged_and_is_resolved_later() {
        let cfg = CoordinatorConfig { retry_timeout_us: 100, max_attempts: 2, ..quiet(1) };
        let mut c = Coordinator::new(cfg);
        let mut out = Vec::new();
        let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out);
        c.on_message(10, reply(id, 0, 50, 60, 5), &mut out);
        out.clear();
        c.tick(100, &mut out);
        c.tick(200, &mut out);
        let d = done(&out).expect("reported");
        assert!(matches!(d.outcome, TxnOutcome::Unknown(_)), "{:?}", d.outcome);
        assert_eq!((c.in_flight(), c.unresolved()), (0, 1));
        assert_eq!(sends(&out), vec![1, 1], "shard 1 is still asked, also after the report");
        out.clear();
        let later = c.submit(250, "p", vec![], vec![piece(0)], &mut out);
        assert_eq!(acked_below_of(&out), vec![id.seq], "the unknown one is not acknowledged");
        c.on_message(260, reply(later, 0, 300, 300, 1), &mut out);
        out.clear();
        c.tick(300, &mut out);
        assert_eq!(sends(&out), vec![1], "asked again every retry timeout, without limit");
        c.on_message(310, reply(id, 1, 50, 60, 5), &mut out);
        let r = resolved(&out).expect("resolved");
        assert!(r.outcome.is_committed());
        assert_eq!((c.unresolved(), c.stats().unknown, c.stats().resolved), (0, 1, 1));
        out.clear();
        c.submit(400, "p", vec![], vec![piece(0)], &mut out);
        assert_eq!(acked_below_of(&out), vec![later.seq + 1], "acknowledged once every participant answered");
    }

    /// A refusal is definite at once, but the transaction is acknowledged only once every
    /// participant answered: one that never saw it must not find it acknowledged.
    #[test]
    fn a_rejection_is_reported_at_once_and_acknowledged_once_every_participant_answered() {
        let cfg = CoordinatorConfig { retry_timeout_us: 100, ..quiet(1) };
        let mut c = Coordinator::new(cfg);
        let mut out = Vec::new();
        let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out);
        out.clear();
        c.on_message(10, rejected(id, 0), &mut out);
        assert!(matches!(done(&out).map(|d| &d.outcome), Some(TxnOutcome::Rejected(_))));
        assert_eq!(c.unresolved(), 1);
        out.clear();
        c.tick(100, &mut out);
        assert_eq!(sends(&out), vec![1], "the silent participant is still asked");
        out.clear();
        c.on_message(110, rejected(id, 1), &mut out);
        assert!(out.is_empty(), "reported once");
        assert_eq!(c.unresolved(), 0);
        c.submit(120, "p", vec![], vec![piece(0)], &mut out);
        assert_eq!(acked_below_of(&out), vec![id.seq + 1]);
    }

    #[test]
    fn busy_answers_are_resent_soon_like_not_leader() {
        let cfg = CoordinatorConfig { retry_timeout_us: 1_000_000, not_leader_retry_us: 50, ..quiet(1) };
        let mut c = Coordinator::new(cfg);
        let mut out = Vec::new();
        let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out);
        let busy = TxnReply {
            id,
            shard: 0,
            ts: 0,
            outcome: Err(TxnError::Busy("log full".into())),
            watermark: 0,
            arrival_delta_us: 0,
            rounds: 0,
        };
        out.clear();
        c.on_message(10, ServerMsg::Reply(busy), &mut out);
        assert!(out.is_empty());
        c.tick(60, &mut out);
        assert_eq!(sends(&out), vec![0]);
        assert_eq!(c.stats().retries, 0);
    }

    #[test]
    fn a_transaction_waiting_only_for_a_watermark_is_never_reported_unknown() {
        let cfg = CoordinatorConfig { retry_timeout_us: 100, max_attempts: 2, ..quiet(1) };
        let mut c = Coordinator::new(cfg);
        let mut out = Vec::new();
        let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out);
        c.on_message(10, reply(id, 0, 500, 400, 5), &mut out);
        out.clear();
        for t in 1..10 {
            c.tick(t * 100, &mut out);
        }
        assert!(out.is_empty(), "every participant answered: nothing to resend, nothing unknown");
        c.on_message(1_000, ServerMsg::Watermark { shard: 0, watermark: 500 }, &mut out);
        assert!(done(&out).is_some_and(|d| d.outcome.is_committed()));
    }

    #[test]
    fn retries_resend_only_to_silent_participants_then_report_unknown() {
        let cfg = CoordinatorConfig { retry_timeout_us: 100, max_attempts: 3, ..quiet(1) };
        let mut c = Coordinator::new(cfg);
        let mut out = Vec::new();
        let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out);
        c.on_message(10, reply(id, 0, 50, 60, 5), &mut out);
        out.clear();
        c.tick(99, &mut out);
        assert!(out.is_empty());
        c.tick(100, &mut out);
        assert_eq!(sends(&out), vec![1], "only the silent shard is asked again");
        out.clear();
        c.tick(200, &mut out);
        c.tick(300, &mut out);
        let d = done(&out).expect("reported");
        assert!(matches!(d.outcome, TxnOutcome::Unknown(_)));
        assert_eq!(d.attempts, 3);
        assert_eq!(c.stats().retries, 2);
    }

    #[test]
    fn not_leader_answers_are_resent_soon_without_using_attempts() {
        let cfg = CoordinatorConfig { retry_timeout_us: 1_000_000, not_leader_retry_us: 50, ..quiet(1) };
        let mut c = Coordinator::new(cfg);
        let mut out = Vec::new();
        let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out);
        let not_leader = ServerMsg::Reply(TxnReply {
            id,
            shard: 0,
            ts: 0,
            outcome: Err(TxnError::NotLeader { hint: None }),
            watermark: 0,
            arrival_delta_us: 0,
            rounds: 0,
        });
        for round in 0..3u64 {
            out.clear();
            c.on_message(10 + round * 100, not_leader.clone(), &mut out);
            assert!(out.is_empty(), "no completion for a not-leader answer");
            c.tick(10 + round * 100 + 50, &mut out);
            assert_eq!(sends(&out), vec![0], "resent after 50 µs, not after the retry timeout");
        }
        assert_eq!(c.stats().retries, 0, "not-leader resends are not attempts");
        c.on_message(400, reply(id, 0, 5, 5, 1), &mut out);
        assert_eq!(done(&out).expect("answered").attempts, 1);
    }

    #[test]
    fn a_lost_leader_connection_resends_soon_to_the_shards_still_silent() {
        let cfg = CoordinatorConfig { retry_timeout_us: 1_000_000, not_leader_retry_us: 50, ..quiet(1) };
        let mut c = Coordinator::new(cfg);
        let mut out = Vec::new();
        let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out);
        c.submit(0, "p", vec![], vec![piece(1)], &mut out);
        c.on_message(10, reply(id, 0, 50, 60, 5), &mut out);
        out.clear();
        c.shard_unreachable(20, 0);
        c.tick(70, &mut out);
        assert!(out.is_empty(), "shard 0 already answered; nothing waits for it");
        c.shard_unreachable(100, 1);
        c.tick(149, &mut out);
        assert!(out.is_empty());
        c.tick(150, &mut out);
        assert_eq!(sends(&out), vec![1, 1], "both transactions waiting for shard 1 are resent");
        assert_eq!(c.stats().retries, 0, "not counted as attempts");
    }

    #[test]
    fn acked_below_tracks_the_oldest_unfinished() {
        let mut c = Coordinator::new(quiet(1));
        let mut out = Vec::new();
        let a = c.submit(0, "p", vec![], vec![piece(0)], &mut out);
        let b = c.submit(0, "p", vec![], vec![piece(0)], &mut out);
        c.on_message(1, reply(b, 0, 5, 5, 1), &mut out);
        assert_eq!(c.acked_below(), a.seq);
        c.on_message(1, reply(a, 0, 5, 5, 1), &mut out);
        assert_eq!(c.acked_below(), 3);
    }

    #[test]
    fn owd_learned_from_replies() {
        let mut c = Coordinator::new(CoordinatorConfig { headroom_us: 0, ..quiet(1) });
        let mut out = Vec::new();
        let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out);
        c.on_message(1, reply(id, 0, 5, 5, 2_500), &mut out);
        assert_eq!(c.owd_estimate_us(0), 2_500);
        assert_eq!(c.stamp(1_000, [0].into_iter()), 3_500);
    }
}
