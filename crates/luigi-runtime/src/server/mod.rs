//! The server shell: one node's TCP listener and event loop around the sans-I/O shard leader.
//!
//! Connection readers decode frames and feed one bounded channel; a single task owns the
//! leader, handles events in batches, ticks it, and hands outputs to per-connection batching
//! writers (which apply the WAN delay). A precise timer wakes the loop when a held transaction's
//! timestamp comes. Each leader keeps one outbound connection to every other shard's leader for
//! agreement batches and receives theirs on its listener.
//!
//! The event loop is here; `links` holds the accept loop, connection opening and the
//! outbound links to the other servers, `conns` the accepted connections and their gate
//! bookkeeping, `budget` the connection limits, `hosted` the cluster file's workload,
//! `scrape` what a metrics scrape reads (served by [`crate::metrics::http`] when the cluster
//! file gives this node a `metrics` address) and `log_watch` what the metrics time of the log.

mod budget;
mod conns;
mod hosted;
mod links;
mod log_watch;
mod not_taken;
mod scrape;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::wire::WireMsg;
use anyhow::Context;
use luigi_node::{CheckedSnapshot, Effect, NodeConfig, NodeError, ReplicaNode, SnapshotCheck};
use luigi_replica::{SnapshotImage, SnapshotJob};
use luigi_txn::msg::ServerMsg;
use luigi_txn::procedure::Registry;
use luigi_wal::Durability;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use budget::ConnBudget;
pub use budget::ConnLimits;
use conns::Conns;
use hosted::hosted_workload;
use links::{accept_loop, peer_link};
use log_watch::LogWatch;
use not_taken::NotTaken;
use prometheus_client::metrics::histogram::Histogram;
use scrape::LeaderWatch;

use crate::clock;
use crate::config::{ClusterConfig, NodeId};
use crate::gate::{self, GateConfig};
use crate::metrics::{Snapshot, Timings};
use crate::net::peer::PeerWriter;
use crate::net::wan::DelayLine;
use crate::storage::{rebuild_hint, Storage, StorageOp, StorageReport};
use crate::timer::PreciseTimer;

/// Capacity of the channel from connection readers to the event loop.
const INBOUND_QUEUE_EVENTS: usize = 1 << 16;
/// Events handled before the loop turns the node again.
const EVENTS_PER_BATCH_MAX: usize = 4096;

type ConnId = u64;

enum Inbound {
    Opened(conns::Opened),
    Msg {
        conn: ConnId,
        msg: WireMsg,
    },
    /// A connection's reader ended; `why` if it refused what it read.
    Closed {
        conn: ConnId,
        why: Option<String>,
    },
    /// The outbound link to another server (a replica of this shard or of another) is up.
    PeerUp {
        peer: NodeId,
        writer: PeerWriter<WireMsg>,
    },
    PeerDown {
        peer: NodeId,
    },
    /// From the storage thread.
    Storage(StorageReport),
    /// A snapshot job finished.
    SnapshotMade(MadeSnapshot),
    /// A received snapshot was checked (or decoded) off the loop (boxed: a decoded state is
    /// large).
    SnapshotChecked(Box<CheckedSnapshot>),
    /// The metrics responder asks for the server's figures.
    Scrape(tokio::sync::oneshot::Sender<Snapshot>),
}

/// What a [`SnapshotJob`] made.
type MadeSnapshot = Result<SnapshotImage, luigi_raft::RaftError>;

/// Where a replica keeps its log, and whether it fsyncs it. Every shard, one replica or
/// more, is a Raft group with this storage.
#[derive(Clone, Debug)]
pub struct StorageOptions {
    /// Directory holding one sub-directory per node (the command's default: `luigi-data`).
    pub data_dir: PathBuf,
    /// `Fsync` (default for servers) or `None` (benchmarks that say so).
    pub durability: Durability,
    /// Discard this node's Raft state (moved aside) and rebuild it from its peers
    /// (`luigi server --rejoin`, see [`crate::datadir::prepare`]).
    pub rejoin: bool,
}

