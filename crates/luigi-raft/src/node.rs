//! [`RaftLog`]: one replica of a shard's replica group, sans I/O.

use std::collections::{BTreeSet, VecDeque};

use luigi_proto::log::{LogEntry, LogError, LogIndex, LogRecord, ReplicatedLog};
use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType, Snapshot};
use raft::{GetEntriesContext, RawNode, SnapshotStatus, StateRole};

use crate::codec::{decode_entry, encode_entry, encode_message, DecodeError, HardState, PersistEntry};
use crate::rng::SplitMix64;
use crate::store::LogStore;

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
            max_inflight_msgs: 256,
            max_size_per_msg: 1 << 20,
            max_pending: 1 << 16,
            skip_bcast_commit: false,
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
    /// The application's state bytes (opaque here).
    pub data: Vec<u8>,
}

impl SnapshotData {
    fn from_raft(s: &Snapshot) -> Self {
        let meta = s.get_metadata();
        SnapshotData {
            index: meta.index,
            term: meta.term,
            voters: meta.get_conf_state().voters.clone(),
            data: s.data.to_vec(),
        }
    }

    fn to_raft(&self) -> Snapshot {
        let mut snap = Snapshot { data: self.data.clone().into(), ..Default::default() };
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
    snapshot: Option<Snapshot>,
    entries: Vec<Entry>,
}

impl Replay {
    /// The snapshot's state-machine data (`None`: the log was never compacted).
    pub fn snapshot_data(&self) -> Option<&[u8]> {
        self.snapshot.as_ref().map(|s| &s.data[..])
    }

    /// The committed records after the snapshot, in log order (Raft's own entries skipped).
    ///
    /// # Errors
    /// [`RaftError::BadEntry`] if an entry does not decode.
    pub fn records(&self) -> Result<Vec<LogEntry>, RaftError> {
        let mut out = Vec::with_capacity(self.entries.len());
        for e in &self.entries {
            if let Some(entry) = decode_committed(e)? {
                out.push(entry);
            }
        }
        Ok(out)
    }
}

/// Role of a replica in its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Follows a leader (or waits for one).
    Follower,
    /// Polling peers before a real election (pre-vote), without bumping its term.
    PreCandidate,
    /// Running an election.
    Candidate,
    /// The leader: the only replica that accepts proposals.
    Leader,
}

impl From<StateRole> for Role {
    fn from(s: StateRole) -> Self {
        match s {
            StateRole::Follower => Role::Follower,
            StateRole::PreCandidate => Role::PreCandidate,
            StateRole::Candidate => Role::Candidate,
            StateRole::Leader => Role::Leader,
        }
    }
}

/// A raft message to send: `bytes` (made by [`crate::encode_message`]) go to replica `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutMessage {
    /// Destination replica id.
    pub to: u64,
    /// The raft message type (for metrics and tests; the bytes carry it too).
    pub msg_type: MessageType,
    /// Encoded message; the receiver passes it to [`RaftLog::step_bytes`].
    pub bytes: Vec<u8>,
}

/// The role and known leader after a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleChange {
    /// New role.
    pub role: Role,
    /// Known leader, if any.
    pub leader_id: Option<u64>,
}

/// The work a [`RaftLog`] hands its shell: what to persist, what to send, when. Handle it in
/// this order (see the crate docs):
///
/// 1. send `messages` (allowed before persisting: the leader's appends go out while it writes
///    its own copy, Raft thesis 10.2.1);
/// 2. persist, in this order: `snapshot` (then restore the state machine from it), `entries`
///    (first removing every stored entry with index `>= entries[0].index`: an overwritten
///    uncommitted suffix), `hard_state`; make it durable (fsync) if `must_sync`;
/// 3. send `persisted_messages` (votes and acknowledgements promise what step 2 wrote);
/// 4. call [`RaftLog::advance`] with `number`;
/// 5. take committed records with [`ReplicatedLog::take_committed`] and apply them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// Identifies this ready for [`RaftLog::advance`].
    pub number: u64,
    /// Role or leader changed.
    pub role_change: Option<RoleChange>,
    /// A snapshot from the leader to persist; it replaces the whole log and the state machine
    /// must be restored from `data` before applying anything [`ReplicatedLog::take_committed`]
    /// returns afterwards.
    pub snapshot: Option<SnapshotData>,
    /// Entries to append, replacing any stored suffix from `entries[0].index` on.
    pub entries: Vec<PersistEntry>,
    /// Hard state to persist, if it changed.
    pub hard_state: Option<HardState>,
    /// False iff nothing here needs an fsync: no entries, no snapshot, and at most the commit
    /// index of the hard state changed.
    pub must_sync: bool,
    /// Send now, before or while persisting.
    pub messages: Vec<OutMessage>,
    /// Send only after everything above is durable.
    pub persisted_messages: Vec<OutMessage>,
    /// How many records became available to [`ReplicatedLog::take_committed`].
    pub committed: usize,
    /// A rejoining replica caught up: `hard_state` records its vote in the current term as
    /// given to itself (see [`RaftLog`], "Rejoining"); once that is durable, the storage
    /// forgets that the replica was rejoining.
    pub rejoined: bool,
}

