//! [`RaftLog`]: one replica of a shard's replica group, sans I/O.
//!
//! The struct, its construction and recovery, and the [`ReplicatedLog`] seam live here; the
//! rest is split by concern: [`config`] (what goes in), [`ready`] (what comes out),
//! [`step`] (messages in, rejoining, lost entries), [`determinism`] (election timeouts),
//! [`compact`] (snapshots and replays), [`abstain`] (a replica that must not lead), [`error`],
//! [`typed`] (records in and out: as bytes, and the typed view a protocol uses).
//!
//! Size: over 600 lines, of which about 200 are documentation (what each call may be
//! relied on for, which the node and the simulator follow); the rest is already split by
//! concern into the modules above.

mod abstain;
mod compact;
mod config;
mod determinism;
mod error;
mod ready;
mod step;
mod typed;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Debug;

use bytes::Bytes;
#[cfg(doc)]
use luigi_txn::log::ReplicatedLog;
use luigi_txn::log::{LogEntry, LogIndex};
use raft::eraftpb::{ConfState, Entry, EntryType};
use raft::{GetEntriesContext, RawNode, StateRole};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use config::{RaftConfig, RecoveredState, Replay, SnapshotData};
pub use error::RaftError;
pub use ready::{OutMessage, Ready, Role, RoleChange};
pub use step::REJOIN_CONTEXT;

use crate::codec::decode_entry;
use crate::store::LogStore;
use step::Rejoin;

/// What a replica found when a leader's heartbeat claimed a commit index beyond its log: it
/// lost acknowledged entries (see "Lost entries"), reported as [`RaftError::LostEntries`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LostEntries {
    /// The leader whose heartbeat showed it.
    leader: u64,
    /// That leader's term.
    term: u64,
    /// The commit index it claimed.
    commit: u64,
    /// The last index this replica's log holds.
    last_index: u64,
}

/// The first committed entry a typed view could not decode (see [`RaftLog::undecodable`]).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Undecodable {
    /// Its index.
    index: u64,
    /// The decoder's complaint.
    reason: String,
}

/// An acknowledgement to a leader (an append response) sent in a ready not yet advanced:
/// it counts as durable once ready `ready` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AckInFlight {
    /// The ready it went out in.
    ready: u64,
    /// The acknowledged entry's term.
    term: u64,
    /// The acknowledged entry's index.
    index: LogIndex,
}

/// One replica of a shard's replicated log: Raft (Multi-Paxos with a strong leader) via raft-rs
/// 0.7's `RawNode`, sans I/O: no threads, sockets, clocks or files. The shell calls
/// [`RaftLog::tick`] on a timer, [`RaftLog::step_bytes`] for every message received, and then
/// drains [`RaftLog::ready`] (persist, send, [`RaftLog::advance`]); the shard leader (or a
/// follower's replayer) uses the [`ReplicatedLog`] seam.
///
/// The log holds bytes, as raft-rs's does: it knows no record type. A protocol proposes and
/// takes its records through the [`ReplicatedLog<R>`] view the log offers for every
/// [`Record`] type `R` (`typed.rs`: postcard on `propose`, decoded on `take_committed`),
/// which is how the node that owns the log lends it to the protocol's replica.
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
    /// Ticks between the group's election timeouts in a term (1: distinct draws).
    election_spacing: usize,
    seed: u64,
    /// Position of `id` among the sorted voters.
    slot: usize,
    /// `(term, role)` after the last call into raft-rs.
    observed: (u64, StateRole),
    /// Committed records not yet taken, as proposed (encoded).
    committed: VecDeque<LogEntry<Bytes>>,
    /// Fatal: a committed record taken through a typed view did not decode.
    undecodable: Option<Undecodable>,
    /// Highest index handed out as committed (records, no-ops and conf changes alike) or
    /// covered by an installed snapshot.
    handed_out: u64,
    max_pending: usize,
    /// While rebuilding from the peers (see "Rejoining").
    rejoin: Option<Rejoin>,
    /// The rejoin ended; the next ready says so.
    rejoin_done: bool,
    /// Fatal: the replica lost acknowledged entries (see "Lost entries").
    lost: Option<LostEntries>,
    /// Snapshots travel outside Raft's messages (see [`RaftConfig::external_snapshots`]).
    external_snapshots: bool,
    /// Acknowledgements to a leader sent in readies not yet advanced.
    acks_in_flight: VecDeque<AckInFlight>,
    /// The last acknowledgement whose ready was advanced (durable): term and index.
    acked: (u64, LogIndex),
    /// The leader this follower's connection to broke, and its term (see
    /// [`RaftLog::peer_lost_leader`]).
    lost_leader: Option<(u64, u64)>,
    /// Replicas of the group that reported their connection to their leader of a term broken:
    /// (term, replica) to the reporter's last log entry (term, index); of the current term or
    /// later only.
    lost_reports: BTreeMap<(u64, u64), (u64, u64)>,
    /// This replica must not lead (see [`RaftLog::set_abstaining`]).
    abstaining: bool,
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

