//! The node tests' mini cluster: one shard's group of [`ReplicaNode`]s over an in-memory
//! network that delivers in order, and the one executor of their effects, as a shell would
//! carry them out: replication onto the wire (unless either end is cut off), synced writes
//! durable at once, snapshot jobs and checks run in place, a damaged disk an error. What
//! concerns the test (answers to clients, executions, transitions) comes back to it as
//! [`Seen`] effects; replicas' clocks and the pace of the run stay the test's.
#![allow(dead_code)] // each test uses its part

use std::collections::VecDeque;

use luigi_node::{Effect, ReplicaNode, SnapshotCheck};
use luigi_protocol::msg::ReplicationMsg;
use luigi_replica::Transition;
use luigi_txn::msg::ServerMsg;
use luigi_txn::types::NodeId;
use luigi_txn::types::{ClientId, TxnId};

/// Rounds of effects a replica may produce in a row (each persist or snapshot answered
/// leads to another turn) before it counts as never settling.
const SETTLE_ROUNDS: usize = 64;

/// A replication message on the wire.
pub struct InFlight {
    /// The sending replica.
    pub from: u32,
    /// The receiving replica.
    pub to: u32,
    /// The message.
    pub msg: ReplicationMsg,
}

/// What the executor leaves to the test of a replica's effects.
pub enum Seen {
    /// A message to a client.
    ToClient {
        /// The replica that sent it.
        replica: u32,
        /// The client.
        client: ClientId,
        /// The message.
        msg: ServerMsg,
    },
    /// An execution.
    Executed {
        /// The replica that executed it.
        replica: u32,
        /// The transaction.
        id: TxnId,
    },
    /// The replica started or stopped serving.
    Transition {
        /// The replica.
        replica: u32,
        /// Which way.
        transition: Transition,
    },
    /// A snapshot check of a replica whose checks the test holds (`hold_checks`).
    HeldCheck {
        /// The replica.
        replica: u32,
        /// The check, to run and hand back.
        check: SnapshotCheck,
    },
}

/// One message delivered (see [`MiniCluster::deliver_one`]).
pub struct Delivered {
    /// Its receiver.
    pub to: u32,
    /// What the receiver's effects left to the test.
    pub seen: Vec<Seen>,
}

/// One shard's replicas and the messages between them.
pub struct MiniCluster {
    /// The replicas, by replica index.
    pub nodes: Vec<ReplicaNode>,
    /// Messages in flight, in the order they were sent.
    pub wire: VecDeque<InFlight>,
    /// Replicas cut off: they hear and say nothing.
    pub cut: Vec<bool>,
    /// Why a replica refused a message of the group (for tests that require none).
    pub refusals: Vec<String>,
    /// Why a replica refused a snapshot it received, once checked.
    pub snapshot_refusals: Vec<String>,
    /// Replicas whose snapshot checks are left to the test (as [`Seen`] effects), to be run
    /// later, instead of at once.
    pub hold_checks: Vec<bool>,
    /// What the test notes of each message put on the wire (`None`: nothing), in `tapped`.
    pub tap: Option<fn(&InFlight) -> Option<String>>,
    /// The lines `tap` gave.
    pub tapped: Vec<String>,
}

impl MiniCluster {
    /// A group of `nodes` (one shard's replicas 0..n), every link between them up.
    pub fn new(mut nodes: Vec<ReplicaNode>) -> Self {
        let n = nodes.len() as u32;
        for (i, node) in nodes.iter_mut().enumerate() {
            for j in (0..n).filter(|j| *j != i as u32) {
                node.replica_link(j, true);
            }
        }
        MiniCluster {
            cut: vec![false; n as usize],
            nodes,
            wire: VecDeque::new(),
            refusals: Vec::new(),
            snapshot_refusals: Vec::new(),
            hold_checks: vec![false; n as usize],
            tap: None,
            tapped: Vec::new(),
        }
    }

    fn cut_off(&self, replica: u32) -> bool {
        self.cut[replica as usize]
    }

    /// Replica `r` turns at `now` (its clock) and its effects are carried out.
    pub fn turn(&mut self, r: u32, now: u64) -> Result<Vec<Seen>, String> {
        let mut fx = Vec::new();
        self.nodes[r as usize].turn(now, &mut fx).map_err(|e| e.to_string())?;
        self.execute(r, now, fx)
    }

