//! The replicated world: every shard is a Raft group of [`ReplicaNode`]s, the node the
//! server runs (a follower or the serving [`ShardLeader`](luigi_proto::leader::ShardLeader)
//! over its own Raft log, with its ticks, elections, snapshots and routing), and the run
//! injects faults: replica crashes and restarts, isolations and Raft-only partitions, leader
//! kills at named points of a cross-shard transaction, and coordinators that die after
//! dispatching to only some participants (DESIGN.md, "Failure handling"). This world only
//! executes each node's effects (`replicas.rs`); every decision about what to call on the
//! cores and when is the node's, as in the server.
//!
//! - Messages travel on the simulated network (seeded delays, the default link's loss rate
//!   for client and Raft traffic, reordering if [`SimConfig::reorder`]); links between
//!   servers go down when either end crashes or is cut off and come back when it heals, and
//!   each node hears of it as a server hears of its connections (a serving leader announces
//!   itself with `LeaderIs` on every new link).
//! - Each replica has a simulated disk: what a `Persist` effect asks to write is written at
//!   once and becomes durable only when the disk syncs ([`FaultConfig::sync`] after the first
//!   write that must be synced); the node hears `persisted` only then. A crash loses
//!   everything not synced. A restart builds a new node from what is durable, which replays
//!   the committed log.
//! - Clients route with the runtime client's rules ([`ClientRoutes`]): `NotLeader` hints,
//!   newer watermarks, and the next replica when a dispatch is resent with no news.
//!   Agreement batches go to the replica the sending node believes leads the shard.
//! - Faults: a seeded schedule of random faults (at most one faulty replica per shard at a
//!   time, healed after [`FaultConfig::down`]), and/or kills at a [`KillPoint`], detected by
//!   watching a serving leader's effects and counters around each call.
//!
//! Checks during the run: each state machine (a replica between restarts and demotions)
//! executes a transaction at most once, and only once every participant's `PREPARE` (and, if
//! proposals differed, the final timestamp) is committed in that participant's group (rule 4;
//! committed = at or below the highest commit index any replica of the group reports); a
//! serving leader's watermark never goes back; replies carry the same timestamp from every
//! replica and every retry, never at or below a watermark the shard published before the
//! dispatch arrived. After every transaction is answered (or orphaned by a dead client), the
//! run heals everything and waits until every shard has one serving leader with nothing
//! pending and every replica holds the same store. Then: every replica's committed log agrees
//! with every other's (Raft safety), every answered transaction is durable (prepared, not
//! aborted) on every participant at the answered timestamp, and the [`checker`] replays every
//! ordered transaction (and every executed orphan) against the final stores.

use std::collections::{BTreeMap, HashMap, HashSet};

use luigi_node::{NodeId, ReplicaNode};
use luigi_proto::coordinator::CoordOutput;
use luigi_proto::log::LogRecord;
use luigi_proto::msg::{ClientMsg, ReplicationMsg, TxnError, TxnReply};
use luigi_proto::types::{ClientId, ShardId, Timestamp, TxnId};
use luigi_raft::replica::Replica;
use luigi_store::Store;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::checker::{self, CheckOptions, Moment, TxnRecord};
use crate::config::SimConfig;
use crate::hash::fold;
use crate::log::Durable;
use crate::net::{EventKind, EventQueue, Network, Node, SimMsg, VirtualUs};
use crate::procedure;
use crate::violation::{Violation, ViolationKind};
use crate::workload::Workload;

mod checks;
mod config;
mod faults;
mod replicas;

pub use config::{failover_config, FailoverReport, FaultConfig, KillPoint, Outage};

use crate::clients::{ClientNode, ClientState, ClientWorld};
use replicas::{new_node, SimReplica};

/// Runs a replicated simulation with faults and checks it.
pub fn run_replicated(config: &SimConfig, faults: &FaultConfig) -> Result<FailoverReport, Violation> {
    let summary = format!("{} {}", config.summary(), faults.summary());
    let tag = |v: Violation| v.in_run(config.seed, summary.clone());
    config.validate().map_err(|why| tag(Violation::new(ViolationKind::Config, why)))?;
    if faults.replicas == 0 || faults.raft_tick_us == 0 {
        return Err(tag(Violation::new(ViolationKind::Config, "replicas and raft_tick_us must be >= 1")));
    }
    let mut world = FailoverWorld::new(config, faults).map_err(tag)?;
    world.run().map_err(tag)?;
    world.finish().map_err(tag)
}

