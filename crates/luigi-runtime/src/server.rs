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
use std::time::Duration;

use anyhow::Context;
use luigi_proto::leader::{LeaderConfig, LeaderOutput, ShardLeader};
use luigi_proto::log::LocalLog;
use luigi_proto::msg::{ClientMsg, PeerBatch, WireMsg};
use luigi_proto::procedure::Registry;
use luigi_proto::types::{ClientId, ShardId};
use luigi_proto::Map;
use luigi_store::Store;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::clock;
use crate::config::{ClusterConfig, NodeId, CLIENT_NODE};
use crate::net::peer::{connect, split_stream, NetConfig, PeerWriter};
use crate::net::wan::{DelayLine, DelayLink};
use crate::timer::PreciseTimer;

/// Capacity of the channel from connection readers to the event loop.
const INBOUND_QUEUE_EVENTS: usize = 1 << 16;
/// Events handled before the loop ticks the leader again.
const EVENTS_PER_BATCH_MAX: usize = 4096;
/// Agreement batches kept for a peer leader that is not connected (yet or any more).
const PEER_BACKLOG_BATCHES_MAX: usize = 1 << 16;
/// Pause between attempts to (re)connect to a peer leader.
const PEER_RECONNECT_DELAY: Duration = Duration::from_millis(50);

type ConnId = u64;

enum Inbound {
    Opened { conn: ConnId, writer: PeerWriter<WireMsg> },
    Msg { conn: ConnId, msg: WireMsg },
    Closed { conn: ConnId },
    PeerUp { shard: ShardId, writer: PeerWriter<WireMsg> },
    PeerDown { shard: ShardId },
}

/// A bound listener, ready to serve.
pub struct Server {
    config: ClusterConfig,
    node: NodeId,
    listener: TcpListener,
    registry: Registry,
}

impl Server {
    /// Binds `node`'s address from `config`. Fails with one clear line if the node is not in
    /// the file or the port cannot be bound.
    pub async fn bind(config: ClusterConfig, node: NodeId, registry: Registry) -> anyhow::Result<Self> {
        let addr =
            config.node_addr(node).with_context(|| format!("node {} is not in the cluster file", node.name()))?;
        let listener =
            TcpListener::bind(addr).await.with_context(|| format!("node {}: cannot listen on {addr}", node.name()))?;
        Ok(Self { config, node, listener, registry })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Server { config, node, listener, registry } = self;
        let delay_line =
            if config.delay_model().is_zero() { None } else { Some(std::sync::Arc::new(DelayLine::new()?)) };
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE_EVENTS);
        let mut tasks = vec![tokio::spawn(accept_loop(listener, tx.clone(), config.clone(), node, delay_line.clone()))];
        for shard in (0..config.shard_count()).filter(|s| *s != node.shard) {
            tasks.push(tokio::spawn(peer_link(config.clone(), node, shard, delay_line.clone(), tx.clone())));
        }
        drop(tx);
        info!(node = %node.name(), net = %config.net, "serving");
        let mut leader_config = LeaderConfig::new(node.shard);
        leader_config.floor_lookahead_us = config.floor_lookahead_us();
        let leader = ShardLeader::new(leader_config, LocalLog::default(), Store::new(), registry);
        let result = event_loop(leader, rx, shutdown).await;
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
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let conn = next_conn;
        next_conn += 1;
        // Replies on an accepted connection go to a client (peer leaders send on their own
        // outbound connections, so nothing is sent back to them here).
        let dist = model.dist(&node.name(), CLIENT_NODE);
        let link = delay_line.as_ref().map(|l| l.link(dist, config.seed ^ conn.wrapping_mul(0x9e37_79b9)));
        if let Err(e) = open(stream, conn, &net, link, &tx).await {
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
) -> std::io::Result<()> {
    let (writer, reader) = split_stream::<WireMsg, WireMsg>(stream, net, link)?;
    if tx.send(Inbound::Opened { conn, writer }).await.is_err() {
        return Ok(()); // shutting down
    }
    let tx = tx.clone();
    tokio::spawn(async move {
        let end = reader.forward(&tx, |msg| Inbound::Msg { conn, msg }).await;
        debug!(conn, ?end, "connection reader ended");
        let _ = tx.send(Inbound::Closed { conn }).await;
    });
    Ok(())
}

/// Keeps an outbound connection to `shard`'s leader: connects (retrying while it starts),
/// announces it to the event loop, and reconnects after it drops.
async fn peer_link(
    config: ClusterConfig,
    node: NodeId,
    shard: ShardId,
    delay_line: Option<std::sync::Arc<DelayLine>>,
    tx: mpsc::Sender<Inbound>,
) {
    let peer = NodeId { shard, replica: 0 };
    let addr = config.leader_addr(shard);
    let dist = config.delay_model().dist(&node.name(), &peer.name());
    let mut attempt: u64 = 0;
    loop {
        attempt += 1;
        let link = delay_line.as_ref().map(|l| l.link(dist, config.seed ^ (u64::from(shard) << 32) ^ attempt));
        match connect::<WireMsg, WireMsg>(addr, &NetConfig::default(), link).await {
            Ok((writer, reader)) => {
                info!(peer = %peer.name(), %addr, "connected to peer leader");
                if tx.send(Inbound::PeerUp { shard, writer }).await.is_err() {
                    return;
                }
                // The peer never sends on this connection; its end means the link is gone.
                let (drain, _) = mpsc::channel::<()>(1);
                let end = reader.forward(&drain, |_| ()).await;
                warn!(peer = %peer.name(), ?end, "connection to peer leader lost; reconnecting");
                if tx.send(Inbound::PeerDown { shard }).await.is_err() {
                    return;
                }
            }
            Err(e) => debug!(peer = %peer.name(), %addr, error = %e, "peer leader not reachable yet"),
        }
        tokio::time::sleep(PEER_RECONNECT_DELAY).await;
    }
}

struct Conns {
    writers: Map<ConnId, PeerWriter<WireMsg>>,
    client_conn: Map<ClientId, ConnId>,
    peers: BTreeMap<ShardId, PeerWriter<WireMsg>>,
    /// Batches for peers that are not connected, sent in order once they are.
    peer_backlog: BTreeMap<ShardId, VecDeque<PeerBatch>>,
}

impl Conns {
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

