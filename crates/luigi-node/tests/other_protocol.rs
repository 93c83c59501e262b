//! A protocol other than Luigi's under [`ReplicaNode`]: a replicated counter, its own
//! [`ShardReplica`] proposing records of its own to the node's `RaftLog` (lent to it), built
//! by its own [`ReplicaFactory`].
//! A group of three elects a leader, replicates additions, answers clients once they are
//! committed, and brings a cut-off replica back through the leader's snapshot in chunks: the
//! node's election, replication, snapshot cadence, compaction and transfers are the same
//! code that runs Luigi's replicas.

use std::collections::BTreeMap;
use std::sync::Arc;

mod common;

use bytes::Bytes;
use common::{MiniCluster, Seen};
use luigi_node::{NodeConfig, ReplicaNode, Tuning};
use luigi_protocol::log::{LogEntry, ReplicatedLog};
use luigi_raft::{RaftError, RaftLog, RecoveredState};
use luigi_replica::{
    BuildError, LeaderFigures, ReplicaFactory, ReplicaSetup, ShardReplica, SnapshotDecoder, SnapshotImage, SnapshotJob,
    StateBox, Transition,
};
use luigi_store::Store;
use luigi_txn::msg::{ClientMsg, ReplicaStatus, ServerMsg, StalledTxnInfo, TxnError, TxnReply};
use luigi_txn::peer::{NodeOutput, PeerFacts, PeerMsg};
use luigi_txn::types::NodeId;
use luigi_txn::types::{ClientId, ShardId, TimeUs, Timestamp, Txn, TxnId};

/// The counter's record: (client, sequence number, amount added).
type Add = (u64, u64, u64);

/// The counter's snapshot image: its log index and value, 8 bytes LE each.
fn image(index: u64, value: u64) -> Bytes {
    let mut data = index.to_le_bytes().to_vec();
    data.extend_from_slice(&value.to_le_bytes());
    data.into()
}

fn read_image(data: &[u8]) -> Result<(u64, u64), String> {
    let bytes: [u8; 16] = data.try_into().map_err(|_| format!("{} bytes, not 16", data.len()))?;
    let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    Ok((word(0), word(8)))
}

struct CounterImages;

impl SnapshotDecoder for CounterImages {
    fn check(&self, index: u64, data: &[u8]) -> Result<(), String> {
        let (at, _) = read_image(data)?;
        if at == index {
            Ok(())
        } else {
            Err(format!("an image at {at}, offered at {index}"))
        }
    }

    fn decode(&self, data: &[u8]) -> Result<StateBox, String> {
        Ok(Box::new(read_image(data)?))
    }
}

/// A replicated counter: a serving replica proposes each dispatch's addition and answers it
/// with the sum once committed; every replica applies the committed additions.
struct Counter {
    shard: ShardId,
    value: u64,
    /// The log index `value` is at.
    applied: u64,
    serving: bool,
    /// Proposals of this replica's serving term: log index, and who waits for it.
    waiting: BTreeMap<u64, (ClientId, TxnId)>,
    executed: Vec<(TxnId, Timestamp)>,
    store: Store,
    /// Snapshots installed: all of them, and those not decoded off the loop beforehand.
    installs: (u32, u32),
}

const COUNTER_KEY: &[u8] = b"counter";

impl Counter {
    fn set(&mut self, index: u64, value: u64) {
        (self.applied, self.value) = (index, value);
        self.store.put(COUNTER_KEY.to_vec(), value.to_le_bytes().to_vec());
    }

    fn reply(&self, id: TxnId, ts: Timestamp, outcome: Result<Vec<u8>, TxnError>) -> ServerMsg {
        ServerMsg::Reply(TxnReply {
            id,
            shard: self.shard,
            ts,
            outcome,
            watermark: 0,
            arrival_delta_us: 0,
            rounds: 0,
            position: None,
            order: None,
            early: false,
        })
    }
}

