//! The shard leader: admission, cross-shard agreement, the timestamp-ordered hold queue,
//! execution, the watermark and exactly-once answers (DESIGN.md rules 3, 4, 5 and 7).
//! Sans-I/O: every entry point takes the current time and pushes effects into an output
//! vector; the log is a [`ReplicatedLog`].
//!
//! Life of a transaction on this shard:
//! 1. `Dispatch` arrives; [`admission`] bumps its proposal above the conflicting released
//!    floors and the watermark (and up to the clock if it is late) and appends `PREPARE`.
//! 2. The `PREPARE` commits: the transaction is durable. A single-shard transaction is now
//!    decided; a cross-shard one runs [`agreement`] with the other participant leaders.
//! 3. [`queue`] releases it once it is decided, the clock has passed its timestamp and no
//!    conflicting transaction with a smaller timestamp is still pending here; it executes.
//! 4. Its answer is sent once the watermark has passed its timestamp.

pub mod admission;
pub mod agreement;
pub mod answers;
pub mod follower;
pub mod queue;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use luigi_store::Store;

use crate::log::{LogEntry, LogError, LogRecord, ReplicatedLog};
use crate::msg::{ClientMsg, PeerBatch, PeerItem, ServerMsg, TxnError, TxnReply};
use crate::procedure::Registry;
use crate::types::{ClientId, ShardId, TimeUs, Timestamp, Txn, TxnId};
use crate::Map;

use admission::Floors;
use agreement::{Agreement, Step};
use answers::{Answer, Answers, Known};
use follower::Handover;
use queue::HoldQueue;

/// Transactions remembered as having lost an early agreement item.
const EARLY_DROPPED_MAX: usize = 1 << 16;

/// Knobs of a shard leader.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// This shard.
    pub shard: ShardId,
    /// Shards in the cluster: a dispatch naming another shard is malformed.
    pub shards: u32,
    /// How far ahead of the clock a `Floor` promise is logged. Must exceed the log's commit
    /// latency or the watermark stalls while a promise is in flight.
    pub floor_lookahead_us: u64,
    /// Largest number of transactions pending (admitted, not executed) at once; beyond it new
    /// dispatches are rejected with an error reply rather than queued without bound. Also
    /// bounds the agreement messages buffered for transactions not yet dispatched here.
    pub max_pending: usize,
    /// Transactions one client may have pending here at once; beyond it its dispatches are
    /// answered `Busy` (nothing stored), so one client cannot fill the shard's queue.
    pub max_pending_per_client: usize,
    /// Agreement items buffered for transactions whose dispatch has not arrived yet. Beyond
    /// it an item is dropped and its transaction is refused when the dispatch comes (never
    /// left waiting for an item that will not come again).
    pub max_early: usize,
    /// A peer's outgoing batch is flushed at the next tick, or at once when it holds this many.
    pub peer_batch_max: usize,
    /// How often the watermark is sent to the clients heard from recently.
    pub watermark_broadcast_us: u64,
    /// Clients heard from (any message) within this long get watermark broadcasts; idle
    /// ones cost nothing. Coordinators ping every shard they wait on more often than this
    /// while anything is in flight (`CoordinatorConfig::keepalive_us`).
    pub active_client_us: u64,
    /// Every this long a watermark broadcast goes to every connected client instead: a client
    /// whose pings go to a replica that no longer leads learns the new leader from it.
    pub all_clients_broadcast_us: u64,
    /// How often an `Applied` marker (the watermark) is logged for followers, when it moved.
    pub applied_marker_us: u64,
    /// A cross-shard transaction prepared here and still undecided this long after its
    /// `PREPARE` committed is stalled: this leader becomes its recovery coordinator and asks
    /// the other participants (`Recover`), and asks again every period after that. Must
    /// exceed a normal agreement (a few one-way delays plus a log round).
    pub recover_after_us: u64,
    /// Fault-injection switches for tests only. All off in production.
    pub mutations: Mutations,
}

impl LeaderConfig {
    /// Defaults for `shard` of a cluster of `shards`.
    pub fn new(shard: ShardId, shards: u32) -> Self {
        assert!(shard < shards, "shard {shard} of a {shards}-shard cluster");
        Self {
            shard,
            shards,
            floor_lookahead_us: 1_000_000,
            max_pending: 1 << 20,
            max_pending_per_client: 1 << 17,
            max_early: 1 << 20,
            peer_batch_max: 256,
            watermark_broadcast_us: 1_000,
            active_client_us: 2_000_000,
            all_clients_broadcast_us: 100_000,
            applied_marker_us: 1_000,
            recover_after_us: 2_000_000,
            mutations: Mutations::default(),
        }
    }
}

/// Deliberate protocol bugs, used only by tests that prove the checks catch them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mutations {
    /// Release a transaction even when a conflicting smaller-timestamp one is pending.
    pub release_ignores_conflicts: bool,
    /// Decide a cross-shard transaction on the first round even when proposals differed.
    pub skip_second_round: bool,
}

/// An effect of the leader for its shell to carry out.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaderOutput {
    /// Send `msg` to client `client`.
    ToClient {
        /// Destination.
        client: ClientId,
        /// Message.
        msg: ServerMsg,
    },
    /// Send `msg` to every connected client.
    ToAllClients {
        /// Message.
        msg: ServerMsg,
    },
    /// Send `msg` to each of `clients`.
    ToClients {
        /// Destinations.
        clients: Vec<ClientId>,
        /// Message.
        msg: ServerMsg,
    },
    /// Send `batch` to the leader of `shard`.
    ToPeer {
        /// Destination shard.
        shard: ShardId,
        /// Agreement items.
        batch: PeerBatch,
    },
}

/// A transaction admitted here and not yet executed.
#[derive(Debug)]
struct Pending {
    txn: Arc<Txn>,
    /// Current proposal (final once decided).
    ts: Timestamp,
    /// The proposal logged in its `PREPARE` (what recovery re-announces).
    proposal: Timestamp,
    /// Its `DECIDE` is committed here (recovery re-sends `Confirm`).
    confirmed: bool,
    /// When it counts as stalled (cross-shard, durable, undecided).
    recover_at: Option<TimeUs>,
    /// Its `PREPARE` is committed in the log.
    durable: bool,
    arrival_delta_us: i64,
    /// Cross-shard agreement (None for single-shard transactions).
    agreement: Option<Agreement>,
    /// Set when a participant refused it and an `ABORT` is being logged.
    aborting: Option<String>,
    /// When this leader admitted (or took over) it: the age operators see.
    admitted_us: TimeUs,
}

