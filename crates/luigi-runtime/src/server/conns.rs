//! The accepted connections: writers, reader tasks, who each has shown itself to be, and
//! which connection each client is on.

use luigi_proto::msg::WireMsg;
use luigi_proto::types::ClientId;
use luigi_proto::Map;
use tracing::{debug, warn};

use super::ConnId;
use crate::gate::{ConnAuth, GateConfig};
use crate::net::peer::PeerWriter;

pub(super) struct Conns {
    pub(super) writers: Map<ConnId, PeerWriter<WireMsg>>,
    /// Who each accepted connection has shown itself to be (see [`gate`]).
    pub(super) auth: Map<ConnId, ConnAuth>,
    /// Each accepted connection's reader task (stopped when the connection is refused).
    pub(super) readers: Map<ConnId, tokio::task::AbortHandle>,
    pub(super) gate: GateConfig,
    /// Makes each connection's challenge unique across restarts.
    pub(super) started_us: u64,
    pub(super) client_conn: Map<ClientId, ConnId>,
}

impl Conns {
    /// Tells `conn` why its message was refused, logs it, and closes it if `close`.
    pub(super) fn refuse(&mut self, conn: ConnId, reason: String, close: bool) {
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
    pub(super) fn forget(&mut self, conn: ConnId) {
        self.writers.remove(&conn);
        self.readers.remove(&conn);
        self.auth.remove(&conn);
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
