//! The server shell: one node's TCP listener and event loop around the sans-I/O shard leader.
//!
//! Connection readers decode frames and feed one bounded channel; a single task owns the
//! leader, handles events in batches, ticks it, and hands outputs to per-connection batching
//! writers (which apply the WAN delay). A precise timer wakes the loop when a held transaction's
//! timestamp comes. Each leader keeps one outbound connection to every other shard's leader for
//! agreement batches and receives theirs on its listener.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use luigi_proto::leader::follower::Follower;
use luigi_proto::leader::{LeaderConfig, LeaderOutput, ShardLeader};
use luigi_proto::log::ReplicatedLog;
use luigi_proto::msg::{ClientMsg, PeerBatch, ReplicaRole, ReplicaStatus, ServerMsg, StalledTxnInfo, WireMsg};
use luigi_proto::procedure::Registry;
use luigi_proto::types::{ClientId, ShardId};
use luigi_proto::Map;
use luigi_raft::replica::{Replica, SnapshotJob, Transition};
use luigi_wal::Durability;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::auth;
use crate::clock;
use crate::config::{ClusterConfig, NodeId, CLIENT_NODE};
use crate::gate::{self, ConnAuth, GateConfig};
use crate::net::codec::MAX_FRAME_BYTES_DEFAULT;
use crate::net::peer::{connect, split_stream, NetConfig, PeerWriter};
use crate::net::wan::{DelayLine, DelayLink};
use crate::replica::{raft_id, RaftShell};
use crate::timer::PreciseTimer;

/// Capacity of the channel from connection readers to the event loop.
const INBOUND_QUEUE_EVENTS: usize = 1 << 16;
/// Events handled before the loop ticks the leader again.
const EVENTS_PER_BATCH_MAX: usize = 4096;
/// Agreement batches kept for a shard whose leader is not connected (yet or any more).
const PEER_BACKLOG_BATCHES_MAX: usize = 1 << 16;
/// Pause between attempts to (re)connect to a peer leader.
const PEER_RECONNECT_DELAY: Duration = Duration::from_millis(50);
/// The largest frame a connection may send before it authenticates (a hello, a status
/// query): a stranger cannot make the server buffer megabytes.
const PRE_AUTH_FRAME_BYTES: usize = 64 << 10;
/// The largest frame from a client (a transaction: arguments up to 4 MiB plus its key sets).
const CLIENT_FRAME_BYTES: usize = 8 << 20;
/// Connections a server keeps open at once (clients and peers); more are closed at accept.
const CONNECTIONS_MAX: usize = 4096;
/// How long an outbound server link waits for the peer's challenge.
const PEER_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

type ConnId = u64;

enum Inbound {
    Opened { conn: ConnId, writer: PeerWriter<WireMsg>, reader: tokio::task::AbortHandle },
    Msg { conn: ConnId, msg: WireMsg },
    Closed { conn: ConnId },
    PeerUp { target: PeerTarget, writer: PeerWriter<WireMsg> },
    PeerDown { target: PeerTarget },
}

