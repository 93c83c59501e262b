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
use crate::config::{Delay, SimConfig};
use crate::hash::fold;
use crate::log::Durable;
use crate::net::{EventKind, EventQueue, Network, Node, SimMsg, VirtualUs};
use crate::procedure;
use crate::violation::{Violation, ViolationKind};
use crate::workload::Workload;

mod replicas;

use crate::clients::{ClientNode, ClientState, ClientWorld};
use replicas::{new_node, SimReplica};

/// A named point in the life of a cross-shard transaction at which the serving leader of a
/// participant (or the coordinator) is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KillPoint {
    /// (a) Its `PREPARE` committed, its `Propose` not sent: the leader crashes in the call
    /// that would send its first `Propose` (the call's outputs are lost).
    PrepareCommitted,
    /// (b) Its `Propose` sent, nothing decided: the leader crashes right after the call that
    /// sent its first `Propose`.
    ProposeSent,
    /// (c) Decided (agreement reached, or the `DECIDE` of a second round committed) but not
    /// executed: the leader crashes in that call, its outputs lost.
    Decided,
    /// (d) Executed but not answered (the watermark has not passed it, or its reply is lost):
    /// the leader crashes in the call that executed it, its outputs lost.
    Executed,
    /// (e) The coordinator dispatches a cross-shard transaction to its first participant only
    /// and dies (every transaction it had in flight is orphaned).
    CoordinatorPartial,
}

/// Replication and fault knobs of a replicated run (the rest comes from [`SimConfig`]).
#[derive(Clone, Debug)]
pub struct FaultConfig {
    /// Replicas per shard (Raft group size), `>= 1`.
    pub replicas: u32,
    /// Virtual time between two Raft ticks of a replica, µs.
    pub raft_tick_us: u64,
    /// Raft election timeout base, in ticks (heartbeats every tick).
    pub election_ticks: usize,
    /// Time a disk takes to make written data durable.
    pub sync: Delay,
    /// Random faults (crashes, isolations, Raft-only partitions) drawn from the seed.
    pub random_faults: bool,
    /// Time between two random faults.
    pub fault_gap: Delay,
    /// How long a crashed or cut-off replica stays down.
    pub down: Delay,
    /// No random fault starts after this virtual time (so runs end).
    pub faults_until_us: u64,
    /// Kill serving leaders (or a coordinator) at this point.
    pub kill: Option<KillPoint>,
    /// How many kills at `kill` (each needs a shard with every replica up).
    pub kills: u32,
    /// Least time between two kills, µs.
    pub kill_gap_us: u64,
    /// After every transaction is answered, how long (virtual µs) the healed cluster may take
    /// to converge (one serving leader per shard, nothing pending, equal stores).
    pub settle_us: u64,
    /// A deliberately broken disk, for tests that prove the checks catch lost writes: Raft is
    /// told that writes are durable (acknowledgements and votes leave) before they are synced,
    /// so a crash can lose what a quorum acknowledged.
    pub ack_before_sync: bool,
    /// Followers snapshot their state and compact their log every this many applied
    /// records (`None`: never). Restarts then load snapshots, and a replica that fell
    /// behind a compaction is sent the leader's snapshot.
    pub snapshot_entries: Option<u64>,
    /// Majority losses: at each, a majority of one shard's replicas (its serving leader
    /// first) crash and stay down for a while, so the shard has no quorum.
    pub outages: Vec<Outage>,
    /// Liveness: once every fault has healed (outages and random faults over), the cluster
    /// answers a transaction at least this often, virtual µs: no gap between two answers (or
    /// between the last repair and the first answer) is longer, until every transaction has
    /// a definite answer.
    pub liveness_us: u64,
}