/// What a [`RaftLog`]'s typed view replicates: any plain data type with serde support. Records
/// travel and are stored as their postcard encoding inside raft entries; a record type whose
/// `Serialize` fails (e.g. one that needs `serialize_any`) makes [`ReplicatedLog::propose`]
/// panic. Implemented for every type that fits.
pub trait Record: Serialize + DeserializeOwned + Clone + Debug {}

impl<T: Serialize + DeserializeOwned + Clone + Debug> Record for T {}

impl RaftLog {
    /// A replica of a shard's log with the given config, fresh (`recovered: None`) or
    /// restarted from what its storage recovered. Every replica of a fresh group must start
    /// fresh with the same `voters`, and its protocol must propose and take the same record
    /// type on every replica (they decode each other's entries).
    ///
    /// # Errors
    /// [`RaftError::Config`] for an invalid config, [`RaftError::Recovered`] for a recovered
    /// state that cannot be right (gaps, commit past the log, foreign membership, ...).
    pub fn new(config: RaftConfig, recovered: Option<RecoveredState>) -> Result<Self, RaftError> {
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
            election_spacing: config.election_spacing_ticks.max(1),
            seed: config.seed,
            slot,
            observed,
            committed: VecDeque::new(),
            undecodable: None,
            handed_out: applied,
            max_pending: config.max_pending,
            rejoin: rejoining.then(Rejoin::default),
            rejoin_done: false,
            lost: None,
            lost_leader: None,
            lost_reports: BTreeMap::new(),
            external_snapshots: config.external_snapshots,
            acks_in_flight: VecDeque::new(),
            acked: (0, 0),
            abstaining: false,
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

    /// Advances the logical clock by one tick (heartbeats, election timeouts, check-quorum).
    /// A rejoining replica's clock stands still: it does not campaign (see "Rejoining").
    /// An abstaining replica's election clock runs without ever starting an election (see
    /// [`RaftLog::set_abstaining`]).
    pub fn tick(&mut self) {
        if self.rejoin.is_some() || self.lost.is_some() {
            return;
        }
        if self.abstaining && !self.is_leader() {
            self.tick_without_campaign();
            return;
        }
        self.raw.tick();
        self.after_call();
    }

    /// Starts an election now (pre-vote first), e.g. to force a failover in tests. A no-op on
    /// a leader, on a rejoining replica (see "Rejoining") and on an abstaining one
    /// ([`RaftLog::set_abstaining`]).
    ///
    /// # Errors
    /// raft-rs's error, if any.
    pub fn campaign(&mut self) -> Result<(), RaftError> {
        if self.rejoin.is_some() || self.abstaining {
            return Ok(());
        }
        let result = self.raw.campaign();
        self.after_call();
        result.map_err(RaftError::from)
    }

    /// The connection to replica `lost` broke. If it is this follower's leader, the follower
    /// stops waiting out the leader's silence: it counts the election timeout's base as
    /// elapsed, so it no longer defends the leader's lease (it grants pre-votes), and the
    /// group's election order of the term goes on from the first surviving replica at the
    /// next tick, the others still spaced after it. Elections keep pre-vote: a follower whose
    /// link alone broke gets no pre-vote from one that still hears the leader, so a live
    /// leader is not deposed; a crashed one is replaced without the election timeout.
    ///
    /// Returns the leader's term and this replica's last log entry (term, index) when it was
    /// this follower's leader: the shell tells the group's other replicas
    /// ([`RaftLog::peer_lost_leader`]).
    pub fn leader_link_lost(&mut self, lost: u64) -> Option<(u64, (u64, u64))> {
        let (state, leader, term) = (self.raw.raft.state, self.raw.raft.leader_id, self.raw.raft.term);
        if state != StateRole::Follower || leader != lost || self.rejoin.is_some() {
            return None;
        }
        let n = self.voters.len();
        let survivors = self.voters.iter().enumerate().filter(|(_, v)| **v != lost);
        let first_survivor = survivors.map(|(slot, _)| self.election_offset(term, slot, n)).min().unwrap_or(0);
        let elapsed = self.election_base + first_survivor;
        let raft = &mut self.raw.raft;
        raft.election_elapsed = raft.election_elapsed.max(elapsed);
        self.lost_leader = Some((term, lost));
        self.campaign_if_a_majority_lost_the_leader();
        Some((term, self.last_entry()))
    }

    /// Replica `from` of the group reports its connection to its leader of `term` broken,
    /// its log ending at `last` (term, index). Once a majority of the group without that
    /// leader (this replica among them) has, the leader can commit nothing through those
    /// connections, and the one of them with the most up-to-date log (the first in the
    /// term's election order among equals) starts the election at once, without the pre-vote
    /// round: the pre-vote asks exactly what those reports said, a round trip later, and the
    /// others grant the vote (they no longer defend the leader's lease, and their logs are
    /// not ahead of its). Any other replica waits for its spaced timeout, and pre-votes, as
    /// before; so does this one if the reports do not add up (a lone broken connection never
    /// deposes a leader).
    pub fn peer_lost_leader(&mut self, from: u64, term: u64, last: (u64, u64)) {
        if from == self.id || !self.voters.contains(&from) || term < self.raw.raft.term {
            return;
        }
        let current = self.raw.raft.term;
        self.lost_reports.retain(|(t, _), _| *t >= current);
        if self.lost_reports.len() < self.voters.len() {
            self.lost_reports.insert((term, from), last);
        }
        self.campaign_if_a_majority_lost_the_leader();
    }

    /// The term and index of this replica's last log entry.
    fn last_entry(&self) -> (u64, u64) {
        let log = &self.raw.raft.raft_log;
        (log.last_term(), log.last_index())
    }

    fn campaign_if_a_majority_lost_the_leader(&mut self) {
        let Some((term, leader)) = self.lost_leader else { return };
        let raft = &self.raw.raft;
        let waiting = matches!(raft.state, StateRole::Follower | StateRole::PreCandidate);
        if raft.term != term || !waiting || self.rejoin.is_some() || self.lost.is_some() || self.abstaining {
            return;
        }
        let n = self.voters.len();
        let slot_of = |id: u64| self.voters.iter().position(|v| *v == id).unwrap_or(0);
        // (log, order) of each replica that lost the leader: the most up-to-date log first,
        // then the earliest in the term's election order.
        let rank =
            |id: u64, last: (u64, u64)| (last, std::cmp::Reverse(self.election_offset(term, slot_of(id), n)), id);
        let reported = self.lost_reports.iter().filter(|((t, r), _)| *t == term && *r != leader);
        let mut ranks: Vec<_> = reported.map(|((_, r), last)| rank(*r, *last)).collect();
        ranks.push(rank(self.id, self.last_entry()));
        if ranks.len() < n / 2 + 1 || ranks.iter().max().map(|(_, _, id)| *id) != Some(self.id) {
            return;
        }
        self.lost_leader = None;
        self.raw.raft.campaign(raft::CAMPAIGN_ELECTION);
        self.after_call();
    }

    /// Lets the next append to every follower still being probed leave now (raft-rs sends a
    /// probed follower one append and waits for its answer, so a record proposed right
    /// after the election's no-op would otherwise leave a round trip after it). A follower
    /// then gets the no-op twice, once alone and once with what follows: appends repeat
    /// entries harmlessly, and one that does not fit the follower's log is refused and
    /// probed as before.
    pub fn resume_probes(&mut self) {
        let me = self.id;
        for (id, pr) in self.raw.raft.mut_prs().iter_mut() {
            if *id != me && pr.state == raft::ProgressState::Probe {
                pr.resume();
            }
        }
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

    /// For a leader: the highest log index replica `id` is known to hold (Raft's `matched`);
    /// `None` when this replica does not lead or `id` is not in the group.
    pub fn matched(&self, id: u64) -> Option<u64> {
        if !self.is_leader() {
            return None;
        }
        self.raw.raft.prs().get(id).map(|pr| pr.matched)
    }

    /// The leader this replica knows of in its current term, if any (itself if leader).
    pub fn leader_id(&self) -> Option<u64> {
        nonzero(self.raw.raft.leader_id)
    }

    /// Current term.
    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// The term and index of the last acknowledgement this replica sent its leader whose
    /// entries are durable here: its log matches that term's leader up to the index (what a
    /// follower reports as its progress, DESIGN.md rule 14).
    pub fn acked(&self) -> (u64, LogIndex) {
        self.acked
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

    /// Highest index handed out as committed (or covered by the snapshot).
    pub fn handed_out(&self) -> LogIndex {
        self.handed_out
    }

    /// The records after those handed out, committed or not, in log order: for a new
    /// leader, what it will commit on top of the state it applied.
    ///
    /// # Errors
    /// An entry missing from memory (a bug) or one that does not decode.
    pub fn records_after_handed_out<R: Record>(&self) -> Result<Vec<LogEntry<R>>, RaftError> {
        let mut out = Vec::new();
        for index in self.handed_out + 1..=self.last_index() {
            let e = self.entry(index).ok_or_else(|| RaftError::Invalid(format!("log entry {index} not in memory")))?;
            out.extend(decode_committed(&e)?);
        }
        Ok(out)
    }

    /// The rule every protocol's replica starts serving by (one copy): its log leads, an
    /// entry of its term (the election no-op) is committed, and every committed entry has
    /// been handed out, so the state rebuilt from them holds everything any earlier leader
    /// made durable.
    pub fn may_serve(&self) -> bool {
        self.is_leader() && self.has_committed_in_term() && self.handed_out() >= self.commit_index()
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

/// Whether `e` carries a record of the log's user (not an election no-op or a membership
/// change).
fn is_record(e: &Entry) -> bool {
    e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty()
}

/// The record at `index`, encoded as `data`, decoded as an `R`.
fn decode_record<R: Record>(index: u64, data: &[u8]) -> Result<LogEntry<R>, RaftError> {
    postcard::from_bytes::<R>(data)
        .map(|record| LogEntry { index, record })
        .map_err(|err| RaftError::BadEntry { index, reason: err.to_string() })
}

/// A committed entry as a record; `None` for the entries the log's user does not see (the
/// leaders' election no-ops, membership changes).
fn decode_committed<R: Record>(e: &Entry) -> Result<Option<LogEntry<R>>, RaftError> {
    match e.get_entry_type() {
        EntryType::EntryNormal if e.data.is_empty() => Ok(None),
        EntryType::EntryNormal => decode_record(e.index, &e.data).map(Some),
        EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => Ok(None),
    }
}