impl ShardReplica for Counter {
    fn on_client(
        &mut self,
        log: &mut RaftLog,
        _now: TimeUs,
        client: ClientId,
        msg: ClientMsg,
        out: &mut Vec<NodeOutput>,
    ) {
        match msg {
            ClientMsg::Dispatch { txn, .. } => {
                let amount = u64::from_le_bytes(txn.args[..8].try_into().expect("8 bytes"));
                let proposed = if self.serving { log.propose((client, txn.id.seq, amount)).ok() } else { None };
                match proposed {
                    Some(index) => {
                        self.waiting.insert(index, (client, txn.id));
                    }
                    None => {
                        let hint = self.leader_hint(log);
                        let msg = self.reply(txn.id, 0, Err(TxnError::NotLeader { hint }));
                        out.push(NodeOutput::ToClient { client, msg });
                    }
                }
            }
            // A protocol of its own serves no snapshot reads: it leaves them unanswered here.
            ClientMsg::Hello { .. } | ClientMsg::Ping { .. } | ClientMsg::Status | ClientMsg::SnapshotRead(_) => {}
        }
    }

    fn on_peer(&mut self, _log: &mut RaftLog, _now: TimeUs, _msg: PeerMsg, _out: &mut Vec<NodeOutput>) -> bool {
        false
    }

    fn peer_leader_changed(&mut self, _shard: ShardId) {}

    fn turn(
        &mut self,
        log: &mut RaftLog,
        _now: TimeUs,
        out: &mut Vec<NodeOutput>,
    ) -> Result<Option<Transition>, RaftError> {
        let mut committed: Vec<LogEntry<Add>> = Vec::new();
        log.take_committed(&mut committed);
        if let Some(bad) = log.undecodable() {
            return Err(bad);
        }
        for e in committed {
            let (client, seq, amount) = e.record;
            let id = TxnId { client, seq };
            self.set(e.index, self.value + amount);
            self.executed.push((id, e.index));
            if let Some((client, id)) = self.waiting.remove(&e.index) {
                let msg = self.reply(id, e.index, Ok(self.value.to_le_bytes().to_vec()));
                out.push(NodeOutput::ToClient { client, msg });
            }
        }
        self.applied = self.applied.max(log.handed_out());
        if !self.serving && log.is_leader() && log.has_committed_in_term() && log.handed_out() >= log.commit_index() {
            self.serving = true;
            return Ok(Some(Transition::Promoted));
        }
        if self.serving && !log.is_leader() {
            self.serving = false;
            self.waiting.clear();
            return Ok(Some(Transition::Demoted));
        }
        Ok(None)
    }

    fn take_executed(&mut self) -> Vec<(TxnId, Timestamp)> {
        std::mem::take(&mut self.executed)
    }

    fn next_deadline(&self) -> Option<TimeUs> {
        None
    }

    fn is_serving(&self) -> bool {
        self.serving
    }

    fn leader_hint(&self, log: &RaftLog) -> Option<u32> {
        log.leader_id().map(|id| (id - 1) as u32)
    }

    fn store(&self) -> &Store {
        &self.store
    }

    fn own_snapshot_due(&self, log: &RaftLog, next_at: u64) -> Result<Option<SnapshotJob>, RaftError> {
        let (index, value) = (self.applied, self.value);
        if index < next_at || !log.can_compact(index) {
            return Ok(None);
        }
        Ok(Some(SnapshotJob::new(index, move || Ok(SnapshotImage::new(index, image(index, value))))))
    }

    fn snapshot_decoder(&self) -> Arc<dyn SnapshotDecoder> {
        Arc::new(CounterImages)
    }

    fn install_snapshot(&mut self, data: &[u8]) -> Result<Option<StateBox>, RaftError> {
        let state = CounterImages.decode(data).map_err(RaftError::Invalid)?;
        self.installs.1 += 1;
        self.install_decoded(state)
    }

    fn install_decoded(&mut self, state: StateBox) -> Result<Option<StateBox>, RaftError> {
        let (index, value) =
            *state.downcast::<(u64, u64)>().map_err(|_| RaftError::Invalid("not a counter's state".into()))?;
        let replaced = self.value;
        self.installs.0 += 1;
        self.set(index, value);
        self.serving = false;
        self.waiting.clear();
        Ok(Some(Box::new(replaced)))
    }

    fn status(&self, _now: TimeUs, status: &mut ReplicaStatus) {
        status.serving = self.serving;
        status.pending = self.waiting.len() as u64;
    }

