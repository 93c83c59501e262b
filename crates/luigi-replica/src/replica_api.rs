//! The seam between a shard replica's state machine and the node that drives it
//! (`luigi_node::ReplicaNode`): [`ShardReplica`], what a protocol's replica offers (every
//! protocol's through the one [`crate::role_machine::RoleMachine`]: Luigi's
//! `luigi_protocol::replica::Replica`, a baseline's); [`FastPathReplica`], the fast path's optional
//! extension; [`ReplicaFactory`], how a node builds one.
//!
//! The node owns the replica's Raft log ([`RaftLog`], a byte log as raft-rs's: it knows no
//! record type) and drives it; it lends it (`&mut`) to every replica call that may propose,
//! take committed records or read the log's leadership. The replica proposes and takes its
//! protocol's records through the log's typed view ([`luigi_txn::log::ReplicatedLog`],
//! which encodes on `propose` and decodes on `take_committed`).
//!
//! Everything above the state machine (driving the log's readies, ticks, the first election,
//! snapshot cadence, transfers and compaction, routing, persistence) is written once, in
//! `luigi-node`, against these traits, and serves every protocol. A protocol's replica keeps
//! its own record type, its own state, its own snapshot format: the node sees records and
//! snapshots only as bytes, jobs ([`SnapshotJob`]), a decoder ([`SnapshotDecoder`]) and
//! type-erased decoded states ([`StateBox`]).
//!
//! The calling contract (the node follows it):
//!
//! ```text
//! at start:      log = RaftLog::new(config, recovered); replica = factory.build(setup, &log)
//! on an input:   replica.on_client(&mut log, ..) / on_peer(&mut log, ..) / peer_leader_changed
//!                / log.step_bytes
//! then:          drive the log's readies (send, persist, advance; install_snapshot or
//!                install_decoded for a ready's snapshot), then replica.turn(&mut log, now, out),
//!                take_executed(), own_snapshot_due(&log, ..)
//! ```

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use bytes::Bytes;
use luigi_store::Store;
use luigi_txn::msg::{ClientMsg, ReplicaStatus, StalledTxnInfo};
use luigi_txn::peer::{NodeOutput, PeerFacts, PeerMsg};
use luigi_txn::procedure::Registry;
use luigi_txn::types::{ClientId, ShardId, TimeUs, Timestamp, TxnId};

use luigi_raft::{RaftError, RaftLog};

/// Builds a shard's initial store: a workload's population (e.g. TPC-C's tables, generated
/// from a seed, the same on every replica), or an empty store. It is the state before the
/// log's first entry: a replica calls it when it starts without a snapshot, and when it
/// rebuilds its state by replaying its log from the start.
pub type InitialStore = Arc<dyn Fn() -> Store + Send + Sync>;

/// The [`InitialStore`] of a shard that starts empty.
pub fn empty_store() -> InitialStore {
    Arc::new(Store::new)
}

/// A replica's state, type-erased: a snapshot decoded off the event loop
/// ([`SnapshotDecoder::decode`]) for [`ShardReplica::install_decoded`], or a state an
/// installed snapshot replaced, for the shell to drop off its event loop (freeing a large
/// store takes a while).
pub type StateBox = Box<dyn Any + Send>;

/// A leadership change the shell may want to log or act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// This replica now serves as the shard leader.
    Promoted,
    /// This replica stopped leading and rebuilt its follower state from its log.
    Demoted,
}

/// A snapshot a [`SnapshotJob`] made: the replica's state at `index`, serialized in its
/// protocol's format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotImage {
    /// The log index it covers.
    pub index: u64,
    /// The serialized state.
    pub data: Bytes,
    /// CRC-32 of `data` (computed with it, off the event loop: transfers check it).
    pub crc32: u32,
}

impl SnapshotImage {
    /// The image of `data` at `index`, with its CRC-32.
    pub fn new(index: u64, data: Bytes) -> Self {
        SnapshotImage { index, crc32: crc32fast::hash(&data), data }
    }
}