    /// Carries out replica `r`'s effects `fx`; what they lead to (a write made durable, a
    /// snapshot made or checked) is followed by another turn at `now`, until it settles.
    pub fn execute(&mut self, r: u32, now: u64, mut fx: Vec<Effect>) -> Result<Vec<Seen>, String> {
        let mut seen = Vec::new();
        for _ in 0..SETTLE_ROUNDS {
            if fx.is_empty() {
                return Ok(seen);
            }
            let mut again = Vec::new();
            for effect in fx.drain(..) {
                self.carry_out(r, effect, &mut again, &mut seen)?;
            }
            if !again.is_empty() {
                self.nodes[r as usize].turn(now, &mut again).map_err(|e| e.to_string())?;
            }
            fx = again;
        }
        Err(format!("replica {r} never settles"))
    }

    fn carry_out(
        &mut self,
        r: u32,
        effect: Effect,
        again: &mut Vec<Effect>,
        seen: &mut Vec<Seen>,
    ) -> Result<(), String> {
        let node = &mut self.nodes[r as usize];
        match effect {
            Effect::Replicate { to, msg } => {
                if to.shard != node.config().node.shard {
                    return Err(format!("replica {r} replicated to another shard's {to}"));
                }
                if !self.cut_off(r) && !self.cut_off(to.replica) {
                    let sent = InFlight { from: r, to: to.replica, msg };
                    self.tapped.extend(self.tap.and_then(|tap| tap(&sent)));
                    self.wire.push_back(sent);
                }
            }
            Effect::Persist(p) => {
                if p.sync {
                    node.persisted(p.number, again);
                }
            }
            Effect::MakeSnapshot(job) => {
                node.snapshot_made(job.run(), again).map_err(|e| format!("replica {r}'s snapshot: {e}"))?;
            }
            Effect::CheckSnapshot(check) if self.hold_checks[r as usize] => {
                seen.push(Seen::HeldCheck { replica: r, check });
            }
            Effect::CheckSnapshot(check) => {
                if let Err(why) = node.snapshot_checked(check.run(), again) {
                    self.snapshot_refusals.push(format!("replica {r} refused a snapshot: {why}"));
                }
            }
            Effect::MarkDamaged { reason } => return Err(format!("replica {r} damaged: {reason}")),
            Effect::ToClient { client, msg } => seen.push(Seen::ToClient { replica: r, client, msg }),
            Effect::Executed { id, .. } => seen.push(Seen::Executed { replica: r, id }),
            Effect::Transition(transition) => seen.push(Seen::Transition { replica: r, transition }),
            // What these tests do not look at: watermarks to clients, agreement batches to
            // other shards (a group of one shard has none to reach), snapshots saved (the
            // replicas keep their state in memory), former states dropped.
            Effect::ToClients { .. }
            | Effect::ToAllClients { .. }
            | Effect::ToPeer { .. }
            | Effect::SaveSnapshot(_)
            | Effect::Discard(_) => {}
        }
        Ok(())
    }

    /// Delivers every message in flight (and those they lead to), each receiver turning at
    /// its clock `clock(receiver)`; errors if more than `max` are delivered (the group does
    /// not go quiet).
    pub fn deliver(&mut self, clock: impl Fn(u32) -> u64, max: usize) -> Result<Vec<Seen>, String> {
        let mut seen = Vec::new();
        for _ in 0..max {
            let Some(delivered) = self.deliver_one(&clock)? else { return Ok(seen) };
            seen.extend(delivered.seen);
        }
        Err(format!("the group does not go quiet after {max} messages"))
    }

    /// Delivers the first message in flight, its receiver turning at `clock(receiver)`; a
    /// message to or from a replica cut off by now is lost. `None` once the wire is empty.
    pub fn deliver_one(&mut self, clock: impl Fn(u32) -> u64) -> Result<Option<Delivered>, String> {
        let Some(InFlight { from, to, msg }) = self.wire.pop_front() else { return Ok(None) };
        if self.cut_off(from) || self.cut_off(to) {
            return Ok(Some(Delivered { to, seen: Vec::new() }));
        }
        let node = &mut self.nodes[to as usize];
        let mut fx = Vec::new();
        let shard = node.config().node.shard;
        if let Err(why) = node.on_replication(NodeId { shard, replica: from }, msg, &mut fx) {
            self.refusals.push(format!("replica {to} refused a message from {from}: {why}"));
        }
        let now = clock(to);
        self.nodes[to as usize].turn(now, &mut fx).map_err(|e| e.to_string())?;
        Ok(Some(Delivered { to, seen: self.execute(to, now, fx)? }))
    }

    /// The replica serving as the shard's leader, among those not cut off.
    pub fn serving(&self) -> Option<u32> {
        (0..self.nodes.len() as u32).find(|r| !self.cut_off(*r) && self.nodes[*r as usize].replica().is_serving())
    }
}