/// Who an outbound server-to-server connection goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeerTarget {
    /// A replica of another shard (agreement batches go to the one serving as its leader).
    Shard(NodeId),
    /// Another replica of this shard, by Raft id (Raft messages).
    Replica(u64),
}

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
        Ok(Self { config, node, listener, registry, storage })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Server { config, node, listener, registry, storage } = self;
        let delay_line =
            if config.delay_model().is_zero() { None } else { Some(std::sync::Arc::new(DelayLine::new()?)) };
        let replicas = config.shards[node.shard as usize].replicas.len() as u32;
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE_EVENTS);
        let mut tasks = vec![tokio::spawn(accept_loop(listener, tx.clone(), config.clone(), node, delay_line.clone()))];
        // Any replica may come to lead its shard: each keeps links to every replica of every
        // other shard.
        for shard in (0..config.shard_count()).filter(|s| *s != node.shard) {
            for replica in 0..config.shards[shard as usize].replicas.len() as u32 {
                let target = PeerTarget::Shard(NodeId { shard, replica });
                tasks.push(tokio::spawn(peer_link(config.clone(), node, target, delay_line.clone(), tx.clone())));
            }
        }
        for replica in (0..replicas).filter(|r| *r != node.replica) {
            let target = PeerTarget::Replica(raft_id(NodeId { shard: node.shard, replica }));
            tasks.push(tokio::spawn(peer_link(config.clone(), node, target, delay_line.clone(), tx.clone())));
        }
        drop(tx);
        info!(node = %node.name(), net = %config.net, replicas, "serving");
        if config.secret.is_none() && config.shards.iter().map(|s| s.replicas.len()).sum::<usize>() > 1 {
            warn!(
                "the cluster file has no `secret`: any process that reaches the servers and speaks the protocol \
                 can act as a peer (Raft, snapshots, agreement); set one (see the README's trust model)"
            );
        }
        let mut leader_config = LeaderConfig::new(node.shard, config.shard_count());
        leader_config.floor_lookahead_us = config.floor_lookahead_us();
        // A stalled agreement is recovered after several round trips of the scenario.
        leader_config.recover_after_us = (config.scenario().delay().mean_us * 16).max(1_000_000);
        // Every shard is a Raft group, one replica or more. Raft ticks: at least 10 ms, and
        // half a one-way delay so that heartbeats and elections (10-20 ticks) stay well above
        // the emulated round trip.
        let tick_us = (config.scenario().delay().mean_us / 2).max(10_000);
        let (shell, log) = RaftShell::open(node, &config, tick_us, &storage)?;
        // Every replica starts as a follower replaying its log (from its snapshot, if it has
        // one); the elected one serves.
        let last_index = log.snapshot_index();
        let replica = Replica::new(leader_config, registry, log)
            .with_context(|| format!("node {}: loading its snapshot", node.name()))?;
        let snapshots = Snapshots::new(config.snapshot_entries(), last_index, node, replicas);
        let member = Member { replica, snapshots, shell };
        let leader_of = (0..config.shard_count()).map(|s| (s, (0, 0))).collect();
        let gate = GateConfig {
            me: node,
            replicas: config.shards.iter().map(|s| s.replicas.len() as u32).collect(),
            secret: config.secret.clone().unwrap_or_default(),
            client_token: config.client_token.clone(),
        };
        let result = event_loop(member, node, gate, leader_of, rx, shutdown).await;
        for t in tasks {
            t.abort();
        }
        result
    }
}

async fn accept_loop(
    listener: TcpListener,
    tx: mpsc::Sender<Inbound>,
    config: ClusterConfig,
    node: NodeId,
    delay_line: Option<std::sync::Arc<DelayLine>>,
) {
    let net = NetConfig::default();
    let model = config.delay_model();
    let mut next_conn: ConnId = 1;
    let open_conns = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut refused_since_warning: u64 = 0;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if open_conns.load(std::sync::atomic::Ordering::Relaxed) >= CONNECTIONS_MAX {
            // Closed at once (dropping the stream); said once per thousand refusals.
            if refused_since_warning.is_multiple_of(1000) {
                warn!(%peer, open = CONNECTIONS_MAX, "connection limit reached; refusing new connections");
            }
            refused_since_warning += 1;
            continue;
        }
        refused_since_warning = 0;
        let conn = next_conn;
        next_conn += 1;
        // Replies on an accepted connection go to a client (peer leaders send on their own
        // outbound connections, so nothing is sent back to them here).
        let dist = model.dist(&node.name(), CLIENT_NODE);
        let link = delay_line.as_ref().map(|l| l.link(dist, config.seed ^ conn.wrapping_mul(0x9e37_79b9)));
        if let Err(e) = open(stream, conn, &net, link, &tx, open_conns.clone()).await {
            warn!(peer = %peer, error = %e, "could not set up connection");
        }
    }
}

