//! What a [`RaftLog`] hands its shell: [`Ready`] (persist, send, advance) and role changes.

use bytes::Bytes;
use luigi_txn::log::LogEntry;
#[cfg(doc)]
use luigi_txn::log::ReplicatedLog;
use raft::eraftpb::{Message, MessageType};
use raft::{SnapshotStatus, StateRole};

use super::{is_record, nonzero, AckInFlight, RaftError, RaftLog, SnapshotData, REJOIN_CONTEXT};
use crate::codec::{encode_entry, encode_message, HardState, PersistEntry};

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
    /// Encoded message; the receiver passes it to [`RaftLog::step_bytes`] (or, with
    /// `snapshot`, to [`RaftLog::step_snapshot`]).
    pub bytes: Vec<u8>,
    /// With [`crate::RaftConfig::external_snapshots`], a `MsgSnapshot`'s snapshot, its data
    /// taken out of `bytes` (which keep its metadata): the shell transfers the data, the
    /// receiver steps both with [`RaftLog::step_snapshot`], and the sender reports the
    /// outcome with [`RaftLog::report_snapshot`]. The data is shared with the log's memory,
    /// not copied.
    pub snapshot: Option<SnapshotData>,
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

impl RaftLog {
    /// Whether [`RaftLog::ready`] has work.
    pub fn has_ready(&self) -> bool {
        self.raw.has_ready()
    }

    /// The next batch of work, or `None` if there is nothing to do. Handle it as [`Ready`]
    /// says, then call [`RaftLog::advance`]. Several readies may be outstanding (pipelined
    /// persistence) as long as they are persisted in order.
    ///
    /// Committed records become available to [`ReplicatedLog::take_committed`] here, as the
    /// bytes they were proposed as (they are decoded when taken; raft-rs
    /// hands out only entries that are committed *and* durable on this replica). Snapshot
    /// messages to lagging followers are reported delivered right away (if one is lost, the
    /// follower rejects the next append and the leader sends the snapshot again), unless
    /// snapshots travel outside the messages ([`crate::RaftConfig::external_snapshots`]):
    /// then the shell reports the outcome of each with [`RaftLog::report_snapshot`], and
    /// until it does, raft-rs sends that follower nothing but heartbeats.
    ///
    /// # Errors
    /// [`RaftError::BadEntry`] once a committed entry taken did not decode
    /// ([`RaftLog::undecodable`]); fatal for the replica, as [`RaftError::LostEntries`] is.
    pub fn ready(&mut self) -> Result<Option<Ready>, RaftError> {
        if let Some(e) = self.lost_error().or_else(|| self.undecodable()) {
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
        for m in messages.iter().chain(&persisted_messages) {
            if m.get_msg_type() == MessageType::MsgAppendResponse && !m.reject {
                self.acks_in_flight.push_back(AckInFlight { ready: out.number, term: m.term, index: m.index });
            }
        }
        let external = self.external_snapshots;
        out.messages = messages.into_iter().map(|m| out_message(m, external)).collect();
        out.persisted_messages = persisted_messages.into_iter().map(|m| out_message(m, external)).collect();
        let committed = rd.take_committed_entries();
        self.raw.advance_append_async(rd);
        if !external {
            for m in out.messages.iter().chain(&out.persisted_messages) {
                if m.msg_type == MessageType::MsgSnapshot {
                    self.raw.report_snapshot(m.to, SnapshotStatus::Finish);
                }
            }
        }
        self.after_call();
        let before = self.committed.len();
        for e in committed {
            self.handed_out = self.handed_out.max(e.index);
            if is_record(&e) {
                self.committed.push_back(LogEntry { index: e.index, record: e.data });
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
        while let Some(&AckInFlight { ready, term, index }) = self.acks_in_flight.front() {
            if ready > number {
                break;
            }
            self.acks_in_flight.pop_front();
            self.acked = self.acked.max((term, index));
        }
        let log = &self.raw.raft.raft_log;
        let applied = self.handed_out.min(log.committed).min(log.persisted);
        if applied > log.applied {
            self.raw.advance_apply_to(applied);
        }
        self.after_call();
        self.check_rejoined();
    }
}

/// The message to send; with external snapshots, a snapshot's data apart from its bytes.
fn out_message(mut m: Message, external: bool) -> OutMessage {
    let msg_type = m.get_msg_type();
    let snapshot = (external && msg_type == MessageType::MsgSnapshot).then(|| {
        let snap = SnapshotData::from_raft(m.get_snapshot());
        m.mut_snapshot().data = Bytes::new();
        snap
    });
    OutMessage { to: m.to, msg_type, bytes: encode_message(&m), snapshot }
}

impl RaftLog {
    /// With [`crate::RaftConfig::external_snapshots`]: the transfer of the snapshot last sent
    /// to replica `to` ended, `delivered` (the receiver holds it whole and stepped it) or
    /// failed (raft-rs sends a new one after a heartbeat). A no-op if `to` no longer waits
    /// for a snapshot (e.g. its answer to the snapshot came first, or this replica no longer
    /// leads).
    pub fn report_snapshot(&mut self, to: u64, delivered: bool) {
        if !self.is_leader() || !self.voters.contains(&to) || to == self.id {
            return;
        }
        let status = if delivered { SnapshotStatus::Finish } else { SnapshotStatus::Failure };
        self.raw.report_snapshot(to, status);
        self.after_call();
    }
}
