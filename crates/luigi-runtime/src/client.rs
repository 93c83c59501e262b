//! The client library: the cluster protocol's client core (a
//! [`ClientCore`]: Luigi's coordinator, or the baselines' client) driven by one tokio task, with a connection to every replica of
//! every shard. Dispatches go to the replica believed to lead its shard; a
//! `NotLeader` answer (with its hint), a watermark broadcast (only leaders send them) or a
//! lost connection moves that belief. `execute` submits a transaction and resolves with its
//! answer; retries happen inside, under the same transaction id, so a transaction is never
//! executed twice, also across a leader change.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::wire::WireMsg;
use luigi_protocol::coordinator::fast::FanOut;
use luigi_protocol::coordinator::{CommitRule, CoordinatorConfig};
use luigi_store::Key;
use luigi_txn::client_core::ClientCore;
use luigi_txn::client_core::ClientRoutes;
use luigi_txn::client_core::{ClientOutput, Completion, TxnOutcome};
use luigi_txn::msg::ClientMsg;
use luigi_txn::partition::{split, HashPartitioner, Partitioner};
use luigi_txn::types::{ClientId, Protocol, ShardId, ShardPiece, TimeUs, TxnId};
use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::{debug, warn};

use crate::auth;
use crate::clock;
use crate::config::{ClusterConfig, NodeId, CLIENT_NODE};
use crate::net::peer::{connect, NetConfig, PeerWriter};
use crate::net::wan::{DelayLine, DelayLink};

/// Capacity of the request queue into the driver task.
const REQUEST_QUEUE: usize = 1 << 14;
/// Capacity of the channel carrying every leader's messages into the driver task.
const INBOUND_QUEUE: usize = 1 << 16;
/// How long `connect` waits for at least one replica of every shard.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between attempts to (re)connect to a replica.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// How long a new connection waits for the server's challenge.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pings sent to each leader at start to seed the one-way-delay estimate.
const WARMUP_PINGS: usize = 8;
/// How often the coordinator checks for dispatches to retry.
const RETRY_TICK: Duration = Duration::from_millis(10);

/// Why `execute` failed (the transaction's own outcome is in the [`Completion`]).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The client's driver task has stopped.
    #[error("client is shut down")]
    Closed,
    /// The transaction's pieces cannot be sent (no participant, two pieces for one shard, or
    /// a shard the cluster does not have); nothing was sent.
    #[error("invalid transaction: {0}")]
    Invalid(String),
}

struct Request {
    procedure: String,
    args: Vec<u8>,
    pieces: Vec<ShardPiece>,
    /// The answer, or why the client core refused the pieces ([`ClientError::Invalid`]).
    done: oneshot::Sender<Result<Completion, ClientError>>,
}

/// Resolutions kept for slow subscribers (see [`Client::resolutions`]).
const RESOLUTIONS_BUFFER: usize = 1024;

/// A connection to a Luigi cluster, whatever protocol it runs (its file's `[protocol] kind`:
/// Luigi, or a baseline). Cheap to clone; clones share the coordinator.
///
/// **Outcomes.** [`Client::execute`] answers each transaction once:
/// [`TxnOutcome::Ordered`](luigi_txn::client_core::TxnOutcome::Ordered) (executed on every
/// participant and durable), `Rejected` (executed nowhere, never will be), or `Unknown` (no
/// complete answer in time, e.g. a shard without a majority: it may have executed, or may
/// still). The client keeps asking about an unknown transaction under the same id, so it
/// executes at most once, and publishes its outcome on [`Client::resolutions`] once learned.
/// On a baseline cluster (OCC, 2PL) a transaction may also come back aborted by the protocol
/// (a lock conflict, a failed validation: see
/// [`TxnOutcome::protocol_abort`](luigi_txn::client_core::TxnOutcome::protocol_abort)):
/// final for its id, executed nowhere; the caller may submit it again as a new transaction.
/// The id of a client must be unique in the cluster for as long as the servers remember
/// answers (use a fresh one per process).
#[derive(Clone)]
pub struct Client {
    requests: mpsc::Sender<Request>,
    partitioner: Arc<dyn Partitioner>,
    id: ClientId,
    resolutions: broadcast::Sender<Completion>,
    protocol: Protocol,
}