async fn open(
    stream: TcpStream,
    conn: ConnId,
    net: &NetConfig,
    link: Option<DelayLink>,
    tx: &mpsc::Sender<Inbound>,
    open_conns: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> std::io::Result<()> {
    let (writer, reader) = split_stream::<WireMsg, WireMsg>(stream, net, link)?;
    let frame_limit = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(PRE_AUTH_FRAME_BYTES));
    let reader = reader.with_frame_limit(frame_limit.clone());
    let reader_limit = frame_limit;
    let counted = OpenConn::new(open_conns);
    let reader_tx = tx.clone();
    // Whatever arrives before the event loop has sent this connection its challenge is
    // dropped there (a well-behaved peer waits for the challenge).
    let task = tokio::spawn(async move {
        let _counted = counted;
        // A hello raises the frame limit at once, before the next frame is read (the event
        // loop closes the connection if the hello's proof fails): a client sends its first
        // transaction right behind its hello.
        let end = reader
            .forward(&reader_tx, |msg| {
                let raised = if matches!(msg, WireMsg::Client(ClientMsg::Hello { .. })) {
                    Some(CLIENT_FRAME_BYTES)
                } else if matches!(msg, WireMsg::PeerHello { .. }) {
                    Some(MAX_FRAME_BYTES_DEFAULT)
                } else {
                    None
                };
                if let Some(bytes) = raised {
                    reader_limit.store(bytes, std::sync::atomic::Ordering::Relaxed);
                }
                Inbound::Msg { conn, msg }
            })
            .await;
        debug!(conn, ?end, "connection reader ended");
        let _ = reader_tx.send(Inbound::Closed { conn }).await;
    });
    if tx.send(Inbound::Opened { conn, writer, reader: task.abort_handle() }).await.is_err() {
        task.abort(); // shutting down
    }
    Ok(())
}

