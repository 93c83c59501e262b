//! The clients of a simulated run, the same in every world: each is a client core
//! ([`ClientCore`]: Luigi's coordinator, or the baselines' client) at its own clock
//! offset, routing with the runtime client's rules ([`ClientRoutes`]), submitting
//! the workload's transactions into a window of `in_flight` (a business transaction of several
//! steps keeps its slot: the next step is submitted as soon as the previous one committed),
//! and recording what it was told into the history the checker replays. The engine
//! ([`crate::engine::Sim`]) provides the network, time and wake-ups through [`ClientWorld`],
//! whatever the cluster model; the client logic is written once, here.

use std::collections::{BTreeMap, HashMap, VecDeque};

use luigi_protocol::coordinator::{CommitRule, CoordinatorConfig};
use luigi_txn::client_core::ClientCore;
use luigi_txn::client_core::ClientRoutes;
use luigi_txn::client_core::{ClientOutput, Completion, TxnOutcome};
use luigi_txn::msg::ClientMsg;
use luigi_txn::types::{ClientId, Protocol, ShardId, TimeUs, Timestamp, TxnId};

use crate::checker::{AnswerRecord, History, Moment, TxnRecord};
use crate::config::SimConfig;
use crate::engine::{local_clock, virtual_deadline};
use crate::hash::fold;
use crate::net::{Node, VirtualUs};
use crate::replies::ReplyLedger;
use crate::source::{Drawn, TxnSource};
use crate::violation::{Violation, ViolationKind};

/// The client core of client `id` for `config`'s protocol ([`luigi_baseline::client_for`],
/// as the runtime client builds its own), in a cluster of `replicas` replicas per shard.
fn client_core(config: &SimConfig, id: ClientId, replicas: u32) -> Box<dyn ClientCore> {
    let commit_rule = match config.coordinator.commit_rule {
        CommitRule::AllShards { .. } => CommitRule::AllShards { shards: config.shards },
        rule @ CommitRule::Participants => rule,
    };
    let coordinator = CoordinatorConfig {
        client: id,
        commit_rule,
        group_sizes: vec![replicas; config.shards as usize],
        shards: config.shards,
        ..config.coordinator.clone()
    };
    luigi_baseline::client_for(config.protocol, coordinator)
}

/// One client.
pub(crate) struct ClientNode {
    pub(crate) coord: Box<dyn ClientCore>,
    pub(crate) offset_us: i64,
    /// Started submitting its workload.
    pub(crate) started: bool,
    /// Died (a kill point): it sends and hears nothing more.
    pub(crate) dead: bool,
    /// Transactions submitted and not answered.
    pub(crate) outstanding: usize,
    /// The sequence number the coordinator will give the next transaction.
    pub(crate) next_seq: u64,
    /// Where it sends each shard's transactions.
    pub(crate) routes: ClientRoutes,
    /// Next steps of its business transactions, submitted before anything new.
    steps: VecDeque<Drawn>,
}

impl ClientNode {
    /// Client `id` of `config`, in a cluster of `replicas` replicas per shard.
    pub(crate) fn new(config: &SimConfig, id: ClientId, replicas: u32, offset_us: i64) -> Self {
        ClientNode {
            coord: client_core(config, id, replicas),
            offset_us,
            started: false,
            dead: false,
            outstanding: 0,
            next_seq: 1,
            routes: {
                let routes = ClientRoutes::for_protocol(vec![replicas; config.shards as usize], config.protocol);
                if config.leader.fast_path {
                    routes.fanning_out()
                } else {
                    routes
                }
            },
            steps: VecDeque::new(),
        }
    }
}

