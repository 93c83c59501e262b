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
//!
//! This file holds the state, the configuration and the event entry points (`on_client`,
//! `on_peer`, `tick` and the `pump` they share). The handlers live by concern in `dispatch`
//! (admission and refusals), `peer` (agreement items and the records they log), `recovery`
//! (failover and stalled transactions), `execute` (release and execution) and `watermark`
//! (the watermark, answers, broadcasts, floor promises and `Applied` markers);
//! `invariants` checks the state between steps ([`ShardLeader::check_invariants`]).
//!
//! Size: over 600 lines, of which about 240 are documentation of the leader's state and
//! configuration (every field says which rule it serves); the handlers are in the modules
//! above.

pub mod admissible;
pub mod admission;
pub mod agreement;
pub mod answers;
pub mod follower;
pub mod lent;
pub mod outcomes;
pub mod queue;

pub use lent::LeaderWithLog;

// `ShardLeader`'s methods, by concern (each file adds an `impl ShardLeader` block).
mod applied_exchange;
mod dispatch;
mod early;
mod execute;
pub mod fast;
mod fast_cross;
mod invariants;
mod ordered_writes;
mod peer;
mod recovery;
mod speculation;
mod watermark;

use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::sync::Arc;

use luigi_store::Store;

use crate::log::{LogEntry, LogIndex, LogRecord, ReplicatedLog};
use crate::msg::{PeerBatch, PeerItem};
use luigi_txn::msg::{ClientMsg, ServerMsg};
use luigi_txn::peer::ReplicaOutput;
use luigi_txn::procedure::Registry;
use luigi_txn::progress::{LogPos, Progress};
use luigi_txn::types::{ClientId, KeySet, ShardId, TimeUs, Timestamp, Txn, TxnId};
use luigi_txn::Map;

use admission::Floors;
use agreement::Agreement;
use answers::Answers;
use dispatch::Dispatch;
use queue::HoldQueue;
use speculation::Speculation;

/// Transactions remembered as having lost an early agreement item.
const EARLY_DROPPED_MAX: usize = 1 << 16;

/// The clock bound of rule 22 unless a cluster file sets `[protocol] max_clock_offset_us`:
/// the largest offset between two nodes' clocks that the cluster tolerates. CockroachDB's
/// default; NTP keeps clocks within a few milliseconds of each other.
pub const MAX_CLOCK_OFFSET_US_DEFAULT: u64 = 500_000;

/// [`LeaderConfig::outcomes_max`] by default. Outcomes are kept only while another
/// participant has not applied past them: a few report periods' worth of cross-shard
/// commits normally, and while a shard is down the ones it took part in that its old
/// leader executed and did not mark applied.
pub const OUTCOMES_MAX_DEFAULT: usize = 1 << 18;

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
    /// How far an idle shard's watermark moves between two `Applied` markers (timestamp µs;
    /// [`watermark::IDLE_MARKER_US`] by default). The markers are every replica's safe time
    /// for snapshot reads (DESIGN.md rule 23): a cluster that serves them at followers
    /// shortens it (`[protocol] read_only_path`), or reads at an idle shard wait this long.
    pub idle_marker_us: u64,
    /// How long (timestamp µs) a replica's store keeps the versions its writes replaced, for
    /// snapshot reads (DESIGN.md rule 23; `luigi_store::versions`). 0 by default: no client
    /// sends snapshot reads yet (issue 31), and keeping versions cost every write a copy and
    /// two ordered-map entries: 0.63x the throughput of micro 1x1 `--net none` at 8 threads
    /// (results/cpu-per-txn/2026-11-27-merged.txt). With 0 a snapshot read is served only
    /// at or above the shard's newest write.
    pub snapshot_retention_us: u64,
    /// A cross-shard transaction prepared here and still undecided this long after its
    /// `PREPARE` committed is stalled: this leader becomes its recovery coordinator and asks
    /// the other participants (`Recover`), and asks again every period after that. Must
    /// exceed a normal agreement (a few one-way delays plus a log round).
    pub recover_after_us: u64,
    /// Replicas per shard, indexed by shard: how many follower reports prove another shard's
    /// proposal committed (DESIGN.md rule 14). Empty: only the other leaders' commit reports
    /// do.
    pub group_sizes: Vec<u32>,
    /// How far ahead of this replica's clock a transaction's timestamp may lie (DESIGN.md
    /// rule 22): the clock bound (`[protocol] max_clock_offset_us`) plus the largest one-way
    /// delay and headroom a correct coordinator can justify. A leader refuses (logged) a
    /// dispatch stamped beyond it, and a follower does not accept it on the fast path, so no
    /// such timestamp reaches a log, a floor or a recovery.
    pub max_ahead_us: u64,
    /// Keep the fast path's order table, mark fast-eligible answers with their order hash
    /// and vote for them (see [`fast`]); set from the cluster file's `[protocol] fast_path`.
    pub fast_path: bool,
    /// Cross-shard outcomes kept for the other participants' recoveries, plus the
    /// transactions that may add one (pending or being refused), at most: past it a
    /// cross-shard dispatch is answered `Busy` (nothing stored) until the other participants
    /// have applied past enough of them (`leader::outcomes`).
    pub outcomes_max: usize,
    /// How long a client's answers outlive its newest transaction, timestamp µs behind the
    /// watermark (DESIGN.md rule 7; `[protocol] answer_expiry_s`). The same on every server
    /// of a cluster, followers included: it also bounds how far past its timestamp a
    /// cross-shard transaction may be ordered (`leader::outcomes`).
    pub answer_expiry_us: u64,
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
            idle_marker_us: watermark::IDLE_MARKER_US,
            snapshot_retention_us: 0,
            recover_after_us: 2_000_000,
            group_sizes: Vec::new(),
            max_ahead_us: MAX_CLOCK_OFFSET_US_DEFAULT + 2_000_000,
            fast_path: false,
            outcomes_max: OUTCOMES_MAX_DEFAULT,
            answer_expiry_us: answers::DEFAULT_ANSWER_EXPIRY_US,
            mutations: Mutations::default(),
        }
    }
}