    fn send_to_all_clients(&self, msg: &WireMsg) {
        for conn in self.client_conn.values() {
            if let Some(w) = self.writers.get(conn) {
                let _ = w.send(msg); // watermarks are periodic; a lost one is superseded
            }
        }
    }

    /// Queues `batch` for `shard`'s leader and sends everything queued that the connection
    /// accepts, in order. A batch is only dropped from the queue once its writer took it.
    fn send_to_peer(&mut self, shard: ShardId, batch: PeerBatch) {
        let backlog = self.peer_backlog.entry(shard).or_default();
        assert!(
            backlog.len() < PEER_BACKLOG_BATCHES_MAX,
            "peer leader {shard} unreachable with {PEER_BACKLOG_BATCHES_MAX} agreement batches queued"
        );
        backlog.push_back(batch);
        self.drain_peer_backlog(shard);
    }

    fn drain_peer_backlog(&mut self, shard: ShardId) {
        let (Some(writer), Some(backlog)) = (self.peers.get(&shard), self.peer_backlog.get_mut(&shard)) else {
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

    fn peer_up(&mut self, shard: ShardId, writer: PeerWriter<WireMsg>) {
        self.peers.insert(shard, writer);
        self.drain_peer_backlog(shard);
    }
}

async fn event_loop(
    mut leader: ShardLeader<LocalLog>,
    mut rx: mpsc::Receiver<Inbound>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let timer = PreciseTimer::start().context("cannot start timer thread")?;
    let mut conns = Conns {
        writers: Map::default(),
        client_conn: Map::default(),
        peers: BTreeMap::new(),
        peer_backlog: BTreeMap::new(),
    };
    let mut out = Vec::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            ev = rx.recv() => match ev {
                None => break,
                Some(ev) => {
                    handle(&mut leader, &mut conns, ev, &mut out);
                    for _ in 1..EVENTS_PER_BATCH_MAX {
                        match rx.try_recv() {
                            Ok(ev) => handle(&mut leader, &mut conns, ev, &mut out),
                            Err(_) => break,
                        }
                    }
                }
            },
            _ = timer.fired() => {}
        }
        leader.tick(clock::now_us(), &mut out);
        flush(&mut conns, &mut out);
        timer.set(leader.next_deadline());
    }
    info!(stats = ?leader.stats(), "server stopping");
    Ok(())
}

fn handle(leader: &mut ShardLeader<LocalLog>, conns: &mut Conns, ev: Inbound, out: &mut Vec<LeaderOutput>) {
    match ev {
        Inbound::Opened { conn, writer } => {
            conns.writers.insert(conn, writer);
        }
        Inbound::Closed { conn } => {
            conns.writers.remove(&conn);
            conns.client_conn.retain(|_, c| *c != conn);
        }
        Inbound::PeerUp { shard, writer } => conns.peer_up(shard, writer),
        Inbound::PeerDown { shard } => {
            conns.peers.remove(&shard);
        }
        Inbound::Msg { conn, msg } => match msg {
            WireMsg::Client(msg) => {
                let client = match &msg {
                    ClientMsg::Hello { client } => Some(*client),
                    ClientMsg::Dispatch { txn, .. } => Some(txn.id.client),
                    ClientMsg::Ping { .. } => conns.client_conn.iter().find(|(_, c)| **c == conn).map(|(id, _)| *id),
                };
                let Some(client) = client else {
                    warn!(conn, "ping before hello; closing connection");
                    conns.writers.remove(&conn);
                    return;
                };
                conns.client_conn.insert(client, conn);
                leader.on_client(clock::now_us(), client, msg, out);
                flush(conns, out);
            }
            WireMsg::Peer(batch) => {
                leader.on_peer(clock::now_us(), batch, out);
                flush(conns, out);
            }
            WireMsg::Server(_) | WireMsg::Raft { .. } => {
                warn!(conn, "unexpected message for a single-replica leader; closing connection");
                conns.writers.remove(&conn);
            }
        },
    }
}

fn flush(conns: &mut Conns, out: &mut Vec<LeaderOutput>) {
    for o in out.drain(..) {
        match o {
            LeaderOutput::ToClient { client, msg } => conns.send_to_client(client, WireMsg::Server(msg)),
            LeaderOutput::ToAllClients { msg } => conns.send_to_all_clients(&WireMsg::Server(msg)),
            LeaderOutput::ToPeer { shard, batch } => conns.send_to_peer(shard, batch),
        }
    }
}
