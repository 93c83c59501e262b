//! Nodes, messages, the event queue and the simulated network.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;

use luigi_protocol::msg::ReplicationMsg;
use luigi_txn::msg::{ClientMsg, ServerMsg};
use luigi_txn::peer::{PeerBody, PeerMsg};
use luigi_txn::types::{ClientId, ShardId};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::config::SimConfig;
use crate::hash::fnv1a;

/// Virtual time, µs since the start of the run.
pub type VirtualUs = u64;

/// A simulated process. Messages are addressed by node, never by role, so replicas and
/// leader-to-leader traffic slot in as new variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Node {
    /// A client running one coordinator.
    Client(ClientId),
    /// The leader of a shard: its one node in the ideal-log configuration of the cluster
    /// model ([`crate::run`]), where the configuration's per-leader links and clock offsets
    /// apply to it.
    Leader(ShardId),
    /// Replica `index` (from 0) of a shard's Raft group (the Raft cluster model of
    /// [`crate::failover`]).
    Replica(ShardId, u32),
}

impl Node {
    /// A stable number for hashing.
    pub fn code(self) -> u64 {
        match self {
            Node::Client(c) => c << 2,
            Node::Leader(s) => (u64::from(s) << 2) | 1,
            Node::Replica(s, i) => (((u64::from(s) << 16) | u64::from(i)) << 2) | 2,
        }
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Client(c) => write!(f, "c{c}"),
            Node::Leader(s) => write!(f, "L{s}"),
            Node::Replica(s, i) => write!(f, "R{s}.{i}"),
        }
    }
}

/// A message in flight between two nodes.
#[derive(Clone, Debug, PartialEq)]
pub enum SimMsg {
    /// Client to leader.
    ToLeader(ClientMsg),
    /// Leader to client.
    ToClient(ServerMsg),
    /// Leader to leader: the protocol's batch, opaque, or a progress report (never lost, see
    /// [`Network::send`]).
    Peer(PeerMsg),
    /// Replica to replica: Raft and snapshot transfers within a shard, leader announcements
    /// across shards.
    Replication(ReplicationMsg),
}

impl SimMsg {
    /// A stable hash of the message's wire encoding (postcard), for the trace hash.
    pub fn hash(&self) -> u64 {
        let encoded = match self {
            SimMsg::ToLeader(m) => postcard::to_stdvec(m).map(|b| (1u8, b)),
            SimMsg::ToClient(m) => postcard::to_stdvec(m).map(|b| (2u8, b)),
            SimMsg::Peer(PeerMsg { body: PeerBody::Protocol(bytes), .. }) => return fnv1a(bytes) ^ 3,
            // As when the report travelled in Luigi's batch of one `Progress` item (sender,
            // watermark 0, one item, the item's tag 7), so that traces stay comparable.
            SimMsg::Peer(PeerMsg { from, body: PeerBody::Progress(r) }) => {
                postcard::to_stdvec(&(from, 0u8, 1u8, 7u8, r)).map(|b| (3u8, b))
            }
            SimMsg::Replication(ReplicationMsg::Raft { bytes, .. }) => return fnv1a(bytes) ^ 4,
            SimMsg::Replication(ReplicationMsg::SnapshotChunk { transfer, seq, data, .. }) => {
                return fnv1a(data) ^ transfer.rotate_left(16) ^ u64::from(*seq).rotate_left(8) ^ 5
            }
            SimMsg::Replication(
                m @ (ReplicationMsg::LeaderIs { .. }
                | ReplicationMsg::SnapshotBegin { .. }
                | ReplicationMsg::SnapshotAck { .. }
                | ReplicationMsg::SnapshotCancel { .. }
                | ReplicationMsg::SnapshotRefuse { .. }
                | ReplicationMsg::AcceptsQuery { .. }
                | ReplicationMsg::Accepts { .. }
                | ReplicationMsg::LeaderLost { .. }
                | ReplicationMsg::ClockProbe { .. }
                | ReplicationMsg::ClockEcho { .. }),
            ) => postcard::to_stdvec(m).map(|b| (6u8, b)),
        };
        match encoded {
            Ok((tag, bytes)) => fnv1a(&bytes) ^ u64::from(tag),
            // Every protocol message is serializable (the runtime sends them with postcard);
            // fall back to the Debug text rather than abort a run over a hash.
            Err(_) => fnv1a(format!("{self:?}").as_bytes()),
        }
    }
}