/// A bound listener, ready to serve.
pub struct Server {
    config: ClusterConfig,
    node: NodeId,
    listener: TcpListener,
    registry: Registry,
    storage: StorageOptions,
    limits: ConnLimits,
    /// Where it serves `GET /metrics`, if the cluster file says.
    metrics: Option<TcpListener>,
}

impl Server {
    /// Binds `node`'s address from `config`. Fails with one clear line if the node is not in
    /// the file or the port cannot be bound.
    pub async fn bind(
        config: ClusterConfig,
        node: NodeId,
        registry: Registry,
        storage: StorageOptions,
    ) -> anyhow::Result<Self> {
        let addr =
            config.node_addr(node).with_context(|| format!("node {} is not in the cluster file", node.name()))?;
        let listener =
            TcpListener::bind(addr).await.with_context(|| format!("node {}: cannot listen on {addr}", node.name()))?;
        let metrics = match config.metrics_addr(node) {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("node {}: cannot serve metrics on {addr}", node.name()))?,
            ),
            None => None,
        };
        Ok(Self { config, node, listener, registry, storage, limits: ConnLimits::default(), metrics })
    }

    /// Serves under connection limits `limits` instead of the defaults (tests reach them with
    /// a few connections); the peer reserve still grows to fit the cluster.
    pub fn with_conn_limits(mut self, limits: ConnLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The bound metrics address, if it serves metrics.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` resolves.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Server { config, node, listener, registry, storage, limits, metrics } = self;
        let delay_line =
            if config.delay_model().is_zero() { None } else { Some(std::sync::Arc::new(DelayLine::new()?)) };
        let replicas = config.shards[node.shard as usize].replicas.len() as u32;
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE_EVENTS);
        let others = config.shards.iter().map(|s| s.replicas.len()).sum::<usize>() - 1;
        let budget = std::sync::Arc::new(std::sync::Mutex::new(ConnBudget::new(limits.fit_peers(others))));
        let accept = accept_loop(listener, tx.clone(), config.clone(), node, delay_line.clone(), budget.clone());
        let mut tasks = vec![tokio::spawn(accept)];
        // Links to every other replica: of this shard (Raft), and of every other shard (any
        // replica may come to lead its shard and send agreement batches to theirs).
        for shard in 0..config.shard_count() {
            for replica in 0..config.shards[shard as usize].replicas.len() as u32 {
                let peer = NodeId { shard, replica };
                if peer != node {
                    tasks.push(tokio::spawn(peer_link(config.clone(), node, peer, delay_line.clone(), tx.clone())));
                }
            }
        }
        info!(node = %node.name(), net = %config.net, replicas, protocol = %config.protocol(), "serving");
        warn_without_secret(&config);
        let serves_metrics = metrics.is_some();
        let timings = Timings::default();
        tasks.extend(metrics.map(|l| scrape::serve(l, node, &config, &tx, &timings)));
        // Every shard is a Raft group, one replica or more, with its disk on a thread.
        let reports = tx.clone();
        let (mut disk, recovered) = Storage::open(
            node,
            &config,
            &storage,
            move |r| reports.blocking_send(Inbound::Storage(r)).is_ok(),
            &timings,
        )?;
        let shape = config.shards.iter().map(|s| s.replicas.len() as u32).collect();
        let (registry, initial) = hosted_workload(&config, node, registry)?;
        let mut node_config =
            NodeConfig::new(node, shape, config.seed, config.tuning(), registry).with_initial(initial);
        node_config.leader.fast_path = config.fast_path_on(node.shard);
        let factory = luigi_node::replicas_for(config.protocol(), &node_config.leader);
        node_config = node_config.with_protocol(factory);
        let mut replica = ReplicaNode::new(node_config, recovered).map_err(|e| match e {
            NodeError::Raft { source: luigi_raft::RaftError::Recovered(_), .. } => {
                anyhow::anyhow!("{e}; cannot restart from {}; {}", disk.dir().display(), rebuild_hint(replicas))
            }
            e => anyhow::Error::new(e),
        })?;
        replica.restore_accepts(&disk.take_found_accepts())?;
        let gate = GateConfig {
            me: node,
            replicas: config.shards.iter().map(|s| s.replicas.len() as u32).collect(),
            secret: config.secret.clone().unwrap_or_default(),
            client_token: config.client_token.clone(),
            protocol: config.protocol(),
        };
        let shell = Shell {
            node: replica,
            disk,
            links: BTreeMap::new(),
            inbound: tx,
            fatal: None,
            persisted_inline: false,
            leaders: LeaderWatch::default(),
            log_watch: serves_metrics.then(|| LogWatch::new(&timings)),
            turns: serves_metrics.then_some(timings.turn),
            not_taken: NotTaken::default(),
        };
        let result = event_loop(shell, Conns::new(gate, budget, clock::now_us()), rx, shutdown).await;
        for t in tasks {
            t.abort();
        }
        result
    }
}

/// Warns when a cluster of more than one server has no secret.
fn warn_without_secret(config: &ClusterConfig) {
    if config.secret.is_none() && config.shards.iter().map(|s| s.replicas.len()).sum::<usize>() > 1 {
        warn!(
            "the cluster file has no `secret`: any process that reaches the servers and speaks the protocol \
             can act as a peer (Raft, snapshots, agreement); set one (see docs/USAGE.md: Securing a cluster)"
        );
    }
}

/// The node and what executes its effects: the links to the other servers, the disk thread,
/// and snapshot threads reporting back through `inbound`.
struct Shell {
    node: ReplicaNode,
    disk: Storage,
    /// Outbound links to the other replicas, of this shard and of the others.
    links: BTreeMap<NodeId, PeerWriter<WireMsg>>,
    inbound: mpsc::Sender<Inbound>,
    /// Why the node must stop (a disk failure reported by its thread).
    fatal: Option<String>,
    /// A write made durable inline released work since the last turn.
    persisted_inline: bool,
    /// The leader changes seen (for the metrics).
    leaders: LeaderWatch,
    /// What the metrics read of the log's writes and commits, when the server serves them.
    log_watch: Option<LogWatch>,
    /// Times each turn, when the server serves metrics (the disk's syncs are timed always:
    /// two clock reads are nothing beside a sync; a turn can be a few microseconds).
    turns: Option<Histogram>,
    /// Replication messages not taken.
    not_taken: NotTaken,
}

/// Turns in a row after writes made durable inline (each releases what the last wrote).
const INLINE_TURNS_MAX: usize = 8;

impl Shell {
    /// Executes the node's effects, in order (and what executing them released).
    fn execute(&mut self, conns: &Conns, fx: &mut Vec<Effect>) {
        let mut more = Vec::new();
        while !fx.is_empty() {
            for e in fx.drain(..) {
                self.execute_one(conns, e, &mut more);
            }
            std::mem::swap(fx, &mut more);
        }
    }

    /// Turns the node at `now` and executes its effects; turns it again while writes made
    /// durable inline released more work (bounded).
    fn turn(&mut self, conns: &Conns, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        let started = self.turns.is_some().then(std::time::Instant::now);
        let turned = self.turn_inline(conns, fx);
        if let (Some(turns), Some(started)) = (&self.turns, started) {
            Timings::observe(turns, started.elapsed());
        }
        self.leaders.watch(&self.node);
        if let Some(w) = &mut self.log_watch {
            w.turned(&self.node);
        }
        turned
    }

    /// [`Shell::turn`]'s turns.
    fn turn_inline(&mut self, conns: &Conns, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        for _ in 0..INLINE_TURNS_MAX {
            self.persisted_inline = false;
            // The log's messages leave before the state machine's work of the turn.
            let driven = self.node.drive_log(clock::now_us(), fx);
            self.execute(conns, fx);
            driven?;
            let turned = self.node.turn(clock::now_us(), fx);
            self.execute(conns, fx);
            turned?;
            if !self.persisted_inline {
                break;
            }
        }
        Ok(())
    }

    fn execute_one(&mut self, conns: &Conns, e: Effect, more: &mut Vec<Effect>) {
        match e {
            Effect::ToClient { client, msg } => conns.send_to_client(client, WireMsg::Server(msg)),
            Effect::ToClients { clients, msg } => conns.send_to_clients(&clients, &WireMsg::Server(msg)),
            Effect::ToAllClients { msg } => conns.send_to_all_clients(&WireMsg::Server(msg)),
            Effect::ToPeer { to, batch } => {
                let Some(w) = self.links.get(&to) else {
                    self.node.batch_refused(to, batch);
                    return;
                };
                let msg = WireMsg::Peer(batch);
                if let Err(e) = w.send(&msg) {
                    warn!(to = %to, error = %e, "peer leader not taking batches; keeping them");
                    let WireMsg::Peer(batch) = msg else { unreachable!("built above") };
                    self.node.batch_refused(to, batch);
                }
            }
            Effect::Replicate { to, msg } => match self.links.get(&to) {
                Some(w) => {
                    if let Err(e) = w.send(&WireMsg::Replication(msg)) {
                        debug!(to = %to, error = %e, "replication message not sent; it is repeated");
                    }
                }
                None => debug!(to = %to, "replica not connected; replication message dropped (it is repeated)"),
            },
            Effect::Persist(p) => {
                if let Some(w) = &mut self.log_watch {
                    w.submitted(&p);
                }
                self.submit_to_disk(StorageOp::Persist(p), more)
            }
            Effect::SaveSnapshot(snap) => self.submit_to_disk(StorageOp::SaveSnapshot(snap), more),
            Effect::MarkDamaged { reason } => self.submit_to_disk(StorageOp::MarkDamaged(reason), more),
            Effect::MakeSnapshot(job) => self.make_snapshot(job),
            Effect::CheckSnapshot(check) => self.check_snapshot(check),
            Effect::Discard(state) => {
                // Freed on a thread of its own: a large store takes a while to free.
                if std::thread::Builder::new().name("luigi-discard".into()).spawn(move || drop(state)).is_err() {
                    warn!("cannot start a thread to free a replaced state; it is freed on the event loop");
                }
            }
            // Logged by the node; executions are for observers (the simulator's checks).
            Effect::Transition(_) | Effect::Executed { .. } => {}
        }
    }

    /// Hands `op` to the disk. A write that is durable at once (written inline) is reported
    /// to the node now; what that releases goes into `more`.
    fn submit_to_disk(&mut self, op: StorageOp, more: &mut Vec<Effect>) {
        match self.disk.submit(op) {
            Ok(Some(number)) => {
                self.persisted(number, more);
                self.persisted_inline = true;
            }
            Ok(None) => {}
            Err(e) => {
                if self.fatal.is_none() {
                    self.fatal = Some(e);
                }
            }
        }
    }

    /// The writes up to `number` are durable.
    fn persisted(&mut self, number: u64, fx: &mut Vec<Effect>) {
        if let Some(w) = &mut self.log_watch {
            w.persisted(number);
        }
        self.node.persisted(number, fx);
    }

    /// Runs `job` on a thread of its own; its result comes back as an event.
    fn make_snapshot(&mut self, job: SnapshotJob) {
        let tx = self.inbound.clone();
        let spawned = std::thread::Builder::new().name("luigi-snapshot".into()).spawn(move || {
            let _ = tx.blocking_send(Inbound::SnapshotMade(job.run()));
        });
        if let Err(e) = spawned {
            self.fatal = Some(format!("cannot start a snapshot thread: {e}"));
        }
    }

    /// Runs `check` on a thread of its own (the node keeps at most a few under way); its
    /// result comes back as an event.
    fn check_snapshot(&mut self, check: SnapshotCheck) {
        let tx = self.inbound.clone();
        let spawned = std::thread::Builder::new().name("luigi-snapcheck".into()).spawn(move || {
            let _ = tx.blocking_send(Inbound::SnapshotChecked(Box::new(check.run())));
        });
        if let Err(e) = spawned {
            self.fatal = Some(format!("cannot start a snapshot check thread: {e}"));
        }
    }

    fn stats(&self) -> String {
        format!("{} {:?}", self.node.replica().stats_line(), self.node.stats())
    }

    /// The error the server stops with: the node's, after its disk thread finished what was
    /// queued (e.g. marking the directory damaged).
    fn stop(&mut self, e: impl std::fmt::Display) -> anyhow::Error {
        let me = self.node.id();
        let dir = self.disk.dir().display().to_string();
        let replicas = self.node.config().group_size();
        match self.disk.finish() {
            Ok(()) => anyhow::anyhow!("{e}; data directory {dir}; {}", rebuild_hint(replicas)),
            Err(d) => anyhow::anyhow!("node {me}: {e}; its disk: {d}; {}", rebuild_hint(replicas)),
        }
    }
}

async fn event_loop(
    mut shell: Shell,
    mut conns: Conns,
    mut rx: mpsc::Receiver<Inbound>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let timer = PreciseTimer::start().context("cannot start timer thread")?;
    let node = shell.node.id();
    let mut fx = Vec::new();
    tokio::pin!(shutdown);
    // The first turn comes at once, not at the first event: a group of one elects itself in it.
    timer.set(Some(0));
    let mut stall_check_at_us = 0;
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            ev = rx.recv() => match ev {
                None => break,
                Some(ev) => {
                    handle(&mut shell, &mut conns, ev, &mut fx);
                    for _ in 1..EVENTS_PER_BATCH_MAX {
                        match rx.try_recv() {
                            Ok(ev) => handle(&mut shell, &mut conns, ev, &mut fx),
                            Err(_) => break,
                        }
                    }
                }
            },
            _ = timer.fired() => {}
        }
        if let Some(e) = shell.fatal.take() {
            shell.execute(&conns, &mut fx);
            return Err(shell.stop(format_args!("node {node}: {e}")));
        }
        if let Err(e) = shell.turn(&conns, &mut fx) {
            return Err(shell.stop(e));
        }
        let now = clock::now_us();
        conns.close_expired(now);
        timer.set(Some(shell.node.next_deadline().min(conns.next_deadline_us().unwrap_or(u64::MAX))));
        if now >= stall_check_at_us {
            stall_check_at_us = now + STALL_CHECK_US;
            warn_stalled(&shell.node, node, now);
        }
    }
    info!(stats = %shell.stats(), "server stopping");
    shell.disk.finish().map_err(|e| anyhow::anyhow!("node {node}: {e}"))
}

fn handle(shell: &mut Shell, conns: &mut Conns, ev: Inbound, fx: &mut Vec<Effect>) {
    match ev {
        Inbound::Opened(opened) => conns.open(opened, clock::now_us()),
        Inbound::Closed { conn, why } => conns.closed(conn, why),
        Inbound::PeerUp { peer, writer } => {
            shell.links.insert(peer, writer);
            link(&mut shell.node, peer, true, fx);
        }
        Inbound::PeerDown { peer } => {
            shell.links.remove(&peer);
            link(&mut shell.node, peer, false, fx);
        }
        Inbound::Storage(StorageReport::Persisted(number)) => shell.persisted(number, fx),
        // The log is compacted behind it in order with its writes.
        Inbound::Storage(StorageReport::SnapshotSaved(index)) => {
            shell.submit_to_disk(StorageOp::SnapshotSaved(index), fx)
        }
        Inbound::Storage(StorageReport::Failed(e)) => shell.fatal = Some(e),
        Inbound::SnapshotMade(made) => {
            if let Err(e) = shell.node.snapshot_made(made, fx) {
                shell.fatal = Some(e.to_string());
            }
        }
        Inbound::SnapshotChecked(checked) => {
            if let Err(e) = shell.node.snapshot_checked(*checked, fx) {
                warn!(error = %e, "received snapshot not taken");
            }
        }
        Inbound::Msg { conn, msg } => on_msg(shell, conns, conn, msg, fx),
        Inbound::Scrape(reply) => {
            let log = shell.log_watch.as_ref().map(LogWatch::counts).unwrap_or_default();
            let counts = scrape::ShellCounts {
                conns: &*conns,
                leaders: &shell.leaders,
                log,
                replication_not_taken: shell.not_taken.count,
            };
            let _ = reply.send(scrape::snapshot(&shell.node, &counts, clock::now_us()));
        }
    }
}

/// A link to `peer` came up or went down: a replica of this shard (Raft) or of another.
fn link(node: &mut ReplicaNode, peer: NodeId, up: bool, fx: &mut Vec<Effect>) {
    if peer.shard == node.id().shard {
        node.replica_link(peer.replica, up);
    } else {
        node.shard_link(peer, up, fx);
    }
}

/// A message from connection `conn`, once the gate has judged it.
fn on_msg(shell: &mut Shell, conns: &mut Conns, conn: ConnId, msg: WireMsg, fx: &mut Vec<Effect>) {
    let Some(verdict) = conns.judge(conn, &msg) else { return }; // closed meanwhile
    match verdict {
        gate::Verdict::Refuse(reason) => conns.refuse(conn, reason, false),
        gate::Verdict::Close(reason) => conns.refuse(conn, reason, true),
        gate::Verdict::Status => {
            if let Some(writer) = conns.writers.get(&conn) {
                let _ = writer.send(&WireMsg::Server(ServerMsg::Status(shell.node.status(clock::now_us()))));
            }
        }
        gate::Verdict::PeerAuthenticated(node) => debug!(conn, peer = %node.name(), "peer authenticated"),
        gate::Verdict::Client(client) => {
            let WireMsg::Client(msg) = msg else { unreachable!("the gate names a client only for client messages") };
            conns.client_conn.insert(client, conn);
            shell.node.on_client(clock::now_us(), client, msg, fx);
            shell.execute(conns, fx);
        }
        gate::Verdict::Peer(from) => match msg {
            WireMsg::Peer(batch) => {
                shell.node.on_peer_batch(clock::now_us(), batch, fx);
                shell.execute(conns, fx);
            }
            WireMsg::Replication(msg) => {
                if let Err(e) = shell.node.on_replication(from, msg, fx) {
                    // A snapshot that does not load, a misaddressed message: say so, go on.
                    shell.not_taken.record(from, &e, clock::now_us());
                }
            }
            WireMsg::Client(_)
            | WireMsg::Server(_)
            | WireMsg::Challenge { .. }
            | WireMsg::PeerHello { .. }
            | WireMsg::Refused { .. } => unreachable!("the gate passes only server-to-server messages from peers"),
        },
    }
}

/// How often a serving leader looks for long-stalled transactions to warn about.
const STALL_CHECK_US: u64 = 5_000_000;
/// A transaction pending this long on a leader is worth an operator's attention: it holds the
/// shard's watermark (and, under the all-shards commit rule, every client's answers).
const STALL_WARN_AGE_US: u64 = 10_000_000;

/// Logs the transactions pending on this leader for longer than [`STALL_WARN_AGE_US`]
/// (`luigi status` lists them too).
fn warn_stalled(replica: &ReplicaNode, node: NodeId, now: u64) {
    let stalled: Vec<_> =
        replica.replica().stalled(now).into_iter().filter(|t| t.age_us >= STALL_WARN_AGE_US).collect();
    if let Some(oldest) = stalled.first() {
        warn!(
            node = %node.name(),
            count = stalled.len(),
            oldest = ?oldest.id,
            oldest_age_s = oldest.age_us / 1_000_000,
            shards = ?oldest.shards,
            "transactions stalled: each holds this shard's watermark; recovery keeps asking the other participants (see `luigi status`)"
        );
    }
}
