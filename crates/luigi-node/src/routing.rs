//! Where a serving leader's agreement batches go: the shard leaders it sends them to
//! ([`ShardRoutes`], fed by `LeaderIs` announcements). Both shells (server, simulator) use
//! it; neither keeps routing rules of its own. A client's routes are
//! `luigi_txn::client_core::ClientRoutes`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use luigi_txn::peer::PeerMsg;
use luigi_txn::types::{NodeId, ShardId};

/// Agreement batches kept for a shard whose leader is not reachable (yet or any more). Past
/// it the oldest is dropped: its items are not lost for good, stalled transactions are
/// recovered with `Recover` items (DESIGN.md rule 9).
pub const PEER_BACKLOG_BATCHES_MAX: usize = 1 << 16;

/// A serving leader's view of the other shards: who leads each (announced with `LeaderIs`,
/// newest term wins), which of their replicas are reachable, and the batches waiting for a
/// shard's leader to be reachable.
#[derive(Debug)]
pub struct ShardRoutes {
    /// The replica believed to serve each shard, and its term.
    leader_of: BTreeMap<ShardId, (u32, u64)>,
    /// Replicas of other shards this node has a link to.
    reachable: BTreeSet<NodeId>,
    /// Batches per shard, in order, not yet handed to a link.
    backlog: BTreeMap<ShardId, VecDeque<PeerMsg>>,
    /// Batches dropped from a full backlog.
    dropped: u64,
}

impl ShardRoutes {
    /// Routes for a cluster of `shards` shards, each first believed led by its replica 0 (a
    /// fresh cluster's first election is started by replica 0).
    pub fn new(shards: u32) -> Self {
        ShardRoutes {
            leader_of: (0..shards).map(|s| (s, (0, 0))).collect(),
            reachable: BTreeSet::new(),
            backlog: BTreeMap::new(),
            dropped: 0,
        }
    }

    /// The replica believed to lead `shard`.
    pub fn leader_of(&self, shard: ShardId) -> u32 {
        self.leader_of.get(&shard).map_or(0, |(replica, _)| *replica)
    }

    /// The node believed to lead `shard`, if a link to it is up.
    pub fn reachable_leader(&self, shard: ShardId) -> Option<NodeId> {
        let to = NodeId { shard, replica: self.leader_of(shard) };
        self.reachable.contains(&to).then_some(to)
    }

    /// A link to `node` is up (`true`) or gone.
    pub fn set_reachable(&mut self, node: NodeId, up: bool) {
        if up {
            self.reachable.insert(node);
        } else {
            self.reachable.remove(&node);
        }
    }

    /// `shard`'s leader announced itself; returns true if a new leadership began: an
    /// announcement of a later serving term, by another replica or by the same one again (a
    /// stale announcement, from an older term or repeated, changes nothing). A leader that
    /// starts serving in a new term has dropped what it was sent while it did not serve, so
    /// its peers send their pending agreement items again, also when it is the replica they
    /// already believed led (replica 0, at a cluster's start).
    pub fn leader_is(&mut self, shard: ShardId, replica: u32, term: u64) -> bool {
        let known = self.leader_of.get(&shard).copied().unwrap_or((0, 0));
        if term < known.1 || (replica, term) == known {
            return false;
        }
        self.leader_of.insert(shard, (replica, term));
        term > known.1 || replica != known.0
    }

    /// Queues `batch` for `shard`'s leader.
    pub fn push(&mut self, shard: ShardId, batch: PeerMsg) {
        let backlog = self.backlog.entry(shard).or_default();
        if backlog.len() >= PEER_BACKLOG_BATCHES_MAX {
            backlog.pop_front();
            self.dropped += 1;
            tracing::warn!(shard, queued = backlog.len(), "shard unreachable; dropped its oldest agreement batch");
        }
        backlog.push_back(batch);
    }

    /// A link refused `batch` (its queue is full): it goes back to the front of the queue.
    pub fn refused(&mut self, shard: ShardId, batch: PeerMsg) {
        self.backlog.entry(shard).or_default().push_front(batch);
    }

    /// Takes every queued batch whose shard's leader is reachable, in order, with the node
    /// to send it to.
    pub fn drain(&mut self, out: &mut Vec<(NodeId, PeerMsg)>) {
        for (shard, backlog) in &mut self.backlog {
            let to = NodeId { shard: *shard, replica: self.leader_of.get(shard).map_or(0, |(r, _)| *r) };
            if self.reachable.contains(&to) {
                out.extend(backlog.drain(..).map(|b| (to, b)));
            }
        }
    }

    /// Batches waiting for an unreachable leader.
    pub fn queued(&self) -> usize {
        self.backlog.values().map(VecDeque::len).sum()
    }

    /// Replicas of other shards with a link up.
    pub fn reachable(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.reachable.iter().copied()
    }

    /// Batches dropped from full backlogs so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}