/// A transaction pending here for longer than a normal agreement takes (see
/// [`ShardLeader::stalled`]): what an operator looks at when a shard's watermark stops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StalledTxn {
    /// The transaction.
    pub id: TxnId,
    /// Its participants.
    pub shards: Vec<ShardId>,
    /// How long it has been pending on this leader.
    pub age_us: u64,
    /// Its `PREPARE` is committed here (if not, this shard's own log is what it waits for).
    pub durable: bool,
}

/// A refusal whose `Refuse` record is not committed yet: nobody is told before it is.
#[derive(Debug)]
struct Refusing {
    /// The other participants (told to abort it once the record commits).
    others: Vec<ShardId>,
    reason: String,
    arrival_delta_us: i64,
}

/// Agreement messages that arrived before the transaction's own dispatch.
#[derive(Debug, Default)]
struct Early {
    proposals: Vec<(ShardId, Timestamp)>,
    confirms: Vec<(ShardId, Timestamp)>,
    refused: Option<String>,
}

/// Counters for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaderStats {
    /// Transactions admitted.
    pub admitted: u64,
    /// Admissions whose proposal was moved above the coordinator's timestamp.
    pub bumped: u64,
    /// Transactions executed.
    pub executed: u64,
    /// Dispatches rejected at admission.
    pub rejected: u64,
    /// Of those, malformed ones (answered at once, nothing logged).
    pub malformed: u64,
    /// Retried dispatches answered from the answer table or already pending.
    pub duplicates: u64,
    /// Cross-shard transactions decided here.
    pub cross_decided: u64,
    /// Of those, the ones whose proposals differed (second round).
    pub cross_differed: u64,
    /// Cross-shard transactions aborted because a participant refused them.
    pub aborted: u64,
    /// Agreement messages refused because the early buffer was full.
    pub early_overflow: u64,
    /// `Recover` requests sent for stalled (or recovered) transactions.
    pub recover_sent: u64,
    /// `Recover` requests about transactions answered and acknowledged so long ago that the
    /// final timestamp is no longer remembered (answered with `Acknowledged`).
    pub recover_forgotten: u64,
    /// `Acknowledged` answers received for a transaction still undecided here (it stays
    /// stalled: see `on_acknowledged`).
    pub recover_acknowledged: u64,
}

/// The shard leader state machine.
pub struct ShardLeader<L: ReplicatedLog> {
    config: LeaderConfig,
    log: L,
    store: Store,
    registry: Registry,
    floors: Floors,
    queue: HoldQueue,
    pending: Map<TxnId, Pending>,
    /// Pending transactions per client (entries at zero are removed).
    pending_per_client: Map<ClientId, usize>,
    early: Map<TxnId, Early>,
    /// Transactions one of whose early agreement items was dropped (buffer full): refused
    /// when their dispatch arrives. Bounded by `max_early` too.
    early_dropped: BTreeSet<TxnId>,
    answers: Answers,
    /// Refusals waiting for their `Refuse` record to commit.
    refusing: Map<TxnId, Refusing>,
    /// Executed transactions whose answer waits for the watermark, by (ts, id).
    unanswered: BTreeSet<(Timestamp, TxnId)>,
    /// When each client was last heard from (pruned at every broadcast).
    clients_heard: Map<ClientId, TimeUs>,
    /// When the watermark last went to every connected client.
    all_clients_at: TimeUs,
    /// Agreement items per destination shard, flushed at the next tick.
    outbox: BTreeMap<ShardId, Vec<PeerItem>>,
    /// Records the log refused (backlog); proposed again at the next pump.
    log_retry: Vec<LogRecord>,
    watermark: Timestamp,
    /// Nothing is admitted at or below this (set by recovery above everything in the log).
    admission_floor: Timestamp,
    /// Highest committed `Floor` promise.
    floor_committed: Timestamp,
    /// Highest `Floor` proposed (committed or not).
    floor_proposed: Timestamp,
    /// When the watermark was last broadcast, and its value then.
    broadcast_at: (TimeUs, Timestamp),
    /// When the last `Applied` marker was logged, and its value.
    applied_at: (TimeUs, Timestamp),
    /// Highest timestamp executed here: a marker is needed only while it is above the last
    /// marker (an idle shard logs none).
    max_executed_ts: Timestamp,
    /// Transactions moved to their final timestamp whose DECIDE is not committed yet, by their
    /// old (logged) proposal: `Applied` markers stay below the smallest.
    undecided_moves: BTreeSet<(Timestamp, TxnId)>,
    committed_buf: Vec<LogEntry>,
    /// Stalled-transaction deadlines of durable, undecided cross-shard transactions.
    recover_queue: BTreeSet<(TimeUs, TxnId)>,
    /// The time of the event being handled.
    now: TimeUs,
    stats: LeaderStats,
}

impl<L: ReplicatedLog> ShardLeader<L> {
    /// A leader over `store` with `log`, running `registry`'s procedures.
    pub fn new(config: LeaderConfig, log: L, store: Store, registry: Registry) -> Self {
        Self {
            config,
            log,
            store,
            registry,
            floors: Floors::default(),
            queue: HoldQueue::default(),
            pending: Map::default(),
            pending_per_client: Map::default(),
            early: Map::default(),
            early_dropped: BTreeSet::new(),
            answers: Answers::default(),
            refusing: Map::default(),
            clients_heard: Map::default(),
            all_clients_at: 0,
            unanswered: BTreeSet::new(),
            outbox: BTreeMap::new(),
            log_retry: Vec::new(),
            watermark: 0,
            admission_floor: 0,
            floor_committed: 0,
            floor_proposed: 0,
            broadcast_at: (0, 0),
            applied_at: (0, 0),
            max_executed_ts: 0,
            undecided_moves: BTreeSet::new(),
            committed_buf: Vec::new(),
            recover_queue: BTreeSet::new(),
            now: 0,
            stats: LeaderStats::default(),
        }
    }

