//! What a [`RaftLog`] is built from and hands back for a rebuild: its config, the state
//! recovered from disk, snapshots and replays.

use bytes::Bytes;
use luigi_txn::log::LogEntry;
use raft::eraftpb::{ConfState, Entry, Snapshot};

#[cfg(doc)]
use super::RaftLog;
use super::{decode_committed, is_record, RaftError, Record};
use crate::codec::{HardState, PersistEntry};
#[cfg(doc)]
use luigi_txn::log::{LogError, ReplicatedLog};

/// Tuning and identity of one replica. Build with [`RaftConfig::new`] and adjust fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftConfig {
    /// This replica's raft id (non-zero, one of `voters`). Ids are 1..=n by convention.
    pub id: u64,
    /// Every voting member of the group, this replica included. Fixed: membership changes are
    /// not supported (conf-change entries are ignored).
    pub voters: Vec<u64>,
    /// Seeds the election timeouts (see [`RaftLog`]: "Determinism"). Give every replica of a
    /// group the same seed: the per-term permutation keeps their timeouts apart only then.
    pub seed: u64,
    /// Ticks between a leader's heartbeats. Default 1.
    pub heartbeat_ticks: usize,
    /// Base election timeout in ticks (> `heartbeat_ticks`): a follower that hears nothing from
    /// a leader for a timeout drawn from `[election_ticks, 2 * election_ticks)` (see
    /// [`RaftLog`]: "Determinism") starts an election; a leader checks at the end of every
    /// `election_ticks` whether a quorum was active during it and steps down if not
    /// (check-quorum), i.e. 1 to 2 `election_ticks` after it lost its quorum. Default 10.
    pub election_ticks: usize,
    /// Ticks between the election timeouts of a group's replicas in one term. 1 (the
    /// default): each replica's timeout is a distinct draw from the whole range. More: the
    /// replicas' timeouts are spaced this far apart (within the range), so that a follower
    /// whose election is under way (a pre-vote round trip, then its vote requests' one-way
    /// trip) is not raced by a second one: a split vote costs a whole timeout, over a second
    /// on wide-area links. Set to cover 3 one-way delays (`luigi_node::Tuning`).
    pub election_spacing_ticks: usize,
    /// Append messages a leader keeps in flight per follower (pipelining). Default 256.
    pub max_inflight_msgs: usize,
    /// Byte budget of one append message's entries (at least one entry is always sent).
    /// Default 1 MiB.
    pub max_size_per_msg: u64,
    /// Bound on records proposed and not yet taken with [`ReplicatedLog::take_committed`]
    /// (uncommitted plus committed-but-untaken); past it `propose` returns
    /// [`LogError::Backlogged`]. Default 65 536.
    pub max_pending: usize,
    /// If true, a leader does not send an extra round of append messages just to announce a
    /// new commit index; followers learn it from the next append or heartbeat. Halves the
    /// messages per committed batch under load, delays followers' applies by up to a
    /// heartbeat when idle. Default false.
    pub skip_bcast_commit: bool,
    /// If true, snapshots travel outside Raft's messages: a leader's `MsgSnapshot` leaves
    /// with its metadata only, and its data in [`crate::OutMessage::snapshot`] for the shell
    /// to transfer (in chunks, see `luigi-node`'s snapshot transfers), which then reports the
    /// outcome with [`RaftLog::report_snapshot`]; the receiver hands the reassembled data in
    /// with [`RaftLog::step_snapshot`], and [`RaftLog::step_bytes`] refuses a `MsgSnapshot`.
    /// If false (the default), a snapshot travels whole inside its message, which is
    /// reported delivered at once. Every replica of a group must agree.
    pub external_snapshots: bool,
}

impl RaftConfig {
    /// Defaults for replica `id` of the group `voters`.
    pub fn new(id: u64, voters: impl Into<Vec<u64>>, seed: u64) -> Self {
        RaftConfig {
            id,
            voters: voters.into(),
            seed,
            heartbeat_ticks: 1,
            election_ticks: 10,
            election_spacing_ticks: 1,
            max_inflight_msgs: 256,
            max_size_per_msg: 1 << 20,
            max_pending: 1 << 16,
            skip_bcast_commit: false,
            external_snapshots: false,
        }
    }
}