impl Ready {
    /// Whether there is anything to write.
    pub fn has_persist_work(&self) -> bool {
        self.snapshot.is_some() || !self.entries.is_empty() || self.hard_state.is_some()
    }
}

/// Errors of [`RaftLog`].
#[derive(Debug, thiserror::Error)]
pub enum RaftError {
    /// The configuration is invalid.
    #[error("invalid raft config: {0}")]
    Config(String),
    /// The recovered state is inconsistent (names what is wrong).
    #[error("inconsistent recovered raft state: {0}")]
    Recovered(String),
    /// Incoming bytes are not a raft message.
    #[error("undecodable raft message: {0}")]
    Decode(#[from] DecodeError),
    /// A message addressed to another replica.
    #[error("raft message for replica {to} delivered to replica {id}")]
    Misrouted {
        /// The message's destination.
        to: u64,
        /// This replica.
        id: u64,
    },
    /// A message from an id that is not a voter of this group.
    #[error("raft message from {0}, which is not a voter of this group")]
    UnknownPeer(u64),
    /// A message type peers may not send (proposals enter only through `propose`).
    #[error("raft message type {0:?} is not accepted from peers")]
    Forbidden(MessageType),
    /// raft-rs refused a call.
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    /// A committed entry does not decode as a Luigi log record. Fatal for this replica: the
    /// log was written by an incompatible build.
    #[error("committed entry {index} is not a Luigi log record: {reason}")]
    BadEntry {
        /// Its index.
        index: u64,
        /// The decoder's complaint.
        reason: String,
    },
    /// A request that does not fit the log (e.g. compacting past what was applied).
    #[error("{0}")]
    Invalid(String),
    /// The leader says entries are committed on this replica that its log does not hold:
    /// it acknowledged them once and lost them since (a truncated log, deleted files). Fatal:
    /// every later call fails the same way; the replica must be rebuilt from its peers.
    #[error(
        "this replica lost acknowledged log entries: the leader (replica {leader}, term {term}) counts \
         entries up to index {commit} as held here, but the log ends at index {last_index}"
    )]
    LostEntries {
        /// The leader that said so.
        leader: u64,
        /// Its term.
        term: u64,
        /// The commit index it sent, at most what this replica acknowledged to it.
        commit: u64,
        /// This replica's last log index.
        last_index: u64,
    },
}