/// Deliberate protocol bugs, used only by tests that prove the checks catch them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mutations {
    /// A leader serves a snapshot read above its safe time without waiting for the commit of
    /// the writes it executed to the read's keys (rule 23 (e)).
    pub serve_ahead_unsettled: bool,
    /// Release a transaction even when a conflicting smaller-timestamp one is pending.
    pub release_ignores_conflicts: bool,
    /// Decide a cross-shard transaction on the first round even when proposals differed.
    pub skip_second_round: bool,
    /// Use another shard's proposal at once, without the proof that its `PREPARE` committed.
    pub trust_unproven_proposals: bool,
    /// Send answers without the position they depend on (as if everything were committed).
    pub hide_positions: bool,
    /// A new leader serves without preparing what a majority's fast-path accepts say may
    /// have been fast-committed (rule R3 skipped).
    pub skip_fast_recovery: bool,
    /// A leader's fast answers leave without its vote in the accept log (DESIGN.md, the
    /// fast path, "the leader's vote").
    pub skip_leader_vote: bool,
    /// A replica answers a new leader's question for accepts while its own term is older.
    pub answer_accepts_in_old_term: bool,
    /// A leader marks answers fast without rule F2 (a conflicting transaction above admitted
    /// first).
    pub fast_ignores_f2: bool,
    /// A leader marks answers fast even when a predecessor was not clean (rule C: every
    /// predecessor fast-eligible and clean itself).
    pub fast_ignores_unclean_predecessors: bool,
    /// Order hashes (the leader's and the followers') cover only the direct predecessors,
    /// not theirs (rule H).
    pub fast_hashes_direct_predecessors: bool,
    /// A message waiting for its accept record (a follower's `FastAccept`, a leader's vote)
    /// leaves before the record is durable.
    pub accept_before_durable: bool,
    /// A leader uses another shard's proposal marked fast at once, without the proof and
    /// without every follower's accept (rule 18).
    pub fast_trusts_marked_proposals: bool,
    /// An early answer is worked out before the clock passed its timestamp (rule 21), when
    /// a conflicting transaction may still be admitted below it and run first.
    pub early_before_its_time: bool,
    /// A follower accepts a fast-path dispatch without the admission check its leader makes
    /// (rule 22): what the leader refuses reaches the accept log, and a new leader's
    /// recovery.
    pub skip_fast_accept_check: bool,
    /// The leader forgets a cross-shard outcome once its answer has left the table
    /// (acknowledged or expired) and this many more have left after it, whatever the other
    /// participants applied: main's bounded memory before issue 26 (the last 2^17 final
    /// timestamps), with which a shard down long enough stalls on its return
    /// (`leader::outcomes`).
    pub outcomes_fifo: Option<usize>,
    /// Every replica serves a snapshot read at once, before its safe time reaches the read's
    /// timestamp (rule 23 without its wait).
    pub serve_reads_before_safe_time: bool,
}