/// What happens at an instant.
#[derive(Debug)]
pub enum EventKind {
    /// `msg` from `src` arrives at `dst`.
    Deliver {
        /// Sender.
        src: Node,
        /// Receiver.
        dst: Node,
        /// Message.
        msg: SimMsg,
    },
    /// `node` asked to be woken (its `next_deadline`); stale if `gen` is not its current one.
    Wake {
        /// The node.
        node: Node,
        /// Generation of the wake-up.
        gen: u64,
    },
    /// `client` starts submitting its workload.
    Start {
        /// The client.
        client: ClientId,
    },
    /// A replica's disk finishes syncing what was written before; stale if `gen` is not the
    /// replica's current incarnation (a crash loses the sync).
    Sync {
        /// The replica.
        node: Node,
        /// Incarnation of the replica.
        gen: u64,
    },
    /// A scheduled fault (crash, restart, isolation, heal), by index into the run's list.
    Fault {
        /// Index of the fault.
        index: usize,
    },
    /// The clients' links to replica `replica` of `shard` went down or came up (it crashed
    /// or restarted, or a cut that drops links began or healed), as a runtime client sees a
    /// connection close or reopen.
    ClientLinks {
        /// The replica's shard.
        shard: ShardId,
        /// The replica.
        replica: u32,
        /// They came up (false: they went down).
        up: bool,
    },
}

/// An event at a virtual time; `seq` (insertion order) breaks ties, so the order is total.
#[derive(Debug)]
pub struct Event {
    /// When.
    pub at: VirtualUs,
    /// Insertion order.
    pub seq: u64,
    /// What.
    pub kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    /// Reversed so that the max-heap pops the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The event queue: earliest (time, insertion order) first.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Event>,
    next_seq: u64,
}

impl EventQueue {
    /// Schedules `kind` at `at`.
    pub fn push(&mut self, at: VirtualUs, kind: EventKind) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Event { at, seq, kind });
    }

    /// The earliest event.
    pub fn pop(&mut self) -> Option<Event> {
        self.heap.pop()
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// Network counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Messages handed to the network.
    pub sent: u64,
    /// Messages lost.
    pub dropped: u64,
    /// Leader-to-leader batches sent.
    pub peer_batches: u64,
}

/// The simulated network: draws a delay per message from its link's distribution and keeps
/// links FIFO unless reordering is allowed.
///
/// Leader-to-leader links behave like the runtime's TCP connections: never lost (leaders do
/// not retransmit agreement items), FIFO unless both [`SimConfig::reorder`] is set and
/// [`SimConfig::peer_links_fifo`] is cleared. Different links are never ordered with respect
/// to each other: a message may overtake one sent earlier on another link whenever the delays
/// say so.
pub struct Network {
    rng: ChaCha8Rng,
    /// Latest scheduled delivery per directed link (FIFO mode).
    last_delivery: HashMap<(Node, Node), VirtualUs>,
    stats: NetStats,
}

impl Network {
    /// A network drawing from `rng`.
    pub fn new(rng: ChaCha8Rng) -> Self {
        Self { rng, last_delivery: HashMap::new(), stats: NetStats::default() }
    }