/// Counts an open accepted connection until dropped (also when its reader is aborted).
struct OpenConn(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl OpenConn {
    fn new(count: std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        OpenConn(count)
    }
}

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Keeps an outbound connection to another server (a shard leader or a replica of this
/// shard): connects (retrying while it starts), announces it to the event loop, and
/// reconnects after it drops.
async fn peer_link(
    config: ClusterConfig,
    node: NodeId,
    target: PeerTarget,
    delay_line: Option<std::sync::Arc<DelayLine>>,
    tx: mpsc::Sender<Inbound>,
) {
    let peer = match target {
        PeerTarget::Shard(peer) => peer,
        PeerTarget::Replica(id) => NodeId { shard: node.shard, replica: (id - 1) as u32 },
    };
    let addr = config.node_addr(peer).expect("peer targets come from the validated config");
    let dist = config.delay_model().dist(&node.name(), &peer.name());
    let mut attempt: u64 = 0;
    loop {
        attempt += 1;
        let seed = config.seed ^ (u64::from(peer.shard) << 32) ^ (u64::from(peer.replica) << 48) ^ attempt;
        let link = delay_line.as_ref().map(|l| l.link(dist, seed));
        match connect::<WireMsg, WireMsg>(addr, &NetConfig::default(), link).await {
            Ok((writer, reader)) => {
                // Prove the cluster secret over the peer's challenge before anything else.
                let mut reader = reader.start();
                let nonce = match auth::read_challenge(&mut reader, PEER_HANDSHAKE_TIMEOUT).await {
                    Ok(nonce) => nonce,
                    Err(e) => {
                        debug!(peer = %peer.name(), error = %e, "no challenge from the peer; reconnecting");
                        tokio::time::sleep(PEER_RECONNECT_DELAY).await;
                        continue;
                    }
                };
                let proof = auth::peer_proof(config.secret.as_deref().unwrap_or(""), &nonce, peer, node);
                let hello = WireMsg::PeerHello { shard: node.shard, replica: node.replica, proof };
                if writer.send(&hello).is_err() {
                    continue;
                }
                info!(peer = %peer.name(), %addr, "connected to peer");
                if tx.send(Inbound::PeerUp { target, writer }).await.is_err() {
                    return;
                }
                // The peer sends only refusals on this connection; its end means the link is
                // gone.
                let end = reader
                    .run(|msg| match msg {
                        WireMsg::Refused { reason } => warn!(peer = %peer.name(), %reason, "peer refused a message"),
                        other => debug!(peer = %peer.name(), msg = ?other, "unexpected message from a peer; ignored"),
                    })
                    .await;
                warn!(peer = %peer.name(), ?end, "connection to peer lost; reconnecting");
                if tx.send(Inbound::PeerDown { target }).await.is_err() {
                    return;
                }
            }
            Err(e) => debug!(peer = %peer.name(), %addr, error = %e, "peer not reachable yet"),
        }
        tokio::time::sleep(PEER_RECONNECT_DELAY).await;
    }
}

struct Conns {
    node: NodeId,
    writers: Map<ConnId, PeerWriter<WireMsg>>,
    /// Who each accepted connection has shown itself to be (see [`gate`]).
    auth: Map<ConnId, ConnAuth>,
    /// Each accepted connection's reader task (stopped when the connection is refused).
    readers: Map<ConnId, tokio::task::AbortHandle>,
    gate: GateConfig,
    /// Makes each connection's challenge unique across restarts.
    started_us: u64,
    client_conn: Map<ClientId, ConnId>,
    /// Links to the replicas of other shards.
    peers: BTreeMap<NodeId, PeerWriter<WireMsg>>,
    /// The replica believed to serve each shard, and its term (announced with `LeaderIs`).
    leader_of: BTreeMap<ShardId, (u32, u64)>,
    /// The term this replica serves in (0: not serving).
    serving_term: u64,
    /// Batches for shards whose leader is not connected, sent in order once it is.
    peer_backlog: BTreeMap<ShardId, VecDeque<PeerBatch>>,
}

impl Conns {
    /// Tells `conn` why its message was refused, logs it, and closes it if `close`.
    fn refuse(&mut self, conn: ConnId, reason: String, close: bool) {
        warn!(conn, %reason, close, "refused a message");
        if let Some(writer) = self.writers.get(&conn) {
            let _ = writer.send(&WireMsg::Refused { reason });
        }
        if close {
            // Dropping the writer closes our side once the refusal is written; stopping the
            // reader drops the rest of the socket (and its buffer) at once.
            if let Some(reader) = self.readers.get(&conn) {
                reader.abort();
            }
            self.forget(conn);
        }
    }

    /// Drops everything kept about connection `conn`.
    fn forget(&mut self, conn: ConnId) {
        self.writers.remove(&conn);
        self.readers.remove(&conn);
        self.auth.remove(&conn);
        self.client_conn.retain(|_, c| *c != conn);
    }

    fn send_to_client(&self, client: ClientId, msg: WireMsg) {
        let Some(writer) = self.client_conn.get(&client).and_then(|c| self.writers.get(c)) else {
            // Not connected: the answer stays in the leader's table; the client's retry gets it.
            debug!(client, "answer for a disconnected client kept for its retry");
            return;
        };
        if let Err(e) = writer.send(&msg) {
            // Kept in the answer table as well; the client retries under the same id.
            warn!(client, error = %e, "could not send to client");
        }
    }

    /// Sends `msg` (a watermark) to `clients` (the leader picks those heard from recently);
    /// a lost one is superseded by the next.
    fn send_to_clients(&self, clients: &[ClientId], msg: &WireMsg) {
        self.send_to_conns(clients.iter().filter_map(|c| self.client_conn.get(c)), msg);
    }

    /// Sends `msg` (a watermark) to every connected client.
    fn send_to_all_clients(&self, msg: &WireMsg) {
        self.send_to_conns(self.client_conn.values(), msg);
    }

    fn send_to_conns<'a>(&self, conns: impl Iterator<Item = &'a ConnId>, msg: &WireMsg) {
        for conn in conns {
            if let Some(w) = self.writers.get(conn) {
                let _ = w.send(msg);
            }
        }
    }

    /// Queues `batch` for `shard`'s leader and sends everything queued that the connection
    /// accepts, in order. A batch is only dropped from the queue once its writer took it.
    fn send_to_peer(&mut self, shard: ShardId, batch: PeerBatch) {
        let backlog = self.peer_backlog.entry(shard).or_default();
        if backlog.len() >= PEER_BACKLOG_BATCHES_MAX {
            // The shard has been unreachable for long: drop the oldest batch. Its items are
            // not lost for good: stalled transactions are recovered with `Recover` items.
            backlog.pop_front();
            warn!(shard, queued = backlog.len(), "shard unreachable; dropping its oldest agreement batch");
        }
        backlog.push_back(batch);
        self.drain_peer_backlog(shard);
    }

    fn drain_peer_backlog(&mut self, shard: ShardId) {
        let replica = self.leader_of.get(&shard).map_or(0, |(replica, _)| *replica);
        let writer = self.peers.get(&NodeId { shard, replica });
        let (Some(writer), Some(backlog)) = (writer, self.peer_backlog.get_mut(&shard)) else {
            return; // not connected: kept until the link is up
        };
        while let Some(batch) = backlog.pop_front() {
            let msg = WireMsg::Peer(batch);
            if let Err(e) = writer.send(&msg) {
                warn!(shard, error = %e, queued = backlog.len() + 1, "peer leader not taking batches; keeping them");
                let WireMsg::Peer(batch) = msg else { unreachable!("built above") };
                backlog.push_front(batch);
                return;
            }
        }
    }

    fn peer_up(&mut self, peer: NodeId, writer: PeerWriter<WireMsg>) {
        if self.serving_term > 0 {
            let _ = writer.send(&self.leader_is()); // lost: announced again on reconnect
        }
        self.peers.insert(peer, writer);
        self.drain_peer_backlog(peer.shard);
    }

    fn leader_is(&self) -> WireMsg {
        WireMsg::LeaderIs { shard: self.node.shard, replica: self.node.replica, term: self.serving_term }
    }

    /// This replica now serves its shard in `term`: tell every replica of every other shard.
    fn announce_leadership(&mut self, term: u64) {
        self.serving_term = term;
        let msg = self.leader_is();
        for w in self.peers.values() {
            let _ = w.send(&msg); // a replica not connected now hears it when it connects
        }
    }

    /// Returns true if `shard`'s leader changed (a stale announcement changes nothing).
    fn leader_is_now(&mut self, shard: ShardId, replica: u32, term: u64) -> bool {
        let known = self.leader_of.get(&shard).copied().unwrap_or((0, 0));
        if term < known.1 || (replica, term) == known {
            return false;
        }
        self.leader_of.insert(shard, (replica, term));
        let changed = replica != known.0;
        if changed {
            info!(shard, replica, term, "shard has a new leader");
        }
        self.drain_peer_backlog(shard);
        changed
    }
}

/// This node as a member of its shard's Raft group (of one replica or more): the replica
/// (serving as the shard's leader or following), when it snapshots, and the shell driving its
/// log.
struct Member {
    replica: Replica,
    snapshots: Snapshots,
    shell: RaftShell,
}

/// When a replica snapshots its state. The replicas of a group apply the same log, so
/// without care they would all snapshot at the same index; a follower's snapshot blocks its
/// event loop while it serializes, and two followers pausing together stall the leader's
/// commits. Each replica's first snapshot comes at its own fraction of the period instead.
/// (A leader with followers takes none: it compacts behind theirs. The leader of a group of
/// one takes its own, see [`Replica::own_snapshot_due`].) The snapshot job (a follower's
/// bytes, or that leader's replay of its log) runs on a thread of its own; the log is
/// compacted behind it at the first turn after it is done.
struct Snapshots {
    every: u64,
    next_at: u64,
    making: Option<std::thread::JoinHandle<MadeSnapshot>>,
}

/// (index, bytes) of a snapshot made by a [`SnapshotJob`].
type MadeSnapshot = Result<(u64, Vec<u8>), luigi_raft::RaftError>;

impl Snapshots {
    fn new(every: u64, snapshot_index: u64, node: NodeId, replicas: u32) -> Self {
        let phase = every * u64::from(node.replica) / u64::from(replicas.max(1));
        Snapshots { every, next_at: snapshot_index + every - phase, making: None }
    }

    /// Starts making `job` on its own thread.
    fn start(&mut self, job: SnapshotJob) -> anyhow::Result<()> {
        let thread = std::thread::Builder::new().name("luigi-snapshot".into()).spawn(move || job.run());
        self.making = Some(thread.context("cannot start a snapshot thread")?);
        Ok(())
    }

    /// The snapshot being made, once it is done.
    fn done(&mut self) -> anyhow::Result<Option<(u64, Vec<u8>)>> {
        if !self.making.as_ref().is_some_and(|t| t.is_finished()) {
            return Ok(None);
        }
        let thread = self.making.take().expect("checked above");
        let made = thread.join().map_err(|_| anyhow::anyhow!("the snapshot thread panicked"))?;
        Ok(Some(made.context("making a snapshot")?))
    }

    fn taken(&mut self, index: u64) {
        self.next_at = index + self.every;
    }
}

impl Member {
    fn on_client(&mut self, client: ClientId, msg: ClientMsg, out: &mut Vec<LeaderOutput>) {
        self.replica.on_client(clock::now_us(), client, msg, out);
    }

    fn on_peer(&mut self, batch: PeerBatch, out: &mut Vec<LeaderOutput>) {
        let from = batch.from;
        if !self.replica.on_peer(clock::now_us(), batch, out) {
            debug!(from, "agreement batch for a replica that is not serving; dropped (recovery asks again)");
        }
    }

    fn on_raft(&mut self, from: u64, bytes: &[u8]) {
        match self.replica.log_mut().step_bytes(bytes) {
            Ok(()) => {}
            // Fatal, and reported as such by the next turn (which stops the server).
            Err(luigi_raft::RaftError::LostEntries { .. }) => {}
            Err(e) => warn!(from, error = %e, "bad raft message; dropped"),
        }
    }

    /// A follower's snapshot: the serving leader compacts its own log behind it.
    fn on_snapshot_offer(&mut self, from: u64, index: u64, data: Vec<u8>) -> anyhow::Result<()> {
        let Some(shard) = self.replica.leader().map(|l| l.shard()) else {
            return Ok(()); // it was meant for the leader this replica no longer is
        };
        // Only peers send offers (see `gate`), but a snapshot replaces the log: check it loads.
        Follower::check_snapshot(shard, index, &data)
            .with_context(|| format!("snapshot offered by raft id {from} at index {index}"))?;
        if self.shell.compact(self.replica.log_mut(), index, data)?.is_some() {
            debug!(from, index, "compacted the leader's log behind a follower's snapshot");
        }
        Ok(())
    }

    fn peer_leader_changed(&mut self, shard: ShardId) {
        self.replica.peer_leader_changed(shard);
    }

    /// The Raft term.
    fn term(&mut self) -> u64 {
        self.replica.log_mut().term()
    }

    /// Ticks Raft, runs its I/O, lets the replica apply committed records and switch role,
    /// and ticks the leader. Returns the next time something is due and any role change.
    fn turn(&mut self, out: &mut Vec<LeaderOutput>) -> anyhow::Result<(u64, Option<Transition>)> {
        let now = clock::now_us();
        let Member { replica: r, snapshots, shell } = self;
        shell.campaign_when_connected(r.log_mut())?;
        shell.tick(now, r.log_mut());
        if let Some(data) = shell.drive(r.log_mut())? {
            r.install_snapshot(&data).context("loading the leader's snapshot")?;
            snapshots.taken(r.log_mut().snapshot_index());
        }
        let transition = r.turn(now, out).context("switching role")?;
        if let Some((index, data)) = snapshots.done()? {
            // Skipped if the log moved past it meanwhile (a snapshot installed from a leader).
            if let Some(snap) = shell.compact(r.log_mut(), index, data)? {
                snapshots.taken(index);
                shell.offer_snapshot(r.log_mut(), index, snap.data);
            }
        }
        if snapshots.making.is_none() {
            if let Some(job) = r.own_snapshot_due(snapshots.next_at).context("taking a snapshot")? {
                snapshots.start(job)?;
            }
        }
        // What the turn proposed goes out now.
        if let Some(data) = shell.drive(r.log_mut())? {
            r.install_snapshot(&data).context("loading the leader's snapshot")?;
            snapshots.taken(r.log_mut().snapshot_index());
        }
        Ok((r.next_deadline().unwrap_or(u64::MAX).min(shell.next_tick_us()), transition))
    }

    fn stats(&self) -> String {
        let r = &self.replica;
        match (r.leader(), r.follower()) {
            (Some(l), _) => format!("{:?} {:?}", l.stats(), r.stats()),
            (None, Some(f)) => format!("{:?} {:?}", f.stats(), r.stats()),
            (None, None) => format!("{:?}", r.stats()),
        }
    }
}

async fn event_loop(
    mut member: Member,
    node: NodeId,
    gate: GateConfig,
    leader_of: BTreeMap<ShardId, (u32, u64)>,
    mut rx: mpsc::Receiver<Inbound>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let timer = PreciseTimer::start().context("cannot start timer thread")?;
    let mut conns = Conns {
        node,
        writers: Map::default(),
        auth: Map::default(),
        readers: Map::default(),
        gate,
        started_us: clock::now_us(),
        client_conn: Map::default(),
        peers: BTreeMap::new(),
        leader_of,
        serving_term: 0,
        peer_backlog: BTreeMap::new(),
    };
    let mut out = Vec::new();
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
                    handle(&mut member, &mut conns, ev, &mut out);
                    for _ in 1..EVENTS_PER_BATCH_MAX {
                        match rx.try_recv() {
                            Ok(ev) => handle(&mut member, &mut conns, ev, &mut out),
                            Err(_) => break,
                        }
                    }
                }
            },
            _ = timer.fired() => {}
        }
        let (next, transition) = member.turn(&mut out)?;
        match transition {
            Some(Transition::Promoted) => {
                info!(node = %node.name(), "serving as the shard leader");
                conns.announce_leadership(member.term());
            }
            Some(Transition::Demoted) => {
                warn!(node = %node.name(), "lost leadership; following");
                conns.serving_term = 0;
            }
            None => {}
        }
        flush(&mut conns, &mut out);
        timer.set(Some(next));
        let now = clock::now_us();
        if now >= stall_check_at_us {
            stall_check_at_us = now + STALL_CHECK_US;
            warn_stalled(&member, node, now);
        }
    }
    info!(stats = %member.stats(), "server stopping");
    Ok(())
}