/// One replica of a shard's replicated log: Raft (Multi-Paxos with a strong leader) via raft-rs
/// 0.7's `RawNode`, sans I/O: no threads, sockets, clocks or files. The shell calls
/// [`RaftLog::tick`] on a timer, [`RaftLog::step_bytes`] for every message received, and then
/// drains [`RaftLog::ready`] (persist, send, [`RaftLog::advance`]); the shard leader (or a
/// follower's replayer) uses the [`ReplicatedLog`] seam.
///
/// Config: pre-vote and check-quorum on, pipelined (`max_inflight_msgs`) and batched
/// (`batch_append`, `max_size_per_msg`) appends, async-ready persistence (raft-rs's
/// `advance_append_async` + `on_persist_ready`), so `tick`, `step` and `propose` are allowed
/// at any time, even while a [`Ready`] is being persisted.
///
/// # Determinism
///
/// raft-rs 0.7 draws each randomized election timeout with `rand::thread_rng()` in
/// `Raft::reset_randomized_election_timeout`, uniform in `[min_election_tick,
/// max_election_tick)`, and calls it only from `Raft::reset`, which runs exactly when the term
/// or the role changes (`become_follower`, `become_candidate`, `become_leader`). After every
/// call into raft-rs, `RaftLog` compares `(term, role)` with what it saw last and, on a
/// change, overwrites the timeout with `Raft::set_randomized_election_timeout`. raft-rs reads
/// the value only in `tick`, so its own draw is never used, and a replica's behaviour is a
/// function of its config, its recovered state and the sequence of calls.
///
/// The value is `election_ticks + offset`, where `offset` is this replica's entry in a
/// permutation of `0..election_ticks` drawn (SplitMix64, Fisher-Yates) from `(seed, term)`:
/// random per term like Raft's own draw, but replicas of the group (which share the seed) that
/// are in the same term never time out in the same tick, which is what made independent draws
/// end in split votes (two followers of a dead leader both pass pre-vote and split the real
/// vote: about one failover in ten with 10 distinct timeouts). A single-value range
/// `[t, t + 1)` per replica (`min_election_tick = t`, `max_election_tick = t + 1`) would also
/// be deterministic, but the same replica would then time out first in every term, even when
/// it cannot win.
///
/// # Lost entries
///
/// A leader's heartbeat carries `min(commit, what the follower acknowledged)`; raft-rs's
/// follower commits to it without a check and panics ("to_commit ... out of range") if its log
/// is shorter. That happens only if the follower lost entries it acknowledged (a truncated WAL,
/// deleted segments, a wiped directory). [`RaftLog::step`] checks the heartbeat before raft-rs
/// sees it and returns [`RaftError::LostEntries`] instead, from then on.
///
/// # Rejoining
///
/// A replica rebuilt from its peers ([`RecoveredState::rejoining`]) starts empty: it lost its
/// log and also its term and vote. Raft is safe only if no replica votes twice in a term, and
/// the rebuilt one cannot know in which terms it already voted. Until it has caught up once, it
/// therefore does not vote (vote and pre-vote requests, and a leader's `TimeoutNow`, are dropped
/// unanswered) and does not campaign (ticks do not reach raft-rs's election clock). It has
/// caught up when it follows a leader of term `T`, and holds durably and committed everything
/// that leader said in its appends of `T` was committed (its commit index when it sent them).
/// It then records in its hard state a vote for itself
/// in `T`, so it will never grant a vote in `T` (nor, as ever in Raft, in an earlier term),
/// even after another restart, and goes back to plain Raft ([`Ready::rejoined`]). It will vote
/// again only in terms above `T`. Remaining assumption: no term above `T` had started when the
/// replica lost its state (then it may have voted in it); rebuild a replica while the rest of
/// its group has a stable leader (`luigi status`), and a newer term cannot have been hidden
/// from the leader the rebuilt replica catches up with.
///
/// The leader still counts the rebuilt replica as holding what it acknowledged before (raft-rs
/// never lowers a follower's `matched`) and would keep sending from there, which the empty
/// replica rejects forever. So a rejoining replica marks its append rejections (message
/// context [`REJOIN_CONTEXT`]), and answers a heartbeat whose commit index is past its log with
/// such a rejection (committing nothing it does not hold). A leader that gets one whose hint is
/// below the replica's `matched` resets that replica's progress (`matched` 0, conservative for
/// commits; probe from the hint), which brings it up to date by log entries or by snapshot.
pub struct RaftLog {
    raw: RawNode<LogStore>,
    id: u64,
    voters: Vec<u64>,
    election_base: usize,
    seed: u64,
    /// Position of `id` among the sorted voters.
    slot: usize,
    /// `(term, role)` after the last call into raft-rs.
    observed: (u64, StateRole),
    /// Decoded committed records not yet taken.
    committed: VecDeque<LogEntry>,
    /// Highest index handed out as committed (records, no-ops and conf changes alike) or
    /// covered by an installed snapshot.
    handed_out: u64,
    max_pending: usize,
    /// While rebuilding from the peers (see "Rejoining").
    rejoin: Option<Rejoin>,
    /// The rejoin ended; the next ready says so.
    rejoin_done: bool,
    /// Fatal: the replica lost acknowledged entries (see "Lost entries"): leader, term,
    /// commit, last index.
    lost: Option<(u64, u64, u64, u64)>,
}

/// Message context a rejoining replica puts on its append rejections (see [`RaftLog`],
/// "Rejoining").
pub const REJOIN_CONTEXT: &[u8] = b"luigi-rejoin";

/// What a rejoining replica heard from the leader of the newest term it knows.
#[derive(Clone, Copy, Debug, Default)]
struct Rejoin {
    term: u64,
    /// Highest commit index the leader of `term` announced in its appends (its own commit
    /// index when it sent them) or covered by its snapshot. Heartbeats do not count: they
    /// carry at most what the leader believes this replica holds.
    leader_commit: u64,
    /// An append of `term` arrived (a snapshot alone does not show the leader's commit index).
    heard_append: bool,
}

impl Rejoin {
    fn note(&mut self, term: u64, commit: u64, append: bool) {
        if term > self.term {
            *self = Rejoin { term, ..Rejoin::default() };
        }
        if term == self.term {
            self.leader_commit = self.leader_commit.max(commit);
            self.heard_append |= append;
        }
    }
}

impl std::fmt::Debug for RaftLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftLog")
            .field("id", &self.id)
            .field("role", &self.role())
            .field("term", &self.term())
            .field("leader", &self.leader_id())
            .field("commit", &self.commit_index())
            .field("last_index", &self.last_index())
            .field("untaken", &self.committed.len())
            .field("rejoining", &self.rejoin.is_some())
            .finish()
    }
}

fn nonzero(id: u64) -> Option<u64> {
    (id != 0).then_some(id)
}

/// The election-timeout offset of the replica in `slot` for `term`: its entry in a permutation
/// of `0..base` drawn from `(seed, term)`, so replicas in the same term get distinct offsets
/// (while there are at most `base` of them).
fn timeout_offset(seed: u64, term: u64, slot: usize, base: usize) -> usize {
    let mut rng = SplitMix64::new(seed ^ term.wrapping_mul(0xd6e8_feb8_6659_fd93).rotate_left(17));
    let mut perm: Vec<usize> = (0..base).collect();
    for i in (1..base).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        perm.swap(i, j);
    }
    perm[slot % base]
}