/// What the clients of a run share: the workload they draw from and everything they were
/// told.
pub(crate) struct ClientState {
    pub(crate) nodes: Vec<ClientNode>,
    pub(crate) source: TxnSource,
    pub(crate) history: History,
    pub(crate) index: HashMap<TxnId, usize>,
    /// Transactions submitted (next steps of business transactions included).
    pub(crate) submitted: u64,
    /// The clients start no new business transaction once `submitted` reaches it (their next
    /// steps still go out): `SimConfig::txns`, raised by a liveness probe.
    pub(crate) target: u64,
    /// During a liveness probe, the one client that submits, one transaction at a time (one
    /// reported unknown keeps its slot until it is resolved).
    pub(crate) prober: Option<ClientId>,
    /// Transactions with a definite answer.
    pub(crate) answered: u64,
    /// Answers reported unknown (the client moved on; the resolution is the answer).
    pub(crate) unknown: u64,
    /// When the last definite answer came, virtual µs.
    pub(crate) last_answer_us: VirtualUs,
    /// Rule 7 checks of every reply and answer.
    pub(crate) replies: ReplyLedger,
    /// Transactions whose client died before they were answered, with (once the run is
    /// checked) the timestamp they executed at, if they did.
    pub(crate) orphans: BTreeMap<TxnId, Option<Timestamp>>,
    /// The message being delivered to a client, if any: (the server that sent it, its hash).
    pub(crate) delivering: Option<(Node, u64)>,
    /// For each answer a delivered message produced, that message (see `delivering`): the
    /// baselines' checks find which execution of a single-shard read was answered.
    pub(crate) answered_by: HashMap<TxnId, (Node, u64)>,
    out: Vec<ClientOutput>,
}

impl ClientState {
    pub(crate) fn new(nodes: Vec<ClientNode>, source: TxnSource, target: u64) -> Self {
        ClientState {
            nodes,
            source,
            history: History::default(),
            index: HashMap::new(),
            submitted: 0,
            target,
            prober: None,
            answered: 0,
            unknown: 0,
            last_answer_us: 0,
            replies: ReplyLedger::default(),
            orphans: BTreeMap::new(),
            delivering: None,
            answered_by: HashMap::new(),
            out: Vec::new(),
        }
    }

    /// True once every business transaction the run wants has been submitted, every step of
    /// them included, and each is answered or orphaned.
    pub(crate) fn finished(&self) -> bool {
        self.submitted >= self.target && self.answered + self.orphans.len() as u64 >= self.submitted
    }
}

type Step = Result<(), Violation>;

/// What a world provides its clients. The client logic is the trait's provided methods.
pub(crate) trait ClientWorld {
    /// The run's configuration.
    fn sim_config(&self) -> &SimConfig;
    /// Virtual time now.
    fn now(&self) -> VirtualUs;
    /// The next point of the run's history.
    fn moment(&mut self) -> Moment;
    /// Prints `what` when tracing.
    fn trace(&self, what: impl FnOnce() -> String);
    /// Folds `x` into the trace hash.
    fn fold_trace(&mut self, x: u64);
    /// A violation at the current time.
    fn violation(&self, kind: ViolationKind, message: String) -> Violation;
    /// The clients.
    fn clients(&mut self) -> &mut ClientState;
    /// Sends `msg` from client `id` to replica `replica` of `shard`.
    fn send_to_replica(&mut self, id: ClientId, shard: ShardId, replica: u32, msg: ClientMsg);
    /// Wakes `node` at `at` (`None`: never).
    fn schedule_wake(&mut self, node: Node, at: Option<VirtualUs>);
    /// Whether an unknown outcome is the transaction's answer (a world that never loses a
    /// majority: the checker reports it) or the client moves on and its resolution is.
    fn unknown_is_final(&self) -> bool;
    /// After client `id` submitted a transaction (`cross`: cross-shard) whose dispatches
    /// are in `out`: returns true if the client dies here (a kill point of the world).
    fn dies_after_submit(
        &mut self,
        _id: ClientId,
        _cross: bool,
        _out: &mut Vec<ClientOutput>,
    ) -> Result<bool, Violation> {
        Ok(false)
    }

    /// Client `id`.
    fn client(&mut self, id: ClientId) -> Result<&mut ClientNode, Violation> {
        let n = self.clients().nodes.len() as u64;
        if id == 0 || id > n {
            return Err(self.violation(ViolationKind::Invariant, format!("no client {id}")));
        }
        Ok(&mut self.clients().nodes[(id - 1) as usize])
    }