/// What a [`SnapshotJob`] runs.
type MakeSnapshot = Box<dyn FnOnce() -> Result<SnapshotImage, RaftError> + Send>;

/// A replica's own snapshot in the making ([`ShardReplica::own_snapshot_due`]): work that
/// holds only shared or owned data, so that the shell can run it on another thread while the
/// replica goes on. Its result goes to the node (`ReplicaNode::snapshot_made`).
pub struct SnapshotJob {
    index: u64,
    make: MakeSnapshot,
}

impl SnapshotJob {
    /// A job that makes the snapshot at log index `index` with `make`.
    pub fn new(index: u64, make: impl FnOnce() -> Result<SnapshotImage, RaftError> + Send + 'static) -> Self {
        SnapshotJob { index, make: Box::new(make) }
    }

    /// The log index the snapshot covers.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Makes the snapshot.
    ///
    /// # Errors
    /// The replica's state cannot be rebuilt or serialized (the replica cannot go on).
    pub fn run(self) -> Result<SnapshotImage, RaftError> {
        (self.make)()
    }
}

impl Debug for SnapshotJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotJob").field("index", &self.index).finish_non_exhaustive()
    }
}

/// Reads a protocol's snapshot images off the event loop (a large store's image takes a
/// while): the shell runs it on another thread (`luigi_node::SnapshotCheck`).
pub trait SnapshotDecoder: Send + Sync {
    /// Checks a follower's offered image at `index` (the leader compacts behind it only if
    /// it is a valid image of this shard's state at that index).
    ///
    /// # Errors
    /// Why it is not.
    fn check(&self, index: u64, data: &[u8]) -> Result<(), String>;

    /// Decodes the leader's image into the state [`ShardReplica::install_decoded`] takes.
    ///
    /// # Errors
    /// Why it does not decode.
    fn decode(&self, data: &[u8]) -> Result<StateBox, String>;
}

/// One replica of a shard as a protocol's state machine over its Raft log: the shard leader
/// when its log leads (and it has caught up), a follower otherwise. Inputs are clients'
/// messages and other shards' peer messages (the protocol's batches, opaque to the node, in
/// the neutral [`PeerMsg`]); outputs are [`NodeOutput`]s (replies, watermarks, encoded
/// batches for other shards, executions). The node (`luigi_node::ReplicaNode`) owns and
/// drives the replica's log, lends it to the calls that need it (`log`), and calls
/// [`ShardReplica::turn`] after each round of readies (see the module docs).
///
/// Object safe: the node holds a `Box<dyn ShardReplica>` from a [`ReplicaFactory`].
pub trait ShardReplica: Send {
    /// A client's message. A replica that does not serve answers a dispatch with
    /// `NotLeader` and a hint.
    fn on_client(
        &mut self,
        log: &mut RaftLog,
        now: TimeUs,
        client: ClientId,
        msg: ClientMsg,
        out: &mut Vec<NodeOutput>,
    );

    /// A message from another shard's replica, which this replica's protocol decodes.
    /// Returns whether it was taken (a replica that does not serve drops it: the sender's
    /// recovery asks again; one that does not decode is dropped, counted and logged).
    fn on_peer(&mut self, log: &mut RaftLog, now: TimeUs, msg: PeerMsg, out: &mut Vec<NodeOutput>) -> bool;

    /// Another shard has a new leader (its announcement reached this replica).
    fn peer_leader_changed(&mut self, shard: ShardId);

    /// After the node drove the log: applies committed records, switches role if leadership
    /// moved, runs the leader's timers. Returns the transition, if any.
    ///
    /// # Errors
    /// The replica cannot go on (e.g. a demoted leader cannot rebuild its state).
    fn turn(
        &mut self,
        log: &mut RaftLog,
        now: TimeUs,
        out: &mut Vec<NodeOutput>,
    ) -> Result<Option<Transition>, RaftError>;