    fn check_invariants(&self) -> Result<(), String> {
        let stored = self.store.get(COUNTER_KEY).map(|v| v.as_slice().to_vec());
        if self.value != 0 && stored != Some(self.value.to_le_bytes().to_vec()) {
            return Err(format!("the store holds {stored:?}, the counter {}", self.value));
        }
        Ok(())
    }

    fn stats_line(&self) -> String {
        format!("counter {} at {}, installs {:?}", self.value, self.applied, self.installs)
    }

    fn leader_figures(&self) -> Option<LeaderFigures> {
        self.serving.then(|| LeaderFigures { pending: self.waiting.len(), ..LeaderFigures::default() })
    }

    fn stalled(&self, _now: TimeUs) -> Vec<StalledTxnInfo> {
        Vec::new()
    }
}

/// Builds [`Counter`]s over their node's log: the counter from the log's snapshot, if any.
struct Counters;

impl ReplicaFactory for Counters {
    fn name(&self) -> &'static str {
        "counter"
    }

    /// The counter sends no peer messages.
    fn peer_facts(&self, _msg: &PeerMsg) -> PeerFacts {
        PeerFacts::default()
    }

    fn build(&self, setup: ReplicaSetup, log: &RaftLog) -> Result<Box<dyn ShardReplica>, BuildError> {
        let (applied, value) = match log.snapshot_data() {
            Some(data) => read_image(data)
                .map_err(|e| BuildError { what: "loading its snapshot", source: RaftError::Invalid(e) })?,
            None => (0, 0),
        };
        let mut counter = Counter {
            shard: setup.shard,
            value: 0,
            applied: 0,
            serving: false,
            waiting: BTreeMap::new(),
            executed: Vec::new(),
            store: Store::new(),
            installs: (0, 0),
        };
        counter.set(applied, value);
        Ok(Box::new(counter))
    }
}

const TICK_US: u64 = 10_000;

fn config(replica: u32) -> NodeConfig {
    let mut tuning = Tuning::for_delay(1_000, 100);
    tuning.raft_tick_us = TICK_US;
    tuning.snapshot_entries = 6;
    let mut c =
        NodeConfig::new(NodeId { shard: 0, replica }, vec![3], 42, tuning, luigi_workloads::procedures::builtins())
            .with_protocol(Arc::new(Counters));
    c.transfers.chunk_bytes = 4; // a 16-byte image: 4 chunks
    c.transfers.window_chunks = 2;
    c
}

fn add(seq: u64) -> ClientMsg {
    let txn = Arc::new(Txn {
        id: TxnId { client: 4, seq },
        procedure: "add".into(),
        args: seq.to_le_bytes().to_vec(),
        pieces: vec![],
        ts: 1,
    });
    ClientMsg::Dispatch { txn, sent_us: 0, acked_below: seq, fast: true }
}

/// Three replicas and the messages between them, and what they said.
struct Group {
    cluster: MiniCluster,
    now: u64,
    /// Replies to clients: (replica, reply).
    replies: Vec<(u32, TxnReply)>,
    transitions: Vec<(u32, Transition)>,
}

impl Group {
    fn new() -> Self {
        let nodes: Vec<ReplicaNode> =
            (0..3).map(|r| ReplicaNode::new(config(r), RecoveredState::default()).unwrap()).collect();
        Group { cluster: MiniCluster::new(nodes), now: 0, replies: Vec::new(), transitions: Vec::new() }
    }

    /// Notes the replies and transitions among what the replicas' effects left.
    fn note(&mut self, seen: Vec<Seen>) {
        for s in seen {
            match s {
                Seen::ToClient { replica, msg: ServerMsg::Reply(reply), .. } => self.replies.push((replica, reply)),
                Seen::Transition { replica, transition } => self.transitions.push((replica, transition)),
                Seen::ToClient { .. } | Seen::Executed { .. } | Seen::HeldCheck { .. } => {}
            }
        }
    }

    /// Client message `msg` to replica `i`.
    fn client(&mut self, i: u32, msg: ClientMsg) {
        let mut fx = Vec::new();
        self.cluster.nodes[i as usize].on_client(self.now, 4, msg, &mut fx);
        let seen = self.cluster.execute(i, self.now, fx).unwrap();
        self.note(seen);
    }

