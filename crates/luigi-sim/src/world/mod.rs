//! The ideal-log cluster model (`IdealLog`): each shard is one
//! [`ShardLeader`](luigi_protocol::leader::ShardLeader), lent an ideal in-memory log ([`SimLog`]) that commits every record a
//! seeded delay after it is appended, and never fails. The engine
//! (`engine::Sim`) runs the clients, time and the network; this model delivers to
//! the leaders (nodes [`Node::Leader`]), wakes them, and checks what they do while the run
//! goes (`checks.rs`: executions against the committed logs, rule 4, every reply) and after
//! it (exactly the ordered transactions executed, in timestamp order per key, and a follower
//! replaying each log rebuilds the leader's store).

use std::collections::HashSet;

use luigi_protocol::leader::{LeaderConfig, LeaderOutput, LeaderWithLog};
use luigi_protocol::msg::PeerBatch;
use luigi_txn::msg::{ClientMsg, ServerMsg};
use luigi_txn::peer::PeerVocabulary;
use luigi_txn::types::{ClientId, ShardId, TimeUs, Timestamp, TxnId};

use crate::config::SimConfig;
use crate::engine::{busy_backoff_us, ClusterModel, Core, Seeds, Sim, Step};
use crate::log::SimLog;
use crate::net::{Network, Node, SimMsg, VirtualUs};
use crate::source::TxnSource;
use crate::violation::{Violation, ViolationKind};
use crate::RunReport;

mod checks;

pub use crate::engine::{local_clock, virtual_deadline};

/// The run of `config` (which must be valid) over ideal logs. Every random stream is derived
/// from `config.seed` in a fixed order.
pub(crate) fn sim(config: &SimConfig) -> Sim<'_, IdealLog> {
    let mut seeds = Seeds::new(config.seed);
    let net = Network::new(seeds.derive());
    let source = TxnSource::new(config, seeds.derive());
    let clients = seeds.clients(config, 1);
    let cluster = IdealLog::new(config, &mut seeds);
    let core = Core::new(config, net, source, clients, config.seed);
    Sim::new(core, cluster, &mut seeds)
}

struct LeaderNode {
    leader: LeaderWithLog<SimLog>,
    offset_us: i64,
    /// Last watermark seen (it must never go back).
    watermark: Timestamp,
    /// Consecutive wake-ups after which the leader still asked for a deadline in the past.
    busy_streak: u32,
}

/// The ideal-log cluster: one leader per shard over a [`SimLog`].
pub(crate) struct IdealLog {
    leaders: Vec<LeaderNode>,
    leader_out: Vec<LeaderOutput>,
    /// Per shard, the transactions it executed, in execution order.
    executions: Vec<Vec<TxnId>>,
    /// (transaction, shard) pairs executed.
    executed: HashSet<(TxnId, ShardId)>,
    /// Leader wake-ups that asked for a deadline in the past again (see `call_leader`).
    busy_wakes: u64,
}

impl IdealLog {
    /// The leaders of `config`, each with its clock offset and log stream drawn from `seeds`.
    fn new(config: &SimConfig, seeds: &mut Seeds) -> Self {
        let leaders = (0..config.shards)
            .map(|shard| {
                let offset_us = seeds.offset(config, Node::Leader(shard));
                let log = SimLog::new(seeds.derive(), config.log_commit, 1 << 20);
                LeaderNode {
                    leader: LeaderWithLog::new(
                        LeaderConfig { shard, shards: config.shards, ..config.leader.clone() },
                        log,
                        config.initial(shard),
                        config.registry(),
                    ),
                    offset_us,
                    watermark: 0,
                    busy_streak: 0,
                }
            })
            .collect();
        IdealLog {
            leaders,
            leader_out: Vec::new(),
            executions: vec![Vec::new(); config.shards as usize],
            executed: HashSet::new(),
            busy_wakes: 0,
        }
    }

    fn leader(&mut self, core: &Core<'_>, shard: ShardId) -> Result<&mut LeaderNode, Violation> {
        self.leaders
            .get_mut(shard as usize)
            .ok_or_else(|| core.violation(ViolationKind::Invariant, format!("no shard {shard}")))
    }