    /// What the replica executed outside `NodeOutput::Executed` outputs (a follower
    /// applying its log) since the last call, in execution order.
    fn take_executed(&mut self) -> Vec<(TxnId, Timestamp)>;

    /// When [`ShardReplica::turn`] next has timed work, if it has any.
    fn next_deadline(&self) -> Option<TimeUs>;

    /// True while this replica serves as its shard's leader.
    fn is_serving(&self) -> bool;

    /// Which replica (index from 0) clients should try: the leader this replica's `log`
    /// knows of.
    fn leader_hint(&self, log: &RaftLog) -> Option<u32>;

    /// The store as this replica holds it (for checks and reports).
    fn store(&self) -> &Store;

    /// This replica's own snapshot, once its state reached `next_at` (the node's cadence) and
    /// its protocol takes one now: a job the shell runs off its event loop, replaying what it
    /// takes from `log` (the latest snapshot and the records after it). `None`: not now.
    ///
    /// # Errors
    /// The replica cannot make one (a bug).
    fn own_snapshot_due(&self, log: &RaftLog, next_at: u64) -> Result<Option<SnapshotJob>, RaftError>;

    /// The decoder of this protocol's snapshot images (the node asks once, and hands it to
    /// every check it starts).
    fn snapshot_decoder(&self) -> Arc<dyn SnapshotDecoder>;

    /// The log installed the leader's snapshot `data` (not decoded beforehand): the state is
    /// replaced by the snapshot's (a serving replica stops serving). Returns the replaced
    /// state, if any, to drop off the event loop.
    ///
    /// # Errors
    /// The snapshot does not load (the replica cannot go on).
    fn install_snapshot(&mut self, data: &[u8]) -> Result<Option<StateBox>, RaftError>;

    /// As [`ShardReplica::install_snapshot`], with the snapshot already decoded by this
    /// replica's [`SnapshotDecoder::decode`].
    ///
    /// # Errors
    /// `state` is not what this replica's decoder makes (a bug).
    fn install_decoded(&mut self, state: StateBox) -> Result<Option<StateBox>, RaftError>;

    /// Fills in the state machine's part of a status report: `serving`, `watermark`,
    /// `pending`, `stalled_count`, `stalled` (the node fills in the log's).
    fn status(&self, now: TimeUs, status: &mut ReplicaStatus);

    /// Checks what the state machine promises between any two calls (the simulator's
    /// checks).
    ///
    /// # Errors
    /// The broken invariant.
    fn check_invariants(&self) -> Result<(), String>;

    /// The replica's counters on one line (for logs).
    fn stats_line(&self) -> String;

    /// The snapshot reads' counters (DESIGN.md rule 23) and how many wait now.
    fn snapshot_read_stats(&self) -> (crate::snapshot_reads::SnapshotReadStats, usize) {
        Default::default()
    }

    /// The fast path's extension, if this replica's protocol has one (the node asks for it
    /// to run the fast path's recovery rounds and its accept log).
    fn fast_path(&self) -> Option<&dyn FastPathReplica> {
        None
    }

    /// As [`ShardReplica::fast_path`], mutable.
    fn fast_path_mut(&mut self) -> Option<&mut dyn FastPathReplica> {
        None
    }

    /// The serving leader's figures as plain data (for the shells' checks and reports), or
    /// `None` while this replica does not serve.
    fn leader_figures(&self) -> Option<LeaderFigures>;

    /// The counters of every leader state this replica served with since it started, the
    /// serving one's included: they never go back when it leads again (the servers'
    /// metrics). By default the serving leader's alone.
    fn leader_totals(&self) -> LeaderTotals {
        let mut totals = LeaderTotals::default();
        if let Some(figures) = self.leader_figures() {
            totals.add(&figures);
        }
        totals
    }

    /// The transactions pending on the serving leader for longer than a normal agreement
    /// takes, oldest first, all of them (none while this replica does not serve, or if its
    /// protocol does not track them).
    fn stalled(&self, now: TimeUs) -> Vec<StalledTxnInfo>;
}

