//! The replicas of the Raft cluster model: each is a [`ReplicaNode`] (the node the server
//! runs), and this file only executes its effects on the simulated network and disk, and
//! crashes, restarts and cuts it.
//!
//! Size: over 600 lines: executing every kind of the node's effects on the simulated network
//! and disk, and the replica's crash, restart and cuts, which share the replica table; the
//! fault plans and checks are in `faults.rs` and `checks.rs`.

use luigi_node::{replicas_for, Effect, NodeConfig, NodeError, Persist, ReplicaNode, SnapshotCheck, Tuning};
use luigi_protocol::leader::LeaderConfig;
use luigi_raft::accepts::FoundAccepts;
use luigi_raft::disk::DiskStorage;
use luigi_raft::RecoveredState;
use luigi_replica::{AgreementCounters, ShardReplica, SnapshotJob, Transition};
use luigi_txn::msg::ServerMsg;
use luigi_txn::procedure::ProcError;
use luigi_txn::types::NodeId;
use luigi_txn::types::{Protocol, ShardId, TimeUs, Timestamp, TxnId};
use luigi_wal::{Durability, SimFs, WalOptions};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use super::config::population;
use super::partition::ActiveCut;
use super::{FaultAction, FaultConfig, Kill, KillPoint, RaftGroups};
use crate::config::SimConfig;
use crate::engine::{busy_backoff_us, local_clock, virtual_deadline, Core, Step};
use crate::net::{EventKind, Node, SimMsg};
use crate::violation::{Violation, ViolationKind};

/// Rounds of executing effects and turning the node again in one call before the replica
/// counts as livelocked.
const EFFECT_ROUNDS_MAX: usize = 64;

/// Where a replica's storage lives on its file system.
const DATA_DIR: &str = "/luigi/data";

/// A replica's disk: the server's own storage code ([`DiskStorage`], the WAL and snapshot
/// files) over a simulated file system that loses what was not synced when the replica
/// crashes (a power loss: unsynced tails dropped or torn, unsynced renames undone).
pub(super) struct SimDisk {
    fs: SimFs,
    storage: Option<DiskStorage>,
}

impl SimDisk {
    pub(super) fn new(seed: u64) -> Self {
        SimDisk { fs: SimFs::new(seed), storage: None }
    }

    /// Opens the storage as a restarting server does; returns what it recovered, and the
    /// fast-path accepts it found.
    fn open(&mut self) -> Result<(RecoveredState, FoundAccepts), String> {
        let options = WalOptions { durability: Durability::Fsync, ..WalOptions::default() };
        let (mut storage, recovered) =
            DiskStorage::open_with(Arc::new(self.fs.clone()), DATA_DIR, options).map_err(|e| e.to_string())?;
        let accepts = storage.take_found_accepts();
        self.storage = Some(storage);
        Ok((recovered, accepts))
    }

    fn storage(&mut self) -> &mut DiskStorage {
        self.storage.as_mut().expect("a running replica has its storage open")
    }

    /// A power loss.
    fn crash(&mut self) {
        self.storage = None;
        self.fs.crash();
    }
}

/// A replica's place in the world: its node while up, its disk, and what the checks track.
pub(super) struct SimReplica {
    pub(super) node: Option<ReplicaNode>,
    pub(super) disk: SimDisk,
    pub(super) offset_us: i64,
    /// Incarnation: bumped at every crash and restart (stale wake-ups and syncs are ignored).
    pub(super) gen: u64,
    sync_scheduled: bool,
    /// The last ready written that the node waits to hear is durable.
    unsynced: Option<u64>,
    /// The partition it is under, if any (`partition.rs`).
    pub(super) cut: Option<ActiveCut>,
    /// Transactions the current state machine executed.
    pub(super) exec_seen: HashSet<TxnId>,
    /// Last watermark of the current serving incarnation.
    pub(super) watermark: Timestamp,
    /// Baselines: the single-shard reads the current serving incarnation ran and has not
    /// answered yet, per transaction in the order they ran: (last index logged when it ran,
    /// that entry's term).
    pub(super) reads: HashMap<TxnId, VecDeque<(u64, u64)>>,
    busy_streak: u32,
}