/// An effect of the leader for its shell to carry out: the neutral output with Luigi's typed
/// batches (its replica encodes them for the node, `ReplicaOutput::encoded`).
pub type LeaderOutput = ReplicaOutput<PeerBatch>;

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
    /// Where its `PREPARE` is in this leader's log (0: taken over, committed); committed once
    /// the log is (see [`ShardLeader::uncommitted`]).
    prepare_index: LogIndex,
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
    /// Of those, bumped because the dispatch arrived after the clock passed its timestamp.
    pub bumped_late: u64,
    /// Of those, bumped above the watermark or the recovered admission floor.
    pub bumped_floor: u64,
    /// Of those, bumped above a conflicting released transaction.
    pub bumped_conflict: u64,
    /// Transactions executed.
    pub executed: u64,
    /// Dispatches rejected at admission.
    pub rejected: u64,
    /// Of those, malformed ones (answered at once, nothing logged).
    pub malformed: u64,
    /// Of those, stamped beyond the clock horizon (rule 22; refused and logged).
    pub ahead_of_clock: u64,
    /// Dispatches answered `Expired`: unknown here, and older than the answers' expiry.
    pub expired: u64,
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
    /// `Recover` requests about transactions answered and acknowledged whose outcome is not
    /// kept (answered with `Acknowledged`; a recovering participant is never told this).
    pub recover_forgotten: u64,
    /// `Recover` requests answered from a kept outcome whose answer had left the table
    /// (acknowledged or expired): what the retention rule is for.
    pub recover_kept: u64,
    /// Cross-shard dispatches answered `Busy` because the kept outcomes reached
    /// [`LeaderConfig::outcomes_max`].
    pub outcomes_full: u64,
    /// `Acknowledged` answers received for a transaction still undecided here (it stays
    /// stalled: see `on_acknowledged`).
    pub recover_acknowledged: u64,
    /// Other shards' proposals marked fast and used before their proof, on their
    /// followers' accepts (DESIGN.md rule 18).
    pub fast_proposals: u64,
    /// Early answers sent: worked out on another shard's marked proposal before it was
    /// usable (DESIGN.md rule 21).
    pub early_answers: u64,
    /// Admitted transactions whose client asked for the fast path (DESIGN.md rule 20), on a
    /// leader that runs it.
    pub fast_asked: u64,
    /// Of those, not fast-eligible at admission: moved (F1) or below a conflicting one (F2).
    pub fast_ineligible: u64,
    /// Of those, executed after a predecessor that was not clean (rule C): answered unmarked.
    pub fast_unclean: u64,
    /// Of those, executed clean: answered with their order hash (the rest were moved by
    /// agreement, refused or aborted).
    pub fast_marked: u64,
}