/// A shard without a majority for a while (see [`FaultConfig::outages`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    /// The shard.
    pub shard: ShardId,
    /// When its majority crashes, virtual µs.
    pub at_us: u64,
    /// How long they stay down, µs.
    pub down_us: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl FaultConfig {
    /// 3 replicas, 2 ms ticks, 10-tick elections, syncs of 300 ± 200 µs, random faults every
    /// 60 ± 40 ms for the first 600 ms, each lasting 80 ± 60 ms; no kill point.
    pub fn new() -> Self {
        Self {
            replicas: 3,
            raft_tick_us: 2_000,
            election_ticks: 10,
            sync: Delay::new(300, 200),
            random_faults: true,
            fault_gap: Delay::new(60_000, 40_000),
            down: Delay::new(80_000, 60_000),
            faults_until_us: 600_000,
            kill: None,
            kills: 0,
            kill_gap_us: 100_000,
            settle_us: 5_000_000,
            ack_before_sync: false,
            snapshot_entries: None,
            outages: Vec::new(),
            liveness_us: 10_000_000,
        }
    }

    /// No random faults; `kills` kills at `point`.
    pub fn kill_at(point: KillPoint, kills: u32) -> Self {
        Self { random_faults: false, kill: Some(point), kills, ..Self::new() }
    }

    /// A one-line summary (for failure messages).
    pub fn summary(&self) -> String {
        format!(
            "replicas={} raft_tick={}us election_ticks={} sync={}±{}us random_faults={} fault_gap={}±{}us \
             down={}±{}us faults_until={}us kill={:?}×{} ack_before_sync={} snapshot_entries={:?} outages={:?}",
            self.replicas,
            self.raft_tick_us,
            self.election_ticks,
            self.sync.mean_us,
            self.sync.jitter_us,
            self.random_faults,
            self.fault_gap.mean_us,
            self.fault_gap.jitter_us,
            self.down.mean_us,
            self.down.jitter_us,
            self.faults_until_us,
            self.kill,
            self.kills,
            self.ack_before_sync,
            self.snapshot_entries,
            self.outages
        )
    }
}

/// A [`SimConfig`] suited to replicated runs with faults: `shards` shards, 3 clients with 3
/// transactions in flight, 120 transactions over 6 keys per shard, half of them cross-shard,
/// coordinators that resend after 60 ms (and after 5 ms on `NotLeader`) and never give up,
/// leaders that recover stalled transactions after 40 ms.
pub fn failover_config(seed: u64, shards: u32) -> SimConfig {
    let mut c = SimConfig::new(seed)
        .shards(shards)
        .clients(3)
        .in_flight(3)
        .txns(120)
        .keys(6 * u64::from(shards))
        .cross_shard(0.5);
    c.coordinator.retry_timeout_us = 60_000;
    c.coordinator.not_leader_retry_us = 5_000;
    c.coordinator.max_attempts = 100_000;
    c.leader.recover_after_us = 40_000;
    c.max_virtual_us = 60_000_000;
    c
}

/// What a correct replicated run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailoverReport {
    /// The seed.
    pub seed: u64,
    /// Transactions submitted.
    pub txns: u64,
    /// Ordered with every participant's procedure succeeding.
    pub committed: u64,
    /// Rejected (refused or aborted).
    pub rejected: u64,
    /// Never answered: their coordinator died.
    pub orphans: u64,
    /// Reported unknown by a coordinator that gave up (each resolved later: the run ends
    /// only when every transaction has a definite answer).
    pub unknown: u64,
    /// Majority losses applied.
    pub outages: u64,
    /// The longest virtual µs without an answer once every fault had healed (the liveness
    /// bound checks it).
    pub recovery_us: u64,
    /// Of the orphans, those that were executed (recovered by the participants).
    pub orphans_executed: u64,
    /// Replica crashes (random and kill points).
    pub crashes: u64,
    /// Kills at the configured kill point (coordinator deaths included).
    pub kills: u64,
    /// Isolations and Raft-only partitions.
    pub cuts: u64,
    /// Times a replica became its shard's serving leader.
    pub promotions: u64,
    /// Times a serving leader stepped down and rebuilt its state.
    pub demotions: u64,
    /// Snapshots followers took (each compacting its log).
    pub compactions: u64,
    /// Times a serving leader compacted its log behind a follower's snapshot.
    pub leader_compactions: u64,
    /// Snapshots replicas installed from their leader (they had fallen behind a compaction).
    pub snapshots_installed: u64,
    /// Dispatches the coordinators sent again.
    pub retries: u64,
    /// Leader counters, summed over every serving incarnation that was still alive at the
    /// end (a crashed leader's counters are lost with it).
    pub recover_sent: u64,
    /// Virtual time at which the last transaction was answered, µs.
    pub end_us: u64,
    /// Events processed.
    pub events: u64,
    /// Messages delivered.
    pub messages: u64,
    /// Each shard's final store hash (equal on every replica).
    pub shard_hashes: Vec<u64>,
    /// Hash of every delivery, wake-up, fault and answer, in order.
    pub trace_hash: u64,
}

