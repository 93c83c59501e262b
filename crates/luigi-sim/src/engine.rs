//! The one simulation engine: virtual time, the event queue, the network, the clients and the
//! trace hash, and the event loop that drives them. What the servers are is a
//! [`ClusterModel`]: a Raft group of the real node per shard
//! ([`RaftGroups`](crate::failover::RaftGroups)), under faults or in its ideal-log
//! configuration (one node per shard, no faults). The
//! engine is [`Sim`]; everything in it but the cluster is the [`Core`], which the engine
//! lends to the cluster model's methods (`&mut Core`), so a model reaches time, the queue,
//! the network, the clients and the trace without owning them.
//!
//! The loop: pop the earliest event; deliveries to clients, client wake-ups and client
//! starts are the engine's (the client logic is [`ClientWorld`]'s); deliveries to servers,
//! server wake-ups, disk syncs and faults are the model's. A message on a link the model cuts
//! ([`ClusterModel::blocked`], or an end that is a dead client) is lost at sending and at
//! delivery. After every transaction is answered (or orphaned by its dead client) the model
//! settles ([`ClusterModel::settle`]) and checks the run ([`ClusterModel::finish`]).

use std::collections::HashMap;

use luigi_protocol::msg::{ReplicationMsg, SnapshotKind};
use luigi_txn::client_core::ClientOutput;
use luigi_txn::msg::ClientMsg;
use luigi_txn::types::NodeId;
use luigi_txn::types::{ClientId, ShardId, TimeUs, TxnId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::checker::Moment;
use crate::clients::{ClientNode, ClientState, ClientWorld};
use crate::config::SimConfig;
use crate::hash::fold;
use crate::net::{EventKind, EventQueue, Network, Node, SimMsg, VirtualUs};
use crate::source::TxnSource;
use crate::violation::{Violation, ViolationKind, DIGEST_ENV};

/// What a step of the run returns.
pub(crate) type Step = Result<(), Violation>;

/// Rounds of a liveness probe before it fails for want of a commit (see `Sim::probe`).
pub(crate) const PROBE_ROUNDS_MAX: u32 = 4;

/// Longest back-off (µs) for a server that keeps asking to be woken in the past right after
/// being woken (see [`busy_backoff_us`]).
pub(crate) const BUSY_BACKOFF_MAX_US: u64 = 64;

/// How long a server that asked for a past deadline `streak` wake-ups in a row waits before
/// the next one: doubling, up to [`BUSY_BACKOFF_MAX_US`].
pub(crate) fn busy_backoff_us(streak: u32) -> u64 {
    (1u64 << streak.min(6)).min(BUSY_BACKOFF_MAX_US)
}

/// A node's local clock: virtual time plus its offset, clamped at 0.
pub fn local_clock(now: VirtualUs, offset_us: i64) -> TimeUs {
    (now as i64).saturating_add(offset_us).max(0) as TimeUs
}

/// The earliest virtual time at which a clock with `offset_us` reads at least `deadline`.
pub fn virtual_deadline(deadline: TimeUs, offset_us: i64) -> VirtualUs {
    if deadline == 0 {
        return 0;
    }
    (deadline as i64).saturating_sub(offset_us).max(0) as VirtualUs
}

/// The pending wake-up of a node; a wake event whose generation is not current is stale.
#[derive(Debug, Default)]
struct WakeSlot {
    at: Option<VirtualUs>,
    gen: u64,
}

/// The master random stream of a run: every other stream and every clock offset is drawn
/// from it, in a fixed order (each cluster model fixes its own).
pub(crate) struct Seeds {
    master: ChaCha8Rng,
}

impl Seeds {
    /// The master stream of `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Seeds { master: ChaCha8Rng::seed_from_u64(seed) }
    }

    /// A new stream seeded from the master.
    pub(crate) fn derive(&mut self) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.master.gen())
    }

    /// `node`'s clock offset: drawn, unless `config` pins it.
    pub(crate) fn offset(&mut self, config: &SimConfig, node: Node) -> i64 {
        let max = config.clock_offset_max_us as i64;
        let drawn = self.master.gen_range(-max..=max);
        config.clock_offsets.get(&node).copied().unwrap_or(drawn)
    }

    /// The clients of `config`, in a cluster of `replicas` replicas per shard.
    pub(crate) fn clients(&mut self, config: &SimConfig, replicas: u32) -> Vec<ClientNode> {
        (1..=u64::from(config.clients))
            .map(|id| ClientNode::new(config, id, replicas, self.offset(config, Node::Client(id))))
            .collect()
    }
}

