//! The simulated world: nodes, their clocks, the event loop, and the checks made while it
//! runs.

use std::collections::{HashMap, HashSet};

use luigi_proto::leader::follower::Follower;
use luigi_proto::leader::{LeaderConfig, LeaderOutput, LeaderStats, ShardLeader};
use luigi_proto::log::LogEntry;
use luigi_proto::msg::{ClientMsg, ServerMsg, TxnReply};
use luigi_proto::types::{Access, ClientId, KeySet, ShardId, TimeUs, Timestamp, TxnId};
use luigi_store::{Key, Store};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::checker::{self, CheckOptions, Moment};
use crate::clients::{ClientNode, ClientState, ClientWorld, WakeSlot};
use crate::config::SimConfig;
use crate::hash::fold;
use crate::log::{Durable, SimLog};
use crate::net::{EventKind, EventQueue, Network, Node, SimMsg, VirtualUs};
use crate::procedure;

mod checks;

use crate::violation::{Violation, ViolationKind};
use crate::workload::Workload;
use crate::{Latency, RunReport};
use checks::add_stats;

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

struct LeaderNode {
    leader: ShardLeader<SimLog>,
    offset_us: i64,
    wake: WakeSlot,
    /// Last watermark seen (it must never go back).
    watermark: Timestamp,
    /// Consecutive wake-ups after which the leader still asked for a deadline in the past.
    busy_streak: u32,
}

/// Longest back-off (µs) for a leader that keeps asking to be woken in the past right after a
/// tick (see [`World::call_leader`]).
const BUSY_BACKOFF_MAX_US: u64 = 64;

type Step = Result<(), Violation>;

/// One run in progress.
pub struct World<'a> {
    config: &'a SimConfig,
    now: VirtualUs,
    step: u64,
    queue: EventQueue,
    net: Network,
    /// The clients and what they were told.
    cs: ClientState,
    leaders: Vec<LeaderNode>,
    events: u64,
    delivered: u64,
    trace_hash: u64,
    leader_out: Vec<LeaderOutput>,
    /// Where the leaders' `sim-micro` procedure records each execution as it happens.
    /// Per shard, the transactions it executed, in execution order.
    executions: Vec<Vec<TxnId>>,
    /// (transaction, shard) pairs executed.
    executed: HashSet<(TxnId, ShardId)>,
    /// Virtual time of the last answer.
    answered_at: VirtualUs,
    /// Leader wake-ups that asked for a deadline in the past again (see `call_leader`).
    busy_wakes: u64,
}

