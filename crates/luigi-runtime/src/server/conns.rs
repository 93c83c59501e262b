//! The accepted connections: writers, reader tasks, who each has shown itself to be, which
//! connection each client is on, and the connection gate's bookkeeping (DESIGN.md rule 13):
//! hello deadlines, frame limits raised once a hello's proof holds, seats on the budget.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::wire::WireMsg;
use luigi_txn::msg::ClientMsg;
use luigi_txn::types::ClientId;
use luigi_txn::Map;
use tokio::sync::Notify;
use tracing::{debug, warn};

use super::budget::{ConnBudget, ConnLimits, Seat};
use super::ConnId;
use crate::auth;
use crate::gate::{self, ConnAuth, GateConfig, Refusal, RefusalReason, Verdict};
use crate::net::codec::MAX_FRAME_BYTES_DEFAULT;
use crate::net::peer::PeerWriter;

/// The largest frame a connection may send before it authenticates (a hello, a status
/// query): a stranger cannot make the server buffer megabytes.
pub(super) const PRE_AUTH_FRAME_BYTES: usize = 64 << 10;
/// The largest frame from a client (a transaction: arguments up to 4 MiB plus its key sets).
const CLIENT_FRAME_BYTES: usize = 8 << 20;
/// The largest frame from a peer (a snapshot chunk with its envelope).
const PEER_FRAME_BYTES: usize = MAX_FRAME_BYTES_DEFAULT;

/// An accepted connection's frame limit, shared by its reader and the event loop, and the
/// signal with which the event loop lets the reader go on after a hello (see
/// `links::read_conn`).
#[derive(Debug)]
pub(super) struct FrameLimit {
    bytes: Arc<AtomicUsize>,
    judged: Notify,
}

impl FrameLimit {
    /// A limit of [`PRE_AUTH_FRAME_BYTES`].
    pub(super) fn new() -> Arc<Self> {
        Arc::new(FrameLimit { bytes: Arc::new(AtomicUsize::new(PRE_AUTH_FRAME_BYTES)), judged: Notify::new() })
    }

    /// The limit, for the reader's codec (read at the start of every frame).
    pub(super) fn shared(&self) -> Arc<AtomicUsize> {
        self.bytes.clone()
    }

    /// True once a hello's proof held (the limit was raised).
    pub(super) fn raised(&self) -> bool {
        self.bytes.load(Ordering::Acquire) > PRE_AUTH_FRAME_BYTES
    }

    /// Waits until the event loop has judged the hello the reader forwarded last.
    pub(super) async fn judged(&self) {
        self.judged.notified().await
    }
}

/// What the accept loop hands the event loop for a new connection.
pub(super) struct Opened {
    pub(super) conn: ConnId,
    pub(super) writer: PeerWriter<WireMsg>,
    pub(super) reader: tokio::task::AbortHandle,
    pub(super) source: SocketAddr,
    pub(super) seat: Seat,
    pub(super) limit: Arc<FrameLimit>,
}

/// What the event loop keeps of an accepted connection besides its writer and reader.
struct ConnInfo {
    source: SocketAddr,
    seat: Seat,
    limit: Arc<FrameLimit>,
    /// When it must have authenticated by (while it has not).
    deadline_us: Option<u64>,
}

pub(super) struct Conns {
    pub(super) writers: Map<ConnId, PeerWriter<WireMsg>>,
    /// Who each accepted connection has shown itself to be (see [`gate`]).
    auth: Map<ConnId, ConnAuth>,
    /// Each accepted connection's reader task (stopped when the connection is refused).
    readers: Map<ConnId, tokio::task::AbortHandle>,
    gate: GateConfig,
    /// Makes each connection's challenge unique across restarts.
    started_us: u64,
    pub(super) client_conn: Map<ClientId, ConnId>,
    info: Map<ConnId, ConnInfo>,
    /// The hello deadlines of the connections that have not authenticated, soonest first.
    deadlines: BTreeSet<(u64, ConnId)>,
    /// Shared with the accept loop and the readers.
    budget: Arc<Mutex<ConnBudget>>,
    limits: ConnLimits,
    /// Refusals sent, for the metrics.
    refusals: Refusals,
}