/// A serving leader's figures, as plain data: what the shells' checks and logs read of a
/// protocol's leader without knowing its type. A protocol fills in what it has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderFigures {
    /// Transactions in its care: Luigi's admitted and not executed; a baseline's coordinated,
    /// resolved, executed and not prepared (2PL: holding locks), and prepared and not decided.
    pub pending: usize,
    /// Its published watermark, if its protocol publishes one (Luigi).
    pub watermark: Option<Timestamp>,
    /// Its cross-shard agreement's counters, if its protocol keeps them (Luigi's).
    pub agreement: Option<AgreementCounters>,
    /// Pieces prepared and not decided (a baseline's).
    pub prepared: Vec<TxnId>,
    /// Keys locked (a baseline's; 2PL).
    pub locks_held: usize,
    /// Its transaction counters by outcome and path, as its protocol keeps them (the servers'
    /// `luigi_transactions_total`; they count from this leader's start).
    pub txns: Vec<TxnCount>,
    /// Microseconds the transactions it executed waited since it admitted (or took over)
    /// them, summed: the hold time (their count is the `committed` counter), if its protocol
    /// holds transactions (Luigi's hold queue).
    pub held_us: Option<u64>,
    /// Its commits per stored procedure.
    pub procedure_commits: crate::ProcedureCommits,
}

/// A replica's leader counters summed over every leader state it served with (a leader
/// state counts from 0; a demoted one's final figures are folded in): what the servers'
/// metrics expose as counters, which must never go back for the life of the process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderTotals {
    /// Transaction counters by outcome and path (as [`LeaderFigures::txns`]).
    pub txns: Vec<TxnCount>,
    /// Cross-shard agreement counters, if its protocol keeps them.
    pub agreement: Option<AgreementCounters>,
    /// Hold time summed, µs, if its protocol holds transactions.
    pub held_us: Option<u64>,
    /// Commits per stored procedure.
    pub procedure_commits: crate::ProcedureCommits,
}

impl LeaderTotals {
    /// Adds a leader state's counters (`figures`).
    pub fn add(&mut self, figures: &LeaderFigures) {
        for t in &figures.txns {
            match self.txns.iter_mut().find(|have| have.outcome == t.outcome && have.path == t.path) {
                Some(have) => have.count = have.count.saturating_add(t.count),
                None => self.txns.push(*t),
            }
        }
        if let Some(a) = &figures.agreement {
            self.agreement.get_or_insert_default().add(a);
        }
        if let Some(us) = figures.held_us {
            let held = self.held_us.get_or_insert(0);
            *held = held.saturating_add(us);
        }
        self.procedure_commits.add(&figures.procedure_commits);
    }

    /// The transaction counter `outcome`/`path`, if its protocol keeps it.
    pub fn txn(&self, outcome: &str, path: &str) -> Option<u64> {
        self.txns.iter().find(|t| t.outcome == outcome && t.path == path).map(|t| t.count)
    }
}

/// One of a serving leader's transaction counters, named for reports and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnCount {
    /// What happened: `admitted`, `committed`, `rejected`, `refused`, `aborted`, ...
    pub outcome: &'static str,
    /// How: `any`, `cross_shard`, `second_round`, `early`, `clock_horizon`, ...
    pub path: &'static str,
    /// How many times.
    pub count: u64,
}

/// A serving leader's counters of cross-shard agreement and its recovery, as plain data (the
/// simulator's checks and reports read them; a protocol that keeps them fills them in).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgreementCounters {
    /// Cross-shard transactions decided here.
    pub cross_decided: u64,
    /// Recovery requests sent for stalled (or recovered) transactions.
    pub recover_sent: u64,
    /// Recovery requests answered from a kept outcome whose answer had left the table.
    pub recover_kept: u64,
    /// `Acknowledged` answers received for a transaction still undecided here.
    pub recover_acknowledged: u64,
    /// Recovery requests about transactions answered and acknowledged whose outcome is not
    /// kept.
    pub recover_forgotten: u64,
    /// Other shards' proposals used on their fast path's accepts before their proof.
    pub fast_proposals: u64,
    /// Answers worked out on another shard's proposal before it was usable (early answers).
    pub early_answers: u64,
}

