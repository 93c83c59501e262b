//! The protocol's side of the role machine: what a protocol supplies ([`ReplicaProtocol`]:
//! its record type, its follower and leader cores, when it may serve and how it takes
//! office) and the policies it states where protocols differ.

use std::sync::Arc;

use luigi_store::Store;
use luigi_txn::log::LogEntry;
use luigi_txn::msg::{ClientMsg, ReplicaStatus, StalledTxnInfo};
use luigi_txn::peer::{PeerVocabulary, ReplicaOutput};
use luigi_txn::procedure::Registry;
use luigi_txn::progress::LogPos;
use luigi_txn::snapshot::ScannedRange;
use luigi_txn::types::{ClientId, KeySet, ShardId, TimeUs, Timestamp, Txn, TxnId};

use super::RoleMachine;
#[cfg(doc)]
use crate::replica_api::SnapshotDecoder;
use crate::replica_api::{FastPathReplica, InitialStore, LeaderFigures};
use luigi_raft::{RaftError, RaftLog, Record};

/// What a replica serves snapshot reads from (DESIGN.md rule 23): its store, its procedures,
/// and its safe time, below which nothing can still commit at this replica.
pub struct SnapshotView<'a> {
    /// The store (with the versions it keeps).
    pub store: &'a Store,
    /// The procedures.
    pub registry: &'a Registry,
    /// Every transaction at or below it is executed in `store`, and no other can ever be.
    pub safe_ts: Timestamp,
    /// A serving leader's way to serve a read above `safe_ts` (rule 23 (e)); `None` at a
    /// follower.
    pub ahead: Option<ServeAhead<'a>>,
}

/// What lets a leader serve a read above its safe time (DESIGN.md rule 23 (e)): everything
/// at or below `executed_ts` is executed in its store and nothing else can ever commit at or
/// below it; the answer names the log position the writes it executed to the read's keys
/// rest on while that is not known committed, and the client counts it only once proven.
pub struct ServeAhead<'a> {
    /// Every transaction at or below it is executed in the store, and no other can ever be
    /// admitted at or below it on this shard (the leader's watermark, below any undecided
    /// move).
    pub executed_ts: Timestamp,
    /// Where its executed writes rest in its log.
    pub writes: &'a dyn WritePositions,
}

/// A leader's knowledge of where its executed writes rest in its log (rule 14).
pub trait WritePositions {
    /// The log position every write this replica executed to any of `keys`, or that could
    /// fall in one of the `scanned` ranges (which the keys name only by prefix), rests on,
    /// while it is not known committed (`None`: they all rest on committed records).
    fn rests_on(&self, keys: &KeySet, scanned: &[ScannedRange]) -> Option<LogPos>;
}

impl SnapshotView<'_> {
    /// The highest snapshot a read may be served at now: the safe time, or, at a leader, its
    /// executed timestamp if higher (rule 23 (e)).
    pub fn serves_up_to(&self) -> Timestamp {
        match &self.ahead {
            Some(a) => self.safe_ts.max(a.executed_ts),
            None => self.safe_ts,
        }
    }

    /// The log position a read at `ts` of `keys` (having scanned the `scanned` ranges) served
    /// now rests on, while not known committed: only a leader's read above its safe time can
    /// rest on one.
    pub fn position_for(&self, ts: Timestamp, keys: &KeySet, scanned: &[ScannedRange]) -> Option<LogPos> {
        match &self.ahead {
            Some(a) if ts > self.safe_ts => a.writes.rests_on(keys, scanned),
            Some(_) | None => None,
        }
    }
}

/// A follower state taken at one moment ([`FollowerCore::fork_image`]): run, it serializes
/// that state as a snapshot image.
pub type ImageFork = Box<dyn FnOnce() -> Vec<u8> + Send>;

