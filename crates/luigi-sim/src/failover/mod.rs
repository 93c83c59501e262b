//! The Raft cluster model (`RaftGroups`): every shard is a Raft group of [`ReplicaNode`]s,
//! the node the server runs (a follower or the serving
//! [`ShardLeader`](luigi_protocol::leader::ShardLeader) over its own Raft log, with its ticks,
//! elections, snapshots and routing), and the model injects faults (`faults.rs`): replica
//! crashes and restarts, isolations and Raft-only partitions, leader kills at named points of
//! a cross-shard transaction, and coordinators that die after dispatching to only some
//! participants (DESIGN.md, "Failure handling"). The engine (`engine::Sim`) runs
//! the clients, time and the network, as for the ideal-log model; this model only executes
//! each node's effects (`replicas.rs`); every decision about what to call on the cores and
//! when is the node's, as in the server. Its configuration and report are in `config.rs`,
//! its checks in `checks.rs`.
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
//! - Clients route with the runtime client's rules ([`ClientRoutes`](luigi_txn::client_core::ClientRoutes)): `NotLeader` hints,
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
//! aborted) on every participant at the answered timestamp, and the [`checker`](crate::checker) replays every
//! ordered transaction (and every executed orphan) against the final stores (from the hosted
//! workload's population, if any, whose own consistency check follows; see [`crate::hosted`]).
//!
//! Under a baseline protocol ([`SimConfig::protocol`]) the same model runs the baseline's
//! replicas and clients; the checks about Luigi's timestamps are replaced, by protocol, by the
//! baseline's (`baseline.rs`): an oracle of where each committed record installed what, the
//! placement of single-shard reads by the reply that answered them, nothing prepared or in a
//! leader's care after healing, and the serial order derived from the logs and real time for
//! the checker's replay (OCC, 2PL) or durability only (direct). The kill points map to the
//! baseline's counterparts (a participant's first `Vote` for `Propose`, a coordinator's
//! `Decide` for a decision).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use luigi_node::ReplicaNode;
use luigi_replica::ReplicaFactory;
use luigi_txn::msg::ClientMsg;
use luigi_txn::types::NodeId;
use luigi_txn::types::{ClientId, Protocol, ShardId, Timestamp, TxnId};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::checker::TxnRecord;
use crate::config::SimConfig;
use crate::engine::{ClusterModel, Core, Seeds, Sim, Step};
use crate::log::Durable;
use crate::net::{EventKind, Network, Node, SimMsg, VirtualUs};
use crate::source::TxnSource;
use crate::violation::{Violation, ViolationKind};

mod baseline;
mod checks;
mod config;
mod faults;
mod ideal;
mod ideal_checks;
mod partition;
mod replicas;

pub use config::{
    failover_config, hostile_dispatches, population, without_population, CutKind, CutMode, FailoverReport, FaultConfig,
    KillPoint, Outage, PlannedCut, HOSTILE_CLIENT, POPULATION_ROW_BYTES, POPULATION_TABLE,
};

pub(crate) use ideal::run_ideal;
use replicas::{new_node, SimReplica};

/// Runs a replicated simulation with faults and checks it.
pub fn run_replicated(config: &SimConfig, faults: &FaultConfig) -> Result<FailoverReport, Violation> {
    let summary = format!("{} {}", config.summary(), faults.summary());
    let tag = |v: Violation| v.in_run(config.seed, summary.clone());
    config.validate().map_err(|why| tag(Violation::new(ViolationKind::Config, why)))?;
    if faults.replicas == 0 || faults.raft_tick_us == 0 {
        return Err(tag(Violation::new(ViolationKind::Config, "replicas and raft_tick_us must be >= 1")));
    }
    let mut sim = sim(config, faults, None).map_err(tag)?;
    sim.run().map_err(tag)?;
    match sim.finish().map_err(tag)? {
        Finished::Replicated(report) => Ok(report),
        Finished::Ideal(_) => Err(tag(Violation::new(ViolationKind::Invariant, "a replicated run reported as ideal"))),
    }
}