impl SimReplica {
    pub(super) fn new(offset_us: i64, disk_seed: u64) -> Self {
        SimReplica {
            node: None,
            disk: SimDisk::new(disk_seed),
            offset_us,
            gen: 0,
            sync_scheduled: false,
            unsynced: None,
            cut: None,
            exec_seen: HashSet::new(),
            watermark: 0,
            reads: HashMap::new(),
            busy_streak: 0,
        }
    }

    pub(super) fn faulty(&self) -> bool {
        self.node.is_none() || self.cut.is_some()
    }
}

/// The node of replica `i` of shard `s`, fresh or restarted from `recovered`. Its timeouts
/// come from [`Tuning::for_delay`] over the simulated links, with the run's Raft tick,
/// election and snapshot settings and its leader configuration over them (as a cluster file
/// overrides them for a server).
pub(super) fn new_node(
    config: &SimConfig,
    faults: &FaultConfig,
    s: ShardId,
    i: u32,
    disk: &mut SimDisk,
) -> Result<ReplicaNode, Violation> {
    let (recovered, accepts) = disk
        .open()
        .map_err(|e| Violation::new(ViolationKind::Invariant, format!("R{s}.{i} cannot open its disk: {e}")))?;
    let mut tuning = Tuning::for_delay(config.link.delay.mean_us, config.link.delay.jitter_us);
    tuning.raft_tick_us = faults.raft_tick_us;
    tuning.election_ticks = faults.election_ticks;
    tuning.snapshot_entries = faults.snapshot_entries.unwrap_or(u64::MAX);
    // Often, so that crashes meet rewrites of the accept log (the fast path).
    tuning.accepts_rewrite_records = 16;
    let node = NodeId { shard: s, replica: i };
    let mut nc = NodeConfig::new(node, shape_of(config, faults), config.seed, tuning, config.registry());
    // The hosted workload's population, plus the synthetic rows of `population_bytes`.
    let hosted = config.workload.as_ref().map(|h| h.initial_store(s));
    match (hosted, faults.population_bytes) {
        (None, 0) => {}
        (Some(initial), 0) => nc = nc.with_initial(initial),
        (None, bytes) => nc = nc.with_initial(Arc::new(move || population(bytes))),
        (Some(initial), bytes) => {
            nc = nc.with_initial(Arc::new(move || {
                let mut store = initial();
                for (key, value) in population(bytes).iter() {
                    store.put(key.clone(), value.clone());
                }
                store
            }))
        }
    }
    nc.leader = LeaderConfig {
        shard: s,
        shards: config.shards,
        group_sizes: shape_of(config, faults),
        ..config.leader.clone()
    };
    let factory = replicas_for(config.protocol, &nc.leader);
    nc = nc.with_protocol(factory);
    let invariant = |e: NodeError| Violation::new(ViolationKind::Invariant, format!("R{s}.{i}: {e}"));
    let mut node = ReplicaNode::new(nc, recovered).map_err(invariant)?;
    node.restore_accepts(&accepts).map_err(invariant)?;
    Ok(node)
}

/// Replicas per shard.
fn shape_of(config: &SimConfig, faults: &FaultConfig) -> Vec<u32> {
    vec![faults.replicas; config.shards as usize]
}

/// The serving Luigi shard leader's counters of `node`, if it is one (the model's checks of
/// Luigi's counters).
pub(super) fn luigi_stats(node: &ReplicaNode) -> Option<AgreementCounters> {
    node.replica().leader_figures().and_then(|f| f.agreement)
}

/// The serving Luigi shard leader's watermark of `replica`, if it is one.
pub(super) fn luigi_watermark(replica: &dyn ShardReplica) -> Option<Timestamp> {
    replica.leader_figures().and_then(|f| f.watermark)
}

/// What a serving leader still has in its care (`None`: `replica` does not serve): Luigi's
/// pending transactions, or a baseline's transactions coordinated, resolved, executed and
/// not prepared (2PL: holding locks), and prepared and not decided (holding locks).
pub(super) fn serving_pending(replica: &dyn ShardReplica) -> Option<usize> {
    replica.leader_figures().map(|f| f.pending)
}