    /// Runs `f` on client `id`'s coordinator at its local time, handles its output, tops up
    /// its window of transactions in flight and reschedules its wake-up. `sort` orders the
    /// output by transaction id first (the coordinator's `tick` walks a hash map). A dead
    /// client does nothing.
    fn call_client(
        &mut self,
        id: ClientId,
        sort: bool,
        f: impl FnOnce(&mut dyn ClientCore, TimeUs, ShardId, &mut Vec<ClientOutput>),
    ) -> Step {
        let now = self.now();
        let shards = self.sim_config().shards;
        if self.client(id)?.dead {
            return Ok(());
        }
        let mut out = std::mem::take(&mut self.clients().out);
        let node = self.client(id)?;
        let local = local_clock(now, node.offset_us);
        f(&mut *node.coord, local, shards, &mut out);
        // What the coordinator promises holds after every step.
        if let Err(e) = node.coord.check_invariants() {
            return Err(self.violation(ViolationKind::Invariant, e));
        }
        if sort {
            out.sort_by_key(output_order);
        }
        let result = self.client_outputs(id, &mut out).and_then(|()| self.refill(id, &mut out));
        out.clear();
        self.clients().out = out;
        result?;
        let node = self.client(id)?;
        let at = if node.dead {
            None
        } else {
            node.coord.next_deadline().map(|d| virtual_deadline(d, node.offset_us).max(now + 1))
        };
        self.schedule_wake(Node::Client(id), at);
        Ok(())
    }

    /// The clients' links to replica `replica` of `shard` went down or came up (`up`): as the
    /// runtime client does on a lost or regained connection, each live client's core hears of
    /// it ([`ClientCore::replica_link`]), and each whose routes say so
    /// ([`ClientRoutes::link_change_resends`]) sends the dispatches waiting on `shard` again
    /// soon rather than after the full retry timeout.
    fn client_links_changed(&mut self, shard: ShardId, replica: u32, up: bool) -> Step {
        self.trace(|| format!("the clients' links to R{shard}.{replica} change"));
        for id in 1..=self.clients().nodes.len() as ClientId {
            self.client_replica_link(id, shard, replica, up)?;
            let node = self.client(id)?;
            if node.dead || !node.routes.link_change_resends(shard, replica) {
                continue;
            }
            self.call_client(id, false, |coord, local, _, _| coord.shard_unreachable(local, shard))?;
        }
        Ok(())
    }

    /// Client `id`'s core hears that its link to replica `replica` of `shard` went down or came
    /// up. It sends nothing then (a snapshot read waiting there becomes due), so its wake-up
    /// moves only if its next deadline did: a run without snapshot reads is unchanged.
    fn client_replica_link(&mut self, id: ClientId, shard: ShardId, replica: u32, up: bool) -> Step {
        let now = self.now();
        let node = self.client(id)?;
        if node.dead {
            return Ok(());
        }
        let before = node.coord.next_deadline();
        node.coord.replica_link(local_clock(now, node.offset_us), shard, replica, up);
        let after = node.coord.next_deadline();
        if after != before {
            let at = after.map(|d| virtual_deadline(d, node.offset_us).max(now + 1));
            self.schedule_wake(Node::Client(id), at);
        }
        Ok(())
    }

    /// Sends `msg` for `shard` to the replica the client's routes pick.
    fn route(&mut self, id: ClientId, shard: ShardId, msg: ClientMsg) -> Step {
        if shard >= self.sim_config().shards {
            let msg = format!("client {id} sent {msg:?} to nonexistent shard {shard}");
            return Err(self.violation(ViolationKind::Invariant, msg));
        }
        // Every replica is reachable as far as the client knows (faults lose messages).
        let targets = self.client(id)?.routes.route(shard, &msg, |_| true);
        if targets.is_empty() {
            return Err(self.violation(ViolationKind::Invariant, format!("client {id} has no route to shard {shard}")));
        }
        for target in targets {
            self.send_to_replica(id, shard, target, msg.clone());
        }
        Ok(())
    }

    /// Sends `msg` for `shard` to the replica the client core picked (a snapshot read).
    fn send_to(&mut self, id: ClientId, shard: ShardId, replica: u32, msg: ClientMsg) -> Step {
        if shard >= self.sim_config().shards || replica >= self.client(id)?.routes.replicas(shard) {
            let msg = format!("client {id} sent {msg:?} to nonexistent replica {replica} of shard {shard}");
            return Err(self.violation(ViolationKind::Invariant, msg));
        }
        self.send_to_replica(id, shard, replica, msg);
        Ok(())
    }