/// What a run of this model reports: a replicated run's [`FailoverReport`], or the ideal-log
/// configuration's [`RunReport`](crate::RunReport) (`ideal.rs`).
pub(crate) enum Finished {
    /// [`run_replicated`]'s.
    Replicated(FailoverReport),
    /// [`run_ideal`]'s.
    Ideal(crate::RunReport),
}

/// The run of `config` over Raft groups with `faults` (the ideal-log configuration if
/// `ideal`). Every random stream is derived from `config.seed` in a fixed order (from the
/// seed itself in the ideal-log configuration, so that its transactions and network draws are
/// the ones the ideal log's runs had).
fn sim<'a>(
    config: &'a SimConfig,
    faults: &'a FaultConfig,
    ideal: Option<ideal::IdealRecords>,
) -> Result<Sim<'a, RaftGroups<'a>>, Violation> {
    let (seed, core_seed) =
        if ideal.is_some() { (config.seed, config.seed) } else { (config.seed ^ 0xfa11_0e12, config.seed ^ 0xfa11) };
    let mut seeds = Seeds::new(seed);
    let net = Network::new(seeds.derive());
    let source = TxnSource::new(config, seeds.derive());
    let disk_rng = seeds.derive();
    let fault_rng = seeds.derive();
    let clients = seeds.clients(config, faults.replicas);
    let cluster = RaftGroups::new(config, faults, ideal, disk_rng, fault_rng, &mut seeds)?;
    let core = Core::new(config, net, source, clients, core_seed);
    Ok(Sim::new(core, cluster, &mut seeds))
}

/// An execution that relied on another shard's proposal proven committed by its progress
/// reports before any replica there knew its commit (rule 14): checked against the final logs.
struct Rule4Later {
    /// Which replica executed it (`R<shard>.<replica>`).
    who: String,
    /// The executing shard.
    shard: ShardId,
    /// The transaction.
    id: TxnId,
    /// The timestamp it executed at.
    ts: Timestamp,
}

/// What each shard's group has committed, from the highest commit index any replica reports.
#[derive(Default)]
struct Oracle {
    /// (term, data hash) of every committed entry, index 1 first.
    entries: Vec<(u64, u64)>,
    /// Luigi: what each transaction's committed records say.
    durable: HashMap<TxnId, Durable>,
    /// The baselines: the committed log applied, and where each transaction was installed.
    base: Option<baseline::BaseOracle>,
}

#[derive(Clone, Copy, Debug)]
enum FaultAction {
    /// Draw and apply the next random fault.
    Random,
    Restart(ShardId, u32),
    Heal(ShardId, u32),
    /// A majority of the shard crashes (see [`Outage`]).
    LoseMajority(Outage),
    /// The planned partition of this index in [`FaultConfig::cuts`] starts.
    Cut(usize),
    /// Read the clients' one-way delay estimates (a second after a held partition healed).
    ObserveOwd,
}

/// The Raft cluster: per shard, a group of replicas running the real node, with faults.
pub(crate) struct RaftGroups<'a> {
    faults: &'a FaultConfig,
    n: u32,
    disk_rng: ChaCha8Rng,
    fault_rng: ChaCha8Rng,
    replicas: Vec<Vec<SimReplica>>,
    /// When a fault was last repaired (a restart or a heal), virtual µs.
    last_repair_us: VirtualUs,
    /// Per shard, the largest watermark any serving leader of it published.
    published: Vec<Timestamp>,
    oracle: Vec<Oracle>,
    fault_list: Vec<FaultAction>,
    kills_left: u32,
    next_kill_ok_at: VirtualUs,
    /// (shard, transaction) pairs whose first `Propose` (a baseline's: `Vote`) was seen.
    proposed: HashSet<(ShardId, TxnId)>,
    /// The run's protocol's replica factory: what its peer messages carry
    /// ([`ReplicaFactory::peer_facts`]), for the kill points and the reply ledger.
    factory: Arc<dyn ReplicaFactory>,
    /// Executions that relied on another shard's proposal proven committed by its progress
    /// reports before any replica there knew its commit (rule 14): checked against the final
    /// logs.
    rule4_later: Vec<Rule4Later>,
    /// The baselines' single-shard reads and the replies they produced.
    reads: baseline::ReadLedger,
    /// Messages waiting on links cut by a partition that holds them.
    held: partition::Held,
    /// The ideal-log configuration's own records (`ideal.rs`), if this run is one: one
    /// replica per shard addressed as [`Node::Leader`], no faults.
    ideal: Option<ideal::IdealRecords>,
    /// Wake-ups after which a node still asked for a deadline in the past (backed off).
    busy_wakes: u64,
    quiescing: bool,
    /// Hostile dispatches sent so far ([`FaultConfig::hostile_fast`]): the next one's number.
    hostile_sent: u64,
    report: FailoverReport,
}