/// The shard leader state machine.
pub struct ShardLeader<L: ReplicatedLog<LogRecord>> {
    config: LeaderConfig,
    /// The type of the log its caller lends it (it holds none).
    log_type: PhantomData<fn(&mut L)>,
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
    /// Executed transactions whose answer waits for [`ShardLeader::admission_closed`], by
    /// (ts, id).
    unanswered: BTreeSet<(Timestamp, TxnId)>,
    /// The timestamp at or below which this leader admits nothing any more (DESIGN.md rule
    /// 7): `min(clock - 1, committed floor promise)`, never below the watermark and never
    /// back. It is what clients are told (answers, broadcasts, pongs), and an executed
    /// transaction is answered once it passes it, while transactions below it may still be
    /// pending: those below the watermark are all executed, those between are not.
    admission_closed: Timestamp,
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
    /// Highest committed floor promise sent to clients (rule 15).
    promise_sent: Timestamp,
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
    /// Microseconds the transactions released from the hold queue waited since this leader
    /// admitted (or took over) them, summed: the hold time, for the servers' metrics (read,
    /// never acted on; apart from [`LeaderStats`], whose fields the simulator sums).
    held_us: u64,
    /// Its commits per stored procedure, for the servers' metrics (read, never acted on).
    procedure_commits: luigi_replica::ProcedureCommits,
    /// Prepared transactions taken over from earlier leaders (see [`ShardLeader::recover`]):
    /// with `admitted` they are every transaction this leader made pending.
    taken_over: u64,
    /// The Raft term this leader serves (every record it appends is of this term).
    term: u64,
    /// Highest log index taken committed.
    committed_index: LogIndex,
    /// Speculative execution's bookkeeping (rule 14).
    spec: Speculation,
    /// The fast path's order table, when the cluster runs it.
    fast: Option<fast::FastOrder>,
    /// Other shards' marked proposals and their followers' accepts (rule 18; fed only
    /// with the fast path).
    fast_peers: fast_cross::PeerAccepts,
    /// Votes for marked proposals in the outbox: written before the outbox leaves (rule 16).
    outbox_votes: Vec<Vec<u8>>,
    /// Transactions with another shard's marked proposal held, by (timestamp, id): each may
    /// get an early answer (rule 21). At most `max_early`.
    early_candidates: BTreeSet<(Timestamp, TxnId)>,
    /// The other shards' progress reports: what proves their proposals committed.
    progress: Progress,
    /// Per shard, the highest position of a proposal sent to it before it was committed:
    /// this leader's commit is reported to it once it passes that (`report_commit`).
    commit_owed: BTreeMap<ShardId, LogIndex>,
    /// Committed `Applied` markers sent to and heard from the other shards.
    applied_exchange: applied_exchange::AppliedExchange,
}

impl<L: ReplicatedLog<LogRecord>> ShardLeader<L> {
    /// A leader over `store`, running `registry`'s procedures, proposing to `log` (its
    /// caller holds the log and lends it to every call that may propose or take committed
    /// records).
    pub fn new(config: LeaderConfig, log: &L, store: Store, registry: Registry) -> Self {
        let term = log.term();
        let progress = Progress::new(&config.group_sizes, config.shards);
        let fast = config.fast_path.then(|| fast::FastOrder::new(&config.mutations));
        let mut answers = Answers::default();
        answers.set_expiry(config.answer_expiry_us);
        answers.emulate_fifo(config.mutations.outcomes_fifo);
        // Writes in key order, for the scans of snapshot reads (only kept with versions).
        let spec = Speculation::new(config.snapshot_retention_us > 0);
        Self {
            config,
            log_type: PhantomData,
            store,
            registry,
            floors: Floors::default(),
            queue: HoldQueue::default(),
            pending: Map::default(),
            pending_per_client: Map::default(),
            early: Map::default(),
            early_dropped: BTreeSet::new(),
            answers,
            refusing: Map::default(),
            clients_heard: Map::default(),
            all_clients_at: 0,
            unanswered: BTreeSet::new(),
            admission_closed: 0,
            outbox: BTreeMap::new(),
            log_retry: Vec::new(),
            watermark: 0,
            admission_floor: 0,
            floor_committed: 0,
            floor_proposed: 0,
            promise_sent: 0,
            broadcast_at: (0, 0),
            applied_at: (0, 0),
            max_executed_ts: 0,
            undecided_moves: BTreeSet::new(),
            committed_buf: Vec::new(),
            recover_queue: BTreeSet::new(),
            now: 0,
            stats: LeaderStats::default(),
            held_us: 0,
            procedure_commits: luigi_replica::ProcedureCommits::default(),
            taken_over: 0,
            term,
            committed_index: 0,
            spec,
            fast,
            fast_peers: fast_cross::PeerAccepts::default(),
            outbox_votes: Vec::new(),
            early_candidates: BTreeSet::new(),
            progress,
            commit_owed: BTreeMap::new(),
            applied_exchange: applied_exchange::AppliedExchange::default(),
        }
    }

    /// The position `index` of this leader's log while it is not known committed (rule 14:
    /// what an answer or a proposal names for its receiver to wait on), `None` once it is.
    fn uncommitted(&self, index: LogIndex) -> Option<LogPos> {
        (index > self.committed_index).then_some(LogPos { term: self.term, index })
    }

    /// This shard.
    pub fn shard(&self) -> ShardId {
        self.config.shard
    }