    /// Counters.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Sends `msg` from `src` to `dst` at `now`: schedules its delivery (or loses it).
    pub fn send(
        &mut self,
        config: &SimConfig,
        queue: &mut EventQueue,
        now: VirtualUs,
        src: Node,
        dst: Node,
        msg: SimMsg,
    ) {
        self.stats.sent += 1;
        let link = config.link(src, dst);
        let peer = match (src, dst) {
            (Node::Leader(_), Node::Leader(_)) => true,
            (Node::Replica(a, _), Node::Replica(b, _)) => a != b,
            _ => false,
        };
        if peer {
            self.stats.peer_batches += 1;
        } else if link.drop_rate > 0.0 && self.rng.gen_bool(link.drop_rate) {
            self.stats.dropped += 1;
            return;
        }
        let mut at = now + link.delay.sample_us(&mut self.rng);
        let fifo = !config.reorder || (peer && config.peer_links_fifo);
        if fifo {
            // Equal times keep send order through the queue's insertion sequence.
            let last = self.last_delivery.entry((src, dst)).or_insert(0);
            at = at.max(*last);
            *last = at;
        }
        queue.push(at, EventKind::Deliver { src, dst, msg });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn queue_pops_by_time_then_insertion() {
        let mut q = EventQueue::default();
        q.push(5, EventKind::Start { client: 1 });
        q.push(3, EventKind::Start { client: 2 });
        q.push(5, EventKind::Start { client: 3 });
        let order: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|e| match e.kind {
                EventKind::Start { client } => client,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(order, vec![2, 1, 3]);
    }

    /// A peer message numbered `i` (its bytes are the number: the network never reads them).
    fn peer(i: u64) -> SimMsg {
        SimMsg::Peer(PeerMsg { from: 0, body: PeerBody::Protocol(i.to_le_bytes().to_vec()) })
    }

    /// The number [`peer`] gave a message.
    fn number(msg: &PeerMsg) -> u64 {
        let PeerBody::Protocol(bytes) = &msg.body else { unreachable!("{msg:?}") };
        u64::from_le_bytes(bytes.as_slice().try_into().expect("eight bytes"))
    }

    /// Sends 200 messages on `link` and returns the order (by send index) they arrive in.
    fn arrivals(config: &SimConfig, src: Node, dst: Node) -> Vec<u64> {
        let mut net = Network::new(ChaCha8Rng::seed_from_u64(7));
        let mut q = EventQueue::default();
        for i in 0..200 {
            net.send(config, &mut q, i, src, dst, peer(i));
        }
        std::iter::from_fn(|| q.pop())
            .map(|e| match e.kind {
                EventKind::Deliver { msg: SimMsg::Peer(m), .. } => number(&m),
                other => unreachable!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn leader_links_never_lose_messages_and_stay_fifo_unless_told() {
        let (a, b) = (Node::Leader(0), Node::Leader(1));
        let mut config = SimConfig::new(1).shards(2).delay(1_000, 999).drop_rate(0.5).reorder(true);
        let fifo = arrivals(&config, a, b);
        assert_eq!(fifo, (0..200).collect::<Vec<_>>(), "lossless and FIFO like TCP");
        config.peer_links_fifo = false;
        let reordered = arrivals(&config, a, b);
        assert_eq!(reordered.len(), 200, "still lossless");
        assert!(reordered.windows(2).any(|w| w[0] > w[1]), "reordered within the link");
        // Client links keep their loss rate.
        let lossy = arrivals(&config, Node::Client(1), a);
        assert!(lossy.len() < 150, "{} of 200 arrived", lossy.len());
    }

    #[test]
    fn fifo_links_never_reorder() {
        let config = SimConfig::new(1).delay(1_000, 999);
        let mut net = Network::new(ChaCha8Rng::seed_from_u64(7));
        let mut q = EventQueue::default();
        for i in 0..200 {
            let msg = SimMsg::ToLeader(ClientMsg::Ping { sent_us: i });
            net.send(&config, &mut q, i, Node::Client(1), Node::Leader(0), msg);
        }
        let mut last = None;
        while let Some(e) = q.pop() {
            let EventKind::Deliver { msg: SimMsg::ToLeader(ClientMsg::Ping { sent_us }), .. } = e.kind else {
                unreachable!()
            };
            assert!(last < Some(sent_us), "overtaken");
            last = Some(sent_us);
        }
    }
}
