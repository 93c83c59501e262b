//! When a replica takes a snapshot of its own ([`Cadence`]), and the check of a snapshot
//! received from another replica ([`SnapshotCheck`]).
//!
//! The replicas of a group apply the same log, so without care they would all snapshot at
//! the same index; each snapshot costs a replay of the period on another core (see
//! Luigi's `Replica::own_snapshot_due`), and several at once would compete for the cores of the
//! leader's quorum. Each replica's first snapshot comes at its own fraction of the period
//! instead. (A leader with followers takes none: it compacts behind theirs. The leader of a
//! group of one takes its own.)

use std::sync::Arc;

use bytes::Bytes;
use luigi_replica::{SnapshotDecoder, StateBox};

/// A replica's snapshot cadence.
#[derive(Debug)]
pub struct Cadence {
    every: u64,
    /// The applied index at which the next snapshot is due.
    pub next_at: u64,
    /// A snapshot job is out with the shell.
    pub making: bool,
}

impl Cadence {
    /// Every `every` records (`u64::MAX`: never), replica `replica` of `replicas` offset by
    /// its share of the period, counted from the snapshot at `snapshot_index`.
    pub fn new(every: u64, snapshot_index: u64, replica: u32, replicas: u32) -> Self {
        let every = every.max(1);
        let phase = if every == u64::MAX { 0 } else { every / u64::from(replicas.max(1)) * u64::from(replica) };
        Cadence { every, next_at: snapshot_index.saturating_add(every - phase), making: false }
    }

    /// A snapshot at `index` was taken or installed: the next is a period later.
    pub fn taken(&mut self, index: u64) {
        self.next_at = index.saturating_add(self.every);
    }
}

/// A snapshot another replica sent, received whole: an offer to check before the leader
/// compacts behind it, or the leader's snapshot to decode before this replica installs it.
/// Either reads the whole image, which takes a while for a large store, so the shell runs
/// it off its event loop ([`crate::Effect::CheckSnapshot`]) and hands the result to
/// [`crate::ReplicaNode::snapshot_checked`]. The replica's protocol reads the image (its
/// [`SnapshotDecoder`]).
pub struct SnapshotCheck {
    token: u64,
    decoder: Arc<dyn SnapshotDecoder>,
    index: u64,
    install: bool,
    data: Bytes,
}

impl SnapshotCheck {
    pub(crate) fn new(token: u64, decoder: Arc<dyn SnapshotDecoder>, index: u64, install: bool, data: Bytes) -> Self {
        SnapshotCheck { token, decoder, index, install, data }
    }

    /// The snapshot's log index.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The snapshot's size, bytes.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Whether it is the leader's snapshot, to install (else a follower's offer).
    pub fn is_install(&self) -> bool {
        self.install
    }

    /// Checks (an offer: an image of this shard's state at its index) or decodes (an
    /// install) the snapshot.
    pub fn run(self) -> CheckedSnapshot {
        let result = if self.install {
            self.decoder.decode(&self.data).map(Some)
        } else {
            self.decoder.check(self.index, &self.data).map(|()| None)
        };
        CheckedSnapshot { token: self.token, result }
    }
}

/// What a [`SnapshotCheck`] found: for an install, the decoded state (the replica's
/// protocol's, type-erased).
pub struct CheckedSnapshot {
    pub(crate) token: u64,
    pub(crate) result: Result<Option<StateBox>, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_of_a_group_start_at_different_fractions() {
        let at: Vec<u64> = (0..3).map(|r| Cadence::new(300, 0, r, 3).next_at).collect();
        assert_eq!(at, vec![300, 200, 100]);
        let mut c = Cadence::new(300, 1000, 2, 3);
        assert_eq!(c.next_at, 1100);
        c.taken(1100);
        assert_eq!(c.next_at, 1400);
        assert_eq!(Cadence::new(u64::MAX, 5, 1, 3).next_at, u64::MAX);
    }
}
