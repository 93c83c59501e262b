//! The coordinator: the client-side state machine (DESIGN.md rules 1, 2 and 7). It stamps each
//! transaction with `now + max one-way delay to the participants + headroom`, sends the whole
//! transaction to every participant leader at once, retries under the same id, and answers
//! once every participant has answered with a watermark at or above the final timestamp.
//! It holds no authoritative state: losing it loses only the answers not yet delivered.
//!
//! **What a client is told, and what it acknowledges.** Every transaction ends with exactly
//! one [`ClientOutput::Done`]: [`TxnOutcome::Ordered`] (executed at its final timestamp on every
//! participant, durable), [`TxnOutcome::Rejected`] (refused by a participant: executed
//! nowhere, ever), or [`TxnOutcome::Unknown`] (no complete answer in time: it may or may not
//! execute). An unknown transaction keeps its id: the coordinator goes on asking its silent
//! participants (every `retry_timeout_us`, without limit) and reports the outcome it learns
//! with [`ClientOutput::Resolved`]. A transaction is *acknowledged* to the servers
//! (`acked_below` on later dispatches, which lets them forget its answer) only once every
//! participant has answered it. So a server that finds a transaction acknowledged knows it
//! answered it itself (see `PeerItem::Acknowledged`), and no participant is ever told to
//! forget a transaction another participant still waits for.
//!
//! This file holds the types, the state and the accessors; the methods live by concern in
//! `submit` (stamping and dispatch), `replies` (answers and the commit rule) and `retry`
//! (resends, unknown outcomes and keepalive pings); `headroom` is the adaptive headroom.

use std::collections::BTreeSet;

use luigi_txn::client_core::{ClientOutput, Flight, InFlightTable, RetryKnobs};
use luigi_txn::msg::ClientMsg;

use crate::owd::OwdEstimator;
use luigi_txn::progress::Progress;
use luigi_txn::types::{ClientId, ShardId, TimeUs, Timestamp, TxnId};
use luigi_txn::Map;

// `Coordinator`'s methods, by concern (each file adds an `impl Coordinator` block).
pub mod fast;
pub mod headroom;
mod invariants;
pub mod nearest;
pub mod read_only;
mod replies;
mod retry;
mod shell;
mod submit;

/// Knobs of a coordinator.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// This client's id (unique in the cluster).
    pub client: ClientId,
    /// Added to the one-way-delay estimate so that most dispatches arrive before their time;
    /// with `adaptive_headroom`, the least headroom a shard gets (DESIGN.md rule 1).
    pub headroom_us: u64,
    /// The headroom follows how late dispatches reach each shard ([`headroom`]), within
    /// `headroom_us..=headroom_max_us`, and a transaction that gains nothing from arriving
    /// early (single-shard, without the fast path) is stamped to arrive after its time.
    /// Off: every transaction gets `headroom_us` (the behaviour before 2026-11-27).
    pub adaptive_headroom: bool,
    /// The adaptive headroom's ceiling, µs; `None`: an eighth of `retry_timeout_us`.
    pub headroom_max_us: Option<u64>,
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
    /// Replicas per shard, indexed by shard: how many follower progress reports prove an
    /// answer's position committed (DESIGN.md rule 14). Empty: only the leaders' commit
    /// reports do.
    pub group_sizes: Vec<u32>,
    /// Which transactions ask for the fast path (DESIGN.md rule 20); `Never` unless the
    /// cluster runs it.
    pub fan_out: fast::FanOut,
    /// A transaction whose pieces declare no writes reads at a snapshot from the nearest
    /// replica of each participant (DESIGN.md rule 23) instead of taking the read-write path.
    pub read_only_path: bool,
    /// The clock bound (DESIGN.md rule 22): a snapshot read's timestamp is at least `now`
    /// plus this, so that it lies above everything answered anywhere before it started.
    pub max_clock_offset_us: u64,
    /// The cluster's shard count: a transaction's pieces name shards below it
    /// (`u32::MAX` by default: any shard id is taken).
    pub shards: u32,
    /// Fault-injection switches for tests only. All off in production.
    pub mutations: CoordMutations,
}

