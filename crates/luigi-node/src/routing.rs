//! Where messages go: the shard leaders a serving leader sends agreement batches to
//! ([`ShardRoutes`], fed by `LeaderIs` announcements), and the replica a client sends a
//! shard's transactions to ([`ClientRoutes`], fed by `NotLeader` hints and watermarks). Both
//! shells (server, client, simulator) use these; neither keeps routing rules of its own.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;

use luigi_protocol::msg::PeerBatch;
use luigi_txn::msg::{ClientMsg, ServerMsg, TxnError};
use luigi_txn::types::{Protocol, ShardId, Timestamp, TxnId};

/// Identity of a server node: one replica of one shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    /// Shard.
    pub shard: ShardId,
    /// Replica index within the shard, from 0.
    pub replica: u32,
}

impl NodeId {
    /// The node's name, `s{shard}r{replica}`.
    pub fn name(&self) -> String {
        self.to_string()
    }

    /// The node's Raft id within its group (replica index + 1: Raft ids are non-zero).
    pub fn raft_id(&self) -> u64 {
        u64::from(self.replica) + 1
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}r{}", self.shard, self.replica)
    }
}

impl FromStr for NodeId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("node name '{s}' is not of the form s<shard>r<replica>, e.g. s0r0");
        let rest = s.strip_prefix('s').ok_or_else(bad)?;
        let (shard, replica) = rest.split_once('r').ok_or_else(bad)?;
        Ok(NodeId { shard: shard.parse().map_err(|_| bad())?, replica: replica.parse().map_err(|_| bad())? })
    }
}

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
    backlog: BTreeMap<ShardId, VecDeque<PeerBatch>>,
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

    /// `shard`'s leader announced itself; returns true if the leader changed (a stale
    /// announcement, from an older term, changes nothing).
    pub fn leader_is(&mut self, shard: ShardId, replica: u32, term: u64) -> bool {
        let known = self.leader_of.get(&shard).copied().unwrap_or((0, 0));
        if term < known.1 || (replica, term) == known {
            return false;
        }
        self.leader_of.insert(shard, (replica, term));
        replica != known.0
    }

    /// Queues `batch` for `shard`'s leader.
    pub fn push(&mut self, shard: ShardId, batch: PeerBatch) {
        let backlog = self.backlog.entry(shard).or_default();
        if backlog.len() >= PEER_BACKLOG_BATCHES_MAX {
            backlog.pop_front();
            self.dropped += 1;
            tracing::warn!(shard, queued = backlog.len(), "shard unreachable; dropped its oldest agreement batch");
        }
        backlog.push_back(batch);
    }

    /// A link refused `batch` (its queue is full): it goes back to the front of the queue.
    pub fn refused(&mut self, shard: ShardId, batch: PeerBatch) {
        self.backlog.entry(shard).or_default().push_front(batch);
    }

    /// Takes every queued batch whose shard's leader is reachable, in order, with the node
    /// to send it to.
    pub fn drain(&mut self, out: &mut Vec<(NodeId, PeerBatch)>) {
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

/// Dispatches a [`ClientRoutes`] remembers (to notice resends with no news).
pub const SENDS_REMEMBERED_MAX: usize = 1 << 20;

/// A client's guess of each shard's leader. A `NotLeader` answer moves the guess to the
/// hinted replica (or the next one), a watermark newer than any heard moves it to its sender
/// (only a serving leader broadcasts watermarks), and a resend of the same transaction with
/// no news since the last send moves it to the next replica: the guessed leader may be cut
/// off, crashed with its connection still open, or deposed without knowing.
///
/// A guess made without news (the next replica after a lost connection, a resend, or a
/// `NotLeader` naming nobody) is unsure: while it is, a dispatch goes to every reachable
/// replica of the shard. During an election the replicas hold it until they know the
/// winner (`luigi-raft`'s `waiting`): the winner admits it as soon as it serves, and the
/// others name the winner. The client does not walk the group a round trip per guess. Only
/// for protocols whose leaders answer a duplicate dispatch as they answered the first
/// ([`ClientRoutes::broadcasting_when_unsure`]): Luigi's do (rule 7's answer table); the
/// baselines' do not for an abort they never logged.
#[derive(Debug)]
pub struct ClientRoutes {
    /// Replicas per shard.
    replicas: Vec<u32>,
    /// Per shard: the guessed replica, and a counter bumped whenever the guess changes.
    guess: Vec<(u32, u64)>,
    /// Per shard: whether the guess was made without news of a leader.
    unsure: Vec<bool>,
    /// Whether an unsure guess sends a dispatch to every reachable replica.
    broadcast: bool,
    /// Whether the fast path is on: a dispatch that asks for it goes to every reachable
    /// replica, and any replica's link changing resends what waits.
    fan_out: bool,
    /// Highest watermark heard from any replica of each shard.
    best_watermark: Vec<Timestamp>,
    /// Per (transaction, shard): the guess counter when its dispatch was last sent.
    sent_with: HashMap<(TxnId, ShardId), u64>,
}

impl ClientRoutes {
    /// Routes for shards of `replicas[s]` replicas each, first guessing replica 0 (a fresh
    /// cluster's first election is started by replica 0).
    pub fn new(replicas: Vec<u32>) -> Self {
        let n = replicas.len();
        ClientRoutes {
            replicas,
            guess: vec![(0, 0); n],
            unsure: vec![false; n],
            broadcast: false,
            fan_out: false,
            best_watermark: vec![0; n],
            sent_with: HashMap::new(),
        }
    }

    /// Routes that send a dispatch to every reachable replica of a shard while the guess of
    /// its leader is unsure.
    pub fn broadcasting_when_unsure(mut self) -> Self {
        self.broadcast = true;
        self
    }

    /// Routes that send every dispatch asking for the fast path (`fast`, DESIGN.md rule 20)
    /// to every reachable replica, the guessed leader first: the fast path's followers
    /// accept it directly (DESIGN.md, the fast path).
    pub fn fanning_out(mut self) -> Self {
        self.fan_out = true;
        self.broadcast = true;
        self
    }

    /// The routes a client of `protocol` uses: broadcasting while unsure for Luigi only.
    pub fn for_protocol(replicas: Vec<u32>, protocol: Protocol) -> Self {
        let routes = Self::new(replicas);
        match protocol {
            Protocol::Luigi => routes.broadcasting_when_unsure(),
            Protocol::Occ | Protocol::TwoPl | Protocol::Direct => routes,
        }
    }

    /// Shards in the cluster.
    pub fn shards(&self) -> u32 {
        self.replicas.len() as u32
    }

    /// Replicas of `shard`.
    pub fn replicas(&self, shard: ShardId) -> u32 {
        self.replicas.get(shard as usize).copied().unwrap_or(0)
    }

    /// The replicas to send `msg` for `shard` to, among those `reachable` says the client
    /// can reach (none: none of them): the guessed leader, or (when broadcasting) for a
    /// dispatch while the guess is unsure every reachable replica, the guess first. Records
    /// a dispatch's send, so that a resend with no news in between tries the next replica.
    pub fn route(&mut self, shard: ShardId, msg: &ClientMsg, reachable: impl Fn(u32) -> bool) -> Vec<u32> {
        let s = shard as usize;
        let Some(&n) = self.replicas.get(s) else { return Vec::new() };
        if n == 0 {
            return Vec::new();
        }
        let (key, fast) = match msg {
            ClientMsg::Dispatch { txn, fast, .. } => (Some((txn.id, shard)), *fast),
            ClientMsg::Hello { .. } | ClientMsg::Ping { .. } | ClientMsg::Status => (None, false),
        };
        if let Some(k) = key {
            if self.sent_with.get(&k) == Some(&self.guess[s].1) {
                self.move_guess(s, (self.guess[s].0 + 1) % n, true);
            }
        }
        let start = self.guess[s].0;
        let Some(replica) = (0..n).map(|step| (start + step) % n).find(|r| reachable(*r)) else {
            return Vec::new();
        };
        if replica != start {
            self.move_guess(s, replica, true);
        }
        let Some(k) = key else { return vec![replica] };
        if self.sent_with.len() >= SENDS_REMEMBERED_MAX {
            // Bounded: forgetting only costs a resend's move to the next replica.
            self.sent_with.clear();
        }
        self.sent_with.insert(k, self.guess[s].1);
        if !(self.fan_out && fast || self.broadcast && self.unsure[s]) {
            return vec![replica];
        }
        (0..n).map(|step| (replica + step) % n).filter(|r| reachable(*r)).collect()
    }

    /// Whether the link to `replica` of `shard` coming up or going down should send the
    /// dispatches still waiting on `shard` again soon rather than after the full retry
    /// timeout: it is the replica believed to lead, or, fanning out, any replica (the
    /// guess follows watermarks and may sit on a follower; a dispatch that missed the
    /// leader's link goes unanswered, since a fast-path follower only accepts).
    pub fn link_change_resends(&self, shard: ShardId, replica: u32) -> bool {
        self.fan_out || self.guess(shard) == replica
    }

    /// `msg` came from `node`: follows a `NotLeader` hint or a newer watermark.
    pub fn on_server_msg(&mut self, node: NodeId, msg: &ServerMsg) {
        let s = node.shard as usize;
        let Some(&n) = self.replicas.get(s) else { return };
        match msg {
            ServerMsg::Reply(r) => {
                if let Err(TxnError::NotLeader { hint }) = &r.outcome {
                    let named = hint.filter(|h| *h != node.replica && *h < n);
                    if let Some(leader) = named.filter(|_| self.unsure[s] || self.guess[s].0 == node.replica) {
                        // A replica names the leader only once it heard from it.
                        self.move_guess(s, leader, false);
                    } else if self.guess[s].0 == node.replica {
                        self.move_guess(s, (node.replica + 1) % n, true);
                    }
                }
            }
            ServerMsg::Watermark { watermark, .. } => {
                if *watermark > self.best_watermark[s] {
                    self.best_watermark[s] = *watermark;
                    if self.guess[s].0 != node.replica || self.unsure[s] {
                        self.move_guess(s, node.replica, false);
                    }
                }
            }
            // A progress report names no leader a client could route by.
            ServerMsg::Pong { .. }
            | ServerMsg::Status(_)
            | ServerMsg::Progress(_)
            | ServerMsg::Promise { .. }
            | ServerMsg::FastAccept { .. } => {}
        }
    }

    /// The client is done with `id` (answered or given up): forgets its sends.
    pub fn forget(&mut self, id: TxnId) {
        for s in 0..self.replicas.len() as ShardId {
            self.sent_with.remove(&(id, s));
        }
    }

    /// The replica guessed to lead `shard`.
    pub fn guess(&self, shard: ShardId) -> u32 {
        self.guess.get(shard as usize).map_or(0, |g| g.0)
    }

    /// Dispatches remembered (bounded by the client's transactions in flight and unresolved).
    pub fn remembered(&self) -> usize {
        self.sent_with.len()
    }

    /// Whether the guess for `shard` was made without news of a leader.
    pub fn is_unsure(&self, shard: ShardId) -> bool {
        self.unsure.get(shard as usize).copied().unwrap_or(false)
    }

    fn move_guess(&mut self, s: usize, replica: u32, unsure: bool) {
        self.guess[s] = (replica, self.guess[s].1 + 1);
        self.unsure[s] = unsure;
    }
}