impl Client {
    /// Connects to every shard leader of `config` as client `id` (unique in the cluster),
    /// hash-partitioning keys, speaking the cluster's protocol ([`ClusterConfig::protocol`]).
    pub async fn connect(config: &ClusterConfig, id: ClientId) -> anyhow::Result<Self> {
        Self::connect_with(config, id, Arc::new(HashPartitioner::new(config.shard_count()))).await
    }

    /// Like [`Client::connect`] with a workload-specific partitioner (e.g. by warehouse).
    pub async fn connect_with(
        config: &ClusterConfig,
        id: ClientId,
        partitioner: Arc<dyn Partitioner>,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            partitioner.shards() == config.shard_count(),
            "partitioner covers {} shards but the cluster has {}",
            partitioner.shards(),
            config.shard_count()
        );
        let model = config.delay_model();
        let delay_line = if model.is_zero() { None } else { Some(Arc::new(DelayLine::new()?)) };
        let (in_tx, mut in_rx) = mpsc::channel(INBOUND_QUEUE);
        let mut replicas = Vec::new();
        for shard in 0..config.shard_count() {
            let n = config.shards[shard as usize].replicas.len() as u32;
            replicas.push(n);
            for replica in 0..n {
                let node = NodeId { shard, replica };
                let dist = model.dist(CLIENT_NODE, &node.name());
                let seed = config.seed ^ id.rotate_left(17) ^ u64::from(shard) ^ (u64::from(replica) << 40);
                let link = delay_line.as_ref().map(|l| l.link(dist, seed));
                let addr = config.node_addr(node).expect("nodes come from the validated config");
                let token = config.client_token.clone();
                tokio::spawn(replica_link(node, addr, id, token, config.protocol(), link, in_tx.clone()));
            }
        }
        drop(in_tx);
        // Wait until every shard has a replica to talk to.
        let mut routes = Routes::new(replicas, config.protocol(), config.fast_path_anywhere());
        let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
        while let Some(shard) = routes.unreachable_shard() {
            let ev = tokio::time::timeout_at(deadline, in_rx.recv()).await.ok().flatten();
            match ev {
                Some(ev) => routes.on_event_before_start(ev),
                None => {
                    let addrs: Vec<String> = (0..routes.guess.replicas(shard))
                        .filter_map(|replica| config.node_addr(NodeId { shard, replica }))
                        .map(|a| a.to_string())
                        .collect();
                    anyhow::bail!(
                        "cannot reach any replica of shard {shard} ({}) within {CONNECT_TIMEOUT:?}",
                        addrs.join(", ")
                    );
                }
            }
        }
        let protocol = config.protocol();
        let core = client_core(config, id);
        let (req_tx, req_rx) = mpsc::channel(REQUEST_QUEUE);
        let (resolutions, _) = broadcast::channel(RESOLUTIONS_BUFFER);
        let driver = Driver {
            core,
            routes,
            waiting: HashMap::new(),
            out: Vec::new(),
            resolutions: resolutions.clone(),
            _delay_line: delay_line,
        };
        tokio::spawn(driver.run(req_rx, in_rx));
        Ok(Self { requests: req_tx, partitioner, id, resolutions, protocol })
    }

    /// The outcomes learned later of transactions answered `Unknown` (each a
    /// [`Completion`] with an `Ordered` or `Rejected` outcome), from now on. A receiver that
    /// falls more than 1024 behind loses the oldest (tokio broadcast semantics).
    pub fn resolutions(&self) -> broadcast::Receiver<Completion> {
        self.resolutions.subscribe()
    }

    /// This client's id.
    pub fn id(&self) -> ClientId {
        self.id
    }

    /// The protocol it speaks (its cluster's).
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The partitioner used to split keys into shard pieces.
    pub fn partitioner(&self) -> &dyn Partitioner {
        &*self.partitioner
    }

    /// Runs `procedure(args)` reading `reads` and writing `writes` (split across shards by the
    /// partitioner) and waits for its answer.
    pub async fn execute(
        &self,
        procedure: &str,
        args: Vec<u8>,
        reads: Vec<Key>,
        writes: Vec<Key>,
    ) -> Result<Completion, ClientError> {
        let pieces = split(&*self.partitioner, reads, writes);
        self.execute_pieces(procedure, args, pieces).await
    }

    /// Like [`Client::execute`] with explicit per-shard pieces.
    pub async fn execute_pieces(
        &self,
        procedure: &str,
        args: Vec<u8>,
        pieces: Vec<ShardPiece>,
    ) -> Result<Completion, ClientError> {
        let (done, rx) = oneshot::channel();
        let req = Request { procedure: procedure.to_string(), args, pieces, done };
        self.requests.send(req).await.map_err(|_| ClientError::Closed)?;
        rx.await.map_err(|_| ClientError::Closed)?
    }
}