/// A protocol's follower state: what a replica holds while it does not serve, built from a
/// snapshot image or an initial store ([`FollowerImages`]) and the committed records after it.
pub trait FollowerCore: Send + Sized + 'static {
    /// The log's record type.
    type Record: Record + Send + 'static;

    /// Applies one committed record.
    fn apply(&mut self, entry: &LogEntry<Self::Record>);

    /// What applying executed since the last call, in execution order.
    fn take_executed(&mut self) -> Vec<(TxnId, Timestamp)>;

    /// The index of the last record applied.
    fn applied_index(&self) -> u64;

    /// The state serialized as a snapshot image.
    fn image(&self) -> Vec<u8>;

    /// The state as it is now, to serialize off the event loop into exactly the bytes
    /// [`FollowerCore::image`] gives now: its store a fork sharing memory with the live one
    /// (`Store::fork`), so taking it costs the event loop a copy of the rest of the state,
    /// not of the store (DESIGN.md rule 11).
    fn fork_image(&self) -> ImageFork;

    /// The watermark a follower's pong promises.
    fn pong_watermark(&self) -> Timestamp;

    /// The store as this state holds it.
    fn store(&self) -> &Store;

    /// Fills in a status report's state machine part.
    fn status(&self, status: &mut ReplicaStatus);

    /// What the state promises between any two calls.
    ///
    /// # Errors
    /// The broken invariant.
    fn check_invariants(&self) -> Result<(), String>;

    /// Its counters for the replica's stats line, if it keeps any.
    fn stats_line(&self) -> Option<String>;

    /// What it serves snapshot reads from; `None`: the protocol serves none.
    fn snapshot_view(&self) -> Option<SnapshotView<'_>> {
        None
    }
}

/// How a protocol's follower states are made: fresh over a store, or from a snapshot image.
/// Shared with snapshot jobs and decoders that run off the event loop, hence `Clone + Send +
/// Sync`.
pub trait FollowerImages: Clone + Send + Sync + 'static {
    /// The follower state it makes.
    type Follower: FollowerCore;

    /// The shard's state before its log's first entry.
    fn initial(&self) -> &InitialStore;

    /// A follower state over `store`, nothing applied.
    fn fresh(&self, store: Store) -> Self::Follower;

    /// The follower state a snapshot image holds.
    ///
    /// # Errors
    /// The image does not decode (or is another shard's).
    fn load(&self, data: &[u8]) -> Result<Self::Follower, String>;

    /// Checks a follower's offered image at `index` (see [`SnapshotDecoder::check`]).
    ///
    /// # Errors
    /// Why it is not a valid image of this shard at `index`.
    fn check(&self, index: u64, data: &[u8]) -> Result<(), String>;
}

/// A protocol's shard leader. It holds no log: the role machine lends it the Raft log in every
/// call that may propose or take committed records.
pub trait LeaderCore: Send + Sized + 'static {
    /// The log's record type.
    type Record: Record + Send + 'static;
    /// Its peer batches: typed here, encoded for the node by the role machine
    /// ([`ReplicaOutput::encoded`]) and decoded from the node's [`luigi_txn::peer::PeerMsg`].
    type Batch: PeerVocabulary + Send + 'static;

    /// A client's message.
    fn on_client(
        &mut self,
        log: &mut RaftLog,
        now: TimeUs,
        client: ClientId,
        msg: ClientMsg,
        out: &mut Vec<ReplicaOutput<Self::Batch>>,
    );
    /// Items from another shard's leader.
    fn on_peer(
        &mut self,
        log: &mut RaftLog,
        now: TimeUs,
        batch: Self::Batch,
        out: &mut Vec<ReplicaOutput<Self::Batch>>,
    );
    /// Another shard has a new leader.
    fn peer_leader_changed(&mut self, shard: ShardId);
    /// Its timed work.
    fn tick(&mut self, log: &mut RaftLog, now: TimeUs, out: &mut Vec<ReplicaOutput<Self::Batch>>);
    /// When [`LeaderCore::tick`] next has work.
    fn next_deadline(&self) -> Option<TimeUs>;
    /// Its store.
    fn store(&self) -> &Store;
    /// Fills in a status report's state machine part (`serving` included).
    fn status(&self, now: TimeUs, status: &mut ReplicaStatus);
    /// What it promises between any two calls.
    ///
    /// # Errors
    /// The broken invariant.
    fn check_invariants(&self) -> Result<(), String>;
    /// Its counters for the replica's stats line.
    fn stats_line(&self) -> String;
    /// Its figures as plain data (see [`LeaderFigures`]).
    fn figures(&self) -> LeaderFigures;
    /// Its transactions pending longer than a normal agreement takes, oldest first (see
    /// [`crate::ShardReplica::stalled`]); none if the protocol does not track them.
    fn stalled(&self, _now: TimeUs) -> Vec<StalledTxnInfo> {
        Vec::new()
    }
    /// What it serves snapshot reads from; `None`: the protocol serves none.
    fn snapshot_view(&self) -> Option<SnapshotView<'_>> {
        None
    }
}