impl FailoverReport {
    /// Adds `r`'s counts to this sweep total; the longest `recovery_us` and `end_us` are kept
    /// (per-run fields, `seed`, `shard_hashes` and `trace_hash`, are left as they are).
    pub fn absorb(&mut self, r: &FailoverReport) {
        self.txns += r.txns;
        self.committed += r.committed;
        self.rejected += r.rejected;
        self.orphans += r.orphans;
        self.unknown += r.unknown;
        self.outages += r.outages;
        self.recovery_us = self.recovery_us.max(r.recovery_us);
        self.orphans_executed += r.orphans_executed;
        self.crashes += r.crashes;
        self.kills += r.kills;
        self.cuts += r.cuts;
        self.promotions += r.promotions;
        self.demotions += r.demotions;
        self.compactions += r.compactions;
        self.leader_compactions += r.leader_compactions;
        self.snapshots_installed += r.snapshots_installed;
        self.retries += r.retries;
        self.recover_sent += r.recover_sent;
        self.end_us = self.end_us.max(r.end_us);
        self.events += r.events;
        self.messages += r.messages;
    }
}

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

    fn not_converged(&mut self) -> Violation {
        let mut msg = format!(
            "the healed cluster did not converge within {} us (one serving leader per shard, nothing pending, \
             equal stores on every replica)",
            self.faults.settle_us
        );
        for (s, group) in self.replicas.iter_mut().enumerate() {
            for (i, node) in group.iter_mut().enumerate() {
                match node.node.as_ref().map(ReplicaNode::replica) {
                    None => msg.push_str(&format!("; R{s}.{i}: down")),
                    Some(r) => msg.push_str(&format!(
                        "; R{s}.{i}: serving={} pending={} store={:#x} keys={} log={:?}",
                        r.is_serving(),
                        r.leader().map_or(0, |l| l.pending_len()),
                        r.store().state_hash(),
                        r.store().len(),
                        r.log()
                    )),
                }
            }
        }
        self.violation(ViolationKind::Stuck, msg)
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

    fn stuck(&mut self, why: &str) -> Violation {
        let mut msg = format!(
            "the run did not finish: {why}; {}/{} transactions answered ({} orphaned, {} submitted) after {} \
             events at virtual time {} us",
            self.cs.answered,
            self.config.txns,
            self.orphans.len(),
            self.cs.submitted,
            self.events,
            self.now
        );
        let waiting: Vec<String> = self
            .cs
            .history
            .txns
            .iter()
            .filter(|t| t.answers.is_empty() && !self.orphans.contains_key(&t.id))
            .take(5)
            .map(|t| format!("{:?} (dispatched {} us, shards {:?})", t.id, t.dispatched.us, shards_of(t)))
            .collect();
        msg.push_str(&format!("; unanswered (first 5): {}", waiting.join(", ")));
        for (s, group) in self.replicas.iter_mut().enumerate() {
            for (i, node) in group.iter_mut().enumerate() {
                let state = match node.node.as_ref().map(ReplicaNode::replica) {
                    None => "down".to_string(),
                    Some(r) => format!(
                        "serving={} watermark={:?} pending={:?} {:?}",
                        r.is_serving(),
                        r.leader().map(|l| l.watermark()),
                        r.leader().map(|l| l.pending_len()),
                        r.log()
                    ),
                };
                msg.push_str(&format!(
                    "; R{s}.{i}{}{}: {state}",
                    if node.isolated { " (isolated)" } else { "" },
                    if node.raft_cut { " (raft cut)" } else { "" }
                ));
            }
        }
        self.violation(ViolationKind::Stuck, msg)
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

    // ---- faults ----

    fn fault(&mut self, action: FaultAction) -> Step {
        self.trace_hash = fold(fold(self.trace_hash, self.now), 0xfa_u64);
        match action {
            FaultAction::Random => self.random_fault(),
            FaultAction::Restart(s, i) => {
                self.last_repair_us = self.now;
                if self.replicas[s as usize][i as usize].node.is_none() {
                    self.restart(s, i)?;
                }
                Ok(())
            }
            FaultAction::LoseMajority(outage) => self.lose_majority(outage),
            FaultAction::Heal(s, i) => {
                self.last_repair_us = self.now;
                self.trace(|| format!("R{s}.{i} healed"));
                let node = &mut self.replicas[s as usize][i as usize];
                node.isolated = false;
                node.raft_cut = false;
                self.links_up(s, i)
            }
        }
    }

    fn random_fault(&mut self) -> Step {
        if self.quiescing || self.now > self.faults.faults_until_us {
            return Ok(());
        }
        let next = self.now + self.faults.fault_gap.sample(&mut self.fault_rng).max(1);
        self.schedule_fault(next, FaultAction::Random);
        let s = self.fault_rng.gen_range(0..self.config.shards);
        let kind = self.fault_rng.gen_range(0..5u32);
        let random = self.fault_rng.gen_range(0..self.n);
        let down = self.faults.down.sample(&mut self.fault_rng).max(1);
        // Faults stay a minority of each group (one of 3, two of 5), so it keeps a majority.
        let faulty = self.replicas[s as usize].iter().filter(|r| r.faulty()).count() as u32;
        if faulty >= (self.n - 1) / 2 {
            return Ok(());
        }
        let leader = (0..self.n).find(|&i| self.serving(s, i)).unwrap_or(random);
        self.trace_hash = fold(self.trace_hash, u64::from(kind) << 32 | u64::from(s));
        match kind {
            0 => self.crash(s, leader, down),
            1 => self.crash(s, random, down),
            2 | 3 => {
                let target = if kind == 2 { leader } else { random };
                self.trace(|| format!("R{s}.{target} isolated for {down} us"));
                self.replicas[s as usize][target as usize].isolated = true;
                self.links_down(s, target, false)?;
                self.report.cuts += 1;
                self.schedule_fault(self.now + down, FaultAction::Heal(s, target));
                Ok(())
            }
            _ => {
                self.trace(|| format!("R{s}.{leader} cut from its group for {down} us"));
                self.replicas[s as usize][leader as usize].raft_cut = true;
                self.links_down(s, leader, true)?;
                self.report.cuts += 1;
                self.schedule_fault(self.now + down, FaultAction::Heal(s, leader));
                Ok(())
            }
        }
    }

    /// Crashes a majority of `outage.shard` (its serving leader first, then the lowest
    /// numbered others) for `outage.down_us`: the shard has no quorum, so it elects nobody
    /// and commits nothing until they restart.
    fn lose_majority(&mut self, outage: Outage) -> Step {
        let s = outage.shard;
        let majority = self.n / 2 + 1;
        self.trace(|| format!("shard {s} loses its majority for {} us", outage.down_us));
        self.report.outages += 1;
        let (mut victims, others): (Vec<u32>, Vec<u32>) = (0..self.n).partition(|&i| self.serving(s, i));
        victims.extend(others);
        for i in victims.into_iter().take(majority as usize) {
            self.crash(s, i, outage.down_us)?;
        }
        Ok(())
    }

    /// Folds the entries replica `i` knows committed into the shard's oracle, checking that
    /// they agree with what other replicas reported committed.
    fn update_oracle(&mut self, s: ShardId, i: u32) -> Step {
        let log = self.replicas[s as usize][i as usize].node.as_ref().expect("up").replica().log();
        let commit = log.commit_index();
        let oracle = &mut self.oracle[s as usize];
        let known = oracle.entries.len() as u64;
        let check = commit.min(known);
        // Compacted entries are gone from memory (the snapshot's own index keeps its term).
        if check > 0 && check >= log.snapshot_index() {
            let term = log.term_at(check);
            if term != Some(oracle.entries[(check - 1) as usize].0) {
                let msg = format!(
                    "R{s}.{i} has term {term:?} at committed index {check}, but the group committed term {} there",
                    oracle.entries[(check - 1) as usize].0
                );
                return Err(self.violation(ViolationKind::Invariant, msg));
            }
        }
        for index in known + 1..=commit {
            let Some(e) = log.entry(index) else {
                let msg = format!("R{s}.{i} reports index {index} committed but does not hold it");
                return Err(Violation::new(ViolationKind::Invariant, msg));
            };
            oracle.entries.push((e.term, crate::hash::fnv1a(&e.data) ^ u64::from(e.entry_type as u32)));
            if e.entry_type as i32 != 0 || e.data.is_empty() {
                continue;
            }
            let Ok(record) = postcard::from_bytes::<LogRecord>(&e.data) else {
                return Err(Violation::new(
                    ViolationKind::Invariant,
                    format!("shard {s}: entry {index} does not decode"),
                ));
            };
            match record {
                LogRecord::Prepare { txn, ts, .. } => {
                    let d = oracle.durable.entry(txn.id).or_default();
                    d.prepares += 1;
                    d.prepared.get_or_insert(ts);
                }
                LogRecord::Decide { id, ts } => {
                    let d = oracle.durable.entry(id).or_default();
                    d.decided = d.decided.max(Some(ts));
                }
                LogRecord::Abort { id } => oracle.durable.entry(id).or_default().aborted = true,
                LogRecord::Refuse { id, .. } => oracle.durable.entry(id).or_default().refused = true,
                LogRecord::Floor { .. } | LogRecord::Applied { .. } => {}
            }
        }
        Ok(())
    }

    /// Replica `i` of shard `s` executed `id`: once per state machine, as a participant, and
    /// (rule 4) only once every participant durably holds its final timestamp.
    fn on_executed(&mut self, s: ShardId, i: u32, shard: ShardId, id: TxnId) -> Step {
        self.trace(|| format!("R{s}.{i} executes {id:?}"));
        self.trace_hash =
            fold(fold(self.trace_hash, 0xe8ec_u64 ^ Node::Replica(s, i).code()), id.seq ^ (id.client << 40));
        let Some(&k) = self.cs.index.get(&id) else {
            return Err(self.violation(ViolationKind::Execution, format!("R{s}.{i} executed {id:?}, never submitted")));
        };
        let shards = shards_of(&self.cs.history.txns[k]);
        if shard != s || !shards.contains(&s) {
            return Err(self.violation(
                ViolationKind::Execution,
                format!("R{s}.{i} executed {id:?} as shard {shard}; its participants are {shards:?}"),
            ));
        }
        if !self.replicas[s as usize][i as usize].exec_seen.insert(id) {
            return Err(self
                .violation(ViolationKind::Execution, format!("R{s}.{i} executed {id:?} twice in one state machine")));
        }
        if !self.config.check_durable_decisions {
            return Ok(());
        }
        let mut proposals = Vec::new();
        for &p in &shards {
            let d = self.oracle[p as usize].durable.get(&id).copied().unwrap_or_default();
            let why = if d.prepares > 1 {
                Some(format!("shard {p} has {} committed PREPAREs of it", d.prepares))
            } else if d.aborted {
                Some(format!("shard {p} has a committed ABORT of it"))
            } else if d.prepared.is_none() {
                Some(format!("shard {p}'s PREPARE of it is not committed"))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(self.violation(ViolationKind::NotDurable, format!("R{s}.{i} executed {id:?}, but {why}")));
            }
            proposals.push((p, d));
        }
        let final_ts = proposals.iter().filter_map(|(_, d)| d.prepared).max().expect("a participant");
        if proposals.iter().all(|(_, d)| d.prepared == Some(final_ts)) {
            return Ok(());
        }
        if let Some((p, d)) = proposals.iter().find(|(_, d)| d.ts() != Some(final_ts)) {
            return Err(self.violation(
                ViolationKind::NotDurable,
                format!(
                    "R{s}.{i} executed {id:?} (final ts {final_ts}) before shard {p} durably adopted it: its \
                     committed log holds PREPARE at {:?} and DECIDE at {:?}",
                    d.prepared, d.decided
                ),
            ));
        }
        Ok(())
    }

    fn check_reply(&mut self, shard: ShardId, r: &TxnReply) -> Step {
        if let Err(TxnError::NotLeader { .. }) = &r.outcome {
            return Ok(()); // nothing was ordered
        }
        self.cs.replies.check_reply(shard, r).map_err(|(kind, msg)| self.violation(kind, msg))
    }

    fn coordinator_dies(&self) -> bool {
        let alive = self.cs.nodes.iter().filter(|c| !c.dead).count();
        self.faults.kill == Some(KillPoint::CoordinatorPartial)
            && self.kills_left > 0
            && self.now >= self.next_kill_ok_at
            && alive > 1
            && !self.quiescing
    }

    fn kill_client(&mut self, id: ClientId) -> Step {
        self.trace(|| format!("c{id} dies"));
        self.trace_hash = fold(fold(self.trace_hash, 0xc1d), id);
        self.kills_left -= 1;
        self.report.kills += 1;
        self.next_kill_ok_at = self.now + self.faults.kill_gap_us;
        let node = self.client(id)?;
        node.dead = true;
        let lost: Vec<TxnId> =
            self.cs.history.txns.iter().filter(|t| t.id.client == id && t.answers.is_empty()).map(|t| t.id).collect();
        for t in lost {
            self.orphans.insert(t, None);
        }
        self.schedule_wake(Node::Client(id), None);
        Ok(())
    }

    // ---- the end ----

    fn finish(mut self) -> Result<FailoverReport, Violation> {
        // Raft safety: every replica's committed prefix is the group's.
        let now = self.now;
        for (s, group) in self.replicas.iter_mut().enumerate() {
            let oracle = &self.oracle[s];
            for (i, node) in group.iter_mut().enumerate() {
                let log = node.node.as_ref().expect("healed").replica().log();
                let commit = log.commit_index();
                for index in log.snapshot_index().max(1)..=commit.min(oracle.entries.len() as u64) {
                    let term = log.term_at(index);
                    if term != Some(oracle.entries[(index - 1) as usize].0) {
                        return Err(Violation::new(
                            ViolationKind::Invariant,
                            format!("R{s}.{i}: committed entry {index} has term {term:?}, the group's has another"),
                        )
                        .at(now));
                    }
                }
            }
        }
        // Nothing answered is lost: every ordered answer is durable on every participant at
        // the answered timestamp.
        for rec in &self.cs.history.txns {
            let Some(ts) = rec.ts() else { continue };
            let durable: Vec<(ShardId, Durable)> = shards_of(rec)
                .into_iter()
                .map(|p| (p, self.oracle[p as usize].durable.get(&rec.id).copied().unwrap_or_default()))
                .collect();
            let final_ts = durable.iter().filter_map(|(_, d)| d.prepared).max();
            if let Some((p, d)) =
                durable.iter().find(|(_, d)| d.prepared.is_none() || d.aborted || d.refused || d.prepares > 1)
            {
                return Err(self.violation(
                    ViolationKind::NotDurable,
                    format!("{:?} was answered at ts {ts}, but shard {p}'s committed log has {d:?}", rec.id),
                ));
            }
            if final_ts != Some(ts) {
                return Err(self.violation(
                    ViolationKind::TimestampMismatch,
                    format!("{:?} was answered at ts {ts}, the committed proposals give {final_ts:?}", rec.id),
                ));
            }
        }
        // Orphans: executed iff prepared everywhere and aborted nowhere.
        let ids: Vec<TxnId> = self.orphans.keys().copied().collect();
        for id in ids {
            let rec = &self.cs.history.txns[self.cs.index[&id]];
            let durable: Vec<Durable> = shards_of(rec)
                .into_iter()
                .map(|p| self.oracle[p as usize].durable.get(&id).copied().unwrap_or_default())
                .collect();
            let executed = durable.iter().all(|d| d.prepared.is_some() && !d.aborted);
            let ts = durable.iter().filter_map(|d| d.prepared).max();
            if executed {
                self.report.orphans_executed += 1;
            }
            self.orphans.insert(id, if executed { ts } else { None });
        }
        let mut stores: Vec<&Store> = Vec::new();
        for group in &self.replicas {
            let leader = group
                .iter()
                .filter_map(|n| n.node.as_ref().map(ReplicaNode::replica))
                .find(|r| r.is_serving())
                .expect("converged");
            stores.push(leader.store());
            self.report.recover_sent += leader.leader().map_or(0, |l| l.stats().recover_sent);
        }
        let options = CheckOptions { realtime_across_shards: self.config.check_realtime_across_shards };
        let summary =
            checker::check_with_orphans(&self.cs.history, &self.orphans, &procedure::registry(), &stores, options)
                .map_err(|v| v.at(self.now))?;
        self.report.shard_hashes = stores.iter().map(|s| s.state_hash()).collect();
        self.report.committed = summary.committed;
        self.report.rejected = summary.rejected;
        self.report.orphans = self.orphans.len() as u64;
        self.report.unknown = self.cs.unknown;
        self.report.retries = self.cs.nodes.iter().map(|c| c.coord.stats().retries).sum();
        self.report.events = self.events;
        self.report.messages = self.delivered;
        self.report.trace_hash = self.trace_hash;
        let _ = self.answered_at;
        Ok(self.report)
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