/// Refusals sent (the metrics' `luigi_refusals_total` and `luigi_refusals_by_reason_total`).
#[derive(Clone, Debug, Default)]
struct Refusals {
    /// Of a message, the connection kept.
    messages: u64,
    /// Closing the connection.
    connections: u64,
    /// By reason (either kind).
    by_reason: std::collections::BTreeMap<RefusalReason, u64>,
}

impl Conns {
    /// No connections yet; `budget` is the accept loop's.
    pub(super) fn new(gate: GateConfig, budget: Arc<Mutex<ConnBudget>>, started_us: u64) -> Self {
        let limits = *budget.lock().unwrap_or_else(PoisonError::into_inner).limits();
        Conns {
            writers: Map::default(),
            auth: Map::default(),
            readers: Map::default(),
            gate,
            started_us,
            client_conn: Map::default(),
            info: Map::default(),
            deadlines: BTreeSet::new(),
            budget,
            limits,
            refusals: Refusals::default(),
        }
    }

    /// The refusals sent by reason, every reason (0 for one never sent).
    pub(super) fn refusal_reasons(&self) -> Vec<crate::metrics::LabeledCount> {
        RefusalReason::ALL
            .iter()
            .map(|r| crate::metrics::LabeledCount {
                label: r.label(),
                count: self.refusals.by_reason.get(r).copied().unwrap_or(0),
            })
            .collect()
    }

    /// The connections open by what they have shown themselves to be, and the refusals sent.
    pub(super) fn counts(&self) -> crate::metrics::ConnCounts {
        let mut counts = crate::metrics::ConnCounts {
            refused_messages: self.refusals.messages,
            refused_connections: self.refusals.connections,
            ..Default::default()
        };
        for auth in self.auth.values() {
            match auth {
                ConnAuth::Pending { .. } => counts.pending += 1,
                ConnAuth::Client { .. } => counts.clients += 1,
                ConnAuth::Peer(_) => counts.peers += 1,
            }
        }
        counts
    }

    /// Sends a new connection its challenge and starts its hello deadline.
    pub(super) fn open(&mut self, o: Opened, now_us: u64) {
        let nonce = auth::nonce(self.started_us, o.conn);
        if o.writer.send(&WireMsg::Challenge { nonce }).is_err() {
            o.reader.abort();
            return;
        }
        let wait = match o.seat {
            Seat::Reserve => self.limits.reserve_deadline,
            Seat::Stranger | Seat::Peer => self.limits.hello_deadline,
        };
        let deadline_us = now_us.saturating_add(wait.as_micros() as u64);
        self.deadlines.insert((deadline_us, o.conn));
        let info = ConnInfo { source: o.source, seat: o.seat, limit: o.limit, deadline_us: Some(deadline_us) };
        self.info.insert(o.conn, info);
        self.writers.insert(o.conn, o.writer);
        self.readers.insert(o.conn, o.reader);
        self.auth.insert(o.conn, ConnAuth::Pending { nonce });
    }

    /// Connection `conn`'s reader ended; `why` if it refused what it read (a frame too large).
    pub(super) fn closed(&mut self, conn: ConnId, why: Option<String>) {
        match why {
            Some(why) if self.info.contains_key(&conn) => {
                self.refuse(conn, Refusal { reason: RefusalReason::BadFrame, why }, true)
            }
            Some(_) | None => self.forget(conn),
        }
    }

    /// Judges `msg` from `conn` at the gate (`None`: the connection is closed already). The
    /// first hello whose proof holds ends the connection's deadline and raises its frame
    /// limit; after a hello not refused, its reader is let go on (see `links::read_conn`).
    pub(super) fn judge(&mut self, conn: ConnId, msg: &WireMsg) -> Option<Verdict> {
        let info = self.info.get(&conn)?;
        let auth = self.auth.get_mut(&conn)?;
        let was_pending = matches!(auth, ConnAuth::Pending { .. });
        let reserved = (info.seat == Seat::Reserve && was_pending)
            .then(|| gate::on_reserve(msg, self.limits.stranger_seats()))
            .flatten();
        let (client_conn, writers) = (&self.client_conn, &self.writers);
        let in_use = |c: ClientId| client_conn.get(&c).is_some_and(|o| *o != conn && writers.contains_key(o));
        let verdict = reserved.unwrap_or_else(|| gate::check(&self.gate, auth, msg, in_use));
        let now = *auth;
        if was_pending {
            self.authenticated(conn, now);
        }
        // A hello refused closes the connection (its reader is stopped, not let go on).
        let hello = matches!(msg, WireMsg::Client(ClientMsg::Hello { .. }) | WireMsg::PeerHello { .. });
        if hello && !matches!(verdict, Verdict::Close(_)) {
            if let Some(info) = self.info.get(&conn) {
                info.limit.judged.notify_one();
            }
        }
        Some(verdict)
    }