/// What each shard's group has committed, from the highest commit index any replica reports.
#[derive(Default)]
struct Oracle {
    /// (term, data hash) of every committed entry, index 1 first.
    entries: Vec<(u64, u64)>,
    durable: HashMap<TxnId, Durable>,
}

#[derive(Clone, Copy, Debug)]
enum FaultAction {
    /// Draw and apply the next random fault.
    Random,
    Restart(ShardId, u32),
    Heal(ShardId, u32),
    /// A majority of the shard crashes (see [`Outage`]).
    LoseMajority(Outage),
}

type Step = Result<(), Violation>;

const BUSY_BACKOFF_MAX_US: u64 = 64;

struct FailoverWorld<'a> {
    config: &'a SimConfig,
    faults: &'a FaultConfig,
    n: u32,
    now: VirtualUs,
    step: u64,
    queue: EventQueue,
    net: Network,
    disk_rng: ChaCha8Rng,
    fault_rng: ChaCha8Rng,
    /// The clients and what they were told.
    cs: ClientState,
    replicas: Vec<Vec<SimReplica>>,
    orphans: BTreeMap<TxnId, Option<Timestamp>>,
    /// When a fault was last repaired (a restart or a heal), virtual µs.
    last_repair_us: VirtualUs,
    events: u64,
    delivered: u64,
    trace_hash: u64,
    /// Per shard, the largest watermark any serving leader of it published.
    published: Vec<Timestamp>,
    oracle: Vec<Oracle>,
    fault_list: Vec<FaultAction>,
    kills_left: u32,
    next_kill_ok_at: VirtualUs,
    /// (shard, transaction) pairs whose first `Propose` was seen.
    proposed: HashSet<(ShardId, TxnId)>,
    quiescing: bool,
    answered_at: VirtualUs,
    report: FailoverReport,
}

impl<'a> FailoverWorld<'a> {
    fn new(config: &'a SimConfig, faults: &'a FaultConfig) -> Result<Self, Violation> {
        let mut master = ChaCha8Rng::seed_from_u64(config.seed ^ 0xfa11_0e12);
        let derive = |rng: &mut ChaCha8Rng| ChaCha8Rng::seed_from_u64(rng.gen());
        let net = Network::new(derive(&mut master));
        let workload = Workload::new(config, derive(&mut master));
        let mut disk_rng = derive(&mut master);
        let fault_rng = derive(&mut master);
        let max = config.clock_offset_max_us as i64;
        let mut offset = |node: Node| {
            let drawn = master.gen_range(-max..=max);
            config.clock_offsets.get(&node).copied().unwrap_or(drawn)
        };
        let n = faults.replicas;
        let clients: Vec<ClientNode> = (1..=u64::from(config.clients))
            .map(|id| ClientNode::new(config, id, n, offset(Node::Client(id))))
            .collect();
        let mut replicas = Vec::new();
        for s in 0..config.shards {
            let mut group = Vec::new();
            for i in 0..n {
                let offset_us = offset(Node::Replica(s, i));
                let mut node = SimReplica::new(offset_us, disk_rng.gen());
                node.node = Some(new_node(config, faults, s, i, &mut node.disk)?);
                group.push(node);
            }
            replicas.push(group);
        }
        let mut world = Self {
            config,
            faults,
            n,
            now: 0,
            step: 0,
            queue: EventQueue::default(),
            net,
            disk_rng,
            fault_rng,
            cs: ClientState::new(clients, workload),
            replicas,
            orphans: BTreeMap::new(),
            events: 0,
            delivered: 0,
            trace_hash: fold(0, config.seed ^ 0xfa11),
            published: vec![0; config.shards as usize],
            oracle: (0..config.shards).map(|_| Oracle::default()).collect(),
            fault_list: Vec::new(),
            kills_left: faults.kills,
            next_kill_ok_at: 0,
            proposed: HashSet::new(),
            quiescing: false,
            answered_at: 0,
            last_repair_us: 0,
            report: FailoverReport { seed: config.seed, txns: config.txns, ..FailoverReport::default() },
        };
        for client in 1..=u64::from(config.clients) {
            let at = master.gen_range(0..=config.start_spread_us);
            world.queue.push(at, EventKind::Start { client });
        }
        if faults.random_faults {
            let at = faults.fault_gap.sample(&mut world.fault_rng);
            world.schedule_fault(at, FaultAction::Random);
        }
        for outage in &faults.outages {
            if outage.shard >= config.shards {
                let msg = format!("outage of shard {} in a {}-shard run", outage.shard, config.shards);
                return Err(Violation::new(ViolationKind::Config, msg));
            }
            world.schedule_fault(outage.at_us, FaultAction::LoseMajority(*outage));
        }
        Ok(world)
    }