fn handle(member: &mut Member, conns: &mut Conns, ev: Inbound, out: &mut Vec<LeaderOutput>) {
    match ev {
        Inbound::Opened { conn, writer, reader } => {
            let nonce = auth::nonce(conns.started_us, conn);
            if writer.send(&WireMsg::Challenge { nonce }).is_ok() {
                conns.writers.insert(conn, writer);
                conns.readers.insert(conn, reader);
                conns.auth.insert(conn, ConnAuth::Pending { nonce });
            } else {
                reader.abort();
            }
        }
        Inbound::Closed { conn } => conns.forget(conn),
        Inbound::PeerUp { target: PeerTarget::Shard(peer), writer } => conns.peer_up(peer, writer),
        Inbound::PeerDown { target: PeerTarget::Shard(peer) } => {
            conns.peers.remove(&peer);
        }
        Inbound::PeerUp { target: PeerTarget::Replica(id), writer } => {
            member.shell.peer_up(id, writer);
        }
        Inbound::PeerDown { target: PeerTarget::Replica(id) } => {
            member.shell.peer_down(id);
        }
        Inbound::Msg { conn, msg } => on_msg(member, conns, conn, msg, out),
    }
}

/// A message from connection `conn`, once the gate has judged it.
fn on_msg(member: &mut Member, conns: &mut Conns, conn: ConnId, msg: WireMsg, out: &mut Vec<LeaderOutput>) {
    let Some(auth) = conns.auth.get_mut(&conn) else { return }; // closed meanwhile
    let (client_conn, writers) = (&conns.client_conn, &conns.writers);
    let in_use = |c: ClientId| client_conn.get(&c).is_some_and(|o| *o != conn && writers.contains_key(o));
    match gate::check(&conns.gate, auth, &msg, in_use) {
        gate::Verdict::Refuse(reason) => conns.refuse(conn, reason, false),
        gate::Verdict::Close(reason) => conns.refuse(conn, reason, true),
        gate::Verdict::Status => {
            if let Some(writer) = conns.writers.get(&conn) {
                let _ = writer.send(&WireMsg::Server(ServerMsg::Status(status_report(member, conns.node))));
            }
        }
        gate::Verdict::PeerAuthenticated(node) => debug!(conn, peer = %node.name(), "peer authenticated"),
        gate::Verdict::Client(client) => {
            let WireMsg::Client(msg) = msg else { unreachable!("the gate names a client only for client messages") };
            conns.client_conn.insert(client, conn);
            member.on_client(client, msg, out);
            flush(conns, out);
        }
        gate::Verdict::Peer(_) => on_peer_msg(member, conns, msg, out),
    }
}

