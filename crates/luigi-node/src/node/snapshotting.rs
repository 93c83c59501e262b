//! Snapshots and compaction: this replica's own snapshot jobs and the compaction behind
//! them (a follower offers its snapshot to its leader), the checks of snapshots received
//! whole (the leader's, stepped into Raft; a follower's offer, compacted behind).

use bytes::Bytes;

use luigi_protocol::msg::SnapshotKind;
use luigi_raft::RaftError;
use luigi_replica::SnapshotImage;

use super::{replica_of, NodeError, ReplicaNode, Restored, SnapshotCrc};
use crate::effect::Effect;
use crate::snapshots::CheckedSnapshot;
use luigi_txn::types::NodeId;

impl ReplicaNode {
    /// A snapshot job ([`Effect::MakeSnapshot`]) finished: the log is compacted behind it
    /// (unless it moved past meanwhile, e.g. by installing the leader's snapshot), and a
    /// follower offers it to its leader (a transfer, see [`crate::snapshot_transfer`]).
    ///
    /// # Errors
    /// The job failed: the replica cannot make snapshots of its state.
    pub fn snapshot_made(
        &mut self,
        made: Result<SnapshotImage, RaftError>,
        fx: &mut Vec<Effect>,
    ) -> Result<(), NodeError> {
        let node = self.config.node;
        self.snapshots.making = false;
        let image = made.map_err(|source| NodeError::Raft { node, what: "making a snapshot", source })?;
        let log = &mut self.log;
        if !log.can_compact(image.index) {
            return Ok(());
        }
        let leader = log.leader_id().filter(|l| *l != node.raft_id());
        let snap = log.compact(image.index, image.data).map_err(|source| NodeError::Raft {
            node,
            what: "compacting",
            source,
        })?;
        self.snapshot_crc = Some(SnapshotCrc { index: snap.index, crc32: image.crc32 });
        self.snapshots.taken(snap.index);
        self.stats.snapshots_taken += 1;
        let (index, data) = (snap.index, snap.data.clone());
        fx.push(Effect::SaveSnapshot(snap));
        // Offered to the leader, which compacts its own log behind it.
        if let Some(leader) = leader {
            self.offer_snapshot(leader, index, data, image.crc32, fx);
        }
        Ok(())
    }

    /// Sends this follower's snapshot at `index` to its `leader` (Raft id) as an offer.
    fn offer_snapshot(&mut self, leader: u64, index: u64, data: Bytes, crc32: u32, fx: &mut Vec<Effect>) {
        let sent = self.transfers.send(
            self.now_us,
            leader,
            SnapshotKind::Offer,
            index,
            data,
            crc32,
            &mut self.transfer_events,
        );
        if let Err(why) = sent {
            tracing::debug!(node = %self.config.node, index, ?why, "snapshot not offered to the leader");
        }
        self.transfer_effects(fx);
    }

    /// A [`crate::snapshots::SnapshotCheck`] ([`Effect::CheckSnapshot`]) finished: a follower
    /// steps the leader's snapshot into Raft (installed, already decoded, when the log hands
    /// it out), a serving leader compacts behind a follower's offer.
    ///
    /// # Errors
    /// The snapshot does not load or does not fit the log (it is dropped; the shell logs it
    /// and goes on).
    pub fn snapshot_checked(&mut self, checked: CheckedSnapshot, fx: &mut Vec<Effect>) -> Result<(), String> {
        let Some(pos) = self.checks.iter().position(|c| c.token == checked.token) else {
            return Ok(()); // not ours (a shell bug) or already handled
        };
        let c = self.checks.swap_remove(pos);
        let from = replica_of(self.config.node.shard, c.from);
        let restored = match checked.result {
            Ok(restored) => restored,
            Err(e) => {
                self.stats.snapshots_rejected += 1;
                return Err(format!(
                    "snapshot at {} from {from} (transfer {}) does not load: {e}",
                    c.index, c.transfer
                ));
            }
        };
        match c.kind {
            SnapshotKind::Install { envelope } => {
                if self.log.is_leader() {
                    return Ok(()); // this replica leads now: the snapshot is stale
                }
                self.log
                    .step_snapshot(&envelope, c.data)
                    .map_err(|e| format!("snapshot at {} from {from}: {e}", c.index))?;
                self.restored = restored.map(|state| Restored { index: c.index, state, crc32: c.crc32 });
                Ok(())
            }
            SnapshotKind::Offer => self.compact_behind_offer(from, c.index, c.data, c.crc32, fx),
        }
    }

    /// Starts this replica's own snapshot when its cadence says so (one at a time).
    pub(super) fn snapshot_if_due(&mut self, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        if self.snapshots.making {
            return Ok(());
        }
        let node = self.config.node;
        let job = self
            .replica
            .own_snapshot_due(&self.log, self.snapshots.next_at)
            .map_err(|source| NodeError::Raft { node, what: "taking a snapshot", source })?;
        if let Some(job) = job {
            self.snapshots.making = true;
            fx.push(Effect::MakeSnapshot(job));
        }
        Ok(())
    }

    /// A follower's snapshot, checked off the event loop: the serving leader compacts its
    /// own log behind it.
    fn compact_behind_offer(
        &mut self,
        from: NodeId,
        index: u64,
        data: Bytes,
        crc32: u32,
        fx: &mut Vec<Effect>,
    ) -> Result<(), String> {
        if !self.replica.is_serving() {
            return Ok(()); // meant for the leader this replica no longer is
        }
        let log = &mut self.log;
        if !log.can_compact(index) {
            return Ok(());
        }
        let snap = log.compact(index, data).map_err(|e| format!("compacting behind {from}'s snapshot: {e}"))?;
        self.snapshot_crc = Some(SnapshotCrc { index, crc32 });
        self.stats.compactions_behind_offers += 1;
        fx.push(Effect::SaveSnapshot(snap));
        Ok(())
    }
}