impl<'a> RaftGroups<'a> {
    fn new(
        config: &SimConfig,
        faults: &'a FaultConfig,
        ideal: Option<ideal::IdealRecords>,
        mut disk_rng: ChaCha8Rng,
        fault_rng: ChaCha8Rng,
        seeds: &mut Seeds,
    ) -> Result<Self, Violation> {
        let n = faults.replicas;
        let mut replicas = Vec::new();
        for s in 0..config.shards {
            let mut group = Vec::new();
            for i in 0..n {
                let offset_us = seeds.offset(config, addr(ideal.is_some(), s, i));
                let mut node = SimReplica::new(offset_us, disk_rng.gen());
                node.node = Some(new_node(config, faults, s, i, &mut node.disk)?);
                group.push(node);
            }
            replicas.push(group);
        }
        Ok(RaftGroups {
            faults,
            n,
            disk_rng,
            fault_rng,
            replicas,
            last_repair_us: 0,
            published: vec![0; config.shards as usize],
            oracle: (0..config.shards).map(|_| Oracle::default()).collect(),
            fault_list: Vec::new(),
            kills_left: faults.kills,
            next_kill_ok_at: 0,
            proposed: HashSet::new(),
            factory: luigi_node::replicas_for(config.protocol, &config.leader),
            rule4_later: Vec::new(),
            reads: baseline::ReadLedger::default(),
            held: partition::Held::default(),
            ideal,
            busy_wakes: 0,
            quiescing: false,
            hostile_sent: 0,
            report: FailoverReport { seed: config.seed, txns: config.txns, ..FailoverReport::default() },
        })
    }

    /// Where replica `i` of shard `s` is on the network: [`Node::Replica`], or the shard's
    /// [`Node::Leader`] in the ideal-log configuration (so that its links, delays and clock
    /// offsets are the ones a [`SimConfig`] names for the shard's leader).
    fn addr(&self, s: ShardId, i: u32) -> Node {
        addr(self.ideal.is_some(), s, i)
    }

    /// The replica (shard, index) at `node`, if `node` is one in this run (see
    /// [`RaftGroups::addr`]).
    fn place(&self, node: Node) -> Option<(ShardId, u32)> {
        match node {
            Node::Replica(s, i) if self.ideal.is_none() => Some((s, i)),
            Node::Leader(s) if self.ideal.is_some() => Some((s, 0)),
            Node::Replica(..) | Node::Leader(_) | Node::Client(_) => None,
        }
    }

    fn schedule_fault(&mut self, core: &mut Core<'_>, at: VirtualUs, action: FaultAction) {
        let index = self.fault_list.len();
        self.fault_list.push(action);
        core.queue.push(at, EventKind::Fault { index });
    }

    /// True if a message from `src` to `dst` is lost to a fault (checked at send and
    /// delivery); a link whose cut holds messages is not (see [`ClusterModel::hold`]).
    fn cut(&self, core: &Core<'_>, src: Node, dst: Node) -> bool {
        self.link_state(core, src, dst) == partition::Link::Lost
    }