    fn violation(&self, kind: ViolationKind, message: impl Into<String>) -> Violation {
        Violation::new(kind, message).at(self.now)
    }

    fn moment(&mut self) -> Moment {
        self.step += 1;
        Moment { us: self.now, step: self.step }
    }

    fn trace(&self, what: impl FnOnce() -> String) {
        if self.config.trace {
            eprintln!("[{:>10} us] {}", self.now, what());
        }
    }

    fn schedule_fault(&mut self, at: VirtualUs, action: FaultAction) {
        let index = self.fault_list.len();
        self.fault_list.push(action);
        self.queue.push(at, EventKind::Fault { index });
    }

    fn run(&mut self) -> Step {
        // Every replica starts with its links up; replica 0 of each group starts the first
        // election in its first turn (the node's rule, as in the server).
        for s in 0..self.config.shards {
            for i in 0..self.n {
                self.links_up(s, i)?;
            }
        }
        if self.config.ping_first {
            for c in 1..=u64::from(self.config.clients) {
                self.call_client(c, false, |coord, local, shards, out| {
                    for shard in 0..shards {
                        coord.ping(local, shard, out);
                    }
                })?;
            }
        }
        while self.cs.answered + (self.orphans.len() as u64) < self.config.txns {
            self.step_event(self.config.max_virtual_us)?;
            self.check_liveness()?;
        }
        self.answered_at = self.now;
        self.report.end_us = self.now;
        self.quiesce()
    }

    /// Once no fault is left to come or to heal, answers must keep coming (see
    /// [`FaultConfig::liveness_us`]).
    fn check_liveness(&mut self) -> Step {
        let faults_over = self
            .faults
            .outages
            .iter()
            .map(|o| o.at_us + o.down_us)
            .max()
            .unwrap_or(0)
            .max(self.faults.faults_until_us + self.faults.down.mean_us + self.faults.down.jitter_us);
        if self.now < faults_over || self.now < self.last_repair_us {
            return Ok(());
        }
        let since = self.cs.last_answer_us.max(self.last_repair_us).max(faults_over);
        let gap_us = self.now - since;
        self.report.recovery_us = self.report.recovery_us.max(gap_us);
        if gap_us > self.faults.liveness_us {
            let msg = format!(
                "liveness: no transaction answered for {gap_us} us after every fault healed (bound {} us); \
                 {} of {} answered",
                self.faults.liveness_us, self.cs.answered, self.config.txns
            );
            return Err(self.violation(ViolationKind::Stuck, msg));
        }
        Ok(())
    }

    /// Heals every fault and runs until the cluster converges.
    fn quiesce(&mut self) -> Step {
        self.quiescing = true;
        self.trace(|| "quiescing: healing every fault".into());
        for s in 0..self.config.shards {
            for i in 0..self.n {
                let node = &mut self.replicas[s as usize][i as usize];
                let cut = node.isolated || node.raft_cut;
                node.isolated = false;
                node.raft_cut = false;
                if node.node.is_none() {
                    self.restart(s, i)?;
                } else if cut {
                    self.links_up(s, i)?;
                }
            }
        }
        let deadline = self.now.saturating_add(self.faults.settle_us);
        let mut k = 0u64;
        loop {
            if k.is_multiple_of(128) && self.converged() {
                return Ok(());
            }
            k += 1;
            if let Err(v) = self.step_event(deadline) {
                if v.kind == ViolationKind::Stuck {
                    return Err(self.not_converged());
                }
                return Err(v);
            }
        }
    }

    fn converged(&self) -> bool {
        // Every live coordinator has heard every participant of everything it reported.
        let clients_settled = self.cs.nodes.iter().all(|c| c.dead || c.coord.unresolved() == 0);
        clients_settled
            && self.replicas.iter().all(|group| {
                let serving: Vec<&Replica> = group
                    .iter()
                    .filter_map(|n| n.node.as_ref().map(ReplicaNode::replica))
                    .filter(|r| r.is_serving())
                    .collect();
                let [leader] = serving.as_slice() else { return false };
                let l = leader.leader().expect("serving");
                let hash = l.store().state_hash();
                l.pending_len() == 0
                    && group.iter().all(|n| {
                        n.node.as_ref().map(ReplicaNode::replica).is_some_and(|r| r.store().state_hash() == hash)
                    })
            })
    }