/// Deliberate coordinator bugs, used only by tests that prove the checks catch them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoordMutations {
    /// Forget (and so acknowledge) a transaction as soon as it is reported unknown: the bug
    /// that let a participant that never saw it take it for answered.
    pub acknowledge_unknown: bool,
    /// Complete a transaction on speculative answers without the proof that their
    /// positions are committed.
    pub trust_unproven_answers: bool,
    /// Count a snapshot read's piece served on a position not proven committed (rule 23 (e)).
    pub count_unproven_reads: bool,
    /// Count progress reports of any term as proof (not only the answer's own term).
    pub accept_reports_of_any_term: bool,
    /// Pass over a shard whose floor promise covers a transaction without waiting for a
    /// majority of it to move past the promising leader's term (rule 15 without its guard).
    pub pass_over_without_term_change: bool,
    /// Commit on the fast path on accepts whose order hash differs from the leader's (the
    /// accepting replicas saw other recent conflicting predecessors).
    pub fast_ignores_order: bool,
    /// Count a leader's early answer (rule 21) like a regular one, settled by its own
    /// position or super-quorum, although another participant's proposal it rests on may
    /// still change.
    pub early_answers_count_alone: bool,
}

/// Which shards' watermarks must have passed a transaction's timestamp before the client is
/// answered (DESIGN.md rule 7, and its deviation 1 in DESIGN.md).
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
    /// The adaptive headroom's ceiling: `headroom_max_us`, or an eighth of the resend timeout
    /// (a timestamp then lies at most `retry_timeout_us` (the delay estimate's bound) plus
    /// this ahead of a correct clock: rule 22's horizon counts it).
    pub fn headroom_ceiling_us(&self) -> u64 {
        self.headroom_max_us.unwrap_or(self.retry_timeout_us / 8)
    }

    /// Defaults for client `client`.
    pub fn new(client: ClientId) -> Self {
        Self {
            client,
            headroom_us: 200,
            adaptive_headroom: true,
            headroom_max_us: None,
            initial_owd_us: 0,
            retry_timeout_us: 2_000_000,
            max_attempts: 10,
            not_leader_retry_us: 50_000,
            commit_rule: CommitRule::Participants,
            keepalive_us: 250_000,
            group_sizes: Vec::new(),
            fan_out: fast::FanOut::Never,
            read_only_path: false,
            max_clock_offset_us: 500_000,
            shards: u32::MAX,
            mutations: CoordMutations::default(),
        }
    }
}

/// Luigi's own state of a transaction in flight.
#[derive(Clone, Debug, Default)]
pub(crate) struct FlightState {
    /// The followers' fast-path accepts, one slot per participant like its replies.
    accepts: Vec<fast::Accepts>,
    /// The headroom it was stamped with, when its answers' lateness tells the adaptive
    /// headroom something (`None`: stamped to arrive late on purpose, see [`headroom`]).
    headroom_us: Option<u64>,
}

/// A transaction in flight: the table's entry, with Luigi's [`FlightState`].
type InFlight = Flight<FlightState>;

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
    /// Transactions completed on the fast path: every participant's answer committed by
    /// its followers' accepts (its position may have been proven by then too).
    pub fast: u64,
    /// Transactions that asked for the fast path (see [`fast::FanOut`]).
    pub fanned_out: u64,
    /// Of the fast ones, those completed on an early answer of some participant (DESIGN.md
    /// rule 21).
    pub early: u64,
    /// Delay samples dropped because their round trip exceeded the resend timeout (rule 1).
    pub owd_samples_dropped: u64,
    /// First answers of transactions stamped to arrive on time that reached their leader
    /// after their timestamp (it moved them: rule 3's bump).
    pub late_arrivals: u64,
    /// The headroom every submitted transaction was stamped with, summed, µs (its mean
    /// shows what the adaptive headroom chose).
    pub headroom_us_sum: u64,
    /// Transactions read at a snapshot (rule 23), of the submitted ones.
    pub read_only: u64,
}

/// The coordinator state machine of one client.
pub struct Coordinator {
    config: CoordinatorConfig,
    owd: Map<ShardId, OwdEstimator>,
    /// The headroom, fixed or per shard (rule 1).
    headroom: headroom::Headroom,
    watermarks: Map<ShardId, Timestamp>,
    /// The transactions in flight and the retry rules.
    flights: InFlightTable<FlightState>,
    /// Answered by every participant, waiting for a watermark to pass the timestamp or for
    /// the proof that an answer's position is committed.
    awaiting_watermark: BTreeSet<TxnId>,
    /// The replicas' progress reports (rule 14).
    progress: Progress,
    /// Per shard, the latest committed floor promise heard: (term, floor) (rule 15).
    promises: Map<ShardId, (u64, Timestamp)>,
    /// When the shards are next pinged to stay among the clients they send watermarks to.
    keepalive_at_us: TimeUs,
    /// Which transactions ask for the fast path.
    fan_out: fast::FanOutPolicy,
    /// Read-only transactions in flight (rule 23), and the replicas' distances.
    reads: read_only::Reads,
    stats: CoordStats,
}