/// A snapshot of the state machine: everything up to and including `index`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotData {
    /// Last log index the snapshot covers.
    pub index: u64,
    /// Term of that entry.
    pub term: u64,
    /// Group membership at that point.
    pub voters: Vec<u64>,
    /// The application's state bytes (opaque here). Shared, not copied, between the log's
    /// memory, the disk and the transfers to other replicas: a store's image can be large.
    pub data: Bytes,
}

impl SnapshotData {
    pub(super) fn from_raft(s: &Snapshot) -> Self {
        let meta = s.get_metadata();
        SnapshotData {
            index: meta.index,
            term: meta.term,
            voters: meta.get_conf_state().voters.clone(),
            data: s.data.clone(),
        }
    }

    pub(super) fn to_raft(&self) -> Snapshot {
        let mut snap = Snapshot { data: self.data.clone(), ..Default::default() };
        let meta = snap.mut_metadata();
        meta.index = self.index;
        meta.term = self.term;
        meta.set_conf_state(ConfState { voters: self.voters.clone(), ..Default::default() });
        snap
    }
}

/// What a replica found on its disk at restart, as [`crate::disk::DiskStorage::open`] returns
/// it; [`RaftLog::new`] takes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveredState {
    /// The last persisted hard state (all zero if none was ever written).
    pub hard_state: HardState,
    /// The latest snapshot, if any.
    pub snapshot: Option<SnapshotData>,
    /// The log after the snapshot: consecutive indexes from `snapshot index + 1`.
    pub entries: Vec<PersistEntry>,
    /// Entries up to this index are not handed back again by
    /// [`ReplicatedLog::take_committed`]. 0 (or anything at or below the snapshot) means: hand
    /// back every committed entry after the snapshot, which is what a replica that rebuilds its
    /// state from snapshot + log wants. Clamped to the recovered commit index.
    pub applied: u64,
    /// The replica is being rebuilt from its peers (`--rejoin`): it lost its log and its vote,
    /// so it must not vote or campaign before it has caught up with a leader (see
    /// [`RaftLog`], "Rejoining").
    pub rejoining: bool,
}

/// A replica's state-machine input up to [`RaftLog::handed_out`], as [`RaftLog::replay`]
/// returns it: the latest snapshot and the committed entries after it. Owned (`Send`), so
/// the decoding and replaying can run on another thread.
#[derive(Clone, Debug)]
pub struct Replay {
    pub(super) snapshot: Option<Snapshot>,
    pub(super) entries: Vec<Entry>,
}

impl Replay {
    /// The snapshot's state-machine data (`None`: the log was never compacted).
    pub fn snapshot_data(&self) -> Option<&[u8]> {
        self.snapshot.as_ref().map(|s| &s.data[..])
    }

    /// The index of the last record in the replay (Raft's own entries, which change no state,
    /// skipped): the log index at which the replayed state is a follower's (its applied
    /// index). `None` if no record follows the snapshot.
    pub fn last_record_index(&self) -> Option<u64> {
        self.entries.iter().rev().find(|e| is_record(e)).map(|e| e.index)
    }

    /// The committed records after the snapshot, in log order (Raft's own entries skipped),
    /// decoded as the replaying protocol's record type `R` (a replay holds bytes, as the log
    /// does; see [`RaftLog`]).
    ///
    /// # Errors
    /// [`RaftError::BadEntry`] if an entry does not decode.
    pub fn records<R: Record>(&self) -> Result<Vec<LogEntry<R>>, RaftError> {
        self.records_one_by_one().collect()
    }

    /// [`Replay::records`], decoded one at a time as they are taken: a replay that applies
    /// each and drops it never holds a whole snapshot interval's records decoded at once
    /// (their memory, fresh pages the kernel zeroes, cost a snapshot more than decoding did).
    pub fn records_one_by_one<R: Record>(&self) -> impl Iterator<Item = Result<LogEntry<R>, RaftError>> + '_ {
        self.entries.iter().filter_map(|e| decode_committed(e).transpose())
    }
}