impl AgreementCounters {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &AgreementCounters) {
        let AgreementCounters {
            cross_decided,
            recover_sent,
            recover_kept,
            recover_acknowledged,
            recover_forgotten,
            fast_proposals,
            early_answers,
        } = *other;
        self.cross_decided = self.cross_decided.saturating_add(cross_decided);
        self.recover_sent = self.recover_sent.saturating_add(recover_sent);
        self.recover_kept = self.recover_kept.saturating_add(recover_kept);
        self.recover_acknowledged = self.recover_acknowledged.saturating_add(recover_acknowledged);
        self.recover_forgotten = self.recover_forgotten.saturating_add(recover_forgotten);
        self.fast_proposals = self.fast_proposals.saturating_add(fast_proposals);
        self.early_answers = self.early_answers.saturating_add(early_answers);
    }
}

/// What a follower's fast-path accept rule (F0, DESIGN.md "The fast path") decided about the
/// dispatches offered to it, counted for the life of the replica (the servers'
/// `luigi_fast_accepts_total`): where the fast path is lost under load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastAcceptCounts {
    /// Accepted (an accept record written, a `FastAccept` sent).
    pub accepted: u64,
    /// Refused: it arrived after its timestamp.
    pub late: u64,
    /// Refused: a conflicting transaction this follower knows comes after it.
    pub overtaken: u64,
    /// Refused: the undecided accepts reached their bound.
    pub full: u64,
    /// Refused: its predecessors are too many to hash.
    pub tangled: u64,
}

impl FastAcceptCounts {
    /// The counts by outcome label, in a fixed order.
    pub fn labeled(&self) -> [(&'static str, u64); 5] {
        [
            ("accepted", self.accepted),
            ("late", self.late),
            ("overtaken", self.overtaken),
            ("full", self.full),
            ("tangled", self.tangled),
        ]
    }
}

/// What a replica with a fast path offers the node beyond [`ShardReplica`]: the accepts of a
/// new leader's recovery round and the accept log's records (DESIGN.md, the fast path).
pub trait FastPathReplica {
    /// The term whose fast-path recovery round this replica, running for it or elected and
    /// not serving yet, waits for: the shell asks the group for their undecided accepts
    /// ([`FastPathReplica::accepts_of`]) and hands the answers to
    /// [`FastPathReplica::accepts_from`].
    fn accepts_wanted(&self, log: &RaftLog) -> Option<u64>;

    /// What its accept rule decided so far, while it followed (see [`FastAcceptCounts`]).
    fn accept_counts(&self) -> FastAcceptCounts;

    /// Every fast-path accept record this replica still needs, encoded: its undecided
    /// accepts and its leader state's votes (what a rewrite of the accept log keeps).
    fn accepts_live(&self) -> Vec<Vec<u8>>;

    /// This replica's undecided fast-path accept records, encoded: the answer to a new
    /// leader's question of `term`, or `None` while this replica's own term is older (it
    /// answers when asked again).
    fn accepts_of(&self, log: &RaftLog, term: u64) -> Option<Vec<Vec<u8>>>;

    /// `replica`'s undecided accepts, asked about in `term`.
    ///
    /// # Errors
    /// A record that does not decode (the answer is dropped).
    fn accepts_from(&mut self, log: &RaftLog, replica: u32, term: u64, records: &[Vec<u8>]) -> Result<(), String>;