    /// The exactly-once answer table (rule 7).
    pub fn answers(&self) -> &Answers {
        &self.answers
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

    /// What snapshot reads are served from at this leader (DESIGN.md rule 23): its store, its
    /// procedures and its safe time, the committed `Applied` marker (not the watermark: what
    /// it executed may rest on records not committed yet, rule 14); and above it, a read at
    /// or below the watermark, naming the position its keys' executed writes rest on (rule
    /// 23 (e)).
    pub fn snapshot_view(&self) -> luigi_replica::SnapshotView<'_> {
        let safe_ts = self.applied_exchange.committed;
        let ahead = Some(luigi_replica::ServeAhead { executed_ts: self.applied_marker(), writes: self });
        luigi_replica::SnapshotView { store: &self.store, registry: &self.registry, safe_ts, ahead }
    }

    /// This leader's fast-path votes whose `PREPARE` is not known committed (see
    /// [`fast::FastOrder::vote`]): part of this replica's answer to a new leader's recovery,
    /// and its undecided accepts once it steps down.
    pub fn fast_votes(&self) -> Vec<crate::fast::AcceptRecord> {
        self.fast.as_ref().map(fast::FastOrder::votes).unwrap_or_default()
    }

    /// Counters.
    pub fn stats(&self) -> LeaderStats {
        self.stats
    }

    /// The hold time summed, µs: how long the transactions released from the hold queue
    /// waited since this leader admitted (or took over) them (their count is
    /// [`LeaderStats::executed`]).
    pub fn held_us(&self) -> u64 {
        self.held_us
    }

    /// Its commits per stored procedure.
    pub fn procedure_commits(&self) -> &luigi_replica::ProcedureCommits {
        &self.procedure_commits
    }