    fn step_event(&mut self, limit: VirtualUs) -> Step {
        let Some(event) = self.queue.pop() else {
            return Err(self.stuck("no event is left to run"));
        };
        if event.at > limit {
            return Err(self.stuck("the virtual-time budget is exhausted"));
        }
        self.events += 1;
        if self.events > self.config.max_events {
            return Err(self.stuck("the event budget is exhausted (livelock?)"));
        }
        self.now = event.at;
        match event.kind {
            EventKind::Deliver { src, dst, msg } => self.deliver(src, dst, msg),
            EventKind::Wake { node, gen } => self.wake(node, gen),
            EventKind::Start { client } => {
                self.trace_hash = fold(fold(self.trace_hash, self.now), client);
                self.trace(|| format!("c{client} starts"));
                self.client(client)?.started = true;
                self.call_client(client, false, |_, _, _, _| {})
            }
            EventKind::Sync { node, gen } => {
                let Node::Replica(s, i) = node else {
                    return Err(self.violation(ViolationKind::Invariant, format!("disk sync for {node}")));
                };
                self.sync(s, i, gen)
            }
            EventKind::Fault { index } => {
                let action = self.fault_list[index];
                self.fault(action)
            }
        }
    }

    /// True if a message from `src` to `dst` is cut by a fault (checked at send and delivery).
    fn cut(&self, src: Node, dst: Node) -> bool {
        let blocked = |node: Node, other: Node| match node {
            Node::Replica(s, i) => {
                let r = &self.replicas[s as usize][i as usize];
                r.node.is_none() || r.isolated || (r.raft_cut && matches!(other, Node::Replica(t, _) if t == s))
            }
            Node::Client(c) => self.cs.nodes[(c - 1) as usize].dead,
            Node::Leader(_) => true,
        };
        blocked(src, dst) || blocked(dst, src)
    }

    fn send(&mut self, src: Node, dst: Node, msg: SimMsg) {
        if self.cut(src, dst) {
            return;
        }
        self.net.send(self.config, &mut self.queue, self.now, src, dst, msg);
    }

    fn deliver(&mut self, src: Node, dst: Node, msg: SimMsg) -> Step {
        if self.cut(src, dst) {
            return Ok(());
        }
        self.delivered += 1;
        let h = [self.now, src.code(), dst.code(), msg.hash()];
        self.trace_hash = h.iter().fold(self.trace_hash, |acc, x| fold(acc, *x));
        self.trace(|| match &msg {
            SimMsg::Replication(ReplicationMsg::Raft { bytes, .. }) => {
                format!("{src} -> {dst}: raft ({} bytes)", bytes.len())
            }
            SimMsg::Replication(ReplicationMsg::SnapshotOffer { index, data, .. }) => {
                format!("{src} -> {dst}: snapshot at {index} ({} bytes)", data.len())
            }
            other => format!("{src} -> {dst}: {other:?}"),
        });
        match (src, dst, msg) {
            (Node::Client(client), Node::Replica(s, i), SimMsg::ToLeader(m)) => {
                if let ClientMsg::Dispatch { txn, .. } = &m {
                    if self.serving(s, i) {
                        let w = self.published[s as usize];
                        self.cs.replies.arrived(txn.id, s, w);
                    }
                }
                self.call_replica(s, i, false, |r, local, fx| {
                    r.on_client(local, client, m, fx);
                    Ok(())
                })
            }
            (Node::Replica(s, i), Node::Client(client), SimMsg::ToClient(m)) => {
                self.client(client)?.routes.on_server_msg(NodeId { shard: s, replica: i }, &m);
                self.call_client(client, false, |coord, local, _, out| coord.on_message(local, m, out))
            }
            (Node::Replica(from, _), Node::Replica(to, i), SimMsg::Peer(batch)) if from != to && batch.from == from => {
                if self.serving(to, i) {
                    let w = self.published[to as usize];
                    self.cs.replies.arrived_in_batch(to, w, &batch.items);
                }
                self.call_replica(to, i, false, |r, local, fx| {
                    r.on_peer_batch(local, batch, fx);
                    Ok(())
                })
            }
            (Node::Replica(fs, fi), Node::Replica(to, i), SimMsg::Replication(m)) => {
                let from = NodeId { shard: fs, replica: fi };
                self.call_replica(to, i, false, |r, _, fx| {
                    // A message from an earlier incarnation of a peer may be refused; Raft
                    // copes with any loss.
                    let _ = r.on_replication(from, m, fx);
                    Ok(())
                })
            }
            (src, dst, msg) => {
                Err(self
                    .violation(ViolationKind::Invariant, format!("the simulator routed {msg:?} from {src} to {dst}")))
            }
        }
    }