    /// Handles a coordinator's outputs: dispatches leave, answers are recorded.
    fn client_outputs(&mut self, id: ClientId, out: &mut Vec<ClientOutput>) -> Step {
        for o in out.drain(..) {
            match o {
                ClientOutput::Send { shard, msg } => self.route(id, shard, msg)?,
                ClientOutput::SendTo { shard, replica, msg } => self.send_to(id, shard, replica, msg)?,
                ClientOutput::Done(done)
                    if matches!(done.outcome, TxnOutcome::Unknown(_)) && !self.unknown_is_final() =>
                {
                    // The client moves on (its window slot frees; a prober's does not, its
                    // probe stays one transaction at a time); the answer that counts is the
                    // resolution, which must come (liveness).
                    self.trace(|| format!("c{id} reports {:?} unknown: {:?}", done.id, done.outcome));
                    self.clients().unknown += 1;
                    if self.clients().prober != Some(id) {
                        self.client(id)?.outstanding -= 1;
                    }
                }
                ClientOutput::Done(done) => {
                    self.client(id)?.routes.forget(done.id);
                    let txn = done.id;
                    let outputs = committed_outputs(&done.outcome);
                    self.record_answer(id, done, true)?;
                    if let Some(outputs) = outputs {
                        self.queue_next_step(id, txn, &outputs)?;
                    }
                }
                ClientOutput::Resolved(done) => {
                    self.client(id)?.routes.forget(done.id);
                    let in_window = self.unknown_is_final() || self.clients().prober == Some(id);
                    self.record_answer(id, done, in_window)?
                }
            }
        }
        Ok(())
    }