/// What a follower does with a client's dispatch (it does not serve).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowerDispatch {
    /// Answers `NotLeader` with the leader its log knows of (itself, elected and not
    /// serving yet, included) or none.
    AnswerNotLeader,
    /// Holds it while no other replica is known to lead (an election, or this replica won
    /// one and does not serve yet), bounded ([`crate::waiting::Waiting`]), and hands it to its own leader
    /// state once it serves; answers `NotLeader` naming the other leader once one is known.
    HoldWhileNoLeader,
}

/// Whether a follower state rebuilt by replaying the log (a demoted leader's) reports the
/// executions of that replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayedExecutions {
    /// They are reported at the next [`RoleMachine::take_executed`].
    Reported,
    /// They are forgotten.
    Forgotten,
}

/// The outputs of protocol `P`'s leader core, with its typed batches.
pub type OutputOf<P> = ReplicaOutput<<<P as ReplicaProtocol>::Leader as LeaderCore>::Batch>;

/// One protocol's part of a replica: its cores, its record type, when it may serve, and its
/// policies. [`RoleMachine`] runs everything else.
pub trait ReplicaProtocol: Send + Sized + 'static {
    /// The log's record type.
    type Record: Record + Send + 'static;
    /// The follower state.
    type Follower: FollowerCore<Record = Self::Record>;
    /// The leader state.
    type Leader: LeaderCore<Record = Self::Record>;
    /// How follower states are made.
    type Images: FollowerImages<Follower = Self::Follower>;
    /// What [`ReplicaProtocol::may_serve`] hands to [`ReplicaProtocol::take_office`].
    type Handover;

    /// What a follower does with a dispatch.
    const FOLLOWER_DISPATCH: FollowerDispatch;
    /// Whether a rebuilt follower reports its replay's executions.
    const REPLAYED_EXECUTIONS: ReplayedExecutions;

    /// The shard.
    fn shard(&self) -> ShardId;

    /// The bounds of the snapshot reads waiting at this replica (DESIGN.md rule 23), and the
    /// simulator's mutation.
    fn snapshot_reads(&self) -> crate::snapshot_reads::SnapshotReadConfig {
        crate::snapshot_reads::SnapshotReadConfig::default()
    }

    /// How its follower states are made.
    fn images(&self) -> &Self::Images;

    /// A follower applied a committed record (after the follower state did).
    fn on_committed(&mut self, _entry: &LogEntry<Self::Record>) {}

    /// Whether a follower whose log may lead takes office now (called at every follower
    /// turn, after applying): what to take office with, or `None` (not yet, or its log does
    /// not lead).
    ///
    /// # Errors
    /// The log's tail does not decode.
    fn may_serve(
        &mut self,
        follower: &Self::Follower,
        log: &mut RaftLog,
        now: TimeUs,
    ) -> Result<Option<Self::Handover>, RaftError>;

    /// The leader state of a follower that takes office at `now`, over `log`.
    fn take_office(
        &mut self,
        follower: Self::Follower,
        log: &mut RaftLog,
        now: TimeUs,
        handover: Self::Handover,
    ) -> Self::Leader;

    /// A leader's turn while its `log` still leads, before its tick.
    fn leading(&mut self, _leader: &Self::Leader, _log: &RaftLog) {}

    /// `leader` stopped leading; `replayed` is what rebuilding its follower state replayed
    /// (`None`: the rebuild failed).
    fn stepped_down(&mut self, _leader: &Self::Leader, _replayed: Option<&[LogEntry<Self::Record>]>) {}

    /// A follower's fast-path answer to a dispatch: whether it took it (then nothing else
    /// answers it). Protocols without a fast path take none.
    #[allow(clippy::too_many_arguments)]
    fn follower_offer(
        &mut self,
        _log: &RaftLog,
        _now: TimeUs,
        _client: ClientId,
        _txn: &Arc<Txn>,
        _fast: bool,
        _out: &mut Vec<OutputOf<Self>>,
    ) -> bool {
        false
    }

    /// The fast-path extension of `machine`, if the protocol has one.
    fn fast_path(_machine: &RoleMachine<Self>) -> Option<&dyn FastPathReplica> {
        None
    }

    /// As [`ReplicaProtocol::fast_path`], mutable.
    fn fast_path_mut(_machine: &mut RoleMachine<Self>) -> Option<&mut dyn FastPathReplica> {
        None
    }
}
