//! Snapshots and replays: [`RaftLog::compact`], [`RaftLog::replay`].

use bytes::Bytes;
use raft::GetEntriesContext;

use super::{RaftError, RaftLog, Replay, SnapshotData};

impl RaftLog {
    /// Records a snapshot of the state machine covering everything up to `index` and drops
    /// those entries from memory. `index` must have been handed out by `ready` (the caller
    /// took and applied it). Returns the snapshot for the shell to persist (e.g.
    /// [`crate::disk::DiskStorage::save_snapshot`], which also compacts the WAL); it is what
    /// the leader sends a follower that needs compacted entries.
    ///
    /// # Errors
    /// [`RaftError::Invalid`] if `index` is not past the current snapshot or not yet applied.
    pub fn compact(&mut self, index: u64, data: impl Into<Bytes>) -> Result<SnapshotData, RaftError> {
        if !self.can_compact(index) {
            return Err(RaftError::Invalid(format!(
                "cannot compact to {index}: the snapshot is at {} and entries up to {} are applied and durable",
                self.snapshot_index(),
                self.compact_limit()
            )));
        }
        let snap = self.raw.mut_store().compact(index, data.into()).map_err(RaftError::Invalid)?;
        Ok(SnapshotData::from_raft(&snap))
    }

    /// Whether [`RaftLog::compact`] to `index` is possible now: past the current snapshot,
    /// and handed out (applied) and durable here. Shells skip a snapshot until it is.
    pub fn can_compact(&self, index: u64) -> bool {
        index > self.snapshot_index() && index <= self.compact_limit()
    }

    /// Compaction stops at what raft-rs itself counts as applied: before it campaigns it reads
    /// the entries after its applied index (looking for configuration changes), which must
    /// still be there. Entries handed out and durable run ahead of that until the next
    /// `advance` (an election started from a broken link to the leader found the gap,
    /// simulator seed 2079 of `random_faults_with_snapshots_sweep`).
    fn compact_limit(&self) -> u64 {
        self.handed_out.min(self.raw.raft.raft_log.persisted).min(self.raw.raft.raft_log.applied)
    }

    /// What a replica that drops its state machine (a demoted leader) rebuilds it from: the
    /// latest snapshot, if the log was compacted, and every committed entry handed out after
    /// it ([`RaftLog::replay`]). Records committed but not taken yet are dropped from the
    /// queue: they are in the replay.
    ///
    /// # Errors
    /// As [`RaftLog::replay`].
    pub fn replay_for_rebuild(&mut self) -> Result<Replay, RaftError> {
        let replay = self.replay()?;
        self.committed.clear();
        Ok(replay)
    }

    /// The highest index at or below `index` that holds a record of the log's user (not an
    /// election no-op or a membership change) and is still in memory (after the latest
    /// snapshot); `None` if there is none.
    pub fn last_record_at_or_below(&self, index: u64) -> Option<u64> {
        let mut i = index.min(self.last_index());
        while i > self.snapshot_index() {
            let e = self.entry(i)?;
            if super::is_record(&e) {
                return Some(i);
            }
            i -= 1;
        }
        None
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

    /// The latest snapshot (`None`: the log was never compacted), its data shared with the
    /// log's memory.
    pub fn latest_snapshot(&self) -> Option<SnapshotData> {
        let snapshot = self.raw.store().latest_snapshot();
        (snapshot.get_metadata().index > 0).then(|| SnapshotData::from_raft(snapshot))
    }

    /// The rule every protocol's replica takes its own snapshot by (one copy): a follower, or
    /// the leader of a group of one (`serving`: the replica runs ahead of its log as the
    /// leader, so a leader with followers takes none and compacts behind theirs), once the
    /// last record it applied reached `next_at` and the log may compact there. Returns the
    /// snapshot's index: the last record handed out.
    pub fn own_snapshot_index(&self, serving: bool, next_at: u64) -> Option<u64> {
        if serving && self.voters().len() > 1 {
            return None;
        }
        let index = self.last_record_at_or_below(self.handed_out())?;
        (index >= next_at && self.can_compact(index)).then_some(index)
    }

    /// The replay that rebuilds the state at `index` ([`RaftLog::own_snapshot_index`]) off
    /// the event loop, for a replica whose state ran ahead of the log (the leader of a group
    /// of one).
    ///
    /// # Errors
    /// An entry is missing from the log's memory (a bug), or the replay does not end at
    /// `index`.
    pub fn own_snapshot_replay(&self, index: u64) -> Result<Replay, RaftError> {
        let replay = self.replay()?;
        if replay.last_record_index() != Some(index) {
            return Err(RaftError::Invalid(format!("the replay does not end with the record at {index}")));
        }
        Ok(replay)
    }
}