    /// Runs `f` on leader `shard` at its local time, checks what it did, and sends its output.
    /// A deadline that has already passed (a leader with agreement items to flush asks for
    /// `Some(0)`) is honoured at once: at this very instant after an event, or at the next
    /// microsecond after a wake-up. A leader that still asks for a past deadline right after
    /// being ticked has nothing to do then (`ShardLeader::next_deadline` keeps returning the
    /// last broadcast time plus the interval while its watermark is stalled, a known bug), so
    /// such wake-ups back off exponentially (see [`busy_backoff_us`]); they are counted in
    /// [`RunReport::busy_wakes`]. Log commits are still woken for at their exact time.
    fn call_leader(
        &mut self,
        core: &mut Core<'_>,
        shard: ShardId,
        woken: bool,
        f: impl FnOnce(&mut LeaderWithLog<SimLog>, TimeUs, &mut Vec<LeaderOutput>),
    ) -> Step {
        let now = core.now;
        let mut out = std::mem::take(&mut self.leader_out);
        let wake_at = self.run_leader(core, shard, woken, f, &mut out)?;
        // Executions are observed through the leader's effects (before its replies go out).
        let executed: Vec<(ShardId, TxnId)> = out
            .iter()
            .filter_map(|o| match o {
                LeaderOutput::Executed { shard, id, .. } => Some((*shard, *id)),
                _ => None,
            })
            .collect();
        for (s, id) in executed {
            self.on_executed(core, s, id)?;
        }
        for o in out.drain(..) {
            self.send_output(core, shard, o)?;
        }
        self.leader_out = out;
        let earliest = if woken { now + 1 } else { now };
        core.schedule_wake(Node::Leader(shard), wake_at.map(|t| t.max(earliest)));
        Ok(())
    }

    /// Runs `f` on leader `shard` at its local time and checks it after the step (its
    /// invariants, a watermark that never goes back); returns when it next wants to be woken
    /// (its deadline, backed off if it keeps asking for a past one, or its log's next commit).
    fn run_leader(
        &mut self,
        core: &mut Core<'_>,
        shard: ShardId,
        woken: bool,
        f: impl FnOnce(&mut LeaderWithLog<SimLog>, TimeUs, &mut Vec<LeaderOutput>),
        out: &mut Vec<LeaderOutput>,
    ) -> Result<Option<TimeUs>, Violation> {
        let now = core.now;
        let node = self
            .leaders
            .get_mut(shard as usize)
            .ok_or_else(|| core.violation(ViolationKind::Invariant, format!("no shard {shard}")))?;
        node.leader.log_mut().set_now(now);
        let local = local_clock(now, node.offset_us);
        f(&mut node.leader, local, out);
        // What the core promises holds after every step.
        if let Err(e) = node.leader.check_invariants() {
            return Err(core.violation(ViolationKind::Invariant, e));
        }
        let watermark = node.leader.watermark();
        let previous = std::mem::replace(&mut node.watermark, watermark);
        let mut deadline = node.leader.next_deadline().map(|d| virtual_deadline(d, node.offset_us));
        match deadline {
            Some(d) if woken && d <= now => {
                node.busy_streak += 1;
                self.busy_wakes += 1;
                deadline = Some(now + busy_backoff_us(node.busy_streak));
            }
            _ => node.busy_streak = 0,
        }
        let commit = node.leader.log_mut().next_commit_at();
        if watermark < previous {
            return Err(core.violation(
                ViolationKind::Invariant,
                format!("shard {shard}'s watermark went back from {previous} to {watermark}"),
            ));
        }
        Ok(match (deadline, commit) {
            (Some(d), Some(c)) => Some(d.min(c)),
            (d, c) => d.or(c),
        })
    }

    /// Sends one of leader `shard`'s outputs, checking where it goes (and a reply).
    fn send_output(&mut self, core: &mut Core<'_>, shard: ShardId, o: LeaderOutput) -> Step {
        let me = Node::Leader(shard);
        let clients = u64::from(core.config.clients);
        match o {
            LeaderOutput::ToClient { client, msg } => {
                if let ServerMsg::Reply(r) = &msg {
                    self.check_reply(core, shard, r)?;
                }
                if client == 0 || client > clients {
                    return Err(core.violation(
                        ViolationKind::Invariant,
                        format!("shard {shard} sent {msg:?} to nonexistent client {client}"),
                    ));
                }
                core.send(me, Node::Client(client), SimMsg::ToClient(msg));
            }
            LeaderOutput::ToClientDurably { .. } => {
                // Only followers send these, and this world has leaders only.
                return Err(core.violation(
                    ViolationKind::Invariant,
                    format!("shard {shard}'s leader sent a follower's message: {o:?}"),
                ));
            }
            LeaderOutput::ToAllClients { msg } => {
                for client in 1..=clients {
                    core.send(me, Node::Client(client), SimMsg::ToClient(msg.clone()));
                }
            }
            LeaderOutput::ToClients { clients, msg } => {
                for client in clients {
                    core.send(me, Node::Client(client), SimMsg::ToClient(msg.clone()));
                }
            }
            // Unreplicated: no accept log to wait for.
            LeaderOutput::ToPeer { shard: to, batch } | LeaderOutput::ToPeerDurably { shard: to, batch, .. } => {
                if to == shard || to >= core.config.shards || batch.from != shard {
                    return Err(core.violation(
                        ViolationKind::Invariant,
                        format!("shard {shard} sent a batch from shard {} to shard {to}: {batch:?}", batch.from),
                    ));
                }
                core.send(me, Node::Leader(to), SimMsg::Peer(batch.encode().msg));
            }
            LeaderOutput::Executed { .. } => {} // observed before the outputs are sent
        }
        Ok(())
    }
}