impl Coordinator {
    /// A coordinator with `config`.
    pub fn new(config: CoordinatorConfig) -> Self {
        Self {
            fan_out: fast::FanOutPolicy::new(config.fan_out),
            progress: {
                // Reports matter only for the shards whose groups are known.
                let progress = Progress::new(&config.group_sizes, 0);
                if config.mutations.accept_reports_of_any_term {
                    progress.accepting_any_term()
                } else {
                    progress
                }
            },
            flights: InFlightTable::new(
                config.client,
                config.shards,
                RetryKnobs {
                    retry_timeout_us: config.retry_timeout_us,
                    max_attempts: config.max_attempts,
                    not_leader_retry_us: config.not_leader_retry_us,
                },
            ),
            headroom: headroom::Headroom::new(
                config.adaptive_headroom,
                config.headroom_us,
                config.headroom_ceiling_us(),
            ),
            reads: read_only::Reads::new(&config.group_sizes),
            config,
            owd: Map::default(),
            watermarks: Map::default(),
            awaiting_watermark: BTreeSet::new(),
            promises: Map::default(),
            keepalive_at_us: 0,
            stats: CoordStats::default(),
        }
    }

    /// This client's id.
    pub fn client(&self) -> ClientId {
        self.config.client
    }

    /// The fast path's fan-out policy (whether it samples now, its switches).
    pub fn fan_out(&self) -> &fast::FanOutPolicy {
        &self.fan_out
    }

    /// Counters.
    pub fn stats(&self) -> CoordStats {
        let c = self.flights.counts();
        CoordStats {
            submitted: c.submitted,
            retries: c.retries,
            unknown: c.unknown,
            resolved: c.resolved,
            ..self.stats
        }
    }

    /// The current one-way-delay estimate towards `shard`'s leader at `now`.
    pub fn owd_estimate_us(&self, now: TimeUs, shard: ShardId) -> i64 {
        let initial = i64::try_from(self.config.initial_owd_us).unwrap_or(i64::MAX);
        self.owd.get(&shard).and_then(|e| e.estimate_us(now)).unwrap_or(initial)
    }

    /// A delay sample towards `shard` from an exchange whose round trip took `rtt_us`: it
    /// counts only if that was within the resend timeout (rule 1).
    pub(super) fn owd_sample(&mut self, now: TimeUs, shard: ShardId, delta_us: i64, rtt_us: u64) {
        let max_rtt_us = self.config.retry_timeout_us;
        if !self.owd.entry(shard).or_default().record(now, delta_us, rtt_us, max_rtt_us) {
            self.stats.owd_samples_dropped += 1;
        }
    }

    /// The headroom a transaction over `shards` gets now (rule 1): the configured one, or
    /// with adaptation the largest of its participants'.
    pub fn headroom_us(&self, shards: impl Iterator<Item = ShardId>) -> u64 {
        self.headroom.for_shards(shards)
    }

    /// The timestamp a transaction over `shards` submitted at `now` gets, with the
    /// configured headroom (rule 1; [`Coordinator::submit`] stamps with the adaptive one).
    pub fn stamp(&self, now: TimeUs, shards: impl Iterator<Item = ShardId>) -> Timestamp {
        let owd = shards.map(|s| self.owd_estimate_us(now, s)).max().unwrap_or(0);
        stamp_at(now, owd, self.config.headroom_us)
    }

    /// The smallest recent delay sample towards `shard` (the estimate when there is none).
    pub(super) fn owd_low_us(&self, now: TimeUs, shard: ShardId) -> i64 {
        self.owd.get(&shard).and_then(|e| e.low_us(now)).unwrap_or_else(|| self.owd_estimate_us(now, shard))
    }

    /// A ping for `shard`'s leader, to seed the delay estimate before the first transaction.
    pub fn ping(&self, now: TimeUs, shard: ShardId, out: &mut Vec<ClientOutput>) {
        out.push(ClientOutput::Send { shard, msg: ClientMsg::Ping { sent_us: now } });
    }
}

/// `now + owd + headroom`, within `1..=u64::MAX`: in i128, since the estimate comes from
/// servers' clocks and may be anything in i64.
pub(super) fn stamp_at(now: TimeUs, owd_us: i64, headroom_us: u64) -> Timestamp {
    let ts = i128::from(now) + i128::from(owd_us) + i128::from(headroom_us);
    ts.clamp(1, i128::from(u64::MAX)) as Timestamp
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_headroom;
#[cfg(test)]
mod tests_read_only;