impl<'a> World<'a> {
    /// Builds the world of `config` (which must be valid). Every random stream is derived
    /// from `config.seed` in a fixed order.
    pub fn new(config: &'a SimConfig) -> Self {
        let mut master = ChaCha8Rng::seed_from_u64(config.seed);
        let derive = |rng: &mut ChaCha8Rng| ChaCha8Rng::seed_from_u64(rng.gen());
        let net = Network::new(derive(&mut master));
        let workload = Workload::new(config, derive(&mut master));
        let max = config.clock_offset_max_us as i64;
        let offset = |rng: &mut ChaCha8Rng, node: Node| {
            let drawn = rng.gen_range(-max..=max);
            config.clock_offsets.get(&node).copied().unwrap_or(drawn)
        };
        let clients = (1..=u64::from(config.clients))
            .map(|id| ClientNode::new(config, id, 1, offset(&mut master, Node::Client(id))))
            .collect();
        let leaders = (0..config.shards)
            .map(|shard| {
                let offset_us = offset(&mut master, Node::Leader(shard));
                let log = SimLog::new(derive(&mut master), config.log_commit, 1 << 20);
                LeaderNode {
                    leader: ShardLeader::new(
                        LeaderConfig { shard, shards: config.shards, ..config.leader.clone() },
                        log,
                        Store::new(),
                        procedure::registry(),
                    ),
                    offset_us,
                    wake: WakeSlot::default(),
                    watermark: 0,
                    busy_streak: 0,
                }
            })
            .collect();
        let mut world = Self {
            config,
            now: 0,
            step: 0,
            queue: EventQueue::default(),
            net,
            cs: ClientState::new(clients, workload),
            leaders,
            events: 0,
            delivered: 0,
            trace_hash: fold(0, config.seed),
            leader_out: Vec::new(),
            executions: vec![Vec::new(); config.shards as usize],
            executed: HashSet::new(),
            answered_at: 0,
            busy_wakes: 0,
        };
        for client in 1..=u64::from(config.clients) {
            let at = master.gen_range(0..=config.start_spread_us);
            world.queue.push(at, EventKind::Start { client });
        }
        for shard in 0..config.shards {
            world.schedule_wake(Node::Leader(shard), Some(0));
        }
        world
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

    /// Runs until every transaction is answered, or fails.
    pub fn run(&mut self) -> Step {
        if self.config.ping_first {
            for id in 1..=self.cs.nodes.len() as ClientId {
                self.call_client(id, false, |coord, local, shards, out| {
                    for shard in 0..shards {
                        coord.ping(local, shard, out);
                    }
                })?;
            }
        }
        while self.cs.answered < self.config.txns {
            self.step_event(self.config.max_virtual_us)?;
        }
        // Drain: a client may be answered before every leader is done with its transaction
        // (told `Rejected` by a refusing shard while another participant still has to log
        // its `ABORT`). Run on until every leader is idle, so that the final checks see it.
        self.answered_at = self.now;
        let deadline = self.now.saturating_add(self.config.drain_us).min(self.config.max_virtual_us);
        while self.leaders.iter().any(|l| l.leader.pending_len() > 0) {
            if self.queue.is_empty() {
                break;
            }
            self.step_event(deadline)?;
        }
        Ok(())
    }

    /// Processes the next event; fails when it lies beyond `limit` (virtual µs) or the event
    /// budget is exhausted.
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
        debug_assert!(event.at >= self.now, "time never goes back");
        self.now = event.at;
        match event.kind {
            EventKind::Deliver { src, dst, msg } => self.deliver(src, dst, msg)?,
            EventKind::Wake { node, gen } => self.wake(node, gen)?,
            EventKind::Start { client } => {
                self.trace_hash = fold(fold(self.trace_hash, self.now), client);
                self.trace(|| format!("c{client} starts"));
                self.client(client)?.started = true;
                self.call_client(client, false, |_, _, _, _| {})?;
            }
            kind @ (EventKind::Sync { .. } | EventKind::Fault { .. }) => {
                return Err(self.violation(
                    ViolationKind::Invariant,
                    format!("replica event {kind:?} in the single-leader world"),
                ));
            }
        }
        Ok(())
    }

    fn deliver(&mut self, src: Node, dst: Node, msg: SimMsg) -> Step {
        self.delivered += 1;
        let h = [self.now, src.code(), dst.code(), msg.hash()];
        self.trace_hash = h.iter().fold(self.trace_hash, |acc, x| fold(acc, *x));
        self.trace(|| format!("{src} -> {dst}: {msg:?}"));
        match (src, dst, msg) {
            (Node::Client(client), Node::Leader(shard), SimMsg::ToLeader(m)) => {
                if let ClientMsg::Dispatch { txn, .. } = &m {
                    let w = self.leader(shard)?.leader.watermark();
                    self.cs.replies.arrived(txn.id, shard, w);
                }
                self.call_leader(shard, false, |l, local, out| l.on_client(local, client, m, out))
            }
            (Node::Leader(_), Node::Client(client), SimMsg::ToClient(m)) => {
                self.call_client(client, false, |coord, local, _, out| coord.on_message(local, m, out))
            }
            (Node::Leader(from), Node::Leader(to), SimMsg::Peer(batch)) if batch.from == from => {
                let w = self.leader(to)?.leader.watermark();
                self.cs.replies.arrived_in_batch(to, w, &batch.items);
                self.call_leader(to, false, |l, local, out| l.on_peer(local, batch, out))
            }
            (src, dst, msg) => {
                Err(self
                    .violation(ViolationKind::Invariant, format!("the simulator routed {msg:?} from {src} to {dst}")))
            }
        }
    }

