//! The in-memory [`raft::Storage`] behind [`crate::RaftLog`]: the log from the last snapshot on,
//! the hard state and membership, and the latest snapshot *with its data* (raft-rs's
//! `MemStorage` returns snapshots without data, which is useless for bringing a lagging
//! follower up to date). It mirrors what the shell has persisted or is persisting; it does no
//! I/O.

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

#[derive(Debug, Default)]
pub(crate) struct LogStore {
    hard_state: HardState,
    conf_state: ConfState,
    /// The latest snapshot (index 0: none). `entries[0]`, if any, has index `snapshot index + 1`.
    snapshot: Snapshot,
    entries: Vec<Entry>,
}

impl LogStore {
    pub(crate) fn new(conf_state: ConfState) -> Self {
        LogStore { conf_state, ..Default::default() }
    }

    fn snap_meta(&self) -> &SnapshotMetadata {
        self.snapshot.get_metadata()
    }

    pub(crate) fn snapshot_index(&self) -> u64 {
        self.snap_meta().index
    }

    pub(crate) fn snapshot_term(&self) -> u64 {
        self.snap_meta().term
    }

    pub(crate) fn first(&self) -> u64 {
        self.snapshot_index() + 1
    }

    pub(crate) fn last(&self) -> u64 {
        self.snapshot_index() + self.entries.len() as u64
    }

    pub(crate) fn set_hard_state(&mut self, hs: HardState) {
        self.hard_state = hs;
    }

    /// Appends entries, dropping any existing suffix they overwrite. The caller (raft) never
    /// leaves a gap or rewrites the snapshot; a violation is reported, not papered over.
    pub(crate) fn append(&mut self, ents: &[Entry]) -> Result<(), String> {
        let Some(first) = ents.first() else { return Ok(()) };
        if first.index < self.first() {
            return Err(format!("append at {} overwrites the snapshot at {}", first.index, self.snapshot_index()));
        }
        if first.index > self.last() + 1 {
            return Err(format!("append at {} leaves a gap after {}", first.index, self.last()));
        }
        self.entries.truncate((first.index - self.first()) as usize);
        self.entries.extend_from_slice(ents);
        Ok(())
    }

    /// Replaces the whole log by a snapshot (a follower installing the leader's snapshot, or a
    /// restart from a snapshot file).
    pub(crate) fn apply_snapshot(&mut self, snap: Snapshot) {
        let meta = snap.get_metadata();
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.conf_state = meta.get_conf_state().clone();
        self.entries.clear();
        self.snapshot = snap;
    }

    /// Records a snapshot of the state machine at `index` (which must be in the log) and drops
    /// the entries it covers.
    pub(crate) fn compact(&mut self, index: u64, data: bytes::Bytes) -> Result<Snapshot, String> {
        if index <= self.snapshot_index() {
            return Err(format!("snapshot at {index} is not past the current one at {}", self.snapshot_index()));
        }
        if index > self.last() {
            return Err(format!("snapshot at {index} is past the last log index {}", self.last()));
        }
        let term = self.entries[(index - self.first()) as usize].term;
        let mut snap = Snapshot { data, ..Default::default() };
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(self.conf_state.clone());
        self.entries.drain(..(index - self.snapshot_index()) as usize);
        self.snapshot = snap.clone();
        Ok(snap)
    }

    /// The latest snapshot (index 0: none).
    pub(crate) fn latest_snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Encoded size of the snapshot this store would send.
    #[cfg(test)]
    pub(crate) fn snapshot_bytes(&self) -> usize {
        self.snapshot.compute_size() as usize
    }
}

/// Keeps at least one entry, then as many as fit in `max` bytes (raft-rs's `limit_size` rule).
fn limit_size(ents: &mut Vec<Entry>, max: Option<u64>) {
    let Some(max) = max else { return };
    if max == raft::NO_LIMIT || ents.len() <= 1 {
        return;
    }
    let mut size = 0u64;
    let keep = ents
        .iter()
        .take_while(|e| {
            let first = size == 0;
            size += u64::from(e.compute_size());
            first || size <= max
        })
        .count();
    ents.truncate(keep);
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard_state.clone(), self.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let lo = (low - self.first()) as usize;
        let hi = (high - self.first()) as usize;
        let mut ents = self.entries[lo..hi].to_vec();
        limit_size(&mut ents, max_size.into());
        Ok(ents)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.snapshot_index() {
            return Ok(self.snapshot_term());
        }
        if idx < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        // Raft asks only when a follower needs entries we compacted, i.e. below our snapshot.
        if self.snapshot_index() == 0 || self.snapshot_index() < request_index {
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        Ok(self.snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ent(index: u64, term: u64) -> Entry {
        Entry { index, term, data: vec![0; 10].into(), ..Default::default() }
    }

    #[test]
    fn append_overwrites_suffix_compact_and_snapshot() {
        let mut s = LogStore::new(ConfState { voters: vec![1, 2, 3], ..Default::default() });
        assert_eq!((s.first(), s.last()), (1, 0));
        s.append(&[ent(1, 1), ent(2, 1), ent(3, 1)]).unwrap();
        s.append(&[ent(3, 2), ent(4, 2)]).unwrap();
        assert_eq!(s.term(3), Ok(2));
        assert_eq!(s.last(), 4);
        assert!(s.append(&[ent(6, 2)]).is_err());
        assert!(s.snapshot(0, 2).is_err(), "no snapshot yet");
        let snap = s.compact(2, bytes::Bytes::from_static(b"state")).unwrap();
        assert_eq!((snap.get_metadata().index, snap.get_metadata().term), (2, 1));
        assert!(s.snapshot_bytes() > 5);
        assert_eq!(s.first(), 3);
        assert_eq!(s.term(2), Ok(1));
        assert_eq!(s.term(1), Err(raft::Error::Store(StorageError::Compacted)));
        assert_eq!(s.entries(3, 5, None, GetEntriesContext::empty(false)).unwrap().len(), 2);
        assert_eq!(s.entries(3, 5, Some(1), GetEntriesContext::empty(false)).unwrap().len(), 1);
        assert!(s.append(&[ent(2, 1)]).is_err());
        assert_eq!(s.snapshot(0, 2).unwrap().data, b"state".to_vec());
        let mut other = Snapshot::default();
        other.mut_metadata().index = 10;
        other.mut_metadata().term = 3;
        s.apply_snapshot(other);
        assert_eq!((s.first(), s.last()), (11, 10));
        assert_eq!(s.term(10), Ok(3));
        assert_eq!(s.initial_state().unwrap().hard_state.commit, 10);
    }
}