impl RaftGroups<'_> {
    /// Runs `f` on replica `i` of shard `s` at its local time, turns its node, checks what it
    /// did, applies the kill point, and executes its effects. A crashed replica ignores it.
    pub(super) fn call_replica(
        &mut self,
        core: &mut Core<'_>,
        s: ShardId,
        i: u32,
        woken: bool,
        f: impl FnOnce(&mut ReplicaNode, TimeUs, &mut Vec<Effect>) -> Result<(), String>,
    ) -> Step {
        let now = core.now;
        let me = self.addr(s, i);
        let r = &mut self.replicas[s as usize][i as usize];
        let Some(node) = r.node.as_mut() else { return Ok(()) };
        let local = local_clock(now, r.offset_us);
        let was_serving = node.replica().is_serving();
        let before = luigi_stats(node).unwrap_or_default();
        let stats_before = node.stats();
        let mut fx = Vec::new();
        if let Err(e) = f(node, local, &mut fx) {
            return Err(core.violation(ViolationKind::Invariant, format!("{me}: {e}")));
        }
        if let Err(e) = node.turn(local, &mut fx) {
            return Err(core.violation(ViolationKind::Invariant, format!("{me}: {e}")));
        }
        // What the cores promise holds after every step, in either role.
        if let Err(e) = node.replica().check_invariants() {
            return Err(core.violation(ViolationKind::Invariant, format!("{me}: {e}")));
        }
        let executed = self.after_turn(core, s, i, &fx, stats_before)?;
        let r = &mut self.replicas[s as usize][i as usize];
        let node = r.node.as_ref().expect("up");
        let serving = node.replica().is_serving();
        let after = luigi_stats(node).unwrap_or_default();
        if fx.iter().any(|e| matches!(e, Effect::Transition(_))) {
            r.watermark = 0; // a new serving incarnation, or none
            r.reads.clear();
        }
        match core.config.protocol {
            Protocol::Luigi => {
                if let Some(w) = luigi_watermark(node.replica()) {
                    if w < r.watermark {
                        let msg = format!("{me}'s watermark went back from {} to {w}", r.watermark);
                        return Err(Violation::new(ViolationKind::Invariant, msg).at(now));
                    }
                }
            }
            // No watermarks: a baseline answers once durable.
            Protocol::Occ | Protocol::TwoPl | Protocol::Direct => {}
        }
        let kill = if was_serving && serving { self.kill_point(core, s, &fx, &executed, before, after) } else { None };
        if matches!(kill, Some(Kill::DropOutputs)) {
            // Dies before anything of this call leaves or is synced.
            return self.kill(core, s, i);
        }
        self.execute(core, s, i, fx)?;
        if kill.is_some() {
            return self.kill(core, s, i);
        }
        self.schedule_replica_wake(core, s, i, woken);
        Ok(())
    }

    /// Checks what a turn of replica `i` of shard `s` did: folds its commits into the oracle,
    /// starts a new execution record for a new state machine (a demotion or an installed
    /// snapshot replays the log), and checks every execution. Returns the executions.
    fn after_turn(
        &mut self,
        core: &mut Core<'_>,
        s: ShardId,
        i: u32,
        fx: &[Effect],
        stats_before: luigi_node::NodeStats,
    ) -> Result<Vec<(ShardId, TxnId)>, Violation> {
        self.update_oracle(core, s, i)?;
        let r = &mut self.replicas[s as usize][i as usize];
        let stats = r.node.as_ref().expect("up").stats();
        let demoted = fx.iter().any(|e| matches!(e, Effect::Transition(Transition::Demoted)));
        if demoted || stats.snapshots_installed > stats_before.snapshots_installed {
            r.exec_seen.clear();
        }
        self.report.snapshots_installed += stats.snapshots_installed - stats_before.snapshots_installed;
        self.report.leader_compactions += stats.compactions_behind_offers - stats_before.compactions_behind_offers;
        // Executions are observed through the node's effects, as any shell would see them.
        let executed: Vec<(ShardId, TxnId, Timestamp)> = fx
            .iter()
            .filter_map(|e| match e {
                Effect::Executed { shard, id, ts } => Some((*shard, *id, *ts)),
                _ => None,
            })
            .collect();
        for &(shard, id, ts) in &executed {
            self.on_executed(core, s, i, shard, id, ts)?;
        }
        Ok(executed.into_iter().map(|(shard, id, _)| (shard, id)).collect())
    }

    /// Executes `fx` for replica `i` of shard `s`; effects that call back into the node (an
    /// acknowledged write on a broken disk, a snapshot made inline) are followed by another
    /// turn, until nothing is left.
    fn execute(&mut self, core: &mut Core<'_>, s: ShardId, i: u32, mut fx: Vec<Effect>) -> Step {
        let me = self.addr(s, i);
        for _ in 0..EFFECT_ROUNDS_MAX {
            let mut again = Vec::new();
            for e in fx.drain(..) {
                self.execute_one(core, s, i, e, &mut again)?;
            }
            if again.is_empty() {
                return Ok(());
            }
            let r = &mut self.replicas[s as usize][i as usize];
            let local = local_clock(core.now, r.offset_us);
            let node = r.node.as_mut().expect("up");
            let stats_before = node.stats();
            if let Err(e) = node.turn(local, &mut again) {
                return Err(core.violation(ViolationKind::Invariant, format!("{me}: {e}")));
            }
            self.after_turn(core, s, i, &again, stats_before)?;
            fx = again;
        }
        Err(core.violation(ViolationKind::Invariant, format!("{me} never settles")))
    }

    fn execute_one(&mut self, core: &mut Core<'_>, s: ShardId, i: u32, e: Effect, again: &mut Vec<Effect>) -> Step {
        let me = self.addr(s, i);
        match e {
            // Not a simulated client: it only sends (see `send_hostile`).
            Effect::ToClient { client: super::HOSTILE_CLIENT, .. } => {}
            Effect::ToClient { client, msg } => self.send_to_client(core, s, i, client, msg)?,
            Effect::ToAllClients { msg } => {
                for client in 1..=u64::from(core.config.clients) {
                    self.send(core, me, Node::Client(client), SimMsg::ToClient(msg.clone()));
                }
            }
            Effect::ToClients { clients, msg } => {
                for client in clients {
                    self.send(core, me, Node::Client(client), SimMsg::ToClient(msg.clone()));
                }
            }
            Effect::ToPeer { to, batch } => {
                if to.shard == s || to.shard >= core.config.shards || to.replica >= self.n || batch.from != s {
                    let msg = format!("{me} sent a batch from shard {} to {to}: {batch:?}", batch.from);
                    return Err(core.violation(ViolationKind::Invariant, msg));
                }
                let to = self.addr(to.shard, to.replica);
                self.send(core, me, to, SimMsg::Peer(batch));
            }
            Effect::Replicate { to, msg } => {
                let to = self.addr(to.shard, to.replica);
                self.send(core, me, to, SimMsg::Replication(msg))
            }
            Effect::Persist(p) => self.persist(core, s, i, &p, again)?,
            Effect::SaveSnapshot(snap) => {
                let index = snap.index;
                if let Err(e) = self.replicas[s as usize][i as usize].disk.storage().save_snapshot(&snap) {
                    let msg = format!("{me} cannot save its snapshot: {e}");
                    return Err(core.violation(ViolationKind::Invariant, msg));
                }
                core.trace(|| format!("{me} saves a snapshot at {index}"));
            }
            Effect::MakeSnapshot(job) => self.make_snapshot(core, s, i, job, again)?,
            Effect::CheckSnapshot(check) => self.check_snapshot(core, s, i, check, again)?,
            Effect::MarkDamaged { reason } => {
                let _ = self.replicas[s as usize][i as usize].disk.storage().mark_damaged(&reason);
                return Err(core.violation(ViolationKind::Invariant, format!("{me} lost its disk: {reason}")));
            }
            Effect::Executed { .. } => {} // checked in `after_turn`
            Effect::Discard(state) => drop(state),
            Effect::Transition(t) => self.transition(core, s, i, t),
        }
        Ok(())
    }

    /// A message to a simulated client: a reply is checked (Luigi) or bound to the read it
    /// answers (the baselines) before it goes.
    fn send_to_client(&mut self, core: &mut Core<'_>, s: ShardId, i: u32, client: u64, msg: ServerMsg) -> Step {
        let me = self.addr(s, i);
        if let ServerMsg::Reply(r) = &msg {
            match core.config.protocol {
                Protocol::Luigi => self.check_reply(core, s, r)?,
                Protocol::Occ | Protocol::TwoPl | Protocol::Direct => {
                    self.bind_read_reply(s, i, r, &msg);
                }
            }
        }
        // Counted so that the sweeps with reads show followers serve them (DESIGN.md rule 23):
        // a read run at its snapshot, not refused and not too old for the versions kept.
        if let ServerMsg::SnapshotRead(r) = &msg {
            let served = !matches!(r.outcome, Err(_) | Ok(Err(ProcError::SnapshotTooOld { .. })));
            if served && !self.serving(s, i) {
                self.report.snapshot_reads_by_followers += 1;
            }
        }
        if client == 0 || client > u64::from(core.config.clients) {
            let msg = format!("{me} sent {msg:?} to nonexistent client {client}");
            return Err(core.violation(ViolationKind::Invariant, msg));
        }
        self.send(core, me, Node::Client(client), SimMsg::ToClient(msg));
        Ok(())
    }

    /// A write of a ready to the simulated disk: written now, durable at its sync (which is
    /// scheduled if none is), or at once on the broken disk that says durable before it is.
    fn persist(&mut self, core: &mut Core<'_>, s: ShardId, i: u32, p: &Persist, again: &mut Vec<Effect>) -> Step {
        let me = self.addr(s, i);
        let r = &mut self.replicas[s as usize][i as usize];
        if let Err(e) = r.disk.storage().write_accepts(&p.accepts, p.accepts_rewrite) {
            let msg = format!("{me} cannot write its accept log: {e}");
            return Err(core.violation(ViolationKind::Invariant, msg));
        }
        if let Err(e) = r.disk.storage().write(&p.ready) {
            return Err(core.violation(ViolationKind::Invariant, format!("{me} cannot write its log: {e}")));
        }
        if p.sync && self.faults.ack_before_sync {
            // The broken disk: says durable before it is.
            r.node.as_mut().expect("up").persisted(p.number, again);
        } else if p.sync {
            r.unsynced = Some(p.number);
        }
        if p.sync && !r.sync_scheduled {
            r.sync_scheduled = true;
            let at = core.now + self.faults.sync.sample_us(&mut self.disk_rng);
            let gen = r.gen;
            core.queue.push(at, EventKind::Sync { node: me, gen });
        }
        Ok(())
    }

    /// Runs a snapshot job at once and hands its result back, counting the compaction.
    fn make_snapshot(
        &mut self,
        core: &Core<'_>,
        s: ShardId,
        i: u32,
        job: SnapshotJob,
        again: &mut Vec<Effect>,
    ) -> Step {
        let me = self.addr(s, i);
        let made = job.run();
        let node = self.replicas[s as usize][i as usize].node.as_mut().expect("up");
        let taken = node.stats().snapshots_taken;
        if let Err(e) = node.snapshot_made(made, again) {
            return Err(core.violation(ViolationKind::Invariant, format!("{me}: {e}")));
        }
        self.report.compactions += node.stats().snapshots_taken - taken;
        Ok(())
    }

    /// Checks a received snapshot at once (a server runs it on a thread while its replica
    /// goes on) and hands the result back.
    fn check_snapshot(
        &mut self,
        core: &mut Core<'_>,
        s: ShardId,
        i: u32,
        check: SnapshotCheck,
        again: &mut Vec<Effect>,
    ) -> Step {
        let me = self.addr(s, i);
        let index = check.index();
        if check.is_install() {
            self.report.installed_bytes_max = self.report.installed_bytes_max.max(check.bytes() as u64);
        }
        let checked = check.run();
        let node = self.replicas[s as usize][i as usize].node.as_mut().expect("up");
        let compactions = node.stats().compactions_behind_offers;
        if let Err(e) = node.snapshot_checked(checked, again) {
            // Every replica's snapshot is made by the same code from the same log: one
            // that does not load is a bug.
            return Err(core.violation(ViolationKind::Invariant, format!("{me}: {e}")));
        }
        self.report.leader_compactions += node.stats().compactions_behind_offers - compactions;
        core.trace(|| format!("{me} checked a received snapshot at {index}"));
        Ok(())
    }

    /// The replica started or stopped serving: what it published as a leader is void.
    fn transition(&mut self, core: &mut Core<'_>, s: ShardId, i: u32, t: Transition) {
        let me = self.addr(s, i);
        let r = &mut self.replicas[s as usize][i as usize];
        r.watermark = 0;
        r.reads.clear();
        match t {
            Transition::Promoted => {
                self.report.promotions += 1;
                self.report.promoted.push((s, i));
                core.trace(|| format!("{me} serves as the leader"));
            }
            Transition::Demoted => {
                self.report.demotions += 1;
                core.trace(|| format!("{me} stepped down and rebuilt its state"));
            }
        }
    }

    /// Publishes a serving leader's watermark and schedules the next wake-up at its node's
    /// deadline.
    fn schedule_replica_wake(&mut self, core: &mut Core<'_>, s: ShardId, i: u32, woken: bool) {
        let now = core.now;
        let me = self.addr(s, i);
        let r = &mut self.replicas[s as usize][i as usize];
        let node = r.node.as_ref().expect("up");
        match core.config.protocol {
            Protocol::Luigi => {
                if let Some(w) = luigi_watermark(node.replica()) {
                    r.watermark = w;
                    self.published[s as usize] = self.published[s as usize].max(r.watermark);
                }
            }
            // No watermarks to publish.
            Protocol::Occ | Protocol::TwoPl | Protocol::Direct => {}
        }
        let mut deadline = virtual_deadline(node.next_deadline(), r.offset_us);
        if woken && deadline <= now {
            r.busy_streak += 1;
            self.busy_wakes += 1;
            deadline = now + busy_backoff_us(r.busy_streak);
        } else {
            r.busy_streak = 0;
        }
        let earliest = if woken { now + 1 } else { now };
        core.schedule_wake(me, Some(deadline.max(earliest)));
    }

    /// Whether the serving leader of `s` dies at the configured kill point in this call.
    fn kill_point(
        &mut self,
        core: &mut Core<'_>,
        s: ShardId,
        fx: &[Effect],
        executed: &[(ShardId, TxnId)],
        before: AgreementCounters,
        after: AgreementCounters,
    ) -> Option<Kill> {
        // Luigi: the first `Propose` of a transaction (its `PREPARE` committed) and a
        // `Confirm` (decided). The baselines' counterparts: a participant's first `Vote` (its
        // `Prepare` record committed) and a coordinator's `Decide` (the outcome is decided).
        let mut first_propose = false;
        let mut confirm = false;
        // The protocol reads its own batches (`ReplicaFactory::peer_facts`).
        for e in fx {
            if let Effect::ToPeer { batch, .. } = e {
                let facts = self.factory.peer_facts(batch);
                for id in facts.proposals {
                    first_propose |= self.proposed.insert((s, id));
                }
                confirm |= facts.decides;
            }
        }
        let point = self.faults.kill?;
        let eligible = self.kills_left > 0
            && core.now >= self.next_kill_ok_at
            && !self.quiescing
            && !self.replicas[s as usize].iter().any(SimReplica::faulty);
        if !eligible {
            return None;
        }
        let replied = |id: &TxnId| {
            fx.iter().any(|e| matches!(e, Effect::ToClient { msg: ServerMsg::Reply(r), .. } if r.id == *id))
        };
        let speculative = fx.iter().any(|e| {
            matches!(e, Effect::ToClient { msg: ServerMsg::Reply(r), .. } if r.position.is_some() && r.outcome.is_ok())
        });
        let cross = |id: &TxnId| core.cs.index.get(id).is_some_and(|&k| core.cs.history.txns[k].pieces.len() > 1);
        match point {
            KillPoint::PrepareCommitted if first_propose => Some(Kill::DropOutputs),
            KillPoint::ProposeSent if first_propose => Some(Kill::AfterOutputs),
            KillPoint::Decided if after.cross_decided > before.cross_decided || confirm => Some(Kill::DropOutputs),
            KillPoint::Executed if executed.iter().any(|(_, id)| cross(id) && !replied(id)) => Some(Kill::DropOutputs),
            KillPoint::SpeculativeAnswer if speculative => Some(Kill::AfterOutputs),
            KillPoint::PrepareCommitted
            | KillPoint::ProposeSent
            | KillPoint::Decided
            | KillPoint::Executed
            | KillPoint::CoordinatorPartial
            | KillPoint::SpeculativeAnswer => None,
        }
    }

    fn kill(&mut self, core: &mut Core<'_>, s: ShardId, i: u32) -> Step {
        if self.faults.hostile_fast {
            self.send_hostile(core, s, i)?;
        }
        self.kills_left -= 1;
        self.report.kills += 1;
        self.next_kill_ok_at = core.now + self.faults.kill_gap_us;
        let down = self.faults.down.sample_us(&mut self.fault_rng).max(1);
        self.crash(core, s, i, down)
    }

    /// The disk of replica `i` of shard `s` finished syncing: what was written is durable.
    pub(super) fn sync_disk(&mut self, core: &mut Core<'_>, s: ShardId, i: u32, gen: u64) -> Step {
        let r = &mut self.replicas[s as usize][i as usize];
        if r.gen != gen || r.node.is_none() {
            return Ok(());
        }
        r.sync_scheduled = false;
        if let Err(e) = r.disk.storage().sync() {
            return Err(core.violation(ViolationKind::Invariant, format!("R{s}.{i} cannot sync its log: {e}")));
        }
        let Some(number) = r.unsynced.take() else { return Ok(()) };
        self.call_replica(core, s, i, false, |n, _, fx| {
            n.persisted(number, fx);
            Ok(())
        })
    }

    /// Crashes replica `i` of shard `s` (unsynced writes are lost) and restarts it after `down`.
    pub(super) fn crash(&mut self, core: &mut Core<'_>, s: ShardId, i: u32, down: u64) -> Step {
        core.trace(|| format!("R{s}.{i} crashes (restarts in {down} us)"));
        core.fold(0xdead);
        core.fold(self.addr(s, i).code());
        let r = &mut self.replicas[s as usize][i as usize];
        if r.node.is_none() {
            return Ok(());
        }
        r.node = None;
        r.disk.crash();
        r.unsynced = None;
        r.sync_scheduled = false;
        r.gen += 1;
        r.exec_seen.clear();
        r.watermark = 0;
        r.reads.clear();
        r.busy_streak = 0;
        self.report.crashes += 1;
        core.schedule_wake(self.addr(s, i), None);
        let at = core.now + down;
        self.schedule_fault(core, at, FaultAction::Restart(s, i));
        core.queue.push(core.now, EventKind::ClientLinks { shard: s, replica: i, up: false });
        self.links_down(core, s, i, false)
    }

    /// Restarts replica `i` of shard `s` from what its disk holds.
    pub(super) fn restart(&mut self, core: &mut Core<'_>, s: ShardId, i: u32) -> Step {
        core.trace(|| format!("R{s}.{i} restarts from its disk"));
        let r = &mut self.replicas[s as usize][i as usize];
        let node = new_node(core.config, self.faults, s, i, &mut r.disk).map_err(|v| v.at(core.now))?;
        r.node = Some(node);
        r.gen += 1;
        core.queue.push(core.now, EventKind::ClientLinks { shard: s, replica: i, up: true });
        self.links_up(core, s, i)
    }

    /// Replica `i` of shard `s` reaches (again) every replica that is up and not cut off:
    /// both ends hear of the links, as a server hears of its connections.
    pub(super) fn links_up(&mut self, core: &mut Core<'_>, s: ShardId, i: u32) -> Step {
        for t in 0..core.config.shards {
            for j in 0..self.n {
                if (t, j) == (s, i) || self.cut(core, self.addr(s, i), self.addr(t, j)) {
                    continue;
                }
                self.link(core, s, i, t, j, true)?;
                self.link(core, t, j, s, i, true)?;
            }
        }
        self.call_replica(core, s, i, false, |_, _, _| Ok(()))
    }

    /// Replica `i` of shard `s` lost its links (crashed, or cut off: from its own group
    /// only if `raft_only`).
    pub(super) fn links_down(&mut self, core: &mut Core<'_>, s: ShardId, i: u32, raft_only: bool) -> Step {
        for t in 0..core.config.shards {
            for j in 0..self.n {
                if (t, j) == (s, i) || (raft_only && t != s) {
                    continue;
                }
                self.link(core, s, i, t, j, false)?;
                self.link(core, t, j, s, i, false)?;
            }
        }
        Ok(())
    }

    /// Tells the node of replica `i` of shard `s` (if up) that its link to `(t, j)` is up
    /// or down.
    fn link(&mut self, core: &mut Core<'_>, s: ShardId, i: u32, t: ShardId, j: u32, up: bool) -> Step {
        if self.replicas[s as usize][i as usize].node.is_none() {
            return Ok(());
        }
        let other = NodeId { shard: t, replica: j };
        self.call_replica(core, s, i, false, |n, _, fx| {
            if t == s {
                n.replica_link(j, up);
            } else {
                n.shard_link(other, up, fx);
            }
            Ok(())
        })
    }
}
