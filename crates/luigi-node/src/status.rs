//! A replica's state for `luigi status`, in any role.

use luigi_proto::leader::ShardLeader;
use luigi_proto::log::ReplicatedLog;
use luigi_proto::msg::{ReplicaRole, ReplicaStatus, StalledTxnInfo};
use luigi_proto::types::TimeUs;

use crate::node::ReplicaNode;

/// Stalled transactions listed (oldest first) in a status report.
pub const STATUS_STALLED_MAX: usize = 5;

impl ReplicaNode {
    /// This replica's state at `now` (its clock).
    pub fn status(&self, now: TimeUs) -> ReplicaStatus {
        let me = self.id();
        let r = self.replica();
        let log = r.log();
        let mut status = ReplicaStatus {
            shard: me.shard,
            replica: me.replica,
            role: match log.role() {
                luigi_raft::Role::Leader => ReplicaRole::Leader,
                luigi_raft::Role::Follower => ReplicaRole::Follower,
                luigi_raft::Role::Candidate => ReplicaRole::Candidate,
                luigi_raft::Role::PreCandidate => ReplicaRole::PreCandidate,
            },
            serving: false,
            term: log.term(),
            leader: r.leader_hint(),
            commit_index: log.commit_index(),
            applied_index: log.handed_out(),
            watermark: 0,
            clock_us: now,
            pending: 0,
            stalled_count: 0,
            stalled: Vec::new(),
        };
        match (r.leader(), r.follower()) {
            (Some(l), _) => leader_status(l, now, &mut status),
            (None, Some(f)) => (status.watermark, status.pending) = (f.applied_ts(), f.queued_len() as u64),
            (None, None) => {}
        }
        status
    }
}

fn leader_status<L: ReplicatedLog>(l: &ShardLeader<L>, now: TimeUs, status: &mut ReplicaStatus) {
    let stalled = l.stalled(now, usize::MAX);
    status.serving = true;
    (status.watermark, status.pending, status.stalled_count) =
        (l.watermark(), l.pending_len() as u64, stalled.len() as u64);
    status.stalled = stalled
        .into_iter()
        .take(STATUS_STALLED_MAX)
        .map(|t| StalledTxnInfo { id: t.id, shards: t.shards, age_us: t.age_us, durable: t.durable })
        .collect();
}