    /// Client `id`'s transaction `txn` committed with `outputs`: the next step of its
    /// business transaction, if any, is queued for submission.
    fn queue_next_step(&mut self, id: ClientId, txn: TxnId, outputs: &[(ShardId, Vec<u8>)]) -> Step {
        let c = self.clients();
        let rec = &c.history.txns[c.index[&txn]];
        match c.source.next_step(id, rec, outputs) {
            Ok(Some(step)) => {
                self.client(id)?.steps.push_back(step);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => Err(self.violation(ViolationKind::Config, e)),
        }
    }

    /// Submits transactions while the client's window has room: the next steps of its
    /// business transactions, then new ones while the run wants more.
    fn refill(&mut self, id: ClientId, out: &mut Vec<ClientOutput>) -> Step {
        loop {
            let in_flight = match self.clients().prober {
                None => self.sim_config().in_flight,
                Some(prober) => usize::from(prober == id),
            };
            let (started, outstanding, seq, dead) = {
                let node = self.client(id)?;
                (node.started, node.outstanding, node.next_seq, node.dead)
            };
            // Past the unresolved bound the client holds new submissions, as the runtime
            // client does: each unresolved one holds every later acknowledgement.
            if dead || !started || outstanding >= in_flight || !self.client(id)?.coord.can_submit() {
                return Ok(());
            }
            let spec = match self.client(id)?.steps.pop_front() {
                Some(step) => step,
                None if self.clients().submitted >= self.clients().target => return Ok(()),
                None => match self.clients().source.next(id, seq) {
                    Ok(spec) => spec,
                    Err(e) => return Err(self.violation(ViolationKind::Config, e)),
                },
            };
            let now = self.now();
            let dispatched = self.moment();
            let node = self.client(id)?;
            let local = local_clock(now, node.offset_us);
            let submitted = node.coord.submit(local, &spec.procedure, spec.args.clone(), spec.pieces.clone(), out);
            let txn_id = match submitted {
                Ok(id) => id,
                Err(e) => return Err(self.violation(ViolationKind::Config, format!("client {id}'s transaction: {e}"))),
            };
            node.outstanding += 1;
            node.next_seq += 1;
            if txn_id != (TxnId { client: id, seq }) {
                let msg = format!("client {id} numbered its transaction {txn_id:?}, expected seq {seq}");
                return Err(self.violation(ViolationKind::Invariant, msg));
            }
            self.trace(|| format!("c{id} submits {txn_id:?}: {}", spec.describe));
            let cross = spec.pieces.len() > 1;
            let c = self.clients();
            c.index.insert(txn_id, c.history.txns.len());
            c.history.txns.push(TxnRecord {
                id: txn_id,
                procedure: spec.procedure,
                args: spec.args,
                pieces: spec.pieces,
                dispatched,
                answers: Vec::new(),
            });
            c.submitted += 1;
            if self.dies_after_submit(id, cross, out)? {
                return Ok(());
            }
            self.client_outputs(id, out)?;
        }
    }

    /// Records the definite answer of `done.id`; `in_window`: it still holds a slot of the
    /// client's window (a resolution of an unknown one does not).
    fn record_answer(&mut self, client: ClientId, done: Completion, in_window: bool) -> Step {
        let at = self.moment();
        self.fold_trace(fold(at.us, done.id.seq ^ (done.id.client << 40)));
        self.trace(|| format!("c{client} answered {:?} -> {:?}", done.id, done.outcome));
        let Some(&k) = self.clients().index.get(&done.id) else {
            let msg = format!("client {client} answered {:?}, which was never submitted", done.id);
            return Err(self.violation(ViolationKind::Invariant, msg));
        };
        if done.id.client != client {
            let msg = format!("client {client} answered {:?}, another client's transaction", done.id);
            return Err(self.violation(ViolationKind::Invariant, msg));
        }
        match self.sim_config().protocol {
            // A snapshot read has no leader's reply to match: the checker's replay checks
            // its timestamp and results (rule 23).
            Protocol::Luigi if done.read_only => {}
            Protocol::Luigi => {
                if let Err((kind, msg)) = self.clients().replies.check_completion(&done) {
                    return Err(self.violation(kind, msg));
                }
            }
            // The baselines' replies carry no timestamp (0): their serial order is derived
            // from the shards' logs after the run (`failover::baseline`).
            Protocol::Occ | Protocol::TwoPl | Protocol::Direct => {}
        }
        if let Some(source) = self.clients().delivering {
            self.clients().answered_by.insert(done.id, source);
        }
        let now = self.now();
        let c = self.clients();
        let rec = &mut c.history.txns[k];
        rec.answers.push(AnswerRecord {
            at,
            outcome: done.outcome,
            attempts: done.attempts,
            read_only: done.read_only,
        });
        if rec.answers.len() > 1 {
            let msg = format!(
                "{:?} answered a second time: first {:?}, then {:?}",
                done.id, rec.answers[0].outcome, rec.answers[1].outcome
            );
            return Err(self.violation(ViolationKind::DuplicateAnswer, msg));
        }
        c.answered += 1;
        c.last_answer_us = now;
        if in_window {
            self.client(client)?.outstanding -= 1;
        }
        Ok(())
    }
}

/// Each participant's output, if `outcome` is committed (ordered, every procedure succeeded).
fn committed_outputs(outcome: &TxnOutcome) -> Option<Vec<(ShardId, Vec<u8>)>> {
    match outcome {
        TxnOutcome::Ordered { results, .. } => {
            results.iter().map(|(s, r)| r.as_ref().ok().map(|o| (*s, o.clone()))).collect()
        }
        TxnOutcome::Rejected(_) | TxnOutcome::Unknown(_) => None,
    }
}

/// Sort key that puts a coordinator's output in transaction-id order.
fn output_order(o: &ClientOutput) -> TxnId {
    match o {
        ClientOutput::Send { msg: ClientMsg::Dispatch { txn, .. }, .. } => txn.id,
        ClientOutput::Send { msg: ClientMsg::SnapshotRead(read), .. }
        | ClientOutput::SendTo { msg: ClientMsg::SnapshotRead(read), .. } => read.id,
        ClientOutput::Send { .. } | ClientOutput::SendTo { .. } => TxnId { client: 0, seq: 0 },
        ClientOutput::Done(done) | ClientOutput::Resolved(done) => done.id,
    }
}