/// A server-to-server message from an authenticated peer, sent as itself.
fn on_peer_msg(member: &mut Member, conns: &mut Conns, msg: WireMsg, out: &mut Vec<LeaderOutput>) {
    match msg {
        WireMsg::Peer(batch) => {
            member.on_peer(batch, out);
            flush(conns, out);
        }
        WireMsg::Raft { from, bytes, .. } => member.on_raft(from, &bytes),
        WireMsg::SnapshotOffer { from, index, data, .. } => {
            if let Err(e) = member.on_snapshot_offer(from, index, data) {
                // A snapshot that does not load, or disk trouble saving it: the log stays
                // as it was; say so and go on.
                warn!(from, index, error = %e, "did not compact behind a follower's snapshot");
            }
        }
        WireMsg::LeaderIs { shard, replica, term } => {
            if conns.leader_is_now(shard, replica, term) {
                member.peer_leader_changed(shard);
            }
        }
        WireMsg::Client(_)
        | WireMsg::Server(_)
        | WireMsg::Challenge { .. }
        | WireMsg::PeerHello { .. }
        | WireMsg::Refused { .. } => unreachable!("the gate passes only server-to-server messages from peers"),
    }
}

/// How often a serving leader looks for long-stalled transactions to warn about.
const STALL_CHECK_US: u64 = 5_000_000;
/// A transaction pending this long on a leader is worth an operator's attention: it holds the
/// shard's watermark (and, under the all-shards commit rule, every client's answers).
const STALL_WARN_AGE_US: u64 = 10_000_000;

