//! A client's routes: which replica of each shard it sends a shard's transactions to
//! ([`ClientRoutes`], fed by `NotLeader` hints and watermarks). Every shell's client (the
//! tokio client, the simulator's) uses these; none keeps routing rules of its own.

use std::collections::HashMap;

use crate::msg::{ClientMsg, ServerMsg, TxnError};
use crate::types::{NodeId, Protocol, ShardId, Timestamp, TxnId};

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
            // A snapshot read may go to any replica: its sender picks one (rule 23).
            ClientMsg::Hello { .. } | ClientMsg::Ping { .. } | ClientMsg::Status | ClientMsg::SnapshotRead(_) => {
                (None, false)
            }
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
            | ServerMsg::FastAccept { .. }
            | ServerMsg::SnapshotRead(_) => {}
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