/// Events from the replica connections to the driver.
enum Event {
    Up { node: NodeId, writer: PeerWriter<WireMsg> },
    Msg { node: NodeId, msg: WireMsg },
    Down { node: NodeId },
}

/// Keeps a connection to one replica: connects (retrying while it is down), answers the
/// server's challenge with its hello (and its token proof, if the cluster has a client
/// token), forwards what it sends, and reconnects after the connection drops.
async fn replica_link(
    node: NodeId,
    addr: std::net::SocketAddr,
    client: ClientId,
    token: Option<String>,
    protocol: luigi_txn::types::Protocol,
    link: Option<DelayLink>,
    tx: mpsc::Sender<Event>,
) {
    loop {
        match connect::<WireMsg, WireMsg>(addr, &NetConfig::default(), link.clone()).await {
            Ok((writer, reader)) => {
                let mut reader = reader.start();
                let nonce = match auth::read_challenge(&mut reader, HANDSHAKE_TIMEOUT).await {
                    Ok(nonce) => nonce,
                    Err(e) => {
                        debug!(node = %node.name(), error = %e, "no challenge from the replica; reconnecting");
                        tokio::time::sleep(RECONNECT_DELAY).await;
                        continue;
                    }
                };
                let proof = token.as_deref().map(|t| auth::client_proof(t, &nonce, client));
                if writer.send(&WireMsg::Client(ClientMsg::Hello { client, proof, protocol })).is_err() {
                    continue;
                }
                if tx.send(Event::Up { node, writer }).await.is_err() {
                    return; // client dropped
                }
                let end = reader.forward(&tx, move |msg| Event::Msg { node, msg }).await;
                debug!(node = %node.name(), ?end, "connection to replica ended");
                if tx.send(Event::Down { node }).await.is_err() {
                    return;
                }
            }
            Err(e) => debug!(node = %node.name(), %addr, error = %e, "replica not reachable yet"),
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// Where each shard's messages go: the replica believed to lead it, and the connections.
/// The client's links, and its guess of each shard's leader (the routing rules are
/// [`ClientRoutes`]'s, shared with the simulator).
struct Routes {
    writers: HashMap<NodeId, PeerWriter<WireMsg>>,
    guess: ClientRoutes,
}

impl Routes {
    fn new(replicas: Vec<u32>, protocol: Protocol, fast_path: bool) -> Self {
        let guess = ClientRoutes::for_protocol(replicas, protocol);
        let guess = if fast_path { guess.fanning_out() } else { guess };
        Self { writers: HashMap::new(), guess }
    }

    fn unreachable_shard(&self) -> Option<ShardId> {
        (0..self.guess.shards()).find(|&shard| !self.writers.keys().any(|n| n.shard == shard))
    }

    fn on_event_before_start(&mut self, ev: Event) {
        match ev {
            Event::Up { node, writer } => {
                self.writers.insert(node, writer);
            }
            Event::Down { node } => {
                self.writers.remove(&node);
            }
            Event::Msg { .. } => {} // nothing is asked before the driver starts
        }
    }

    /// The writers for `msg` to `shard` (see [`ClientRoutes::route`]).
    fn writers(&mut self, shard: ShardId, msg: &ClientMsg) -> Vec<&PeerWriter<WireMsg>> {
        let writers = &self.writers;
        let replicas = self.guess.route(shard, msg, |replica| writers.contains_key(&NodeId { shard, replica }));
        replicas.into_iter().filter_map(|replica| self.writers.get(&NodeId { shard, replica })).collect()
    }
}

/// The client core of the cluster's protocol ([`luigi_baseline::client_for`]): Luigi's
/// coordinator or a baseline's client, driven alike (connections, routing, delay links and
/// authentication are one for every protocol).
fn client_core(config: &ClusterConfig, id: ClientId) -> Box<dyn ClientCore> {
    let mut c = CoordinatorConfig::new(id);
    c.headroom_us = config.headroom_us();
    c.adaptive_headroom = config.adaptive_headroom();
    c.headroom_max_us = Some(config.tuning().headroom_max_us);
    c.retry_timeout_us = config.retry_timeout_us();
    c.initial_owd_us = config.scenario().delay().mean_us;
    c.commit_rule = CommitRule::AllShards { shards: config.shard_count() };
    c.group_sizes = config.shards.iter().map(|s| s.replicas.len() as u32).collect();
    c.shards = config.shard_count();
    // Rule 20: the fast path where it pays (under saturation few transactions commit fast,
    // and fanning every one out costs the followers more).
    c.fan_out = if config.fast_path_anywhere() { FanOut::Adaptive } else { FanOut::Never };
    c.max_clock_offset_us = config.tuning().max_clock_offset_us;
    // Rule 23: transactions that declare no writes read a snapshot at the nearest replicas.
    c.read_only_path = config.read_only_path();
    luigi_baseline::client_for(config.protocol(), c)
}

/// Seeds `core`'s one-way-delay estimates (a protocol that stamps nothing sends no ping).
fn warm_up(core: &dyn ClientCore, now: TimeUs, shards: u32, out: &mut Vec<ClientOutput>) {
    for shard in 0..shards {
        for _ in 0..WARMUP_PINGS {
            core.ping(now, shard, out);
        }
    }
}

struct Driver {
    core: Box<dyn ClientCore>,
    routes: Routes,
    waiting: HashMap<TxnId, oneshot::Sender<Result<Completion, ClientError>>>,
    out: Vec<ClientOutput>,
    resolutions: broadcast::Sender<Completion>,
    _delay_line: Option<Arc<DelayLine>>,
}

impl Driver {
    async fn run(mut self, mut requests: mpsc::Receiver<Request>, mut inbound: mpsc::Receiver<Event>) {
        warm_up(&*self.core, clock::now_us(), self.routes.guess.shards(), &mut self.out);
        self.flush();
        let mut accepting = true;
        // Retries are on the scale of the retry timeout; a coarse tick is plenty and keeps
        // the per-event path free of timer bookkeeping.
        let mut retry_tick = tokio::time::interval(RETRY_TICK);
        retry_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                // Unresolved transactions hold every later acknowledgement: past the bound, new
                // requests wait (backpressure) until some resolve.
                req = requests.recv(), if accepting && self.core.can_submit() => match req {
                    Some(req) => {
                        self.submit(req);
                        while let Ok(req) = requests.try_recv() {
                            self.submit(req);
                        }
                    }
                    None => accepting = false, // every handle dropped
                },
                ev = inbound.recv() => match ev {
                    Some(ev) => {
                        self.on_event(ev);
                        while let Ok(ev) = inbound.try_recv() {
                            self.on_event(ev);
                        }
                    }
                    None => return,
                },
                _ = retry_tick.tick() => self.core.tick(clock::now_us(), &mut self.out),
            }
            self.flush();
            if !accepting && self.waiting.is_empty() {
                return; // nothing left to answer
            }
        }
    }

    fn submit(&mut self, req: Request) {
        // Malformed pieces are the library user's input: refused to them, sending nothing.
        match self.core.submit(clock::now_us(), &req.procedure, req.args, req.pieces, &mut self.out) {
            Ok(id) => {
                self.waiting.insert(id, req.done);
            }
            Err(e) => {
                let _ = req.done.send(Err(ClientError::Invalid(e.to_string())));
            }
        }
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Up { node, writer } => {
                self.routes.writers.insert(node, writer);
                self.core.replica_link(clock::now_us(), node.shard, node.replica, true);
                // What was sent while it was down missed it: if it may lead, ask again.
                if self.routes.guess.link_change_resends(node.shard, node.replica) {
                    self.core.shard_unreachable(clock::now_us(), node.shard);
                }
            }
            Event::Down { node } => {
                warn!(node = %node.name(), "connection to replica lost; reconnecting");
                self.routes.writers.remove(&node);
                self.core.replica_link(clock::now_us(), node.shard, node.replica, false);
                if self.routes.guess.link_change_resends(node.shard, node.replica) {
                    self.core.shard_unreachable(clock::now_us(), node.shard);
                }
            }
            Event::Msg { node, msg } => self.on_msg(node, msg),
        }
    }

    fn on_msg(&mut self, node: NodeId, msg: WireMsg) {
        let shard = node.shard;
        match msg {
            WireMsg::Server(msg) => {
                self.routes.guess.on_server_msg(node, &msg);
                self.core.on_message(clock::now_us(), msg, &mut self.out)
            }
            WireMsg::Refused { reason } => warn!(node = %node.name(), %reason, "the server refused a message"),
            WireMsg::Client(_)
            | WireMsg::Peer(_)
            | WireMsg::Replication(_)
            | WireMsg::Challenge { .. }
            | WireMsg::PeerHello { .. } => {
                warn!(shard, "leader sent a message meant for a server; ignored")
            }
        }
    }

    fn flush(&mut self) {
        for o in self.out.drain(..) {
            match o {
                ClientOutput::Send { shard, msg } => {
                    let writers = self.routes.writers(shard, &msg);
                    if writers.is_empty() {
                        debug!(shard, "no replica of the shard connected; will retry");
                    }
                    let msg = WireMsg::Client(msg);
                    for w in writers {
                        // A failed send is retried by the coordinator's timeout under the same id.
                        if let Err(e) = w.send(&msg) {
                            debug!(shard, error = %e, "send to a replica failed; will retry");
                        }
                    }
                }
                ClientOutput::SendTo { shard, replica, msg } => {
                    match self.routes.writers.get(&NodeId { shard, replica }) {
                        // A read sent nowhere is sent elsewhere after the resend timeout.
                        Some(w) => {
                            if let Err(e) = w.send(&WireMsg::Client(msg)) {
                                debug!(shard, replica, error = %e, "send to a replica failed; will retry");
                            }
                        }
                        None => debug!(shard, replica, "replica not connected; will retry elsewhere"),
                    }
                }
                ClientOutput::Done(c) => {
                    if !matches!(c.outcome, TxnOutcome::Unknown(_)) {
                        self.routes.guess.forget(c.id);
                    }
                    if let Some(done) = self.waiting.remove(&c.id) {
                        let _ = done.send(Ok(c));
                    }
                }
                ClientOutput::Resolved(c) => {
                    self.routes.guess.forget(c.id);
                    debug!(id = ?c.id, outcome = ?c.outcome, "outcome of an unknown transaction learned");
                    let _ = self.resolutions.send(c); // no subscriber: nobody asked
                }
            }
        }
    }
}