    /// A new leader over the state its replica rebuilt from the committed log (DESIGN.md,
    /// failure handling). The caller has applied every committed record, including one of
    /// the new term (the election no-op), so the handover holds everything any earlier
    /// leader made durable. The new leader admits nothing at or below the recovered floor,
    /// re-queues every prepared transaction at its logged proposal, and asks the other
    /// participants of each undecided cross-shard transaction for their state at once.
    pub fn recover(config: LeaderConfig, log: L, handover: Handover, now: TimeUs) -> Self {
        let Handover { store, registry, answers, prepared, applied_ts, floor, recovered_floor } = handover;
        let mut l = Self::new(config, log, store, registry);
        l.now = now;
        l.answers = answers;
        l.admission_floor = recovered_floor;
        l.floor_committed = floor;
        l.floor_proposed = floor;
        l.watermark = applied_ts;
        l.applied_at = (now, applied_ts);
        l.max_executed_ts = applied_ts;
        l.broadcast_at = (now, 0);
        let me = l.config.shard;
        for p in prepared {
            let id = p.txn.id;
            let keys = p.txn.piece(me).expect("prepared here, so a participant");
            l.queue.insert(id, p.proposal, keys);
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
                durable: true,
                arrival_delta_us: p.arrival_delta_us,
                agreement,
                aborting: None,
                admitted_us: now,
            };
            l.insert_pending(id, pending);
        }
        l
    }

    /// This shard.
    pub fn shard(&self) -> ShardId {
        self.config.shard
    }

    /// The published watermark: every transaction with a final timestamp at or below it is
    /// executed and durable here, and nothing new will be ordered at or below it.
    pub fn watermark(&self) -> Timestamp {
        self.watermark
    }

    /// The shard's store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Counters.
    pub fn stats(&self) -> LeaderStats {
        self.stats
    }

    /// Number of transactions admitted and not yet executed.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
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
                durable: p.durable,
            })
            .collect();
        out.sort_by(|a, b| b.age_us.cmp(&a.age_us).then(a.id.cmp(&b.id)));
        out.truncate(max);
        out
    }

    /// The log (for shells that drive its I/O).
    pub fn log_mut(&mut self) -> &mut L {
        &mut self.log
    }

    /// The log.
    pub fn log(&self) -> &L {
        &self.log
    }

    /// Drops the leader's state and keeps its log (a demoted leader rebuilds from it).
    pub fn into_log(self) -> L {
        self.log
    }

    /// The earliest time at which [`ShardLeader::tick`] has work to do.
    pub fn next_deadline(&self) -> Option<TimeUs> {
        if !self.outbox.is_empty() || !self.log_retry.is_empty() {
            return Some(0); // now
        }
        let renew = self.floor_proposed.saturating_sub(self.floor_margin_us());
        // Wake up to broadcast only if the watermark can have moved past the last broadcast
        // value by then: it follows the clock up to (smallest pending - 1) and the floor. A
        // watermark held by a transaction waiting for a message needs no wake-up (the message
        // is an event), and asking for one would busy-loop the shell.
        let cap = self.queue.min_ts().map_or(Timestamp::MAX, |ts| ts - 1).min(self.floor_committed);
        let when_moved = |(at, last): (TimeUs, Timestamp), every_us: u64| {
            if cap > last {
                at + every_us
            } else {
                TimeUs::MAX
            }
        };
        let marker = if self.max_executed_ts > self.applied_at.1 {
            when_moved(self.applied_at, self.config.applied_marker_us)
        } else {
            TimeUs::MAX
        };
        let broadcast = when_moved(self.broadcast_at, self.config.watermark_broadcast_us).min(marker);
        let release = self.queue.next_clock_deadline().unwrap_or(TimeUs::MAX);
        let recover = self.recover_queue.first().map_or(TimeUs::MAX, |(at, _)| *at);
        Some(release.min(renew).min(broadcast).min(recover))
    }

    /// Handles a message from client `client`.
    pub fn on_client(&mut self, now: TimeUs, client: ClientId, msg: ClientMsg, out: &mut Vec<LeaderOutput>) {
        self.now = now;
        self.clients_heard.insert(client, now);
        match msg {
            ClientMsg::Hello { .. } => {}
            ClientMsg::Ping { sent_us } => out.push(LeaderOutput::ToClient {
                client,
                msg: ServerMsg::Pong {
                    shard: self.config.shard,
                    arrival_delta_us: now as i64 - sent_us as i64,
                    watermark: self.watermark,
                },
            }),
            ClientMsg::Dispatch { txn, sent_us, acked_below } => {
                let arrival_delta_us = now as i64 - sent_us as i64;
                self.forget_acked(txn.id.client, acked_below);
                self.on_dispatch(now, txn, arrival_delta_us, acked_below, out);
            }
            ClientMsg::Status => {} // answered by the shell, which sees the whole replica
        }
        self.pump(now, out);
    }

    /// Handles a batch of agreement items from the leader of `batch.from`.
    pub fn on_peer(&mut self, now: TimeUs, batch: PeerBatch, out: &mut Vec<LeaderOutput>) {
        self.now = now;
        let from = batch.from;
        for item in batch.items {
            match item {
                PeerItem::Propose { id, ts } => self.on_proposal(id, from, ts),
                PeerItem::Confirm { id, ts } => self.on_confirm(id, from, ts),
                PeerItem::Recover { txn, ts } => self.on_recover(txn, from, ts, out),
                PeerItem::Executed { id, ts } => self.on_executed(id, from, ts),
                PeerItem::Refuse { id, reason } => self.on_refuse(id, reason),
                PeerItem::Acknowledged { id } => self.on_acknowledged(id),
            }
        }
        self.pump(now, out);
    }

    /// Shard `shard` has a new leader, which may have missed agreement items sent to the old
    /// one (lost with its connection): re-send this shard's proposal, and its confirmation
    /// if its `DECIDE` is committed, of every pending transaction shared with `shard`. The
    /// recovery of stalled transactions would ask later; this saves the wait.
    pub fn peer_leader_changed(&mut self, shard: ShardId) {
        let me = self.config.shard;
        if shard == me {
            return;
        }
        let mut items = Vec::new();
        for (id, p) in &self.pending {
            let shared = p.agreement.as_ref().is_some_and(|a| a.shards().contains(&shard));
            if !shared || !p.durable {
                continue;
            }
            items.push(PeerItem::Propose { id: *id, ts: p.proposal });
            if p.confirmed {
                items.push(PeerItem::Confirm { id: *id, ts: p.ts });
            }
        }
        for item in items {
            self.queue_peer(shard, item);
        }
    }

    /// Advances time: renews the floor promise, releases transactions whose time has come,
    /// publishes the watermark, and flushes agreement batches to the other leaders.
    pub fn tick(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        self.now = now;
        self.pump(now, out);
        self.recover_stalled(now);
        let (at, w) = self.broadcast_at;
        if now >= at + self.config.watermark_broadcast_us && self.watermark > w {
            self.broadcast_at = (now, self.watermark);
            let msg = ServerMsg::Watermark { shard: self.config.shard, watermark: self.watermark };
            let since = now.saturating_sub(self.config.active_client_us);
            self.clients_heard.retain(|_, heard| *heard >= since);
            if now >= self.all_clients_at + self.config.all_clients_broadcast_us {
                self.all_clients_at = now;
                out.push(LeaderOutput::ToAllClients { msg });
            } else if !self.clients_heard.is_empty() {
                let clients = self.clients_heard.keys().copied().collect();
                out.push(LeaderOutput::ToClients { clients, msg });
            }
        }
        if now >= self.applied_at.0 + self.config.applied_marker_us {
            self.log_applied_marker(now);
        }
        self.flush_outbox(out);
    }

    /// Logs an `Applied` marker for the current watermark now if it moved since the last one
    /// (periodic markers come from `tick`; this is for shutdown, snapshots and tests).
    pub fn mark_applied(&mut self) {
        self.log_applied_marker(self.applied_at.0);
    }

    /// Logs a marker if the watermark moved and something executed since the last one.
    fn log_applied_marker(&mut self, now: TimeUs) {
        let marker = self.applied_marker();
        if marker > self.applied_at.1 && self.max_executed_ts > self.applied_at.1 {
            self.applied_at = (now, marker);
            self.propose_record(LogRecord::Applied { ts: marker });
        }
    }

    /// The watermark as followers may use it: below the old proposal of any transaction
    /// moved by agreement whose DECIDE is not committed (the log still has it there).
    fn applied_marker(&self) -> Timestamp {
        let below_moved = self.undecided_moves.first().map_or(Timestamp::MAX, |(old, _)| old - 1);
        self.watermark.min(below_moved)
    }

    fn on_dispatch(
        &mut self,
        now: TimeUs,
        txn: Arc<Txn>,
        arrival_delta_us: i64,
        acked_below: u64,
        out: &mut Vec<LeaderOutput>,
    ) {
        let id = txn.id;
        if self.pending.contains_key(&id) || self.refusing.contains_key(&id) {
            // A retry of a transaction still in progress: its answer will follow.
            self.stats.duplicates += 1;
            return;
        }
        match self.answers.known(id) {
            Known::Unknown => {}
            Known::Acknowledged(_) => {
                self.stats.duplicates += 1;
                self.reply_now(id, 0, Err(TxnError::Forgotten), arrival_delta_us, 0, out);
                return;
            }
            Known::Answered(answer) => {
                self.stats.duplicates += 1;
                if answer.ts <= self.watermark {
                    let a = answer.clone();
                    self.reply_now(id, a.ts, a.outcome, a.arrival_delta_us, a.rounds, out);
                } // else: still in `unanswered`, the reply goes out when the watermark passes.
                return;
            }
        }
        if self.early_dropped.remove(&id) {
            // An agreement item for it was dropped: refuse it (and tell the others) rather
            // than prepare a transaction that would wait forever for that item.
            self.early.remove(&id);
            self.refuse(
                &txn,
                format!("shard {} dropped its agreement messages (buffer full)", self.config.shard),
                arrival_delta_us,
                out,
            );
            return;
        }
        if let Some(reason) = self.early.get(&id).and_then(|e| e.refused.clone()) {
            // Another participant refused it first; it will never be prepared anywhere.
            self.early.remove(&id);
            self.refuse(&txn, reason, arrival_delta_us, out);
            return;
        }
        if let Err(reason) = self.check_malformed(&txn) {
            // Every participant refuses it alike: nothing to log, nobody to tell.
            tracing::warn!(shard = self.config.shard, txn = ?id, %reason, "refused a malformed transaction");
            self.stats.rejected += 1;
            self.stats.malformed += 1;
            self.reply_now(id, 0, Err(TxnError::Rejected(reason)), arrival_delta_us, 0, out);
            return;
        }
        let client_pending = self.pending_per_client.get(&id.client).copied().unwrap_or(0);
        if client_pending >= self.config.max_pending_per_client {
            // Transient: not stored, the client asks again soon.
            let why = format!(
                "client {} has {client_pending} transactions pending on shard {}",
                id.client, self.config.shard
            );
            self.reply_now(id, 0, Err(TxnError::Busy(why)), arrival_delta_us, 0, out);
            return;
        }
        if let Err(reason) = self.validate(&txn) {
            self.refuse(&txn, reason, arrival_delta_us, out);
            return;
        }
        let keys = txn.piece(self.config.shard).expect("validated");
        let floor = self.watermark.max(self.admission_floor);
        let proposal = admission::propose(txn.ts, now, floor, &self.floors, keys);
        let record = LogRecord::Prepare { txn: txn.clone(), ts: proposal, arrival_delta_us, acked_below };
        match self.log.propose(record) {
            Ok(_) => {}
            // Not stored: this replica may lead soon (election) or another one does; the
            // coordinator retries under the same id.
            Err(LogError::NotLeader) => {
                self.reply_now(id, 0, Err(TxnError::NotLeader { hint: None }), arrival_delta_us, 0, out);
                return;
            }
            // Not stored either: the coordinator asks again soon.
            Err(e @ LogError::Backlogged(_)) => {
                self.reply_now(id, 0, Err(TxnError::Busy(e.to_string())), arrival_delta_us, 0, out);
                return;
            }
        }
        self.stats.admitted += 1;
        if proposal != txn.ts {
            self.stats.bumped += 1;
        }
        self.queue.insert(id, proposal, keys);
        let agreement = txn.is_cross_shard().then(|| Agreement::new(txn.shards().collect()));
        self.insert_pending(
            id,
            Pending {
                txn,
                ts: proposal,
                proposal,
                confirmed: false,
                recover_at: None,
                durable: false,
                arrival_delta_us,
                agreement,
                aborting: None,
                admitted_us: now,
            },
        );
        if let Some(early) = self.early.remove(&id) {
            for (shard, ts) in early.proposals {
                self.on_proposal(id, shard, ts);
            }
            for (shard, ts) in early.confirms {
                self.on_confirm(id, shard, ts);
            }
        }
    }

    /// What any participant finds wrong with `txn` alike (its shape, this shard not among its
    /// participants, an unknown procedure: every replica runs the same registry).
    fn check_malformed(&self, txn: &Txn) -> Result<(), String> {
        txn.check_shape(self.config.shards)?;
        let shard = self.config.shard;
        if txn.piece(shard).is_none() {
            return Err(format!("shard {shard} is not a participant"));
        }
        if !self.registry.contains(&txn.procedure) {
            return Err(format!("unknown procedure '{}'", txn.procedure));
        }
        Ok(())
    }

    /// Checks a well-formed dispatch against this shard's state; a refusal here is durable
    /// (see [`ShardLeader::refuse`]).
    fn validate(&self, _txn: &Txn) -> Result<(), String> {
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
    fn refuse(&mut self, txn: &Txn, reason: String, arrival_delta_us: i64, out: &mut Vec<LeaderOutput>) {
        let id = txn.id;
        let record = LogRecord::Refuse { id, reason: reason.clone(), arrival_delta_us };
        match self.log.propose(record) {
            Ok(_) => {
                self.stats.rejected += 1;
                let me = self.config.shard;
                let others = txn.shards().filter(|s| *s != me).collect();
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

    /// A `Refuse` record committed: store the refusal, tell the others, answer the client.
    fn on_refuse_logged(&mut self, id: TxnId, reason: String, arrival_delta_us: i64, out: &mut Vec<LeaderOutput>) {
        self.store_refusal(id, reason.clone(), arrival_delta_us);
        // Not ours (an earlier leader's, committed before this one took over): stored only.
        let Some(r) = self.refusing.remove(&id) else { return };
        for shard in r.others {
            self.queue_peer(shard, PeerItem::Refuse { id, reason: r.reason.clone() });
        }
        self.reply_now(id, 0, Err(TxnError::Rejected(r.reason)), r.arrival_delta_us, 0, out);
    }

    fn store_refusal(&mut self, id: TxnId, reason: String, arrival_delta_us: i64) {
        self.answers.insert(id, Answer::refusal(reason, arrival_delta_us));
    }

    fn early_entry(&mut self, id: TxnId) -> Option<&mut Early> {
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

    /// Answered here, or refused and waiting for the `Refuse` record: agreement items for it
    /// are not buffered.
    fn insert_pending(&mut self, id: TxnId, p: Pending) {
        *self.pending_per_client.entry(id.client).or_default() += 1;
        let old = self.pending.insert(id, p);
        assert!(old.is_none(), "{id:?} pending twice");
    }

    fn remove_pending(&mut self, id: TxnId) -> Option<Pending> {
        let p = self.pending.remove(&id)?;
        let count = self.pending_per_client.get_mut(&id.client).expect("counted when inserted");
        *count -= 1;
        if *count == 0 {
            self.pending_per_client.remove(&id.client);
        }
        Some(p)
    }

    fn is_answered(&self, id: TxnId) -> bool {
        self.answers.is_answered(id) || self.refusing.contains_key(&id)
    }

    fn on_proposal(&mut self, id: TxnId, from: ShardId, ts: Timestamp) {
        let skip = self.config.mutations.skip_second_round;
        if let Some(agreement) = self.pending.get_mut(&id).and_then(|p| p.agreement.as_mut()) {
            let step = agreement.on_proposal(from, ts, skip);
            self.on_step(id, step);
        } else if !self.pending.contains_key(&id) && !self.is_answered(id) {
            if let Some(e) = self.early_entry(id) {
                e.proposals.push((from, ts));
            }
        }
    }

    fn on_confirm(&mut self, id: TxnId, from: ShardId, ts: Timestamp) {
        if let Some(agreement) = self.pending.get_mut(&id).and_then(|p| p.agreement.as_mut()) {
            let step = agreement.on_confirm(from, ts);
            self.on_step(id, step);
        } else if !self.pending.contains_key(&id) && !self.is_answered(id) {
            if let Some(e) = self.early_entry(id) {
                e.confirms.push((from, ts));
            }
        }
    }

    fn on_executed(&mut self, id: TxnId, from: ShardId, ts: Timestamp) {
        let skip = self.config.mutations.skip_second_round;
        // Not pending: executed (or aborted) here too; nothing to learn.
        if let Some(agreement) = self.pending.get_mut(&id).and_then(|p| p.agreement.as_mut()) {
            let step = agreement.on_executed(from, ts, skip);
            self.on_step(id, step);
        }
    }

    /// Another participant answered `Recover` with `Acknowledged`: it answered this
    /// transaction and its client acknowledged every participant's answer, so it executed
    /// everywhere (this shard lost its execution with a leader change), but the final
    /// timestamp is forgotten there. Nothing is inferred from it (a client that broke its
    /// promise would make that unsafe); the transaction stays stalled and visible in
    /// [`ShardLeader::stalled`] while recovery keeps asking the others. See DESIGN.md on why
    /// the all-shards commit rule keeps this out of reach.
    fn on_acknowledged(&mut self, id: TxnId) {
        if self.pending.get(&id).is_some_and(|p| p.agreement.as_ref().is_some_and(|a| !a.is_decided())) {
            self.stats.recover_acknowledged += 1;
        }
    }

    fn on_refuse(&mut self, id: TxnId, reason: String) {
        if let Some(p) = self.pending.get_mut(&id) {
            // The refusing shard never proposed, so nobody can have decided it.
            assert!(!p.agreement.as_ref().is_some_and(Agreement::is_decided), "refused after decision");
            if p.aborting.is_none() {
                p.aborting = Some(reason);
                self.propose_record(LogRecord::Abort { id });
            }
        } else if !self.is_answered(id) {
            if let Some(e) = self.early_entry(id) {
                e.refused = Some(reason);
            }
        }
    }

    fn on_step(&mut self, id: TxnId, step: Step) {
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
                self.propose_record(LogRecord::Decide { id, ts: final_ts });
            }
            Step::Decided { final_ts } => {
                self.cancel_recovery(id);
                self.reposition(id, final_ts);
                self.stats.cross_decided += 1;
                self.queue.mark_ready(id);
            }
        }
    }

    fn cancel_recovery(&mut self, id: TxnId) {
        if let Some(at) = self.pending.get_mut(&id).and_then(|p| p.recover_at.take()) {
            self.recover_queue.remove(&(at, id));
        }
    }

    /// Sends `Recover` for every stalled transaction and asks again one period later.
    fn recover_stalled(&mut self, now: TimeUs) {
        let me = self.config.shard;
        while let Some(&(at, id)) = self.recover_queue.first() {
            if at > now {
                break;
            }
            self.recover_queue.pop_first();
            let next = now + self.config.recover_after_us;
            let p = self.pending.get_mut(&id).expect("recovery deadlines belong to pending transactions");
            debug_assert!(p.durable && p.agreement.as_ref().is_some_and(|a| !a.is_decided()));
            p.recover_at = Some(next);
            let (txn, ts) = (p.txn.clone(), p.proposal);
            self.recover_queue.insert((next, id));
            for shard in txn.shards().filter(|s| *s != me) {
                self.stats.recover_sent += 1;
                self.queue_peer(shard, PeerItem::Recover { txn: txn.clone(), ts });
            }
        }
    }

    /// A participant asks what this shard knows of `txn` (it logged proposal `ts`).
    fn on_recover(&mut self, txn: Arc<Txn>, from: ShardId, ts: Timestamp, out: &mut Vec<LeaderOutput>) {
        let id = txn.id;
        if self.refusing.contains_key(&id) {
            return; // `Refuse` goes to every participant once its record commits
        }
        if let Some(p) = self.pending.get(&id) {
            let (durable, confirmed, proposal, current) = (p.durable, p.confirmed, p.proposal, p.ts);
            if durable {
                self.queue_peer(from, PeerItem::Propose { id, ts: proposal });
            } // else: the Propose goes out when the PREPARE commits
            if confirmed {
                self.queue_peer(from, PeerItem::Confirm { id, ts: current });
            }
            self.on_proposal(id, from, ts);
            return;
        }
        match self.answers.known(id) {
            Known::Answered(a) if a.is_refusal() => {
                let reason = match &a.outcome {
                    Err(TxnError::Rejected(reason)) => reason.clone(),
                    other => unreachable!("a refusal is Rejected, not {other:?}"),
                };
                self.queue_peer(from, PeerItem::Refuse { id, reason });
            }
            // Executed here at its final timestamp: the maximum of every proposal, confirmed.
            Known::Answered(&Answer { ts: final_ts, .. }) | Known::Acknowledged(Some(final_ts)) => {
                self.queue_peer(from, PeerItem::Executed { id, ts: final_ts });
            }
            // Answered here and acknowledged: the client had every participant's answer.
            Known::Acknowledged(None) => {
                self.stats.recover_forgotten += 1;
                self.queue_peer(from, PeerItem::Acknowledged { id });
            }
            Known::Unknown => {
                // Never dispatched here (its coordinator died, or the dispatch is late):
                // prepare it now; a late dispatch is then a duplicate.
                self.on_dispatch(self.now, txn, 0, 0, out);
                self.on_proposal(id, from, ts);
            }
        }
    }

    fn reposition(&mut self, id: TxnId, ts: Timestamp) {
        let p = self.pending.get_mut(&id).expect("agreement of a pending transaction");
        assert!(ts >= p.ts, "agreement only raises timestamps");
        if ts != p.ts {
            p.ts = ts;
            self.queue.reposition(id, ts);
        }
    }

    fn propose_record(&mut self, record: LogRecord) {
        if self.log.propose(record.clone()).is_err() {
            self.log_retry.push(record); // backlog: try again at the next pump
        }
    }

    fn queue_peer(&mut self, shard: ShardId, item: PeerItem) {
        self.outbox.entry(shard).or_default().push(item);
    }

    fn flush_outbox(&mut self, out: &mut Vec<LeaderOutput>) {
        for (shard, items) in std::mem::take(&mut self.outbox) {
            let batch = PeerBatch { from: self.config.shard, watermark: self.watermark, items };
            out.push(LeaderOutput::ToPeer { shard, batch });
        }
    }

    /// Applies committed log records, renews the floor, releases and executes what is ready,
    /// and sends the answers the watermark now covers.
    fn pump(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        for record in std::mem::take(&mut self.log_retry) {
            self.propose_record(record);
        }
        self.renew_floor(now);
        self.apply_committed(out);
        let mut released = Vec::new();
        let ignore_conflicts = self.config.mutations.release_ignores_conflicts;
        self.queue.release(now, &mut released, ignore_conflicts);
        for id in released {
            self.execute(id);
        }
        self.advance_watermark(now, out);
        if self.outbox.values().any(|items| items.len() >= self.config.peer_batch_max) {
            self.flush_outbox(out);
        }
    }

    /// A floor promise is renewed once less than this is left (7/8 of the lookahead): a
    /// renewal every lookahead/8 keeps a long margin for the log commit while the promise a
    /// new leader must wait out after a failover stays short.
    fn floor_margin_us(&self) -> u64 {
        self.config.floor_lookahead_us - self.config.floor_lookahead_us / 8
    }

    fn renew_floor(&mut self, now: TimeUs) {
        let lookahead = self.config.floor_lookahead_us;
        if self.floor_proposed < now + self.floor_margin_us() {
            let ts = now + lookahead;
            if self.log.propose(LogRecord::Floor { ts }).is_ok() {
                self.floor_proposed = ts;
            }
        }
    }

    fn apply_committed(&mut self, out: &mut Vec<LeaderOutput>) {
        let mut entries = std::mem::take(&mut self.committed_buf);
        self.log.take_committed(&mut entries);
        for entry in entries.drain(..) {
            match entry.record {
                LogRecord::Prepare { txn, ts, .. } => self.on_prepared(txn.id, ts),
                LogRecord::Decide { id, ts } => self.on_decide_logged(id, ts),
                LogRecord::Abort { id } => self.on_abort_logged(id, out),
                LogRecord::Refuse { id, reason, arrival_delta_us } => {
                    self.on_refuse_logged(id, reason, arrival_delta_us, out)
                }
                LogRecord::Floor { ts } => self.floor_committed = self.floor_committed.max(ts),
                LogRecord::Applied { .. } => {} // for followers; the leader executed already
            }
        }
        self.committed_buf = entries;
    }

    fn on_prepared(&mut self, id: TxnId, proposal: Timestamp) {
        let shard = self.config.shard;
        let Some(p) = self.pending.get_mut(&id) else { return };
        p.durable = true;
        let Some(agreement) = p.agreement.as_ref() else {
            self.queue.mark_ready(id); // single shard: decided once durable
            return;
        };
        let others: Vec<ShardId> = agreement.shards().iter().copied().filter(|s| *s != shard).collect();
        let at = self.now + self.config.recover_after_us;
        p.recover_at = Some(at);
        self.recover_queue.insert((at, id));
        for s in others {
            self.queue_peer(s, PeerItem::Propose { id, ts: proposal });
        }
        self.on_proposal(id, shard, proposal);
    }

    fn on_decide_logged(&mut self, id: TxnId, ts: Timestamp) {
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
        self.on_confirm(id, shard, ts);
    }

    fn on_abort_logged(&mut self, id: TxnId, out: &mut Vec<LeaderOutput>) {
        self.cancel_recovery(id);
        let Some(p) = self.remove_pending(id) else { return };
        self.queue.remove(id);
        self.undecided_moves.retain(|(_, moved)| *moved != id);
        self.stats.aborted += 1;
        let reason = p.aborting.unwrap_or_else(|| "aborted by recovery".into());
        self.store_refusal(id, reason.clone(), p.arrival_delta_us);
        self.reply_now(id, 0, Err(TxnError::Rejected(reason)), p.arrival_delta_us, 0, out);
    }

    fn execute(&mut self, id: TxnId) {
        let p = self.remove_pending(id).expect("released transactions are pending");
        assert!(p.durable, "executing a transaction whose PREPARE is not committed");
        assert!(
            p.agreement.as_ref().is_none_or(Agreement::is_decided),
            "executing an undecided cross-shard transaction"
        );
        let shard = self.config.shard;
        let keys = p.txn.piece(shard).expect("participant");
        let outcome =
            self.registry.execute(&p.txn.procedure, &p.txn.args, &mut self.store, keys, shard).map_err(TxnError::from);
        self.floors.record_release(keys, p.ts);
        self.stats.executed += 1;
        self.max_executed_ts = self.max_executed_ts.max(p.ts);
        let rounds = p.agreement.as_ref().map_or(0, Agreement::rounds);
        self.answers.insert(id, Answer { ts: p.ts, outcome, arrival_delta_us: p.arrival_delta_us, rounds });
        self.unanswered.insert((p.ts, id));
    }

    fn advance_watermark(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        let below_pending = self.queue.min_ts().map_or(Timestamp::MAX, |ts| ts - 1);
        let w = now.min(below_pending).min(self.floor_committed);
        if w > self.watermark {
            self.watermark = w;
            self.floors.prune_at_or_below(w);
        }
        while let Some(&(ts, id)) = self.unanswered.first() {
            if ts > self.watermark {
                break;
            }
            self.unanswered.pop_first();
            let Some(answer) = self.answers.get(id).cloned() else {
                continue;
            };
            self.reply_now(id, answer.ts, answer.outcome, answer.arrival_delta_us, answer.rounds, out);
        }
    }

    fn reply_now(
        &self,
        id: TxnId,
        ts: Timestamp,
        outcome: Result<Vec<u8>, TxnError>,
        arrival_delta_us: i64,
        rounds: u8,
        out: &mut Vec<LeaderOutput>,
    ) {
        out.push(LeaderOutput::ToClient {
            client: id.client,
            msg: ServerMsg::Reply(TxnReply {
                id,
                shard: self.config.shard,
                ts,
                outcome,
                watermark: self.watermark,
                arrival_delta_us,
                rounds,
            }),
        });
    }

    fn forget_acked(&mut self, client: ClientId, acked_below: u64) {
        // Answers not yet sent stay (they cannot have been received).
        self.answers.forget_acked(client, acked_below, self.watermark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LocalLog;
    use crate::procedures::{micro_key, Micro, MicroOp};
    use crate::types::{KeySet, ShardPiece};

    fn leader() -> ShardLeader<LocalLog> {
        ShardLeader::new(LeaderConfig::new(0, 8), LocalLog::default(), Store::new(), Registry::with_builtins())
    }

    fn txn(seq: u64, ts: Timestamp, ops: &[MicroOp]) -> Arc<Txn> {
        let reads = ops.iter().filter(|o| o.write.is_none()).map(|o| micro_key(o.key)).collect();
        let writes = ops.iter().filter(|o| o.write.is_some()).map(|o| micro_key(o.key)).collect();
        Arc::new(Txn {
            id: TxnId { client: 9, seq },
            procedure: Micro::NAME.into(),
            args: postcard::to_stdvec(ops).unwrap(),
            pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(reads, writes) }],
            ts,
        })
    }

    fn dispatch(l: &mut ShardLeader<LocalLog>, now: TimeUs, t: &Arc<Txn>) -> Vec<LeaderOutput> {
        let mut out = Vec::new();
        l.on_client(now, 9, ClientMsg::Dispatch { txn: t.clone(), sent_us: now - 1, acked_below: 1 }, &mut out);
        out
    }

    pub(super) fn replies(out: &[LeaderOutput]) -> Vec<TxnReply> {
        out.iter()
            .filter_map(|o| match o {
                LeaderOutput::ToClient { msg: ServerMsg::Reply(r), .. } => Some(r.clone()),
                LeaderOutput::ToClient { .. }
                | LeaderOutput::ToClients { .. }
                | LeaderOutput::ToAllClients { .. }
                | LeaderOutput::ToPeer { .. } => None,
            })
            .collect()
    }

    fn tick(l: &mut ShardLeader<LocalLog>, now: TimeUs) -> Vec<TxnReply> {
        let mut out = Vec::new();
        l.tick(now, &mut out);
        replies(&out)
    }

    const W: Option<u64> = Some(1);
    const R: Option<u64> = None;

    #[test]
    fn holds_until_the_timestamp_then_answers_exactly_once() {
        let mut l = leader();
        let t = txn(1, 1_000, &[MicroOp { key: 1, write: W }]);
        assert!(replies(&dispatch(&mut l, 100, &t)).is_empty());
        assert!(tick(&mut l, 999).is_empty(), "held until the clock reaches ts");
        assert!(l.watermark() < 1_000);
        let r = tick(&mut l, 1_000);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].id.seq, r[0].ts), (1, 1_000));
        assert!(r[0].watermark >= 1_000, "answered only once the watermark passed");
        assert_eq!(r[0].arrival_delta_us, 1);
        assert!(tick(&mut l, 2_000).is_empty(), "never answered twice");
        // A retry gets the stored answer, not a second execution.
        let again = replies(&dispatch(&mut l, 2_100, &t));
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].ts, &again[0].outcome), (1_000, &r[0].outcome));
        assert_eq!(l.stats().executed, 1);
        assert_eq!(l.stats().duplicates, 1);
    }

    #[test]
    fn late_arrival_is_moved_up_to_the_clock() {
        let mut l = leader();
        let t = txn(1, 50, &[MicroOp { key: 1, write: W }]);
        // Its proposal is the clock, which has already come: executed and answered at once.
        let r = replies(&dispatch(&mut l, 500, &t));
        assert_eq!(r[0].ts, 500);
        assert_eq!(l.stats().bumped, 1);
    }

    #[test]
    fn reads_see_writes_in_timestamp_order_not_arrival_order() {
        let mut l = leader();
        // The read arrives first but has the later timestamp; the write arrives second.
        let read = txn(1, 2_000, &[MicroOp { key: 7, write: R }]);
        let write = txn(2, 1_500, &[MicroOp { key: 7, write: Some(42) }]);
        dispatch(&mut l, 100, &read);
        dispatch(&mut l, 200, &write);
        let r = tick(&mut l, 5_000);
        assert_eq!(r.iter().map(|r| r.id.seq).collect::<Vec<_>>(), vec![2, 1]);
        let out: crate::procedures::MicroOutput = postcard::from_bytes(r[1].outcome.as_ref().unwrap()).unwrap();
        assert_eq!(out, vec![(7, Some(42))]);
    }

    #[test]
    fn a_write_after_a_released_read_is_bumped_above_it() {
        let mut l = leader();
        dispatch(&mut l, 100, &txn(1, 1_000, &[MicroOp { key: 3, write: R }]));
        tick(&mut l, 1_000); // read released at 1000
                             // A write stamped below the released read must be ordered after it.
        let late_write = txn(2, 900, &[MicroOp { key: 3, write: W }]);
        dispatch(&mut l, 950, &late_write);
        let r = tick(&mut l, 5_000);
        assert!(r[0].ts > 1_000, "write ordered at {} after a read released at 1000", r[0].ts);
    }

    #[test]
    fn watermark_never_passes_a_pending_transaction() {
        let mut l = leader();
        dispatch(&mut l, 100, &txn(1, 10_000, &[MicroOp { key: 1, write: W }]));
        dispatch(&mut l, 100, &txn(2, 3_000, &[MicroOp { key: 2, write: W }]));
        assert!(tick(&mut l, 2_000).is_empty());
        assert!(l.watermark() < 2_001);
        let r = tick(&mut l, 4_000);
        assert_eq!(r.len(), 1);
        assert!(l.watermark() >= 3_000 && l.watermark() < 10_000);
        // A new transaction stamped below the watermark is bumped above it.
        dispatch(&mut l, 4_000, &txn(3, 100, &[MicroOp { key: 2, write: W }]));
        let r = tick(&mut l, 20_000);
        assert_eq!(r.len(), 2);
        assert!(r.iter().find(|r| r.id.seq == 3).unwrap().ts > 3_000);
    }

    #[test]
    fn unknown_procedure_and_foreign_shard_are_rejected_at_once() {
        let mut l = leader();
        let mut t = (*txn(1, 100, &[MicroOp { key: 1, write: W }])).clone();
        t.procedure = "nope".into();
        let r = replies(&dispatch(&mut l, 10, &Arc::new(t.clone())));
        assert!(matches!(&r[0].outcome, Err(TxnError::Rejected(why)) if why.contains("unknown procedure 'nope'")));
        t.procedure = Micro::NAME.into();
        t.pieces[0].shard = 4;
        t.id.seq = 2;
        let r = replies(&dispatch(&mut l, 10, &Arc::new(t)));
        assert!(matches!(&r[0].outcome, Err(TxnError::Rejected(why)) if why.contains("not a participant")));
        assert_eq!(l.pending_len(), 0);
    }

    #[test]
    fn bad_arguments_are_an_ordered_error_answer() {
        let mut l = leader();
        let mut t = (*txn(1, 100, &[MicroOp { key: 1, write: W }])).clone();
        t.args = vec![0xff; 3];
        dispatch(&mut l, 10, &Arc::new(t));
        let r = tick(&mut l, 200);
        assert!(matches!(r[0].outcome, Err(TxnError::Proc(crate::procedure::ProcError::BadArgs(_)))));
        assert!(l.store().is_empty());
    }

    #[test]
    fn acknowledged_answers_are_forgotten() {
        let mut l = leader();
        let t1 = txn(1, 100, &[MicroOp { key: 1, write: W }]);
        dispatch(&mut l, 10, &t1);
        tick(&mut l, 200);
        let mut out = Vec::new();
        let t2 = txn(2, 300, &[MicroOp { key: 2, write: W }]);
        l.on_client(250, 9, ClientMsg::Dispatch { txn: t2, sent_us: 249, acked_below: 2 }, &mut out);
        let r = replies(&dispatch(&mut l, 260, &t1));
        assert_eq!(r[0].outcome, Err(TxnError::Forgotten));
    }

    #[test]
    fn ping_is_answered_with_the_arrival_delta() {
        let mut l = leader();
        let mut out = Vec::new();
        l.on_client(1_000, 9, ClientMsg::Ping { sent_us: 400 }, &mut out);
        assert!(matches!(
            out.as_slice(),
            [LeaderOutput::ToClient { client: 9, msg: ServerMsg::Pong { shard: 0, arrival_delta_us: 600, .. } }]
        ));
    }

    /// Watermarks go to the clients heard from within `active_client_us`, not to every
    /// client ever connected (200 idle clients once cost 60 % of a core).
    #[test]
    fn watermarks_go_only_to_recently_heard_clients() {
        let mut l = leader();
        let broadcasts = |out: &[LeaderOutput]| {
            out.iter()
                .filter_map(|o| match o {
                    LeaderOutput::ToClients { clients, msg: ServerMsg::Watermark { .. } } => {
                        let mut clients = clients.clone();
                        clients.sort_unstable();
                        Some(clients)
                    }
                    LeaderOutput::ToClients { .. }
                    | LeaderOutput::ToAllClients { .. }
                    | LeaderOutput::ToClient { .. }
                    | LeaderOutput::ToPeer { .. } => None,
                })
                .collect::<Vec<_>>()
        };
        let mut out = Vec::new();
        l.tick(100_000, &mut out);
        assert!(
            out.iter().any(|o| matches!(o, LeaderOutput::ToAllClients { msg: ServerMsg::Watermark { .. } })),
            "now and then every connected client is told (a client may be pinging a replica that no longer leads)"
        );
        out.clear();
        l.tick(101_100, &mut out);
        assert!(broadcasts(&out).is_empty(), "nobody heard from: nobody to tell until the next broadcast to all");
        l.on_client(101_000, 3, ClientMsg::Ping { sent_us: 101_000 }, &mut out);
        l.on_client(1_500_000, 4, ClientMsg::Ping { sent_us: 1_500_000 }, &mut out);
        // Every client is told at 1_500_000, 2_500_000 and 4_000_000 (at most every 100 ms),
        // the recent ones at the ticks in between.
        l.tick(1_500_000, &mut out);
        out.clear();
        l.tick(1_501_600, &mut out);
        assert_eq!(broadcasts(&out), vec![vec![3, 4]]);
        l.tick(2_500_000, &mut out);
        out.clear();
        l.tick(2_501_100, &mut out);
        assert_eq!(broadcasts(&out), vec![vec![4]], "client 3 has been silent for over 2 s");
        l.tick(4_000_000, &mut out);
        out.clear();
        l.tick(4_001_100, &mut out);
        assert!(broadcasts(&out).is_empty());
    }

    #[test]
    fn idle_watermark_follows_the_clock() {
        let mut l = leader();
        tick(&mut l, 5_000);
        assert_eq!(l.watermark(), 5_000);
        tick(&mut l, 9_000);
        assert_eq!(l.watermark(), 9_000);
    }
}

#[cfg(test)]
mod tests_common;
#[cfg(test)]
mod tests_cross;
#[cfg(test)]
mod tests_recovery;