impl ClusterModel for IdealLog {
    type Report = RunReport;

    /// One leader per shard.
    fn node_of(&self, shard: ShardId, _replica: u32) -> Node {
        Node::Leader(shard)
    }

    /// Every leader is woken at once.
    fn start(&mut self, core: &mut Core<'_>) -> Step {
        for shard in 0..core.config.shards {
            core.schedule_wake(Node::Leader(shard), Some(0));
        }
        Ok(())
    }

    fn deliver(&mut self, core: &mut Core<'_>, src: Node, dst: Node, msg: SimMsg) -> Step {
        match (src, dst, msg) {
            (Node::Client(client), Node::Leader(shard), SimMsg::ToLeader(m)) => {
                if let ClientMsg::Dispatch { txn, .. } = &m {
                    let w = self.leader(core, shard)?.leader.watermark();
                    core.cs.replies.arrived(txn.id, shard, w);
                }
                self.call_leader(core, shard, false, |l, local, out| l.on_client(local, client, m, out))
            }
            (Node::Leader(from), Node::Leader(to), SimMsg::Peer(msg)) if msg.from == from => {
                // Luigi's leaders, driven directly: the model decodes what their replica would.
                let batch =
                    PeerBatch::decode(msg).map_err(|e| core.violation(ViolationKind::Invariant, e.to_string()))?;
                let w = self.leader(core, to)?.leader.watermark();
                core.cs.replies.arrived_in_batch(to, w, &batch.facts().admits);
                self.call_leader(core, to, false, |l, local, out| l.on_peer(local, batch, out))
            }
            (src, dst, msg) => {
                Err(core
                    .violation(ViolationKind::Invariant, format!("the simulator routed {msg:?} from {src} to {dst}")))
            }
        }
    }

    fn wake(&mut self, core: &mut Core<'_>, node: Node) -> Step {
        match node {
            Node::Leader(s) => self.call_leader(core, s, true, |l, local, out| l.tick(local, out)),
            Node::Client(_) | Node::Replica(..) => {
                Err(core.violation(ViolationKind::Invariant, format!("no server {node} here")))
            }
        }
    }

    fn sync(&mut self, core: &mut Core<'_>, node: Node, _gen: u64) -> Step {
        Err(core.violation(ViolationKind::Invariant, format!("disk sync of {node} in the ideal-log world")))
    }

    fn fault(&mut self, core: &mut Core<'_>, index: usize) -> Step {
        Err(core.violation(ViolationKind::Invariant, format!("fault {index} in the ideal-log world")))
    }

    /// Nothing fails.
    fn blocked(&self, _core: &Core<'_>, _src: Node, _dst: Node) -> bool {
        false
    }

    /// Nothing is cut, so nothing is held.
    fn hold(&mut self, _core: &Core<'_>, _src: Node, _dst: Node, msg: SimMsg) -> Option<SimMsg> {
        Some(msg)
    }

    fn after_step(&mut self, _core: &mut Core<'_>) -> Step {
        Ok(())
    }

    /// Drain: a client may be answered before every leader is done with its transaction
    /// (told `Rejected` by a refusing shard while another participant still has to log its
    /// `ABORT`). Run on until every leader is idle, so that the final checks see it.
    fn settle(&mut self, core: &mut Core<'_>) -> Result<VirtualUs, Violation> {
        Ok(core.now.saturating_add(core.config.drain_us).min(core.config.max_virtual_us))
    }

    fn settled(&self, core: &Core<'_>, _steps: u64) -> bool {
        self.leaders.iter().all(|l| l.leader.pending_len() == 0) || core.queue.is_empty()
    }

    fn unsettled(&mut self, _core: &mut Core<'_>, v: Violation) -> Violation {
        v
    }

    /// The ideal log never loses a majority: an unknown outcome is recorded as the answer,
    /// and the checker reports it.
    fn unknown_is_final(&self) -> bool {
        true
    }

    /// No client dies.
    fn dies_after_submit(&mut self, _core: &mut Core<'_>, _id: ClientId, _cross: bool) -> bool {
        false
    }

    fn describe(&mut self, core: &Core<'_>) -> String {
        let mut msg = String::new();
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
                local_clock(core.now, l.offset_us),
                l.leader.watermark(),
                l.leader.pending_len(),
                unfinished.join(", "),
                l.leader.stats()
            ));
        }
        msg
    }

    fn finish(self, core: Core<'_>) -> Result<RunReport, Violation> {
        self.finish_checks(core)
    }
}