/// Logs the transactions pending on this leader for longer than [`STALL_WARN_AGE_US`]
/// (`luigi status` lists them too).
fn warn_stalled(member: &Member, node: NodeId, now: u64) {
    let Some(l) = member.replica.leader() else { return };
    let stalled: Vec<_> = l.stalled(now, usize::MAX).into_iter().filter(|t| t.age_us >= STALL_WARN_AGE_US).collect();
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

/// Stalled transactions listed (oldest first) in a status report.
const STATUS_STALLED_MAX: usize = 5;

/// This replica's state for `luigi status`, in any role.
fn status_report(member: &Member, node: NodeId) -> ReplicaStatus {
    let now = clock::now_us();
    let mut status = ReplicaStatus {
        shard: node.shard,
        replica: node.replica,
        role: ReplicaRole::Follower,
        serving: false,
        term: 0,
        leader: None,
        commit_index: 0,
        applied_index: 0,
        watermark: 0,
        clock_us: now,
        pending: 0,
        stalled_count: 0,
        stalled: Vec::new(),
    };
    let r = &member.replica;
    let log = r.log();
    status.role = match log.role() {
        luigi_raft::Role::Leader => ReplicaRole::Leader,
        luigi_raft::Role::Follower => ReplicaRole::Follower,
        luigi_raft::Role::Candidate => ReplicaRole::Candidate,
        luigi_raft::Role::PreCandidate => ReplicaRole::PreCandidate,
    };
    (status.term, status.leader) = (log.term(), r.leader_hint());
    (status.commit_index, status.applied_index) = (log.commit_index(), log.handed_out());
    match (r.leader(), r.follower()) {
        (Some(l), _) => leader_status(l, now, &mut status),
        (None, Some(f)) => (status.watermark, status.pending) = (f.applied_ts(), f.queued_len() as u64),
        (None, None) => {}
    }
    status
}

fn leader_status<L: ReplicatedLog>(l: &ShardLeader<L>, now: u64, status: &mut ReplicaStatus) {
    let stalled = l.stalled(now, usize::MAX);
    status.serving = true;
    (status.watermark, status.pending, status.stalled_count) =
        (l.watermark(), l.pending_len() as u64, stalled.len() as u64);
    status.stalled = stalled
        .into_iter()
        .take(STATUS_STALLED_MAX)
        .map(|t| StalledTxnInfo { id: t.id, shards: t.shards, age_us: t.age_us, durable: t.durable })
        .collect();
}

fn flush(conns: &mut Conns, out: &mut Vec<LeaderOutput>) {
    for o in out.drain(..) {
        match o {
            LeaderOutput::ToClient { client, msg } => conns.send_to_client(client, WireMsg::Server(msg)),
            LeaderOutput::ToClients { clients, msg } => conns.send_to_clients(&clients, &WireMsg::Server(msg)),
            LeaderOutput::ToAllClients { msg } => conns.send_to_all_clients(&WireMsg::Server(msg)),
            LeaderOutput::ToPeer { shard, batch } => conns.send_to_peer(shard, batch),
            // An observation for checkers (the simulator); nothing to send.
            LeaderOutput::Executed { .. } => {}
        }
    }
}