    /// Number of transactions admitted and not yet executed.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The earliest time at which [`ShardLeader::tick`] has work to do.
    pub fn next_deadline(&self) -> Option<TimeUs> {
        if !self.outbox.is_empty() || !self.log_retry.is_empty() {
            return Some(0); // now
        }
        if self.commit_owed.values().any(|index| *index <= self.committed_index) {
            return Some(0); // a commit to report
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
        let early = self.early_deadline().unwrap_or(TimeUs::MAX);
        let applied = self.applied_exchange_deadline().unwrap_or(TimeUs::MAX);
        Some(release.min(renew).min(broadcast).min(recover).min(early).min(applied))
    }

    /// Handles a message from client `client`.
    pub fn on_client(
        &mut self,
        log: &mut L,
        now: TimeUs,
        client: ClientId,
        msg: ClientMsg,
        out: &mut Vec<LeaderOutput>,
    ) {
        self.now = now;
        self.clients_heard.insert(client, now);
        match msg {
            ClientMsg::Hello { .. } => {}
            ClientMsg::Ping { sent_us } => out.push(LeaderOutput::ToClient {
                client,
                msg: ServerMsg::pong(self.config.shard, now, sent_us, self.admission_closed),
            }),
            ClientMsg::Dispatch { txn, sent_us, acked_below, fast } => {
                let arrival_delta_us = luigi_txn::msg::arrival_delta_us(now, sent_us);
                self.forget_acked(txn.id.client, acked_below);
                self.on_dispatch(log, now, Dispatch { txn, arrival_delta_us, acked_below, asked_fast: fast }, out);
            }
            ClientMsg::Status => {} // answered by the shell, which sees the whole replica
            // Served by the role machine, at any replica, without the leader (rule 23).
            ClientMsg::SnapshotRead(_) => {}
        }
        self.pump(log, now, out);
    }

    /// Handles a batch of agreement items from the leader of `batch.from`.
    pub fn on_peer(&mut self, log: &mut L, now: TimeUs, batch: PeerBatch, out: &mut Vec<LeaderOutput>) {
        self.now = now;
        let from = batch.from;
        for item in batch.items {
            match item {
                PeerItem::Propose { id, ts, at, fast } => self.on_announced(log, id, from, ts, at, fast),
                PeerItem::Progress(report) => self.on_progress(log, report),
                PeerItem::FastAccept { replica, term, id, ts } => {
                    self.on_peer_accept(log, from, (replica, term, ts), id)
                }
                PeerItem::Confirm { id, ts } => self.on_confirm(log, id, from, ts),
                PeerItem::Recover { txn, ts } => self.on_recover(log, txn, from, ts, out),
                PeerItem::Executed { id, ts } => self.on_executed(log, id, from, ts),
                PeerItem::Refuse { id, reason } => self.on_refuse(log, id, peer::named_refusal(from, reason)),
                PeerItem::Acknowledged { id } => self.on_acknowledged(id),
                PeerItem::Applied { ts } => self.on_peer_applied(from, ts),
            }
        }
        self.pump(log, now, out);
    }

    /// Advances time: renews the floor promise, releases transactions whose time has come,
    /// publishes the watermark, and flushes agreement batches to the other leaders.
    pub fn tick(&mut self, log: &mut L, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        self.now = now;
        self.pump(log, now, out);
        self.recover_stalled(now);
        self.broadcast_watermark(now, out);
        if now >= self.applied_at.0.saturating_add(self.config.applied_marker_us) {
            self.log_applied_marker(log, now);
        }
        self.answers.expire_at(self.watermark);
        self.exchange_applied(log, now);
        self.report_commit();
        self.flush_outbox(out);
    }

    fn propose_record(&mut self, log: &mut L, record: LogRecord) {
        if log.propose(record.clone()).is_err() {
            self.log_retry.push(record); // backlog: try again at the next pump
        }
    }

    /// Applies committed log records, renews the floor, releases and executes what is ready,
    /// and sends the answers the watermark now covers.
    fn pump(&mut self, log: &mut L, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        for record in std::mem::take(&mut self.log_retry) {
            self.propose_record(log, record);
        }
        self.renew_floor(log, now);
        self.apply_committed(log, out);
        self.release_and_execute(now, out);
        self.advance_watermark(log, now, out);
        if !self.early_candidates.is_empty() {
            self.answer_early(log, now, out);
        }
        if self.outbox.values().any(|items| items.len() >= self.config.peer_batch_max) {
            self.flush_outbox(out);
        }
    }

    fn apply_committed(&mut self, log: &mut L, out: &mut Vec<LeaderOutput>) {
        let mut entries = std::mem::take(&mut self.committed_buf);
        log.take_committed(&mut entries);
        if let Some(last) = entries.last() {
            self.committed_index = self.committed_index.max(last.index);
        }
        for entry in entries.drain(..) {
            match entry.record {
                LogRecord::Prepare { txn, .. } => {
                    if let Some(f) = self.fast.as_mut() {
                        f.prepare_committed(txn.id);
                    }
                    self.on_prepared(txn.id)
                }
                LogRecord::Decide { id, ts } => self.on_decide_logged(log, id, ts),
                LogRecord::Abort { id } => self.on_abort_logged(id, out),
                LogRecord::Refuse { id, reason, arrival_delta_us, ts, others } => {
                    self.on_refuse_logged(id, reason, arrival_delta_us, ts, &others, out)
                }
                LogRecord::Floor { ts } => self.floor_committed = self.floor_committed.max(ts),
                // For followers (the leader executed already); the fast path's table prunes.
                LogRecord::Applied { ts } => {
                    self.applied_exchange.committed = self.applied_exchange.committed.max(ts);
                    if let Some(f) = self.fast.as_mut() {
                        f.applied(ts);
                    }
                }
                LogRecord::PeerApplied { shard, ts } => self.answers.peer_applied(shard, ts),
            }
        }
        self.committed_buf = entries;
        for d in self.spec.on_committed(self.committed_index) {
            self.on_recover(log, d.txn, d.from, d.ts, out);
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_common;
#[cfg(test)]
mod tests_cross;
#[cfg(test)]
mod tests_fast_cross;
#[cfg(test)]
mod tests_fast_recovery;
#[cfg(test)]
mod tests_outcomes;
#[cfg(test)]
mod tests_recovery;
#[cfg(test)]
mod tests_speculation;

impl<L: ReplicatedLog<LogRecord>> luigi_replica::WritePositions for ShardLeader<L> {
    /// The highest of rule 14's per-key positions of uncommitted writes to `keys` and of
    /// those that could fall in the `scanned` ranges.
    fn rests_on(&self, keys: &KeySet, scanned: &[luigi_txn::snapshot::ScannedRange]) -> Option<LogPos> {
        if self.config.mutations.serve_ahead_unsettled {
            return None;
        }
        let declared = self.spec.position_for(keys, 0, self.committed_index);
        self.uncommitted(declared.max(self.spec.scanned_position(scanned).unwrap_or(0)))
    }
}