    /// The fast-path accept records its disk held at restart (see [`luigi_raft::accepts`]), given
    /// before the first turn so that the replayed log decides them again.
    ///
    /// # Errors
    /// A record that does not decode (a damaged accept log).
    fn restore_accepts(&mut self, records: &[(u64, Vec<u8>)]) -> Result<(), String>;
}

/// What a [`ReplicaFactory`] builds a replica from.
pub struct ReplicaSetup {
    /// The shard.
    pub shard: ShardId,
    /// The replica's index in its group, from 0 (its Raft id is this + 1).
    pub replica: u32,
    /// Shards in the cluster.
    pub shards: u32,
    /// How long a protocol's round may take before its recovery starts: the node's leader
    /// recovery timeout (derived from the one-way-delay estimate). Luigi's factory takes its
    /// own configuration from its node; a baseline derives its round timeouts from this.
    pub round_timeout_us: u64,
    /// The stored procedures.
    pub registry: Registry,
    /// The shard's state before its log's first entry.
    pub initial: InitialStore,
}

/// Why a [`ReplicaFactory`] could not build a replica.
#[derive(Debug)]
pub struct BuildError {
    /// What it was doing (e.g. "opening the log", "loading its snapshot").
    pub what: &'static str,
    /// The error.
    pub source: RaftError,
}

/// Builds one protocol's replicas: puts the protocol's state machine over the Raft log its
/// node opened (and owns). A node's configuration names one
/// (`luigi_node::NodeConfig::protocol`).
pub trait ReplicaFactory: Send + Sync {
    /// The protocol's name (for logs).
    fn name(&self) -> &'static str;

    /// Whether the protocol's coordinators and leaders use the replicas' progress reports
    /// (Luigi's rule 14); the node sends them only then.
    fn progress_reports(&self) -> bool {
        false
    }

    /// What a peer message of this protocol carries, as plain data: the simulator's fault
    /// injection asks it where to kill a leader (a first proposal, a decision) and which
    /// transactions a batch admits. A message that does not decode tells nothing.
    fn peer_facts(&self, msg: &PeerMsg) -> PeerFacts;

    /// A replica from `setup`, starting as a follower over `log` (its node's, opened from the
    /// recovered state): from the log's snapshot, if it has one.
    ///
    /// # Errors
    /// The log's snapshot does not load.
    fn build(&self, setup: ReplicaSetup, log: &RaftLog) -> Result<Box<dyn ShardReplica>, BuildError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_sum_every_leader_states_counters_by_outcome_and_path() {
        let count = |outcome, path, count| TxnCount { outcome, path, count };
        let first = LeaderFigures {
            txns: vec![count("committed", "any", 10), count("rejected", "any", 1)],
            agreement: Some(AgreementCounters { cross_decided: 4, recover_sent: 1, ..AgreementCounters::default() }),
            held_us: Some(700),
            ..LeaderFigures::default()
        };
        let second = LeaderFigures {
            txns: vec![count("committed", "any", 3), count("expired", "any", 2)],
            agreement: Some(AgreementCounters { cross_decided: 1, ..AgreementCounters::default() }),
            held_us: Some(u64::MAX),
            ..LeaderFigures::default()
        };
        let (mut first, mut second) = (first, second);
        first.procedure_commits.committed("NewOrder");
        second.procedure_commits.committed("NewOrder");
        second.procedure_commits.committed("Payment");
        let mut totals = LeaderTotals::default();
        totals.add(&first);
        totals.add(&second);
        assert_eq!(totals.procedure_commits.get("NewOrder"), 2);
        assert_eq!(totals.procedure_commits.get("Payment"), 1);
        assert_eq!(totals.txn("committed", "any"), Some(13));
        assert_eq!(totals.txn("rejected", "any"), Some(1));
        assert_eq!(totals.txn("expired", "any"), Some(2));
        assert_eq!(totals.txn("aborted", "any"), None);
        let agreement = totals.agreement.unwrap();
        assert_eq!((agreement.cross_decided, agreement.recover_sent), (5, 1));
        assert_eq!(totals.held_us, Some(u64::MAX), "saturating, never wrapping back");
        let baseline = LeaderFigures { txns: first.txns.clone(), ..LeaderFigures::default() };
        let mut totals = LeaderTotals::default();
        totals.add(&baseline);
        assert_eq!((totals.agreement, totals.held_us), (None, None), "what a protocol does not keep stays absent");
    }
}
