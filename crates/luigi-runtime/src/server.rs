//! The server shell: one node's TCP listener and event loop around the sans-I/O shard leader.
//!
//! Connection readers decode frames and feed one bounded channel; a single task owns the
//! leader, handles events in batches, ticks it, and hands outputs to per-connection batching
//! writers (which apply the WAN delay). A precise timer wakes the loop when a held transaction's
//! timestamp comes.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;

use anyhow::Context;
use luigi_proto::leader::{LeaderConfig, LeaderOutput, ShardLeader};
use luigi_proto::log::LocalLog;
use luigi_proto::msg::{ClientMsg, WireMsg};
use luigi_proto::procedure::Registry;
use luigi_proto::types::ClientId;
use luigi_store::Store;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::clock;
use crate::config::{ClusterConfig, NodeId, CLIENT_NODE};
use crate::net::peer::{split_stream, NetConfig, PeerWriter};
use crate::net::wan::DelayLine;
use crate::timer::PreciseTimer;

/// Capacity of the channel from connection readers to the event loop.
const INBOUND_QUEUE_EVENTS: usize = 1 << 16;
/// Events handled before the loop ticks the leader again.
const EVENTS_PER_BATCH_MAX: usize = 4096;

type ConnId = u64;

enum Inbound {
    Opened {
        conn: ConnId,
        writer: PeerWriter<WireMsg>,
    },
    Msg {
        conn: ConnId,
        msg: WireMsg,
    },
    Closed {
        conn: ConnId,
    },
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
    pub async fn bind(
        config: ClusterConfig,
        node: NodeId,
        registry: Registry,
    ) -> anyhow::Result<Self> {
        let addr = config
            .node_addr(node)
            .with_context(|| format!("node {} is not in the cluster file", node.name()))?;
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("node {}: cannot listen on {addr}", node.name()))?;
        Ok(Self {
            config,
            node,
            listener,
            registry,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Server {
            config,
            node,
            listener,
            registry,
        } = self;
        let delay_line = if config.delay_model().is_zero() {
            None
        } else {
            Some(DelayLine::new()?)
        };
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE_EVENTS);
        let acceptor = tokio::spawn(accept_loop(listener, tx, config.clone(), node, delay_line));
        info!(node = %node.name(), net = %config.net, "serving");
        let mut leader_config = LeaderConfig::new(node.shard);
        leader_config.floor_lookahead_us = config.floor_lookahead_us();
        let leader = ShardLeader::new(leader_config, LocalLog::default(), Store::new(), registry);
        let result = event_loop(leader, rx, shutdown).await;
        acceptor.abort();
        result
    }
}

async fn accept_loop(
    listener: TcpListener,
    tx: mpsc::Sender<Inbound>,
    config: ClusterConfig,
    node: NodeId,
    delay_line: Option<DelayLine>,
) {
    let net = NetConfig::default();
    let model = config.delay_model();
    let mut next_conn: ConnId = 1;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let conn = next_conn;
        next_conn += 1;
        // Server-to-client hop; server-to-server links arrive with cross-shard agreement.
        let dist = model.dist(&node.name(), CLIENT_NODE);
        let link = delay_line
            .as_ref()
            .map(|l| l.link(dist, config.seed ^ conn.wrapping_mul(0x9e37_79b9)));
        if let Err(e) = open(stream, conn, &net, link, &tx).await {
            warn!(peer = %peer, error = %e, "could not set up connection");
        }
    }
}

async fn open(
    stream: TcpStream,
    conn: ConnId,
    net: &NetConfig,
    link: Option<crate::net::wan::DelayLink>,
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

struct Conns {
    writers: HashMap<ConnId, PeerWriter<WireMsg>>,
    client_conn: HashMap<ClientId, ConnId>,
}

impl Conns {
    fn send_to_client(&self, client: ClientId, msg: WireMsg) {
        let Some(writer) = self
            .client_conn
            .get(&client)
            .and_then(|c| self.writers.get(c))
        else {
            // Not connected: the answer stays in the leader's table; the client's retry gets it.
            debug!(
                client,
                "answer for a disconnected client kept for its retry"
            );
            return;
        };
        if let Err(e) = writer.send(&msg) {
            // Kept in the answer table as well; the client retries under the same id.
            warn!(client, error = %e, "could not send to client");
        }
    }
}

async fn event_loop(
    mut leader: ShardLeader<LocalLog>,
    mut rx: mpsc::Receiver<Inbound>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let timer = PreciseTimer::start().context("cannot start timer thread")?;
    let mut conns = Conns {
        writers: HashMap::new(),
        client_conn: HashMap::new(),
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
        flush(&conns, &mut out);
        timer.set(leader.next_deadline());
    }
    info!(stats = ?leader.stats(), "server stopping");
    Ok(())
}

fn handle(
    leader: &mut ShardLeader<LocalLog>,
    conns: &mut Conns,
    ev: Inbound,
    out: &mut Vec<LeaderOutput>,
) {
    match ev {
        Inbound::Opened { conn, writer } => {
            conns.writers.insert(conn, writer);
        }
        Inbound::Closed { conn } => {
            conns.writers.remove(&conn);
            conns.client_conn.retain(|_, c| *c != conn);
        }
        Inbound::Msg { conn, msg } => match msg {
            WireMsg::Client(msg) => {
                let client = match &msg {
                    ClientMsg::Hello { client } => Some(*client),
                    ClientMsg::Dispatch { txn, .. } => Some(txn.id.client),
                    ClientMsg::Ping { .. } => conns
                        .client_conn
                        .iter()
                        .find(|(_, c)| **c == conn)
                        .map(|(id, _)| *id),
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
            WireMsg::Server(_) => {
                warn!(conn, "a client sent a server message; closing connection");
                conns.writers.remove(&conn);
            }
        },
    }
}

fn flush(conns: &Conns, out: &mut Vec<LeaderOutput>) {
    for o in out.drain(..) {
        match o {
            LeaderOutput::ToClient { client, msg } => {
                conns.send_to_client(client, WireMsg::Server(msg))
            }
        }
    }
}
