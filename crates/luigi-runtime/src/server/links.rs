//! Connections in and out: the accept loop, opening an accepted connection, and the
//! outbound links to the other servers.

use std::time::Duration;

use luigi_proto::msg::{ClientMsg, WireMsg};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::{ConnId, Inbound};
use crate::auth;
use crate::config::{ClusterConfig, NodeId, CLIENT_NODE};
use crate::net::codec::MAX_FRAME_BYTES_DEFAULT;
use crate::net::peer::{connect, split_stream, NetConfig};
use crate::net::wan::{DelayLine, DelayLink};

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

pub(super) async fn accept_loop(
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
pub(super) async fn peer_link(
    config: ClusterConfig,
    node: NodeId,
    peer: NodeId,
    delay_line: Option<std::sync::Arc<DelayLine>>,
    tx: mpsc::Sender<Inbound>,
) {
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
                if tx.send(Inbound::PeerUp { peer, writer }).await.is_err() {
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
                if tx.send(Inbound::PeerDown { peer }).await.is_err() {
                    return;
                }
            }
            Err(e) => debug!(peer = %peer.name(), %addr, error = %e, "peer not reachable yet"),
        }
        tokio::time::sleep(PEER_RECONNECT_DELAY).await;
    }
}