    fn wake(&mut self, node: Node, gen: u64) -> Step {
        let slot = match node {
            Node::Client(c) => &mut self.client(c)?.wake,
            Node::Leader(s) => &mut self.leader(s)?.wake,
            Node::Replica(..) => {
                return Err(self.violation(ViolationKind::Invariant, format!("no replica {node} here")));
            }
        };
        if slot.gen != gen {
            return Ok(()); // superseded by a later schedule
        }
        slot.at = None;
        self.trace_hash = fold(fold(self.trace_hash, self.now), node.code());
        self.trace(|| format!("{node} wakes"));
        match node {
            Node::Client(c) => self.call_client(c, true, |coord, local, _, out| coord.tick(local, out)),
            Node::Leader(s) => self.call_leader(s, true, |l, local, out| l.tick(local, out)),
            Node::Replica(..) => Err(self.violation(ViolationKind::Invariant, format!("no replica {node} here"))),
        }
    }

    fn leader(&mut self, shard: ShardId) -> Result<&mut LeaderNode, Violation> {
        let now = self.now;
        self.leaders
            .get_mut(shard as usize)
            .ok_or_else(|| Violation::new(ViolationKind::Invariant, format!("no shard {shard}")).at(now))
    }

    /// (Re)schedules `node`'s wake-up at `at` (None: no wake-up needed).
    fn schedule_wake(&mut self, node: Node, at: Option<VirtualUs>) {
        let slot = match node {
            Node::Client(c) => &mut self.cs.nodes[(c - 1) as usize].wake,
            Node::Leader(s) => &mut self.leaders[s as usize].wake,
            Node::Replica(..) => return, // not in this world
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

    /// Runs `f` on leader `shard` at its local time, checks what it did, and sends its output.
    /// A deadline that has already passed (a leader with agreement items to flush asks for
    /// `Some(0)`) is honoured at once: at this very instant after an event, or at the next
    /// microsecond after a wake-up. A leader that still asks for a past deadline right after
    /// being ticked has nothing to do then (`ShardLeader::next_deadline` keeps returning the
    /// last broadcast time plus the interval while its watermark is stalled, a known bug), so
    /// such wake-ups back off exponentially up to [`BUSY_BACKOFF_MAX_US`]; they are counted in
    /// [`RunReport::busy_wakes`]. Log commits are still woken for at their exact time.
    fn call_leader(
        &mut self,
        shard: ShardId,
        woken: bool,
        f: impl FnOnce(&mut ShardLeader<SimLog>, TimeUs, &mut Vec<LeaderOutput>),
    ) -> Step {
        let now = self.now;
        let mut out = std::mem::take(&mut self.leader_out);
        let node = self
            .leaders
            .get_mut(shard as usize)
            .ok_or_else(|| Violation::new(ViolationKind::Invariant, format!("no shard {shard}")).at(now))?;
        node.leader.log_mut().set_now(now);
        let local = local_clock(now, node.offset_us);
        f(&mut node.leader, local, &mut out);
        let watermark = node.leader.watermark();
        let previous = std::mem::replace(&mut node.watermark, watermark);
        let mut deadline = node.leader.next_deadline().map(|d| virtual_deadline(d, node.offset_us));
        match deadline {
            Some(d) if woken && d <= now => {
                node.busy_streak += 1;
                self.busy_wakes += 1;
                deadline = Some(now + (1u64 << node.busy_streak.min(6)).min(BUSY_BACKOFF_MAX_US));
            }
            _ => node.busy_streak = 0,
        }
        let commit = node.leader.log_mut().next_commit_at();
        if watermark < previous {
            return Err(self.violation(
                ViolationKind::Invariant,
                format!("shard {shard}'s watermark went back from {previous} to {watermark}"),
            ));
        }
        // Executions are observed through the leader's effects (before its replies go out).
        let executed: Vec<(ShardId, TxnId)> = out
            .iter()
            .filter_map(|o| match o {
                LeaderOutput::Executed { shard, id, .. } => Some((*shard, *id)),
                _ => None,
            })
            .collect();
        for (s, id) in executed {
            self.on_executed(s, id)?;
        }
        let me = Node::Leader(shard);
        for o in out.drain(..) {
            match o {
                LeaderOutput::ToClient { client, msg } => {
                    if let ServerMsg::Reply(r) = &msg {
                        self.check_reply(shard, r)?;
                    }
                    if client == 0 || client > u64::from(self.config.clients) {
                        return Err(self.violation(
                            ViolationKind::Invariant,
                            format!("shard {shard} sent {msg:?} to nonexistent client {client}"),
                        ));
                    }
                    self.net.send(self.config, &mut self.queue, now, me, Node::Client(client), SimMsg::ToClient(msg));
                }
                LeaderOutput::ToAllClients { msg } => {
                    for client in 1..=u64::from(self.config.clients) {
                        let m = SimMsg::ToClient(msg.clone());
                        self.net.send(self.config, &mut self.queue, now, me, Node::Client(client), m);
                    }
                }
                LeaderOutput::ToClients { clients, msg } => {
                    for client in clients {
                        let m = SimMsg::ToClient(msg.clone());
                        self.net.send(self.config, &mut self.queue, now, me, Node::Client(client), m);
                    }
                }
                LeaderOutput::ToPeer { shard: to, batch } => {
                    if to == shard || to >= self.config.shards || batch.from != shard {
                        return Err(self.violation(
                            ViolationKind::Invariant,
                            format!("shard {shard} sent a batch from shard {} to shard {to}: {batch:?}", batch.from),
                        ));
                    }
                    self.net.send(self.config, &mut self.queue, now, me, Node::Leader(to), SimMsg::Peer(batch));
                }
                LeaderOutput::Executed { .. } => {} // checked above
            }
        }
        self.leader_out = out;
        let at = match (deadline, commit) {
            (Some(d), Some(c)) => Some(d.min(c)),
            (d, c) => d.or(c),
        };
        let earliest = if woken { now + 1 } else { now };
        self.schedule_wake(me, at.map(|t| t.max(earliest)));
        Ok(())
    }

    fn stuck(&mut self, why: &str) -> Violation {
        let mut msg = format!(
            "the run did not finish: {why}; {}/{} transactions answered ({} submitted) after {} \
             events at virtual time {} us",
            self.cs.answered, self.config.txns, self.cs.submitted, self.events, self.now
        );
        let waiting: Vec<String> = self
            .cs
            .history
            .txns
            .iter()
            .filter(|t| t.answers.is_empty())
            .take(5)
            .map(|t| {
                format!(
                    "{:?} (dispatched {} us, shards {:?})",
                    t.id,
                    t.dispatched.us,
                    t.pieces.iter().map(|p| p.shard).collect::<Vec<_>>()
                )
            })
            .collect();
        msg.push_str(&format!("; unanswered (first 5): {}", waiting.join(", ")));
        for (s, l) in self.leaders.iter_mut().enumerate() {
            let log = l.leader.log_mut();
            let unfinished: Vec<String> = log
                .prepared_ids()
                .into_iter()
                .filter(|id| !self.executed.contains(&(*id, s as ShardId)))
                .take(3)
                .map(|id| format!("{id:?} {:?}", log.records(id)))
                .collect();
            msg.push_str(&format!(
                "; L{s}: clock {} watermark {} pending {} (prepared, not executed: {}) stats {:?}",
                local_clock(self.now, l.offset_us),
                l.leader.watermark(),
                l.leader.pending_len(),
                unfinished.join(", "),
                l.leader.stats()
            ));
        }
        for (c, node) in (1..).zip(&self.cs.nodes) {
            msg.push_str(&format!("; c{c}: in flight {} stats {:?}", node.coord.in_flight(), node.coord.stats()));
        }
        self.violation(ViolationKind::Stuck, msg)
    }

    /// Final checks and the report.
    pub fn finish(mut self) -> Result<RunReport, Violation> {
        let mut retries = 0;
        for (id, c) in (1..).zip(&self.cs.nodes) {
            let stats = c.coord.stats();
            retries += stats.retries;
            if stats.ts_mismatch != 0 {
                return Err(self.violation(
                    ViolationKind::TimestampMismatch,
                    format!(
                        "client {} saw {} transactions whose participants answered with \
                         different timestamps",
                        id, stats.ts_mismatch
                    ),
                ));
            }
        }
        for (s, l) in self.leaders.iter().enumerate() {
            if l.leader.pending_len() != 0 {
                return Err(self.violation(
                    ViolationKind::Invariant,
                    format!(
                        "shard {s} still has {} transactions pending {} us after every \
                         transaction was answered",
                        l.leader.pending_len(),
                        self.now - self.answered_at
                    ),
                ));
            }
        }
        self.check_executions()?;
        self.check_followers()?;
        let (cross_shard, cross_differed) = self.count_cross_shard();
        let stores: Vec<&Store> = self.leaders.iter().map(|l| l.leader.store()).collect();
        let options = CheckOptions { realtime_across_shards: self.config.check_realtime_across_shards };
        let summary =
            checker::check(&self.cs.history, &procedure::registry(), &stores, options).map_err(|v| v.at(self.now))?;
        let mut latencies: Vec<u64> =
            self.cs.history.txns.iter().map(|t| t.answers[0].at.us - t.dispatched.us).collect();
        latencies.sort_unstable();
        let leaders = self.leaders.iter().map(|l| l.leader.stats()).fold(LeaderStats::default(), add_stats);
        let net = self.net.stats();
        Ok(RunReport {
            seed: self.config.seed,
            txns: self.config.txns,
            committed: summary.committed,
            proc_aborted: summary.proc_aborted,
            rejected: summary.rejected,
            retries,
            bumped: leaders.bumped,
            duplicates: leaders.duplicates,
            cross_shard,
            cross_differed,
            leaders,
            peer_batches: net.peer_batches,
            busy_wakes: self.busy_wakes,
            end_us: self.answered_at,
            events: self.events,
            messages: self.delivered,
            dropped: net.dropped,
            max_ts: summary.max_ts,
            conflict_edges: summary.conflict_edges,
            latency: Latency::of_sorted(&latencies),
            shard_hashes: stores.iter().map(|s| s.state_hash()).collect(),
            trace_hash: self.trace_hash,
        })
    }
}
impl ClientWorld for World<'_> {
    fn sim_config(&self) -> &SimConfig {
        self.config
    }

    fn now(&self) -> VirtualUs {
        self.now
    }

    fn moment(&mut self) -> Moment {
        World::moment(self)
    }

    fn trace(&self, what: impl FnOnce() -> String) {
        World::trace(self, what)
    }

    fn fold_trace(&mut self, x: u64) {
        self.trace_hash = fold(self.trace_hash, x);
    }

    fn violation(&self, kind: ViolationKind, message: String) -> Violation {
        World::violation(self, kind, message)
    }

    fn clients(&mut self) -> &mut ClientState {
        &mut self.cs
    }

    fn send_to_replica(&mut self, id: ClientId, shard: ShardId, _replica: u32, msg: ClientMsg) {
        // One leader per shard, over an ideal log.
        self.net.send(
            self.config,
            &mut self.queue,
            self.now,
            Node::Client(id),
            Node::Leader(shard),
            SimMsg::ToLeader(msg),
        );
    }

    fn schedule_wake(&mut self, node: Node, at: Option<VirtualUs>) {
        World::schedule_wake(self, node, at)
    }

    /// The ideal log never loses a majority: an unknown outcome is recorded as the answer,
    /// and the checker reports it.
    fn unknown_is_final(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_clamp_at_zero_and_deadlines_translate_back() {
        assert_eq!(local_clock(100, -300), 0);
        assert_eq!(local_clock(1_000, -300), 700);
        assert_eq!(local_clock(1_000, 300), 1_300);
        for offset in [-300i64, 0, 300] {
            for deadline in [1u64, 250, 5_000] {
                let t = virtual_deadline(deadline, offset);
                assert!(local_clock(t, offset) >= deadline);
                if t > 0 {
                    assert!(local_clock(t - 1, offset) < deadline);
                }
            }
        }
    }
}