    /// Advances 1 ms: every replica turns, and every message in flight is delivered.
    fn step(&mut self) {
        self.now += 1_000;
        for i in 0..3 {
            let seen = self.cluster.turn(i, self.now).unwrap();
            self.note(seen);
        }
        let now = self.now;
        let seen = self.cluster.deliver(|_| now, 10_000).unwrap();
        self.note(seen);
    }

    fn leader(&self) -> Option<usize> {
        self.cluster.nodes.iter().position(|n| n.replica().is_serving())
    }

    /// Replica `i`'s counter, as its store holds it (0 before the first addition).
    fn value(&self, i: usize) -> u64 {
        let stored = self.cluster.nodes[i].replica().store().get(COUNTER_KEY).map(|v| v.as_slice().to_vec());
        stored.map_or(0, |v| u64::from_le_bytes(v.try_into().expect("8 bytes")))
    }

    /// Replica `i`'s stats line (the counter's installs are on it).
    fn stats_line(&self, i: usize) -> String {
        self.cluster.nodes[i].replica().stats_line()
    }
}

#[test]
fn a_replicated_counter_elects_replicates_and_catches_up_by_snapshot_under_the_node() {
    let mut g = Group::new();
    for _ in 0..200 {
        g.step();
        if g.leader().is_some() {
            break;
        }
    }
    assert_eq!(g.leader(), Some(0), "replica 0 starts the first election");
    assert_eq!(g.transitions, vec![(0, Transition::Promoted)]);
    assert_eq!(g.cluster.nodes[0].status(g.now).leader, Some(0));

    // A follower refuses with a hint to the leader.
    g.client(1, add(100));
    let refused = g.replies.pop().expect("a refusal");
    assert_eq!(
        refused,
        (1, TxnReply { ts: 0, outcome: Err(TxnError::NotLeader { hint: Some(0) }), ..refused.1.clone() })
    );

    // Replica 2 is cut off while the others count, snapshot and compact.
    g.cluster.cut[2] = true;
    for seq in 1..=30 {
        g.client(0, add(seq));
        g.step();
    }
    let sums: Vec<u64> =
        g.replies.iter().map(|(_, r)| u64::from_le_bytes(r.outcome.clone().unwrap().try_into().unwrap())).collect();
    let expected: Vec<u64> = (1..=30).map(|n| n * (n + 1) / 2).collect();
    assert_eq!(sums, expected, "each answered once committed, with the sum so far");
    assert_eq!((g.value(0), g.value(1), g.value(2)), (465, 465, 0));
    assert!(g.cluster.nodes[1].stats().snapshots_taken > 0, "the follower's cadence made snapshot jobs");
    let compacted = g.cluster.nodes[0].log().snapshot_index();
    assert!(compacted > g.cluster.nodes[2].log().last_index(), "replica 2 is behind the compaction");

    // Back: the leader's snapshot reaches it in chunks; it checks, decodes and installs it.
    g.cluster.cut[2] = false;
    for _ in 0..400 {
        g.step();
        if g.cluster.nodes[2].stats().snapshots_installed > 0
            && g.cluster.nodes[2].transfers_in_flight() == luigi_node::node::InFlight::default()
        {
            break;
        }
    }
    for _ in 0..20 {
        g.step();
    }
    assert_eq!(g.cluster.nodes[2].stats().snapshots_installed, 1);
    assert!(
        g.stats_line(2).contains("installs (1, 0)"),
        "decoded off the loop by the counter's decoder, then installed: {}",
        g.stats_line(2)
    );
    assert!(g.cluster.nodes[0].transfer_stats().delivered > 0, "the leader's snapshot went as a transfer");
    assert_eq!(g.value(2), 465);
    let hash = g.cluster.nodes[0].replica().store().state_hash();
    assert!(g.cluster.nodes.iter().all(|n| n.replica().store().state_hash() == hash), "every store is equal");

    // Replication goes on, to every replica.
    g.client(0, add(31));
    for _ in 0..20 {
        g.step();
    }
    assert_eq!((g.value(0), g.value(1), g.value(2)), (496, 496, 496));
    assert!(g.cluster.nodes.iter().all(|n| n.replica().check_invariants().is_ok()));
    assert_eq!(g.cluster.refusals, Vec::<String>::new(), "nothing within the group refused");
    assert_eq!(g.cluster.snapshot_refusals, Vec::<String>::new());
}