    fn serving(&self, s: ShardId, i: u32) -> bool {
        self.replicas[s as usize][i as usize].node.as_ref().is_some_and(|n| n.replica().is_serving())
    }

    fn wake(&mut self, node: Node, gen: u64) -> Step {
        let slot = match node {
            Node::Client(c) => &mut self.client(c)?.wake,
            Node::Replica(s, i) => &mut self.replicas[s as usize][i as usize].wake,
            Node::Leader(_) => return Err(self.violation(ViolationKind::Invariant, format!("wake-up for {node}"))),
        };
        if slot.gen != gen {
            return Ok(());
        }
        slot.at = None;
        self.trace_hash = fold(fold(self.trace_hash, self.now), node.code());
        match node {
            Node::Client(c) => self.call_client(c, true, |coord, local, _, out| coord.tick(local, out)),
            Node::Replica(s, i) => self.call_replica(s, i, true, |_, _, _| Ok(())),
            Node::Leader(_) => unreachable!("refused above"),
        }
    }

    fn schedule_wake(&mut self, node: Node, at: Option<VirtualUs>) {
        let slot = match node {
            Node::Client(c) => &mut self.cs.nodes[(c - 1) as usize].wake,
            Node::Replica(s, i) => &mut self.replicas[s as usize][i as usize].wake,
            Node::Leader(_) => return,
        };
        if slot.at == at {
            return;
        }
        slot.gen += 1;
        slot.at = at;
        if let Some(at) = at {
            let gen = slot.gen;
            self.queue.push(at, EventKind::Wake { node, gen });
        }
    }
}

impl ClientWorld for FailoverWorld<'_> {
    fn sim_config(&self) -> &SimConfig {
        self.config
    }

    fn now(&self) -> VirtualUs {
        self.now
    }

    fn moment(&mut self) -> Moment {
        FailoverWorld::moment(self)
    }

    fn trace(&self, what: impl FnOnce() -> String) {
        FailoverWorld::trace(self, what)
    }

    fn fold_trace(&mut self, x: u64) {
        self.trace_hash = fold(self.trace_hash, x);
    }

    fn violation(&self, kind: ViolationKind, message: String) -> Violation {
        FailoverWorld::violation(self, kind, message)
    }

    fn clients(&mut self) -> &mut ClientState {
        &mut self.cs
    }

    fn send_to_replica(&mut self, id: ClientId, shard: ShardId, replica: u32, msg: ClientMsg) {
        self.send(Node::Client(id), Node::Replica(shard, replica), SimMsg::ToLeader(msg));
    }

    fn schedule_wake(&mut self, node: Node, at: Option<VirtualUs>) {
        FailoverWorld::schedule_wake(self, node, at)
    }

    fn unknown_is_final(&self) -> bool {
        false
    }

    fn dies_after_submit(&mut self, id: ClientId, cross: bool, out: &mut Vec<CoordOutput>) -> Result<bool, Violation> {
        if !cross || !self.coordinator_dies() {
            return Ok(false);
        }
        // (e) The dispatch reaches the first participant only; then the client dies.
        let first = out.iter().position(|o| matches!(o, CoordOutput::Send { .. }));
        let mut kept: Vec<CoordOutput> = first.map(|k| out.swap_remove(k)).into_iter().collect();
        out.clear();
        self.client_outputs(id, &mut kept)?;
        self.kill_client(id)?;
        Ok(true)
    }
}

enum Kill {
    /// The replica dies before the call's outputs leave.
    DropOutputs,
    /// The replica dies right after its outputs left.
    AfterOutputs,
}

fn shards_of(rec: &TxnRecord) -> Vec<ShardId> {
    rec.pieces.iter().map(|p| p.shard).collect()
}
