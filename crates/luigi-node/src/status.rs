//! A replica's state for `luigi status`, in any role.

use luigi_txn::msg::{ReplicaRole, ReplicaStatus};
use luigi_txn::types::TimeUs;

use crate::node::ReplicaNode;

/// Stalled transactions listed (oldest first) in a status report (Luigi's leader).
pub use luigi_protocol::replica::STATUS_STALLED_MAX;

impl ReplicaNode {
    /// This replica's state at `now` (its clock): the log's part here, the state machine's
    /// by its protocol ([`luigi_replica::ShardReplica::status`]).
    pub fn status(&self, now: TimeUs) -> ReplicaStatus {
        let me = self.id();
        let r = self.replica();
        let log = self.log();
        let mut status = ReplicaStatus {
            shard: me.shard,
            replica: me.replica,
            protocol: self.factory().name().to_string(),
            role: match log.role() {
                luigi_raft::Role::Leader => ReplicaRole::Leader,
                luigi_raft::Role::Follower => ReplicaRole::Follower,
                luigi_raft::Role::Candidate => ReplicaRole::Candidate,
                luigi_raft::Role::PreCandidate => ReplicaRole::PreCandidate,
            },
            serving: false,
            term: log.term(),
            leader: r.leader_hint(log),
            commit_index: log.commit_index(),
            applied_index: log.handed_out(),
            watermark: 0,
            clock_us: now,
            pending: 0,
            stalled_count: 0,
            stalled: Vec::new(),
            answer_clients: 0,
            answers: 0,
            clock: self.clock().status(now),
        };
        r.status(now, &mut status);
        status
    }
}