impl RaftLog {
    /// A replica with the given config, fresh (`recovered: None`) or restarted from what its
    /// storage recovered. Every replica of a fresh group must start fresh with the same
    /// `voters`.
    ///
    /// # Errors
    /// [`RaftError::Config`] for an invalid config, [`RaftError::Recovered`] for a recovered
    /// state that cannot be right (gaps, commit past the log, foreign membership, ...).
    pub fn new(config: RaftConfig, recovered: Option<RecoveredState>) -> Result<RaftLog, RaftError> {
        let voters: BTreeSet<u64> = config.voters.iter().copied().collect();
        if voters.len() != config.voters.len() || voters.contains(&0) || voters.is_empty() {
            return Err(RaftError::Config(format!("voters {:?} must be distinct non-zero ids", config.voters)));
        }
        if !voters.contains(&config.id) {
            return Err(RaftError::Config(format!("id {} is not among the voters {:?}", config.id, config.voters)));
        }
        if config.heartbeat_ticks == 0 || config.election_ticks <= config.heartbeat_ticks {
            return Err(RaftError::Config(format!(
                "need 0 < heartbeat_ticks ({}) < election_ticks ({})",
                config.heartbeat_ticks, config.election_ticks
            )));
        }
        if config.max_pending == 0 {
            return Err(RaftError::Config("max_pending must be positive".into()));
        }
        let voters: Vec<u64> = voters.into_iter().collect();
        let mut store = LogStore::new(ConfState { voters: voters.clone(), ..Default::default() });
        let mut applied = 0;
        let mut rejoining = false;
        if let Some(rec) = recovered {
            rejoining = rec.rejoining;
            applied = Self::load(&mut store, &voters, rec)?;
        }
        let base = config.election_ticks;
        let rc = raft::Config {
            id: config.id,
            election_tick: base,
            heartbeat_tick: config.heartbeat_ticks,
            min_election_tick: base,
            max_election_tick: 2 * base,
            applied,
            max_size_per_msg: config.max_size_per_msg,
            max_inflight_msgs: config.max_inflight_msgs,
            check_quorum: true,
            pre_vote: true,
            batch_append: true,
            skip_bcast_commit: config.skip_bcast_commit,
            ..Default::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let raw = RawNode::new(&rc, store, &logger)?;
        let observed = (raw.raft.term, raw.raft.state);
        let slot = voters.iter().position(|&v| v == config.id).unwrap_or(0);
        let mut log = RaftLog {
            raw,
            id: config.id,
            voters,
            election_base: base,
            seed: config.seed,
            slot,
            observed,
            committed: VecDeque::new(),
            handed_out: applied,
            max_pending: config.max_pending,
            rejoin: rejoining.then(Rejoin::default),
            rejoin_done: false,
            lost: None,
        };
        log.redraw_election_timeout();
        Ok(log)
    }

    /// Loads a recovered state into the store after checking it; returns the applied index.
    fn load(store: &mut LogStore, voters: &[u64], rec: RecoveredState) -> Result<u64, RaftError> {
        let bad = |s: String| Err(RaftError::Recovered(s));
        let mut snap_index = 0;
        let mut last_term = 0;
        if let Some(snap) = &rec.snapshot {
            let mut sv = snap.voters.clone();
            sv.sort_unstable();
            if sv != voters {
                return bad(format!(
                    "snapshot membership {:?} differs from the configured voters {voters:?}",
                    snap.voters
                ));
            }
            if snap.index == 0 || snap.term == 0 {
                return bad(format!("snapshot at index {} term {} (both must be positive)", snap.index, snap.term));
            }
            store.apply_snapshot(snap.to_raft());
            snap_index = snap.index;
            last_term = snap.term;
        }
        let mut entries = Vec::with_capacity(rec.entries.len());
        for (i, p) in rec.entries.iter().enumerate() {
            let expected = snap_index + 1 + i as u64;
            if p.index != expected {
                return bad(format!("log entry {} where {expected} was expected", p.index));
            }
            if p.term < last_term {
                return bad(format!("log entry {} has term {} below the previous term {last_term}", p.index, p.term));
            }
            last_term = p.term;
            let e = decode_entry(p)
                .map_err(|e| RaftError::Recovered(format!("log entry {} does not decode: {e}", p.index)))?;
            entries.push(e);
        }
        store.append(&entries).map_err(RaftError::Recovered)?;
        let last_index = snap_index + entries.len() as u64;
        let mut hs = rec.hard_state;
        if hs.commit > last_index {
            return bad(format!("hard state commit {} is past the last log index {last_index}", hs.commit));
        }
        // A snapshot is committed by definition; a hard state written before it may lag.
        hs.commit = hs.commit.max(snap_index);
        // currentTerm >= every log term, as if the term bump had been persisted with the entries
        // (a crash between writing entries and the hard state); a higher term voids the vote.
        if last_term > hs.term {
            hs.term = last_term;
            hs.vote = 0;
        }
        store.set_hard_state(hs.into());
        Ok(rec.applied.max(snap_index).min(hs.commit))
    }

    fn redraw_election_timeout(&mut self) {
        let base = self.election_base;
        let t = base + timeout_offset(self.seed, self.raw.raft.term, self.slot, base);
        self.raw.raft.set_randomized_election_timeout(t);
    }

    /// Called after every call into raft-rs: redraw the election timeout if raft-rs reset it.
    fn after_call(&mut self) {
        let now = (self.raw.raft.term, self.raw.raft.state);
        if now != self.observed {
            self.observed = now;
            self.redraw_election_timeout();
        }
    }

    /// Advances the logical clock by one tick (heartbeats, election timeouts, check-quorum).
    /// A rejoining replica's clock stands still: it does not campaign (see "Rejoining").
    pub fn tick(&mut self) {
        if self.rejoin.is_some() || self.lost.is_some() {
            return;
        }
        self.raw.tick();
        self.after_call();
    }

    /// Whether this replica is being rebuilt from its peers and has not caught up yet (see
    /// "Rejoining").
    pub fn is_rejoining(&self) -> bool {
        self.rejoin.is_some()
    }

    fn lost_error(&self) -> Option<RaftError> {
        self.lost.map(|(leader, term, commit, last_index)| RaftError::LostEntries { leader, term, commit, last_index })
    }

    /// A rejoining replica that caught up with the leader of its term records its vote in
    /// that term as given to itself and leaves the rejoin (see "Rejoining").
    fn check_rejoined(&mut self) {
        let Some(r) = self.rejoin else { return };
        let raft = &self.raw.raft;
        let log = &raft.raft_log;
        let caught_up = raft.state == StateRole::Follower
            && raft.leader_id != 0
            && raft.term == r.term
            && r.heard_append
            && r.leader_commit > 0
            && log.committed >= r.leader_commit
            && log.persisted >= r.leader_commit;
        if caught_up {
            self.raw.raft.vote = self.id;
            self.rejoin = None;
            self.rejoin_done = true;
        }
    }

    /// For a leader: a rejoining follower's rejection that shows it holds less than raft-rs
    /// believes (`matched`). Resets its progress and probes from its hint; true if handled.
    fn reset_rejoining_follower(&mut self, msg: &Message) -> bool {
        let raft = &mut self.raw.raft;
        if raft.state != StateRole::Leader || msg.term != raft.term {
            return false;
        }
        let Some(pr) = raft.mut_prs().get_mut(msg.from) else { return false };
        if msg.reject_hint >= pr.matched {
            return false; // plain probing finds the match
        }
        // Lowering `matched` only makes commits more conservative; the probe finds the real one.
        pr.matched = 0;
        pr.become_probe();
        pr.next_idx = msg.reject_hint + 1;
        pr.recent_active = true;
        raft.send_append(msg.from);
        true
    }

    /// Feeds a message received from a peer.
    ///
    /// # Errors
    /// [`RaftError::Misrouted`] if it is addressed to another replica,
    /// [`RaftError::UnknownPeer`] if it comes from outside the group (or claims to come from
    /// this replica), [`RaftError::Forbidden`] for a proposal or a local-only message type, raft-rs's error
    /// for a response from an unknown peer. The message is dropped in every error case.
    pub fn step(&mut self, msg: Message) -> Result<(), RaftError> {
        if msg.to != self.id {
            return Err(RaftError::Misrouted { to: msg.to, id: self.id });
        }
        if msg.from == self.id || !self.voters.contains(&msg.from) {
            return Err(RaftError::UnknownPeer(msg.from));
        }
        let t = msg.get_msg_type();
        if t == MessageType::MsgPropose || raft::raw_node::is_local_msg(t) {
            return Err(RaftError::Forbidden(t));
        }
        if let Some(e) = self.lost_error() {
            return Err(e);
        }
        let mut msg = msg;
        if t == MessageType::MsgAppendResponse
            && msg.reject
            && msg.context.as_ref() == REJOIN_CONTEXT
            && self.reset_rejoining_follower(&msg)
        {
            self.after_call();
            return Ok(());
        }
        let current = msg.term >= self.raw.raft.term;
        if let Some(rejoin) = &mut self.rejoin {
            if matches!(t, MessageType::MsgRequestVote | MessageType::MsgRequestPreVote | MessageType::MsgTimeoutNow) {
                return Ok(()); // no vote, no campaign before caught up (see "Rejoining")
            }
            if current && t == MessageType::MsgAppend {
                rejoin.note(msg.term, msg.commit, true);
            }
            if current && t == MessageType::MsgSnapshot {
                rejoin.note(msg.term, msg.get_snapshot().get_metadata().index, false);
            }
        }
        let last_index = self.last_index();
        let mut claimed = None;
        if t == MessageType::MsgHeartbeat && current && msg.commit > last_index {
            if self.rejoin.is_none() {
                self.lost = Some((msg.from, msg.term, msg.commit, last_index));
                return Err(self.lost_error().expect("just set"));
            }
            // Commit nothing we do not hold; tell the leader where our log ends.
            claimed = Some(msg.commit);
            msg.commit = self.raw.raft.raft_log.committed;
        }
        let (from, term) = (msg.from, msg.term);
        let result = self.raw.step(msg);
        if let Some(claimed) = claimed {
            let raft = &mut self.raw.raft;
            if raft.term == term && raft.leader_id == from {
                let last = raft.raft_log.last_index();
                let mut m = Message::default();
                m.set_msg_type(MessageType::MsgAppendResponse);
                (m.to, m.from, m.term) = (from, self.id, term);
                (m.reject, m.index, m.reject_hint) = (true, claimed, last);
                m.log_term = raft.raft_log.term(last).unwrap_or(0);
                m.commit = raft.raft_log.committed;
                m.context = REJOIN_CONTEXT.to_vec().into();
                raft.msgs.push(m);
            }
        }
        self.after_call();
        self.check_rejoined();
        result.map_err(RaftError::from)
    }

    /// [`crate::decode_message`] then [`RaftLog::step`].
    ///
    /// # Errors
    /// [`RaftError::Decode`] for bytes that are not a raft message, else as [`RaftLog::step`].
    pub fn step_bytes(&mut self, bytes: &[u8]) -> Result<(), RaftError> {
        self.step(crate::codec::decode_message(bytes)?)
    }

    /// Starts an election now (pre-vote first), e.g. to force a failover in tests. A no-op on
    /// a leader, and on a rejoining replica (see "Rejoining").
    ///
    /// # Errors
    /// raft-rs's error, if any.
    pub fn campaign(&mut self) -> Result<(), RaftError> {
        if self.rejoin.is_some() {
            return Ok(());
        }
        let result = self.raw.campaign();
        self.after_call();
        result.map_err(RaftError::from)
    }

    /// Asks the leader (this replica) to hand leadership to `to` once it is up to date.
    /// Proposals are refused ([`LogError::NotLeader`]) while the transfer is pending.
    pub fn transfer_leader(&mut self, to: u64) {
        self.raw.transfer_leader(to);
        self.after_call();
    }

    /// Tells the leader that messages to `id` could not be delivered (it stops pipelining to
    /// it and probes instead).
    pub fn report_unreachable(&mut self, id: u64) {
        self.raw.report_unreachable(id);
        self.after_call();
    }

    /// Whether [`RaftLog::ready`] has work.
    pub fn has_ready(&self) -> bool {
        self.raw.has_ready()
    }

    /// The next batch of work, or `None` if there is nothing to do. Handle it as [`Ready`]
    /// says, then call [`RaftLog::advance`]. Several readies may be outstanding (pipelined
    /// persistence) as long as they are persisted in order.
    ///
    /// Committed records become available to [`ReplicatedLog::take_committed`] here (raft-rs
    /// hands out only entries that are committed *and* durable on this replica). Snapshot
    /// messages to lagging followers are reported delivered right away: if one is lost, the
    /// follower rejects the next append and the leader sends the snapshot again.
    ///
    /// # Errors
    /// [`RaftError::BadEntry`] if a committed entry does not decode; fatal for the replica.
    pub fn ready(&mut self) -> Result<Option<Ready>, RaftError> {
        if let Some(e) = self.lost_error() {
            return Err(e);
        }
        if !self.raw.has_ready() {
            return Ok(None);
        }
        let mut rd = self.raw.ready();
        let mut out = Ready { number: rd.number(), must_sync: rd.must_sync(), ..Default::default() };
        out.role_change = rd.ss().map(|ss| RoleChange { role: ss.raft_state.into(), leader_id: nonzero(ss.leader_id) });
        if !rd.snapshot().is_empty() {
            let snap = rd.snapshot().clone();
            let data = SnapshotData::from_raft(&snap);
            self.raw.mut_store().apply_snapshot(snap);
            self.committed.retain(|e| e.index > data.index);
            self.handed_out = self.handed_out.max(data.index);
            out.snapshot = Some(data);
        }
        let entries = rd.take_entries();
        if let Err(e) = self.raw.mut_store().append(&entries) {
            // raft-rs hands out entries that continue its own log; anything else is a bug.
            panic!("raft-rs produced entries that do not continue the log: {e}");
        }
        out.entries = entries.iter().map(encode_entry).collect();
        if let Some(hs) = rd.hs() {
            self.raw.mut_store().set_hard_state(hs.clone());
            out.hard_state = Some(hs.into());
            if self.rejoin_done && hs.vote == self.id {
                self.rejoin_done = false;
                out.rejoined = true;
            }
        }
        let mut messages = rd.take_messages();
        let mut persisted_messages = rd.take_persisted_messages();
        if self.rejoin.is_some() {
            for m in messages.iter_mut().chain(persisted_messages.iter_mut()) {
                if m.get_msg_type() == MessageType::MsgAppendResponse && m.reject {
                    m.context = REJOIN_CONTEXT.to_vec().into();
                }
            }
        }
        out.messages = messages.iter().map(out_message).collect();
        out.persisted_messages = persisted_messages.iter().map(out_message).collect();
        let committed = rd.take_committed_entries();
        self.raw.advance_append_async(rd);
        for m in out.messages.iter().chain(&out.persisted_messages) {
            if m.msg_type == MessageType::MsgSnapshot {
                self.raw.report_snapshot(m.to, SnapshotStatus::Finish);
            }
        }
        self.after_call();
        let before = self.committed.len();
        for e in committed {
            self.handed_out = self.handed_out.max(e.index);
            if let Some(entry) = decode_committed(&e)? {
                self.committed.push_back(entry);
            }
        }
        out.committed = self.committed.len() - before;
        Ok(Some(out))
    }

    /// Tells the log that everything in readies up to `number` is persisted (and their
    /// `persisted_messages` may be sent). A leader may then count its own copy towards a
    /// quorum; new messages and commits show up in the next [`RaftLog::ready`].
    pub fn advance(&mut self, number: u64) {
        self.raw.on_persist_ready(number);
        let log = &self.raw.raft.raft_log;
        let applied = self.handed_out.min(log.committed).min(log.persisted);
        if applied > log.applied {
            self.raw.advance_apply_to(applied);
        }
        self.after_call();
        self.check_rejoined();
    }

    /// Records a snapshot of the state machine covering everything up to `index` and drops
    /// those entries from memory. `index` must have been handed out by `ready` (the caller
    /// took and applied it). Returns the snapshot for the shell to persist (e.g.
    /// [`crate::disk::DiskStorage::save_snapshot`], which also compacts the WAL); it is what
    /// the leader sends a follower that needs compacted entries.
    ///
    /// # Errors
    /// [`RaftError::Invalid`] if `index` is not past the current snapshot or not yet applied.
    pub fn compact(&mut self, index: u64, data: Vec<u8>) -> Result<SnapshotData, RaftError> {
        if !self.can_compact(index) {
            return Err(RaftError::Invalid(format!(
                "cannot compact to {index}: the snapshot is at {} and entries up to {} are applied and durable",
                self.snapshot_index(),
                self.compact_limit()
            )));
        }
        let snap = self.raw.mut_store().compact(index, data).map_err(RaftError::Invalid)?;
        Ok(SnapshotData::from_raft(&snap))
    }

    /// Whether [`RaftLog::compact`] to `index` is possible now: past the current snapshot,
    /// and handed out (applied) and durable here. Shells skip a snapshot until it is.
    pub fn can_compact(&self, index: u64) -> bool {
        index > self.snapshot_index() && index <= self.compact_limit()
    }

    fn compact_limit(&self) -> u64 {
        self.handed_out.min(self.raw.raft.raft_log.persisted)
    }

    /// This replica's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The group's voters, sorted.
    pub fn voters(&self) -> &[u64] {
        &self.voters
    }

    /// Current role.
    pub fn role(&self) -> Role {
        self.raw.raft.state.into()
    }

    /// Whether this replica is the leader (of its current term).
    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// The leader this replica knows of in its current term, if any (itself if leader).
    pub fn leader_id(&self) -> Option<u64> {
        nonzero(self.raw.raft.leader_id)
    }

    /// Current term.
    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// Highest index known committed.
    pub fn commit_index(&self) -> LogIndex {
        self.raw.raft.raft_log.committed
    }

    /// Highest index durable on this replica (as acknowledged through [`RaftLog::advance`]).
    pub fn persisted_index(&self) -> LogIndex {
        self.raw.raft.raft_log.persisted
    }

    /// Last index in the log (durable or not).
    pub fn last_index(&self) -> LogIndex {
        self.raw.raft.raft_log.last_index()
    }

    /// First index still held in memory (after the last snapshot).
    pub fn first_index(&self) -> LogIndex {
        self.raw.raft.raft_log.first_index()
    }

    /// Index of the latest snapshot (0: none).
    pub fn snapshot_index(&self) -> LogIndex {
        self.raw.store().snapshot_index()
    }

    /// Term of the entry at `index`, if the log holds it (or it is the snapshot's last entry).
    pub fn term_at(&self, index: LogIndex) -> Option<u64> {
        self.raw.raft.raft_log.term(index).ok().filter(|&t| t != 0 || index == 0)
    }

    /// The raw raft entry at `index`, if held (for inspection and tests).
    pub fn entry(&self, index: LogIndex) -> Option<Entry> {
        if index == 0 || index < self.first_index() || index > self.last_index() {
            return None;
        }
        let ents = self.raw.raft.raft_log.slice(index, index + 1, None, GetEntriesContext::empty(false)).ok()?;
        ents.into_iter().next()
    }

    /// What a replica that drops its state machine (a demoted leader) rebuilds it from: the
    /// latest snapshot's data, if the log was compacted, and every committed record handed
    /// out after it ([`RaftLog::replay`]). Records committed but not taken yet are dropped
    /// from the queue: they are in the replay.
    ///
    /// # Errors
    /// As [`RaftLog::replay`] and [`Replay::records`].
    pub fn replay_for_rebuild(&mut self) -> Result<(Option<Vec<u8>>, Vec<LogEntry>), RaftError> {
        let replay = self.replay()?;
        self.committed.clear();
        Ok((replay.snapshot_data().map(<[u8]>::to_vec), replay.records()?))
    }

    /// The latest snapshot and every committed entry handed out after it: what the state
    /// machine at [`RaftLog::handed_out`] is a function of. Cheap (entry payloads and snapshot
    /// data are shared, not copied) and independent of the log, so it can be decoded and
    /// replayed on another thread. Leaves the log as it is.
    ///
    /// # Errors
    /// [`RaftError::Invalid`] if an entry is missing from memory (a bug).
    pub fn replay(&self) -> Result<Replay, RaftError> {
        let (lo, hi) = (self.snapshot_index() + 1, self.handed_out + 1);
        let entries = if lo < hi {
            let missing = |e| RaftError::Invalid(format!("entries {lo}..{hi} not in memory: {e}"));
            self.raw.raft.raft_log.slice(lo, hi, None, GetEntriesContext::empty(false)).map_err(missing)?
        } else {
            Vec::new()
        };
        if entries.len() as u64 != hi.saturating_sub(lo) {
            return Err(RaftError::Invalid(format!("entries {lo}..{hi}: {} in memory", entries.len())));
        }
        let snapshot = self.raw.store().latest_snapshot();
        let snapshot = (snapshot.get_metadata().index > 0).then(|| snapshot.clone());
        Ok(Replay { snapshot, entries })
    }

    /// The latest snapshot's state-machine data (`None`: the log was never compacted); a
    /// restarted or snapshot-installing replica restores its state from it.
    pub fn snapshot_data(&self) -> Option<&[u8]> {
        let snapshot = self.raw.store().latest_snapshot();
        (snapshot.get_metadata().index > 0).then_some(&snapshot.data[..])
    }

    /// Highest index handed out as committed (or covered by the snapshot).
    pub fn handed_out(&self) -> LogIndex {
        self.handed_out
    }

    /// For a leader: whether an entry of its own term is committed (its election no-op at
    /// least). Before that, the leader cannot know which entries of earlier terms are
    /// committed; a shard leader should rebuild its state only after this turns true and it
    /// took every committed record.
    pub fn has_committed_in_term(&self) -> bool {
        self.raw.raft.commit_to_current_term()
    }

    /// Records proposed and not yet taken (uncommitted plus committed-but-untaken).
    pub fn pending(&self) -> usize {
        let log = &self.raw.raft.raft_log;
        (log.last_index().saturating_sub(log.committed) as usize) + self.committed.len()
    }
}

fn out_message(m: &Message) -> OutMessage {
    OutMessage { to: m.to, msg_type: m.get_msg_type(), bytes: encode_message(m) }
}

/// A committed entry as a record; `None` for the entries Luigi does not see (the leaders'
/// election no-ops, membership changes).
fn decode_committed(e: &Entry) -> Result<Option<LogEntry>, RaftError> {
    match e.get_entry_type() {
        EntryType::EntryNormal if e.data.is_empty() => Ok(None),
        EntryType::EntryNormal => match postcard::from_bytes::<LogRecord>(&e.data) {
            Ok(record) => Ok(Some(LogEntry { index: e.index, record })),
            Err(err) => Err(RaftError::BadEntry { index: e.index, reason: err.to_string() }),
        },
        EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => Ok(None),
    }
}

impl ReplicatedLog for RaftLog {
    /// Appends `record` to the leader's log and returns its index. Indexes increase but are
    /// not consecutive: election no-ops take indexes too.
    ///
    /// Errors: [`LogError::NotLeader`] on a non-leader or during a leadership transfer (see
    /// [`RaftLog::leader_id`] for a hint); [`LogError::Backlogged`] past
    /// [`RaftConfig::max_pending`].
    fn propose(&mut self, record: LogRecord) -> Result<LogIndex, LogError> {
        if !self.is_leader() || self.raw.raft.lead_transferee.is_some() {
            return Err(LogError::NotLeader);
        }
        let pending = self.pending();
        if pending >= self.max_pending {
            return Err(LogError::Backlogged(pending));
        }
        // Serializing a plain data enum into a Vec cannot fail.
        let data = postcard::to_stdvec(&record).expect("a LogRecord always serializes");
        let before = self.last_index();
        let result = self.raw.propose(Vec::new(), data);
        self.after_call();
        match result {
            Ok(()) if self.last_index() == before + 1 => Ok(before + 1),
            // Dropped: raft-rs refuses proposals while transferring leadership.
            _ => Err(LogError::NotLeader),
        }
    }

    /// Moves every committed record not yet taken, in log order, into `out`.
    fn take_committed(&mut self, out: &mut Vec<LogEntry>) {
        out.extend(self.committed.drain(..));
    }
}