    /// Sends `msg` unless a fault cuts the link (held if the cut holds messages).
    fn send(&mut self, core: &mut Core<'_>, src: Node, dst: Node, msg: SimMsg) {
        match self.link_state(core, src, dst) {
            partition::Link::Open => core.send(src, dst, msg),
            partition::Link::Held => self.keep(src, dst, msg),
            partition::Link::Lost => {}
        }
    }

    fn serving(&self, s: ShardId, i: u32) -> bool {
        self.replicas[s as usize][i as usize].node.as_ref().is_some_and(|n| n.replica().is_serving())
    }

    /// Once no fault is left to come or to heal, answers must keep coming (see
    /// [`FaultConfig::liveness_us`]).
    fn check_liveness(&mut self, core: &Core<'_>) -> Step {
        let faults_over = self
            .faults
            .outages
            .iter()
            .map(|o| o.at_us + o.down_us)
            .chain(self.faults.cuts.iter().map(|c| c.at_us + c.down_us))
            .max()
            .unwrap_or(0)
            .max(self.faults.faults_until_us + self.faults.down.mean_us + self.faults.down.jitter_us);
        if core.now < faults_over || core.now < self.last_repair_us {
            return Ok(());
        }
        let since = core.cs.last_answer_us.max(self.last_repair_us).max(faults_over);
        let gap_us = core.now - since;
        self.report.recovery_us = self.report.recovery_us.max(gap_us);
        if gap_us > self.faults.liveness_us {
            let msg = format!(
                "liveness: no transaction answered for {gap_us} us after every fault healed (bound {} us); \
                 {} of {} answered",
                self.faults.liveness_us, core.cs.answered, core.config.txns
            );
            return Err(core.violation(ViolationKind::Stuck, msg));
        }
        Ok(())
    }

    fn converged(&self, core: &Core<'_>) -> bool {
        // Every live coordinator has heard every participant of everything it reported.
        if !core.cs.nodes.iter().all(|c| c.dead || c.coord.unresolved() == 0) {
            return false;
        }
        let mut leaders = Vec::new();
        for (s, group) in self.replicas.iter().enumerate() {
            let serving: Vec<&ReplicaNode> =
                group.iter().filter_map(|n| n.node.as_ref()).filter(|n| n.replica().is_serving()).collect();
            let [leader_node] = serving.as_slice() else { return false };
            let leader = leader_node.replica();
            let pending = replicas::serving_pending(leader).expect("serving");
            let len = leader.store().len();
            let same_size = group.iter().all(|n| n.node.as_ref().is_some_and(|n| n.replica().store().len() == len));
            if pending != 0 || !same_size {
                return false;
            }
            // Every record the leader logged is committed, known to the oracle and applied by
            // every replica: a read-only piece's record changes no store, and a leader executes
            // before its records commit (Luigi's rule 14), so neither equal stores nor an empty
            // pending table say that the log has settled.
            let last = self.settle_index(leader_node.log());
            let applied = group.iter().all(|n| n.node.as_ref().is_some_and(|n| n.log().handed_out() >= last));
            if leader_node.log().commit_index() < last || (self.oracle[s].entries.len() as u64) < last || !applied {
                return false;
            }
            leaders.push((group, leader.store()));
        }
        // Hashing a workload's population is costly: only once every cheaper condition holds.
        leaders.iter().all(|(group, store)| {
            let hash = store.state_hash();
            group
                .iter()
                .all(|n| n.node.as_ref().map(ReplicaNode::replica).is_some_and(|r| r.store().state_hash() == hash))
        })
    }
}