    /// Connection `conn`, pending until now, is `now`: if it authenticated, its deadline
    /// ends, its frame limit rises, and a peer leaves the strangers' seats.
    fn authenticated(&mut self, conn: ConnId, now: ConnAuth) {
        let bytes = match now {
            ConnAuth::Pending { .. } => return,
            ConnAuth::Client { .. } => CLIENT_FRAME_BYTES,
            ConnAuth::Peer(_) => {
                self.budget.lock().unwrap_or_else(PoisonError::into_inner).became_peer(conn);
                PEER_FRAME_BYTES
            }
        };
        let Some(info) = self.info.get_mut(&conn) else { return };
        if let Some(at) = info.deadline_us.take() {
            self.deadlines.remove(&(at, conn));
        }
        if matches!(now, ConnAuth::Peer(_)) {
            info.seat = Seat::Peer;
        }
        // Released to the reader (`judged` is notified after this store).
        info.limit.bytes.store(bytes, Ordering::Release);
    }

    /// Closes the connections whose hello deadline has passed at `now_us`, saying why.
    pub(super) fn close_expired(&mut self, now_us: u64) {
        while let Some(&(at, conn)) = self.deadlines.first() {
            if at > now_us {
                return;
            }
            self.deadlines.pop_first();
            let secs = |d: std::time::Duration| d.as_secs_f64();
            let reason = match self.info.get(&conn).map(|i| i.seat) {
                Some(Seat::Reserve) => format!(
                    "no peer hello within {} s on a seat kept for peer servers (the server holds its limit of {} \
                     client and unauthenticated connections)",
                    secs(self.limits.reserve_deadline),
                    self.limits.stranger_seats()
                ),
                Some(Seat::Stranger | Seat::Peer) | None => {
                    format!("no hello within {} s", secs(self.limits.hello_deadline))
                }
            };
            self.refuse(conn, Refusal { reason: RefusalReason::HelloTimeout, why: reason }, true);
        }
    }

    /// When the next hello deadline falls (µs), if a connection has one.
    pub(super) fn next_deadline_us(&self) -> Option<u64> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Tells `conn` why its message was refused, logs it, and closes it if `close`.
    pub(super) fn refuse(&mut self, conn: ConnId, refusal: Refusal, close: bool) {
        let Refusal { reason: counted, why: reason } = refusal;
        let source = self.info.get(&conn).map(|i| i.source.to_string()).unwrap_or_default();
        warn!(conn, %source, %reason, close, "refused a message");
        if close {
            self.refusals.connections += 1;
        } else {
            self.refusals.messages += 1;
        }
        *self.refusals.by_reason.entry(counted).or_insert(0) += 1;
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

    /// Drops everything kept about connection `conn` (its seat is given back when its reader
    /// task ends).
    pub(super) fn forget(&mut self, conn: ConnId) {
        self.writers.remove(&conn);
        self.readers.remove(&conn);
        self.auth.remove(&conn);
        if let Some(ConnInfo { deadline_us: Some(at), .. }) = self.info.remove(&conn) {
            self.deadlines.remove(&(at, conn));
        }
        self.client_conn.retain(|_, c| *c != conn);
    }

    pub(super) fn send_to_client(&self, client: ClientId, msg: WireMsg) {
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
    pub(super) fn send_to_clients(&self, clients: &[ClientId], msg: &WireMsg) {
        self.send_to_conns(clients.iter().filter_map(|c| self.client_conn.get(c)), msg);
    }

    /// Sends `msg` (a watermark) to every connected client.
    pub(super) fn send_to_all_clients(&self, msg: &WireMsg) {
        self.send_to_conns(self.client_conn.values(), msg);
    }

    pub(super) fn send_to_conns<'a>(&self, conns: impl Iterator<Item = &'a ConnId>, msg: &WireMsg) {
        for conn in conns {
            if let Some(w) = self.writers.get(conn) {
                let _ = w.send(msg);
            }
        }
    }
}