/// Everything of a run but the cluster: configuration, virtual time, the event queue, the
/// network, the clients, every node's pending wake-up, the counters and the trace hash.
pub(crate) struct Core<'a> {
    pub(crate) config: &'a SimConfig,
    pub(crate) now: VirtualUs,
    step: u64,
    pub(crate) queue: EventQueue,
    net: Network,
    /// The clients and what they were told.
    pub(crate) cs: ClientState,
    wakes: HashMap<Node, WakeSlot>,
    /// Events processed.
    pub(crate) events: u64,
    /// Messages delivered.
    pub(crate) delivered: u64,
    pub(crate) trace_hash: u64,
    /// Virtual time at which the last transaction was answered (set when settling starts).
    pub(crate) answered_at: VirtualUs,
}

impl Drop for Core<'_> {
    /// Appends the run's digest line to the file named by [`DIGEST_ENV`], if set. Every run
    /// ends by dropping its core, whether it passed or reported a violation.
    fn drop(&mut self) {
        let Some(path) = std::env::var_os(DIGEST_ENV) else { return };
        let thread = std::thread::current();
        let line = format!(
            "{} seed={} events={} messages={} now={} trace={:#018x}\n",
            thread.name().unwrap_or("main"),
            self.config.seed,
            self.events,
            self.delivered,
            self.now,
            self.trace_hash
        );
        // One append per line: lines of parallel tests never interleave.
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| std::io::Write::write_all(&mut file, line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("cannot append to {DIGEST_ENV} file {}: {e}", path.to_string_lossy());
        }
    }
}

impl<'a> Core<'a> {
    /// A run of `config` over `net` with `clients` drawing from `source`; the trace hash
    /// starts from `trace_seed`.
    pub(crate) fn new(
        config: &'a SimConfig,
        net: Network,
        source: TxnSource,
        clients: Vec<ClientNode>,
        trace_seed: u64,
    ) -> Self {
        Core {
            config,
            now: 0,
            step: 0,
            queue: EventQueue::default(),
            net,
            cs: ClientState::new(clients, source, config.txns),
            wakes: HashMap::new(),
            events: 0,
            delivered: 0,
            trace_hash: fold(0, trace_seed),
            answered_at: 0,
        }
    }

    /// A violation at the current time.
    pub(crate) fn violation(&self, kind: ViolationKind, message: impl Into<String>) -> Violation {
        Violation::new(kind, message).at(self.now)
    }

    /// The next point of the run's history.
    pub(crate) fn moment(&mut self) -> Moment {
        self.step += 1;
        Moment { us: self.now, step: self.step }
    }

    /// Prints `what` when tracing.
    pub(crate) fn trace(&self, what: impl FnOnce() -> String) {
        if self.config.trace {
            eprintln!("[{:>10} us] {}", self.now, what());
        }
    }

    /// Folds `x` into the trace hash.
    pub(crate) fn fold(&mut self, x: u64) {
        self.trace_hash = fold(self.trace_hash, x);
    }