impl ClusterModel for RaftGroups<'_> {
    type Report = Finished;

    fn node_of(&self, shard: ShardId, replica: u32) -> Node {
        self.addr(shard, replica)
    }

    /// Schedules the first random fault and the outages; then every replica starts with its
    /// links up (replica 0 of each group starts the first election in its first turn: the
    /// node's rule, as in the server).
    fn start(&mut self, core: &mut Core<'_>) -> Step {
        if self.faults.random_faults {
            let at = self.faults.fault_gap.sample_us(&mut self.fault_rng);
            self.schedule_fault(core, at, FaultAction::Random);
        }
        for outage in &self.faults.outages {
            if outage.shard >= core.config.shards {
                let msg = format!("outage of shard {} in a {}-shard run", outage.shard, core.config.shards);
                return Err(Violation::new(ViolationKind::Config, msg));
            }
            self.schedule_fault(core, outage.at_us, FaultAction::LoseMajority(*outage));
        }
        for (index, cut) in self.faults.cuts.iter().enumerate() {
            if cut.shard >= core.config.shards || cut.replica.is_some_and(|r| r >= self.n) {
                let msg = format!("planned cut of {cut:?} outside a {}x{} run", core.config.shards, self.n);
                return Err(Violation::new(ViolationKind::Config, msg));
            }
            self.schedule_fault(core, cut.at_us, FaultAction::Cut(index));
        }
        for s in 0..core.config.shards {
            for i in 0..self.n {
                self.links_up(core, s, i)?;
            }
        }
        if self.ideal.is_some() {
            self.boot_ideal(core)?;
        }
        Ok(())
    }

    fn deliver(&mut self, core: &mut Core<'_>, src: Node, dst: Node, msg: SimMsg) -> Step {
        let routed = |core: &Core<'_>, msg: &SimMsg| {
            core.violation(ViolationKind::Invariant, format!("the simulator routed {msg:?} from {src} to {dst}"))
        };
        let (Some((to, i)), from) = (self.place(dst), self.place(src)) else {
            return Err(routed(core, &msg));
        };
        match (src, from, msg) {
            (Node::Client(client), None, SimMsg::ToLeader(m)) => {
                let s = to;
                match core.config.protocol {
                    Protocol::Luigi => {
                        // Any replica: one that does not serve yet holds the dispatch
                        // until it does (`luigi-raft`'s `waiting`), or names the leader.
                        if let ClientMsg::Dispatch { txn, .. } = &m {
                            let w = self.published[s as usize];
                            core.cs.replies.arrived(txn.id, s, w);
                        }
                    }
                    // No watermarks (rule 7 is Luigi's).
                    Protocol::Occ | Protocol::TwoPl | Protocol::Direct => {}
                }
                self.call_replica(core, s, i, false, |r, local, fx| {
                    r.on_client(local, client, m, fx);
                    Ok(())
                })
            }
            (_, Some((from, _)), SimMsg::Peer(batch)) if from != to && batch.from == from => {
                match core.config.protocol {
                    Protocol::Luigi => {
                        if self.serving(to, i) {
                            let w = self.published[to as usize];
                            core.cs.replies.arrived_in_batch(to, w, &self.factory.peer_facts(&batch).admits);
                        }
                    }
                    Protocol::Occ | Protocol::TwoPl | Protocol::Direct => {}
                }
                self.call_replica(core, to, i, false, |r, local, fx| {
                    r.on_peer_batch(local, batch, fx);
                    Ok(())
                })
            }
            (_, Some((fs, fi)), SimMsg::Replication(m)) => {
                let from = NodeId { shard: fs, replica: fi };
                self.call_replica(core, to, i, false, |r, _, fx| {
                    // A message from an earlier incarnation of a peer may be refused; Raft
                    // copes with any loss.
                    let _ = r.on_replication(from, m, fx);
                    Ok(())
                })
            }
            (_, _, msg) => Err(routed(core, &msg)),
        }
    }

    fn wake(&mut self, core: &mut Core<'_>, node: Node) -> Step {
        match self.place(node) {
            Some((s, i)) => self.call_replica(core, s, i, true, |_, _, _| Ok(())),
            None => Err(core.violation(ViolationKind::Invariant, format!("wake-up for {node}"))),
        }
    }

    fn sync(&mut self, core: &mut Core<'_>, node: Node, gen: u64) -> Step {
        match self.place(node) {
            Some((s, i)) => self.sync_disk(core, s, i, gen),
            None => Err(core.violation(ViolationKind::Invariant, format!("disk sync for {node}"))),
        }
    }

    fn fault(&mut self, core: &mut Core<'_>, index: usize) -> Step {
        let action = self.fault_list[index];
        self.apply_fault(core, action)
    }

    fn blocked(&self, core: &Core<'_>, src: Node, dst: Node) -> bool {
        self.cut(core, src, dst)
    }

    fn hold(&mut self, core: &Core<'_>, src: Node, dst: Node, msg: SimMsg) -> Option<SimMsg> {
        match self.link_state(core, src, dst) {
            partition::Link::Held => {
                self.keep(src, dst, msg);
                None
            }
            partition::Link::Open | partition::Link::Lost => Some(msg),
        }
    }

    fn after_step(&mut self, core: &mut Core<'_>) -> Step {
        self.check_liveness(core)
    }

    /// Heals every fault (restarts crashed replicas, reconnects cut ones); then the cluster
    /// has [`FaultConfig::settle_us`] to converge.
    fn settle(&mut self, core: &mut Core<'_>) -> Result<VirtualUs, Violation> {
        self.report.end_us = core.now;
        self.quiescing = true;
        core.trace(|| "quiescing: healing every fault".into());
        for s in 0..core.config.shards {
            for i in 0..self.n {
                let node = &self.replicas[s as usize][i as usize];
                if node.node.is_none() {
                    self.replicas[s as usize][i as usize].cut = None;
                    self.restart(core, s, i)?;
                } else if node.cut.is_some() {
                    self.heal_replica(core, s, i)?;
                }
            }
        }
        Ok(core.now.saturating_add(self.faults.settle_us))
    }

    /// Converged (checked every 128 events): one serving leader per shard with nothing
    /// pending, the same store on every replica, every live coordinator settled.
    fn settled(&self, core: &Core<'_>, steps: u64) -> bool {
        steps.is_multiple_of(128) && self.converged(core)
    }

    fn unsettled(&mut self, core: &mut Core<'_>, v: Violation) -> Violation {
        if v.kind == ViolationKind::Stuck {
            return self.not_converged(core);
        }
        v
    }

    /// Raft groups may lose a majority: the client moves on and the resolution is the answer.
    /// The ideal-log configuration never loses one: an unknown outcome is recorded as the
    /// answer, and the checker reports it.
    fn unknown_is_final(&self) -> bool {
        self.ideal.is_some()
    }

    /// The coordinator kill point ([`KillPoint::CoordinatorPartial`]).
    fn dies_after_submit(&mut self, core: &mut Core<'_>, _id: ClientId, cross: bool) -> bool {
        if !cross || !self.coordinator_dies(core) {
            return false;
        }
        self.kills_left -= 1;
        self.report.kills += 1;
        self.next_kill_ok_at = core.now + self.faults.kill_gap_us;
        true
    }

    fn describe(&mut self, _core: &Core<'_>) -> String {
        self.describe_replicas()
    }

    fn finish(self, core: Core<'_>) -> Result<Finished, Violation> {
        if self.ideal.is_some() {
            return self.finish_ideal(core).map(Finished::Ideal);
        }
        self.finish_checks(core).map(Finished::Replicated)
    }
}

enum Kill {
    /// The replica dies before the call's outputs leave.
    DropOutputs,
    /// The replica dies right after its outputs left.
    AfterOutputs,
}

/// Where replica `i` of shard `s` is on the network (see [`RaftGroups::addr`]).
fn addr(ideal: bool, s: ShardId, i: u32) -> Node {
    if ideal {
        Node::Leader(s)
    } else {
        Node::Replica(s, i)
    }
}

fn shards_of(rec: &TxnRecord) -> Vec<ShardId> {
    rec.pieces.iter().map(|p| p.shard).collect()
}
