//! Connections in and out: the accept loop (seats on the connection budget), opening an
//! accepted connection and reading it, and the outbound links to the other servers.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::wire::WireMsg;
use luigi_txn::msg::ClientMsg;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use super::budget::{ConnBudget, Seat};
use super::conns::{FrameLimit, Opened, PRE_AUTH_FRAME_BYTES};
use super::{ConnId, Inbound};
use crate::auth;
use crate::config::{ClusterConfig, NodeId, CLIENT_NODE};
use crate::net::codec::encode_to_bytes;
use crate::net::peer::{connect, split_stream, NetConfig, PeerReader, ReadEnd};
use crate::net::wan::{DelayLine, DelayLink};

/// Pause between attempts to (re)connect to a peer leader.
const PEER_RECONNECT_DELAY: Duration = Duration::from_millis(50);
/// How long an outbound server link waits for the peer's challenge.
const PEER_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Refusals at accept are logged at most this often (a flood would fill the log otherwise).
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(1);

pub(super) async fn accept_loop(
    listener: TcpListener,
    tx: mpsc::Sender<Inbound>,
    config: ClusterConfig,
    node: NodeId,
    delay_line: Option<Arc<DelayLine>>,
    budget: Arc<Mutex<ConnBudget>>,
) {
    let net = NetConfig::default();
    let model = config.delay_model();
    let mut next_conn: ConnId = 1;
    let mut refusals = RefusalLog::default();
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
        let admitted = budget.lock().unwrap_or_else(PoisonError::into_inner).admit(conn, peer.ip());
        let seat = match admitted {
            Ok(seat) => SeatGuard { budget: budget.clone(), conn, seat },
            Err(reason) => {
                refusals.note(peer, &reason);
                refuse_at_accept(&stream, reason);
                continue;
            }
        };
        // Replies on an accepted connection go to a client (peer leaders send on their own
        // outbound connections, so nothing is sent back to them here).
        let dist = model.dist(&node.name(), CLIENT_NODE);
        let link = delay_line.as_ref().map(|l| l.link(dist, config.seed ^ conn.wrapping_mul(0x9e37_79b9)));
        if let Err(e) = open(stream, peer, conn, &net, link, &tx, seat).await {
            warn!(peer = %peer, error = %e, "could not set up connection");
        }
    }
}

/// Tells a connection refused at accept why, best effort (one small frame into an empty send
/// buffer), before it is dropped.
fn refuse_at_accept(stream: &TcpStream, reason: String) {
    if let Ok(frame) = encode_to_bytes(&WireMsg::Refused { reason }, PRE_AUTH_FRAME_BYTES) {
        let _ = stream.try_write(&frame);
    }
}

/// Logs refusals at accept at most once per [`REFUSAL_LOG_EVERY`], each line naming the
/// source refused last, why, and how many were refused since the line before.
#[derive(Default)]
struct RefusalLog {
    last: Option<Instant>,
    refused: u64,
}

impl RefusalLog {
    fn note(&mut self, source: SocketAddr, reason: &str) {
        self.refused += 1;
        if self.last.is_some_and(|at| at.elapsed() < REFUSAL_LOG_EVERY) {
            return;
        }
        warn!(%source, %reason, refused = self.refused, "connection refused at accept");
        self.last = Some(Instant::now());
        self.refused = 0;
    }
}

async fn open(
    stream: TcpStream,
    source: SocketAddr,
    conn: ConnId,
    net: &NetConfig,
    link: Option<DelayLink>,
    tx: &mpsc::Sender<Inbound>,
    seat: SeatGuard,
) -> std::io::Result<()> {
    let (writer, reader) = split_stream::<WireMsg, WireMsg>(stream, net, link)?;
    let limit = FrameLimit::new();
    let reader_limit = limit.clone();
    let reader_tx = tx.clone();
    let (go, started) = oneshot::channel::<()>();
    let seated = seat.seat;
    let task = tokio::spawn(async move {
        let _seat = seat;
        // Read nothing before the event loop has the connection: its messages come after.
        if started.await.is_err() {
            return;
        }
        let why = read_conn(reader, conn, &reader_tx, &reader_limit).await;
        let _ = reader_tx.send(Inbound::Closed { conn, why }).await;
    });
    let opened = Opened { conn, writer, reader: task.abort_handle(), source, seat: seated, limit };
    if tx.send(Inbound::Opened(opened)).await.is_err() {
        task.abort(); // shutting down
    } else {
        let _ = go.send(());
    }
    Ok(())
}

/// Reads connection `conn` into the event loop until it ends; returns why it refused what
/// it read, if it did (the event loop tells the sender).
///
/// Until the connection authenticates, frames are read one at a time under
/// [`PRE_AUTH_FRAME_BYTES`], and after a hello nothing more is read until the event loop has
/// judged it. The event loop raises the limit (to a client's or a peer's) only once the
/// hello's proof holds, so a stranger's large frame behind a wrong proof is refused at its
/// length prefix, never buffered; and a client's first transaction, sent right behind its
/// hello, is read under the raised limit. The price is one event-loop hop per connection,
/// once. (Checking the proof here too would be a second copy of the gate's rule; waiting
/// for the verdict only when a large frame starts would need the codec to wait.)
async fn read_conn(
    reader: PeerReader<WireMsg>,
    conn: ConnId,
    tx: &mpsc::Sender<Inbound>,
    limit: &FrameLimit,
) -> Option<String> {
    let mut reader = reader.with_frame_limit(limit.shared()).start();
    // No watch for half-sent frames here: the hello deadline bounds this phase.
    while !limit.raised() {
        let msg = match reader.next_msg().await {
            Ok(msg) => msg,
            Err(ReadEnd::BadFrame(e)) => return Some(format!("{e}, from a connection that has not said hello")),
            Err(end) => {
                debug!(conn, ?end, "connection reader ended before a hello");
                return None;
            }
        };
        let hello = matches!(msg, WireMsg::Client(ClientMsg::Hello { .. }) | WireMsg::PeerHello { .. });
        if tx.send(Inbound::Msg { conn, msg }).await.is_err() {
            return None;
        }
        if hello {
            limit.judged().await;
        }
    }
    let end = reader.forward(tx, |msg| Inbound::Msg { conn, msg }).await;
    debug!(conn, ?end, "connection reader ended");
    None
}

/// A connection's seat on the budget, given back when dropped (also when its reader task is
/// aborted).
struct SeatGuard {
    budget: Arc<Mutex<ConnBudget>>,
    conn: ConnId,
    seat: Seat,
}

impl Drop for SeatGuard {
    fn drop(&mut self) {
        self.budget.lock().unwrap_or_else(PoisonError::into_inner).release(self.conn);
    }
}

/// Keeps an outbound connection to another server (a shard leader or a replica of this
/// shard): connects (retrying while it starts), announces it to the event loop, and
/// reconnects after it drops.
pub(super) async fn peer_link(
    config: ClusterConfig,
    node: NodeId,
    peer: NodeId,
    delay_line: Option<Arc<DelayLine>>,
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