    /// (Re)schedules `node`'s wake-up at `at` (None: no wake-up needed).
    pub(crate) fn schedule_wake(&mut self, node: Node, at: Option<VirtualUs>) {
        let slot = self.wakes.entry(node).or_default();
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

    /// True if the wake-up of `node` numbered `gen` is current (it is then consumed).
    fn take_wake(&mut self, node: Node, gen: u64) -> bool {
        match self.wakes.get_mut(&node) {
            Some(slot) if slot.gen == gen => {
                slot.at = None;
                true
            }
            Some(_) | None => false,
        }
    }

    /// Hands `msg` to the network now (whatever the cluster's faults: see
    /// [`ClusterModel::blocked`]).
    pub(crate) fn send(&mut self, src: Node, dst: Node, msg: SimMsg) {
        self.net.send(self.config, &mut self.queue, self.now, src, dst, msg);
    }

    /// Network counters.
    pub(crate) fn net_stats(&self) -> crate::net::NetStats {
        self.net.stats()
    }

    /// True if `node` is a client that died (it sends and hears nothing more).
    pub(crate) fn dead(&self, node: Node) -> bool {
        match node {
            Node::Client(c) => self.cs.nodes.get((c as usize).wrapping_sub(1)).is_some_and(|n| n.dead),
            Node::Leader(_) | Node::Replica(..) => false,
        }
    }
}

/// What the servers of a run are: the engine delegates everything about them here. Each
/// method gets the [`Core`] (time, queue, network, clients, trace).
pub(crate) trait ClusterModel {
    /// What a correct run reports.
    type Report;
    /// The node that serves replica `replica` of `shard` (where clients send).
    fn node_of(&self, shard: ShardId, replica: u32) -> Node;
    /// Before the first event: the servers' first wake-ups, links and scheduled faults.
    fn start(&mut self, core: &mut Core<'_>) -> Step;
    /// `msg` from `src` arrives at server `dst` (or is misrouted).
    fn deliver(&mut self, core: &mut Core<'_>, src: Node, dst: Node, msg: SimMsg) -> Step;
    /// Server `node`'s current wake-up is due.
    fn wake(&mut self, core: &mut Core<'_>, node: Node) -> Step;
    /// The disk of `node` finished syncing (stale unless `gen` is its incarnation).
    fn sync(&mut self, core: &mut Core<'_>, node: Node, gen: u64) -> Step;
    /// Scheduled fault number `index` is due.
    fn fault(&mut self, core: &mut Core<'_>, index: usize) -> Step;
    /// True if a message from `src` to `dst` is cut by the cluster's faults (checked when it
    /// is sent and when it arrives; a dead client's links are cut by the engine).
    fn blocked(&self, core: &Core<'_>, src: Node, dst: Node) -> bool;
    /// Takes `msg` from `src` to `dst` if a cut link holds it (as TCP holds what is sent
    /// during a partition, to deliver it when the partition heals); gives it back otherwise.
    /// Asked when a client sends and when a message arrives, after [`Self::blocked`].
    fn hold(&mut self, core: &Core<'_>, src: Node, dst: Node, msg: SimMsg) -> Option<SimMsg>;
    /// After each event until every transaction is answered (a liveness check).
    fn after_step(&mut self, core: &mut Core<'_>) -> Step;
    /// Every transaction is answered or orphaned: heals what the model broke; returns the
    /// virtual time by which [`settled`](Self::settled) must hold.
    fn settle(&mut self, core: &mut Core<'_>) -> Result<VirtualUs, Violation>;
    /// True once the settled cluster can be checked (`steps`: events run since settling).
    fn settled(&self, core: &Core<'_>, steps: u64) -> bool;
    /// The violation to report when settling failed with `v`.
    fn unsettled(&mut self, core: &mut Core<'_>, v: Violation) -> Violation;
    /// Whether an unknown outcome is a transaction's answer (see
    /// [`ClientWorld::unknown_is_final`]).
    fn unknown_is_final(&self) -> bool;
    /// Client `id` just submitted a transaction (`cross`: cross-shard): returns true if it
    /// dies here (the coordinator kill point) after dispatching to its first participant.
    fn dies_after_submit(&mut self, core: &mut Core<'_>, id: ClientId, cross: bool) -> bool;
    /// The servers' state, for a stuck run's report.
    fn describe(&mut self, core: &Core<'_>) -> String;
    /// The end-of-run checks and the report.
    fn finish(self, core: Core<'_>) -> Result<Self::Report, Violation>;
}

/// One run in progress: the [`Core`] and the cluster model `C`.
pub(crate) struct Sim<'a, C> {
    core: Core<'a>,
    cluster: C,
}

impl<'a, C: ClusterModel> Sim<'a, C> {
    /// The run of `core` over `cluster`; each client's start time is drawn from `seeds`.
    pub(crate) fn new(mut core: Core<'a>, cluster: C, seeds: &mut Seeds) -> Self {
        for client in 1..=u64::from(core.config.clients) {
            let at = seeds.master.gen_range(0..=core.config.start_spread_us);
            core.queue.push(at, EventKind::Start { client });
        }
        Sim { core, cluster }
    }

    /// Runs until every transaction is answered (or orphaned) and the cluster has settled,
    /// or fails.
    pub(crate) fn run(&mut self) -> Step {
        self.cluster.start(&mut self.core)?;
        let config = self.core.config;
        if config.ping_first {
            for id in 1..=u64::from(config.clients) {
                self.call_client(id, false, |coord, local, shards, out| {
                    for shard in 0..shards {
                        coord.ping(local, shard, out);
                    }
                })?;
            }
        }
        while !self.core.cs.finished() {
            self.step_event(config.max_virtual_us)?;
            self.cluster.after_step(&mut self.core)?;
        }
        self.core.answered_at = self.core.now;
        self.settle()?;
        if config.probe_txns > 0 {
            self.probe(config.probe_txns)?;
        }
        Ok(())
    }

    /// Heals the cluster and runs until it has settled.
    fn settle(&mut self) -> Step {
        let deadline = self.cluster.settle(&mut self.core)?;
        let mut steps = 0u64;
        while !self.cluster.settled(&self.core, steps) {
            steps += 1;
            if let Err(v) = self.step_event(deadline) {
                return Err(self.cluster.unsettled(&mut self.core, v));
            }
        }
        Ok(())
    }

    /// Liveness after every fault healed: the settled cluster is given `txns` more
    /// transactions, new business transactions (with all their steps) of the first live
    /// client, one at a time (so that admission control does not refuse them all: a refused
    /// cross-shard transaction may still hold a slot of another participant for a moment),
    /// in up to [`PROBE_ROUNDS_MAX`] rounds of `txns` until one commits. Each must be
    /// answered within the settling time. Then the cluster settles again for the end-of-run
    /// checks, which cover them like the others.
    fn probe(&mut self, txns: u64) -> Step {
        let from = self.core.cs.history.txns.len();
        let Some(prober) = (1..=u64::from(self.core.config.clients)).find(|&c| !self.core.dead(Node::Client(c))) else {
            return Ok(()); // no live client (the kill points keep one alive)
        };
        self.core.cs.prober = Some(prober);
        let deadline = self.cluster.settle(&mut self.core)?;
        for round in 1..=PROBE_ROUNDS_MAX {
            self.core.cs.target = self.core.cs.submitted + txns;
            self.core.trace(|| format!("probe {round}: c{prober} submits {txns} transactions to the healed cluster"));
            self.call_client(prober, false, |_, _, _, _| {})?;
            while !self.core.cs.finished() {
                if let Err(v) = self.step_event(deadline) {
                    let msg =
                        format!("liveness: the healed cluster did not answer its probe transactions: {}", v.message);
                    return Err(Violation { message: msg, ..v });
                }
            }
            let probes = &self.core.cs.history.txns[from..];
            if probes.iter().any(|t| t.answers.first().is_some_and(|a| a.outcome.is_committed())) {
                break;
            }
        }
        self.core.cs.prober = None;
        let probes = &self.core.cs.history.txns[from..];
        if !probes.iter().any(|t| t.answers.first().is_some_and(|a| a.outcome.is_committed())) {
            let outcomes: Vec<String> =
                probes.iter().map(|t| format!("{:?}: {:?}", t.id, t.answers.first().map(|a| &a.outcome))).collect();
            let msg =
                format!("liveness: no probe transaction committed on the healed cluster: {}", outcomes.join(", "));
            return Err(self.core.violation(ViolationKind::Stuck, msg));
        }
        self.settle()
    }

    /// The end-of-run checks and the report.
    pub(crate) fn finish(self) -> Result<C::Report, Violation> {
        self.cluster.finish(self.core)
    }

    /// Processes the next event; fails when it lies beyond `limit` (virtual µs) or the event
    /// budget is exhausted.
    fn step_event(&mut self, limit: VirtualUs) -> Step {
        let Some(event) = self.core.queue.pop() else {
            return Err(self.stuck("no event is left to run"));
        };
        if event.at > limit {
            return Err(self.stuck("the virtual-time budget is exhausted"));
        }
        self.core.events += 1;
        if self.core.events > self.core.config.max_events {
            return Err(self.stuck("the event budget is exhausted (livelock?)"));
        }
        debug_assert!(event.at >= self.core.now, "time never goes back");
        self.core.now = event.at;
        match event.kind {
            EventKind::Deliver { src, dst, msg } => self.deliver(src, dst, msg),
            EventKind::Wake { node, gen } => self.wake(node, gen),
            EventKind::Start { client } => {
                let now = self.core.now;
                self.core.fold(now);
                self.core.fold(client);
                self.core.trace(|| format!("c{client} starts"));
                self.client(client)?.started = true;
                self.call_client(client, false, |_, _, _, _| {})
            }
            EventKind::Sync { node, gen } => self.cluster.sync(&mut self.core, node, gen),
            EventKind::Fault { index } => self.cluster.fault(&mut self.core, index),
            EventKind::ClientLinks { shard, replica, up } => {
                let now = self.core.now;
                self.core.fold(now);
                self.core.fold(Node::Replica(shard, replica).code());
                self.client_links_changed(shard, replica, up)
            }
        }
    }

    /// True if a message from `src` to `dst` is lost to a fault or a dead client.
    fn blocked(&self, src: Node, dst: Node) -> bool {
        self.core.dead(src) || self.core.dead(dst) || self.cluster.blocked(&self.core, src, dst)
    }

    fn deliver(&mut self, src: Node, dst: Node, msg: SimMsg) -> Step {
        if self.blocked(src, dst) {
            return Ok(());
        }
        let Some(msg) = self.cluster.hold(&self.core, src, dst, msg) else { return Ok(()) };
        let core = &mut self.core;
        core.delivered += 1;
        let hash = msg.hash();
        for x in [core.now, src.code(), dst.code(), hash] {
            core.fold(x);
        }
        core.trace(|| match &msg {
            SimMsg::Replication(ReplicationMsg::Raft { bytes, .. }) => {
                format!("{src} -> {dst}: raft ({} bytes)", bytes.len())
            }
            SimMsg::Replication(ReplicationMsg::SnapshotChunk { transfer, seq, data, .. }) => {
                format!("{src} -> {dst}: snapshot transfer {transfer} chunk {seq} ({} bytes)", data.len())
            }
            SimMsg::Replication(ReplicationMsg::SnapshotBegin { transfer, kind, index, total_bytes, .. }) => {
                let what = match kind {
                    SnapshotKind::Install { .. } => "leader's snapshot",
                    SnapshotKind::Offer => "snapshot offer",
                };
                format!("{src} -> {dst}: snapshot transfer {transfer} begins: {what} at {index} ({total_bytes} bytes)")
            }
            other => format!("{src} -> {dst}: {other:?}"),
        });
        match (src, dst, msg) {
            (Node::Leader(_) | Node::Replica(..), Node::Client(client), SimMsg::ToClient(m)) => {
                if let Node::Replica(shard, replica) = src {
                    self.client(client)?.routes.on_server_msg(NodeId { shard, replica }, &m);
                }
                self.core.cs.delivering = Some((src, hash));
                let result = self.call_client(client, false, |coord, local, _, out| coord.on_message(local, m, out));
                self.core.cs.delivering = None;
                result
            }
            (src, dst, msg) => self.cluster.deliver(&mut self.core, src, dst, msg),
        }
    }

    fn wake(&mut self, node: Node, gen: u64) -> Step {
        if !self.core.take_wake(node, gen) {
            return Ok(()); // superseded by a later schedule
        }
        let now = self.core.now;
        self.core.fold(now);
        self.core.fold(node.code());
        self.core.trace(|| format!("{node} wakes"));
        match node {
            Node::Client(c) => self.call_client(c, true, |coord, local, _, out| coord.tick(local, out)),
            Node::Leader(_) | Node::Replica(..) => self.cluster.wake(&mut self.core, node),
        }
    }

    /// Client `id` dies: it sends and hears nothing more, and every transaction it has not
    /// been answered is orphaned.
    fn kill_client(&mut self, id: ClientId) -> Step {
        self.core.trace(|| format!("c{id} dies"));
        self.core.fold(0xc1d);
        self.core.fold(id);
        self.client(id)?.dead = true;
        let cs = &mut self.core.cs;
        let lost: Vec<TxnId> =
            cs.history.txns.iter().filter(|t| t.id.client == id && t.answers.is_empty()).map(|t| t.id).collect();
        for t in lost {
            cs.orphans.insert(t, None);
        }
        self.core.schedule_wake(Node::Client(id), None);
        Ok(())
    }

    fn stuck(&mut self, why: &str) -> Violation {
        let core = &self.core;
        let cs = &core.cs;
        let mut msg = format!(
            "the run did not finish: {why}; {}/{} transactions answered ({} orphaned, {} submitted) after {} \
             events at virtual time {} us",
            cs.answered,
            core.config.txns,
            cs.orphans.len(),
            cs.submitted,
            core.events,
            core.now
        );
        let waiting: Vec<String> = cs
            .history
            .txns
            .iter()
            .filter(|t| t.answers.is_empty() && !cs.orphans.contains_key(&t.id))
            .take(5)
            .map(|t| {
                let shards: Vec<ShardId> = t.pieces.iter().map(|p| p.shard).collect();
                format!("{:?} (dispatched {} us, shards {shards:?})", t.id, t.dispatched.us)
            })
            .collect();
        msg.push_str(&format!("; unanswered (first 5): {}", waiting.join(", ")));
        msg.push_str(&self.cluster.describe(&self.core));
        for (c, node) in (1..).zip(&self.core.cs.nodes) {
            msg.push_str(&format!("; c{c}: in flight {} stats {}", node.coord.in_flight(), node.coord.stats_line()));
        }
        self.core.violation(ViolationKind::Stuck, msg)
    }
}

impl<C: ClusterModel> ClientWorld for Sim<'_, C> {
    fn sim_config(&self) -> &SimConfig {
        self.core.config
    }

    fn now(&self) -> VirtualUs {
        self.core.now
    }

    fn moment(&mut self) -> Moment {
        self.core.moment()
    }

    fn trace(&self, what: impl FnOnce() -> String) {
        self.core.trace(what)
    }

    fn fold_trace(&mut self, x: u64) {
        self.core.fold(x);
    }

    fn violation(&self, kind: ViolationKind, message: String) -> Violation {
        self.core.violation(kind, message)
    }

    fn clients(&mut self) -> &mut ClientState {
        &mut self.core.cs
    }

    fn send_to_replica(&mut self, id: ClientId, shard: ShardId, replica: u32, msg: ClientMsg) {
        let (src, dst) = (Node::Client(id), self.cluster.node_of(shard, replica));
        if !self.blocked(src, dst) {
            if let Some(msg) = self.cluster.hold(&self.core, src, dst, SimMsg::ToLeader(msg)) {
                self.core.send(src, dst, msg);
            }
        }
    }

    fn schedule_wake(&mut self, node: Node, at: Option<VirtualUs>) {
        self.core.schedule_wake(node, at)
    }

    fn unknown_is_final(&self) -> bool {
        self.cluster.unknown_is_final()
    }

    /// The coordinator kill point: the dispatch reaches the first participant only, then
    /// the client dies.
    fn dies_after_submit(&mut self, id: ClientId, cross: bool, out: &mut Vec<ClientOutput>) -> Result<bool, Violation> {
        if !self.cluster.dies_after_submit(&mut self.core, id, cross) {
            return Ok(false);
        }
        let first = out.iter().position(|o| matches!(o, ClientOutput::Send { .. }));
        let mut kept: Vec<ClientOutput> = first.map(|k| out.swap_remove(k)).into_iter().collect();
        out.clear();
        self.client_outputs(id, &mut kept)?;
        self.kill_client(id)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests;
