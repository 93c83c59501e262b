//! What a server accepts on a connection, before anything reaches the replica: who the
//! connection is (a client after its hello, a peer server after proving the cluster secret),
//! and whether this message may come from it. Pure: no sockets, so every rule is tested
//! here (and fuzzed) without a network.
//!
//! Rules:
//! - every accepted connection starts unauthenticated, with the challenge it was sent;
//! - `Hello` makes it a client (with a valid token proof when the cluster has a client
//!   token); a client id belongs to one open connection at a time, and a client dispatches
//!   only its own transactions;
//! - `PeerHello` with a valid proof of the cluster secret makes it a peer server; only peers
//!   send server-to-server messages, and each only as itself: agreement batches from its own
//!   shard (another shard than ours), Raft traffic and snapshot transfers (both directions:
//!   begin, chunks, cancel from a sender; acknowledgements, refusals from a receiver) from a
//!   replica of our shard with its own Raft id, leader announcements of itself;
//! - `Status` is answered on any connection (read-only counters);
//! - anything else (server-bound frames, a second hello) is refused;
//! - a connection accepted on the seats kept for peers ([`on_reserve`]) may only prove it is
//!   a peer (or ask for the status): it cannot become a client.

use crate::wire::WireMsg;
use luigi_protocol::msg::ReplicationMsg;
use luigi_txn::msg::ClientMsg;
use luigi_txn::types::{ClientId, Protocol, ShardId};

use crate::auth::{self, Nonce};
use crate::config::NodeId;

/// Who a connection has shown itself to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnAuth {
    /// Nothing yet; it was sent this challenge.
    Pending {
        /// The challenge.
        nonce: Nonce,
    },
    /// A client.
    Client {
        /// Its id.
        client: ClientId,
    },
    /// Another server of the cluster.
    Peer(NodeId),
}

/// What the gate needs to know of the cluster.
#[derive(Clone, Debug)]
pub struct GateConfig {
    /// This server.
    pub me: NodeId,
    /// Replicas per shard.
    pub replicas: Vec<u32>,
    /// The cluster secret ("" when the cluster file has none).
    pub secret: String,
    /// The client token, if clients must prove one.
    pub client_token: Option<String>,
    /// The protocol the cluster runs (clients must speak it).
    pub protocol: Protocol,
}

impl GateConfig {
    fn is_member(&self, node: NodeId) -> bool {
        self.replicas.get(node.shard as usize).is_some_and(|n| node.replica < *n)
    }
}

/// What to do with a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to the replica as coming from this client.
    Client(ClientId),
    /// Hand it to the replica as coming from this peer.
    Peer(NodeId),
    /// Answer with this replica's status.
    Status,
    /// The connection proved it is a peer; nothing else to do.
    PeerAuthenticated(NodeId),
    /// Refuse the message (tell the sender why), keep the connection.
    Refuse(Refusal),
    /// Refuse it and close the connection.
    Close(Refusal),
}

/// Why a message was refused: the reason the metrics count (`luigi_refusals_by_reason_total`)
/// and the sentence the sender is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The reason, counted.
    pub reason: RefusalReason,
    /// What the sender is told (and the log says).
    pub why: String,
}

/// The reasons a message is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefusalReason {
    /// A client speaks another protocol than the cluster's.
    Protocol,
    /// A dispatch or a ping before the hello, or a server-to-server message from a connection
    /// that is not an authenticated peer.
    Unauthenticated,
    /// A second hello on one connection.
    SecondHello,
    /// A peer hello from a node that is not another member of the cluster.
    NotMember,
    /// A peer or a client failed to prove the cluster secret or the client token.
    BadProof,
    /// A client id in use by another open connection.
    ClientIdInUse,
    /// A client dispatched another client's transaction.
    WrongClient,
    /// An authenticated peer's message addressed as from another shard, group or node.
    Misaddressed,
    /// A message meant for a client arrived at a server.
    Misdirected,
    /// A connection on the seats kept for peer servers that is not a peer's.
    SeatsFull,
    /// No hello within the deadline.
    HelloTimeout,
    /// A frame the connection's reader could not take (too large, undecodable).
    BadFrame,
}

impl RefusalReason {
    /// Every reason, in order.
    pub const ALL: [RefusalReason; 12] = [
        RefusalReason::Protocol,
        RefusalReason::Unauthenticated,
        RefusalReason::SecondHello,
        RefusalReason::NotMember,
        RefusalReason::BadProof,
        RefusalReason::ClientIdInUse,
        RefusalReason::WrongClient,
        RefusalReason::Misaddressed,
        RefusalReason::Misdirected,
        RefusalReason::SeatsFull,
        RefusalReason::HelloTimeout,
        RefusalReason::BadFrame,
    ];

    /// Its metrics label.
    pub fn label(self) -> &'static str {
        match self {
            RefusalReason::Protocol => "protocol",
            RefusalReason::Unauthenticated => "unauthenticated",
            RefusalReason::SecondHello => "second_hello",
            RefusalReason::NotMember => "not_member",
            RefusalReason::BadProof => "bad_proof",
            RefusalReason::ClientIdInUse => "client_id_in_use",
            RefusalReason::WrongClient => "wrong_client",
            RefusalReason::Misaddressed => "misaddressed",
            RefusalReason::Misdirected => "misdirected",
            RefusalReason::SeatsFull => "seats_full",
            RefusalReason::HelloTimeout => "hello_timeout",
            RefusalReason::BadFrame => "bad_frame",
        }
    }
}

/// Refuses the message for `reason`, telling `why`; the connection stays.
fn refuse(reason: RefusalReason, why: impl Into<String>) -> Verdict {
    Verdict::Refuse(Refusal { reason, why: why.into() })
}

/// Refuses the message for `reason`, telling `why`, and closes the connection.
fn close(reason: RefusalReason, why: impl Into<String>) -> Verdict {
    Verdict::Close(Refusal { reason, why: why.into() })
}

/// Judges `msg` arriving on a connection in state `auth` (updated on a successful hello);
/// `client_in_use(c)`: another open connection owns client id `c`.
pub fn check(
    cfg: &GateConfig,
    auth: &mut ConnAuth,
    msg: &WireMsg,
    client_in_use: impl Fn(ClientId) -> bool,
) -> Verdict {
    match msg {
        WireMsg::Client(ClientMsg::Status) => Verdict::Status,
        WireMsg::Client(ClientMsg::Hello { client, proof, protocol }) => {
            hello(cfg, auth, *client, proof.as_ref(), *protocol, client_in_use)
        }
        WireMsg::Client(ClientMsg::Dispatch { txn, .. }) => {
            owned(auth, txn.id.client, ("dispatched a transaction", "dispatch"))
        }
        // A snapshot read (rule 23) is a client's as a dispatch is: after its hello, under its id.
        WireMsg::Client(ClientMsg::SnapshotRead(read)) => {
            owned(auth, read.id.client, ("sent a snapshot read", "snapshot read"))
        }
        WireMsg::Client(ClientMsg::Ping { .. }) => match *auth {
            ConnAuth::Client { client } => Verdict::Client(client),
            ConnAuth::Pending { .. } | ConnAuth::Peer(_) => close(RefusalReason::Unauthenticated, "ping before hello"),
        },
        WireMsg::PeerHello { shard, replica, proof } => {
            let node = NodeId { shard: *shard, replica: *replica };
            let ConnAuth::Pending { nonce } = *auth else {
                return close(RefusalReason::SecondHello, "peer hello on a connection that already said who it is");
            };
            if !cfg.is_member(node) || node == cfg.me {
                return close(
                    RefusalReason::NotMember,
                    format!("peer hello from {}, not another member of the cluster", node.name()),
                );
            }
            if !auth::peer_proof_ok(&cfg.secret, &nonce, cfg.me, node, proof) {
                return close(
                    RefusalReason::BadProof,
                    format!("peer {} failed to prove the cluster secret", node.name()),
                );
            }
            *auth = ConnAuth::Peer(node);
            Verdict::PeerAuthenticated(node)
        }
        WireMsg::Peer(batch) => from_peer(auth, |node| {
            (node.shard != cfg.me.shard && batch.from == node.shard)
                .then_some(())
                .ok_or_else(|| format!("agreement batch from shard {} sent by {}", batch.from, node.name()))
        }),
        WireMsg::Replication(
            ReplicationMsg::Raft { shard, from, .. }
            | ReplicationMsg::SnapshotBegin { shard, from, .. }
            | ReplicationMsg::SnapshotChunk { shard, from, .. }
            | ReplicationMsg::SnapshotAck { shard, from, .. }
            | ReplicationMsg::SnapshotCancel { shard, from, .. }
            | ReplicationMsg::SnapshotRefuse { shard, from, .. }
            | ReplicationMsg::AcceptsQuery { shard, from, .. }
            | ReplicationMsg::Accepts { shard, from, .. }
            | ReplicationMsg::LeaderLost { shard, from, .. }
            | ReplicationMsg::ClockProbe { shard, from, .. }
            | ReplicationMsg::ClockEcho { shard, from, .. },
        ) => from_peer(auth, |node| same_group(cfg, node, *shard, *from)),
        WireMsg::Replication(ReplicationMsg::LeaderIs { shard, replica, .. }) => from_peer(auth, |node| {
            (node == NodeId { shard: *shard, replica: *replica })
                .then_some(())
                .ok_or_else(|| format!("{} announced s{shard}r{replica} as leader", node.name()))
        }),
        WireMsg::Server(_) | WireMsg::Challenge { .. } | WireMsg::Refused { .. } => {
            close(RefusalReason::Misdirected, "a message meant for a client arrived at a server")
        }
    }
}

/// What a connection accepted on the peer reserve (the seats strangers and clients cannot
/// take, `server::budget`) may send while it has not authenticated: a `PeerHello` (then
/// judged by [`check`]) and status queries pass (`None`); anything else closes it, naming
/// the full stranger seats (`stranger_seats` of them).
pub fn on_reserve(msg: &WireMsg, stranger_seats: usize) -> Option<Verdict> {
    match msg {
        WireMsg::PeerHello { .. } | WireMsg::Client(ClientMsg::Status) => None,
        WireMsg::Client(
            ClientMsg::Hello { .. } | ClientMsg::Dispatch { .. } | ClientMsg::Ping { .. } | ClientMsg::SnapshotRead(_),
        )
        | WireMsg::Peer(_)
        | WireMsg::Replication(_)
        | WireMsg::Server(_)
        | WireMsg::Challenge { .. }
        | WireMsg::Refused { .. } => Some(close(
            RefusalReason::SeatsFull,
            format!(
                "the server holds its limit of {stranger_seats} client and unauthenticated connections; this one \
             was accepted on the seats kept for peer servers, where only a peer hello is taken: try again later"
            ),
        )),
    }
}

/// A message about a transaction of client `owner` (`what`: how the refusal says it was sent,
/// and what it is): taken from that client only, after its hello.
fn owned(auth: &ConnAuth, owner: ClientId, what: (&str, &str)) -> Verdict {
    let (sent, name) = what;
    match *auth {
        ConnAuth::Client { client } if client == owner => Verdict::Client(client),
        ConnAuth::Client { client } => {
            refuse(RefusalReason::WrongClient, format!("client {client} {sent} of client {owner}"))
        }
        ConnAuth::Pending { .. } | ConnAuth::Peer(_) => {
            close(RefusalReason::Unauthenticated, format!("{name} before hello"))
        }
    }
}

fn hello(
    cfg: &GateConfig,
    auth: &mut ConnAuth,
    client: ClientId,
    proof: Option<&auth::Proof>,
    protocol: Protocol,
    client_in_use: impl Fn(ClientId) -> bool,
) -> Verdict {
    if protocol != cfg.protocol {
        let why = format!(
            "this cluster runs protocol {}, the client speaks {protocol}: use the cluster file's [protocol] kind",
            cfg.protocol
        );
        return close(RefusalReason::Protocol, why);
    }
    let ConnAuth::Pending { nonce } = *auth else {
        return close(RefusalReason::SecondHello, "a second hello on one connection");
    };
    if let Some(token) = &cfg.client_token {
        if !proof.is_some_and(|p| auth::client_proof_ok(token, &nonce, client, p)) {
            return close(RefusalReason::BadProof, format!("client {client} failed to prove the client token"));
        }
    }
    if client_in_use(client) {
        return close(RefusalReason::ClientIdInUse, format!("client id {client} is in use by another open connection"));
    }
    *auth = ConnAuth::Client { client };
    Verdict::Client(client)
}

fn from_peer(auth: &ConnAuth, allowed: impl FnOnce(NodeId) -> Result<(), String>) -> Verdict {
    match *auth {
        ConnAuth::Peer(node) => match allowed(node) {
            Ok(()) => Verdict::Peer(node),
            Err(why) => refuse(RefusalReason::Misaddressed, why),
        },
        ConnAuth::Pending { .. } | ConnAuth::Client { .. } => close(
            RefusalReason::Unauthenticated,
            "a server-to-server message from a connection that is not an authenticated peer",
        ),
    }
}

fn same_group(cfg: &GateConfig, node: NodeId, shard: ShardId, from: u64) -> Result<(), String> {
    let ok = node.shard == cfg.me.shard && shard == cfg.me.shard && from == u64::from(node.replica) + 1;
    ok.then_some(()).ok_or_else(|| {
        format!("Raft or snapshot traffic for shard {shard} from raft id {from} sent by {}", node.name())
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use luigi_protocol::msg::{SnapshotKind, SnapshotRefusal};
    use luigi_txn::peer::{PeerBody, PeerMsg};
    use luigi_txn::types::{KeySet, ShardPiece, Txn, TxnId};

    use super::*;

    const ME: NodeId = NodeId { shard: 0, replica: 0 };

    fn cfg(token: Option<&str>) -> GateConfig {
        GateConfig {
            me: ME,
            replicas: vec![3, 3],
            secret: "cluster secret 0123".into(),
            client_token: token.map(String::from),
            protocol: Protocol::Luigi,
        }
    }

    fn pending() -> ConnAuth {
        ConnAuth::Pending { nonce: auth::nonce(1, 7) }
    }

    fn nonce() -> Nonce {
        auth::nonce(1, 7)
    }

    fn dispatch(client: ClientId) -> WireMsg {
        let txn = Txn {
            id: TxnId { client, seq: 1 },
            procedure: "p".into(),
            args: vec![],
            pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(vec![], vec![b"k".to_vec()]) }],
            ts: 1,
        };
        WireMsg::Client(ClientMsg::Dispatch { txn: Arc::new(txn), sent_us: 0, acked_below: 1, fast: true })
    }

    fn peer_hello(from: NodeId, secret: &str) -> WireMsg {
        WireMsg::PeerHello {
            shard: from.shard,
            replica: from.replica,
            proof: auth::peer_proof(secret, &nonce(), ME, from),
        }
    }

    fn no_one(_: ClientId) -> bool {
        false
    }

    /// One of each snapshot transfer message, from raft id `from` of `shard`.
    fn transfer_msgs(shard: ShardId, from: u64) -> Vec<WireMsg> {
        let begin = ReplicationMsg::SnapshotBegin {
            shard,
            from,
            transfer: 7,
            kind: SnapshotKind::Install { envelope: vec![1, 2, 3] },
            index: 9,
            total_bytes: 94,
            chunk_bytes: 64,
            crc32: 0,
        };
        let chunk = ReplicationMsg::SnapshotChunk { shard, from, transfer: 7, seq: 0, crc32: 0, data: vec![0; 64] };
        let ack = ReplicationMsg::SnapshotAck { shard, from, transfer: 7, next: 1, resend: false };
        let cancel = ReplicationMsg::SnapshotCancel { shard, from, transfer: 7 };
        let refuse = ReplicationMsg::SnapshotRefuse { shard, from, transfer: 7, reason: SnapshotRefusal::Busy };
        [begin, chunk, ack, cancel, refuse].into_iter().map(WireMsg::Replication).collect()
    }

    #[test]
    fn a_client_says_hello_then_dispatches_only_its_own_transactions() {
        let c = cfg(None);
        let mut a = pending();
        assert!(matches!(check(&c, &mut a, &dispatch(5), no_one), Verdict::Close(_)), "before hello");
        let hello = WireMsg::Client(ClientMsg::Hello { client: 5, proof: None, protocol: Protocol::Luigi });
        assert_eq!(check(&c, &mut a, &hello, no_one), Verdict::Client(5));
        assert_eq!(check(&c, &mut a, &dispatch(5), no_one), Verdict::Client(5));
        assert!(matches!(check(&c, &mut a, &dispatch(6), no_one), Verdict::Refuse(_)), "another client's");
        assert!(matches!(check(&c, &mut a, &hello, no_one), Verdict::Close(_)), "second hello");
        let mut b = pending();
        assert!(matches!(check(&c, &mut b, &hello, |id| id == 5), Verdict::Close(why) if why.why.contains("in use")));
    }

    /// Rule 23: a snapshot read is a client's message as a dispatch is.
    #[test]
    fn a_client_sends_snapshot_reads_only_after_hello_and_only_its_own() {
        let read = |client| {
            WireMsg::Client(ClientMsg::SnapshotRead(luigi_txn::read_only::SnapshotRead {
                id: TxnId { client, seq: 1 },
                shard: 0,
                procedure: "p".into(),
                args: vec![],
                keys: KeySet::new(vec![b"k".to_vec()], vec![]),
                ts: 1,
                sent_us: 0,
            }))
        };
        let c = cfg(None);
        let mut a = pending();
        let before = check(&c, &mut a, &read(5), no_one);
        assert!(matches!(&before, Verdict::Close(r) if r.why == "snapshot read before hello"), "{before:?}");
        let hello = WireMsg::Client(ClientMsg::Hello { client: 5, proof: None, protocol: Protocol::Luigi });
        assert_eq!(check(&c, &mut a, &hello, no_one), Verdict::Client(5));
        assert_eq!(check(&c, &mut a, &read(5), no_one), Verdict::Client(5));
        let other = check(&c, &mut a, &read(6), no_one);
        assert!(matches!(&other, Verdict::Refuse(r) if r.why.contains("snapshot read of client 6")), "{other:?}");
        assert!(on_reserve(&read(5), 3).is_some(), "not on the peer reserve");
    }

    #[test]
    fn a_client_speaking_another_protocol_is_told_which_one_the_cluster_runs() {
        let c = cfg(None);
        let mut a = pending();
        let occ = WireMsg::Client(ClientMsg::Hello { client: 5, proof: None, protocol: Protocol::Occ });
        match check(&c, &mut a, &occ, |_| false) {
            Verdict::Close(why) => assert!(why.why.contains("runs protocol luigi, the client speaks occ"), "{why:?}"),
            v => panic!("expected a refusal, got {v:?}"),
        }
        assert_eq!(a, pending(), "still nobody");
    }

    #[test]
    fn a_client_token_must_be_proven() {
        let c = cfg(Some("client token 012345"));
        let mut a = pending();
        let none = WireMsg::Client(ClientMsg::Hello { client: 5, proof: None, protocol: Protocol::Luigi });
        assert!(matches!(check(&c, &mut a, &none, no_one), Verdict::Close(_)));
        let wrong = auth::client_proof("another token 0123", &nonce(), 5);
        let bad = WireMsg::Client(ClientMsg::Hello { client: 5, proof: Some(wrong), protocol: Protocol::Luigi });
        assert!(matches!(check(&c, &mut a, &bad, no_one), Verdict::Close(_)));
        let right = auth::client_proof("client token 012345", &nonce(), 5);
        let good = WireMsg::Client(ClientMsg::Hello { client: 5, proof: Some(right), protocol: Protocol::Luigi });
        assert_eq!(check(&c, &mut a, &good, no_one), Verdict::Client(5));
    }

    /// The forged frames of the security review: a snapshot offer, a leader announcement and
    /// Raft traffic from a connection that never proved the secret are refused and the
    /// connection is closed.
    #[test]
    fn server_to_server_messages_need_an_authenticated_peer() {
        let c = cfg(None);
        let mut forged = vec![
            WireMsg::Replication(ReplicationMsg::LeaderIs { shard: 1, replica: 5, term: u64::MAX }),
            WireMsg::Replication(ReplicationMsg::Raft { shard: 0, from: 2, bytes: vec![] }),
            WireMsg::Peer(PeerMsg { from: 1, body: PeerBody::Protocol(vec![]) }),
        ];
        forged.extend(transfer_msgs(0, 2));
        for msg in &forged {
            let mut a = pending();
            assert!(matches!(check(&c, &mut a, msg, no_one), Verdict::Close(_)), "{msg:?}");
            let mut client = ConnAuth::Client { client: 3 };
            assert!(matches!(check(&c, &mut client, msg, no_one), Verdict::Close(_)), "from a client: {msg:?}");
        }
        let mut a = pending();
        let wrong_secret = peer_hello(NodeId { shard: 1, replica: 0 }, "not the secret 0000");
        assert!(matches!(check(&c, &mut a, &wrong_secret, no_one), Verdict::Close(_)));
        let outsider = peer_hello(NodeId { shard: 1, replica: 5 }, "cluster secret 0123");
        assert!(matches!(check(&c, &mut pending(), &outsider, no_one), Verdict::Close(_)), "not a member");
    }

    #[test]
    fn an_authenticated_peer_speaks_only_as_itself() {
        let c = cfg(None);
        let other_shard = NodeId { shard: 1, replica: 2 };
        let mut a = pending();
        assert_eq!(
            check(&c, &mut a, &peer_hello(other_shard, "cluster secret 0123"), no_one),
            Verdict::PeerAuthenticated(other_shard)
        );
        let batch = |from| WireMsg::Peer(PeerMsg { from, body: PeerBody::Protocol(vec![]) });
        assert_eq!(check(&c, &mut a, &batch(1), no_one), Verdict::Peer(other_shard));
        assert!(matches!(check(&c, &mut a, &batch(0), no_one), Verdict::Refuse(_)), "as another shard");
        let me_as_leader = WireMsg::Replication(ReplicationMsg::LeaderIs { shard: 1, replica: 2, term: 4 });
        assert_eq!(check(&c, &mut a, &me_as_leader, no_one), Verdict::Peer(other_shard));
        let other_as_leader = WireMsg::Replication(ReplicationMsg::LeaderIs { shard: 1, replica: 0, term: 4 });
        assert!(matches!(check(&c, &mut a, &other_as_leader, no_one), Verdict::Refuse(_)));
        let raft = WireMsg::Replication(ReplicationMsg::Raft { shard: 0, from: 3, bytes: vec![] });
        assert!(matches!(check(&c, &mut a, &raft, no_one), Verdict::Refuse(_)), "not in our group");
        let same_group = NodeId { shard: 0, replica: 2 };
        let mut b = pending();
        check(&c, &mut b, &peer_hello(same_group, "cluster secret 0123"), no_one);
        assert_eq!(check(&c, &mut b, &raft, no_one), Verdict::Peer(same_group));
        // Snapshot transfers, both ways, only under its own Raft id and only within the group.
        for msg in transfer_msgs(0, 3) {
            assert_eq!(check(&c, &mut b, &msg, no_one), Verdict::Peer(same_group), "{msg:?}");
        }
        for msg in transfer_msgs(0, 2) {
            assert!(matches!(check(&c, &mut b, &msg, no_one), Verdict::Refuse(_)), "another raft id: {msg:?}");
        }
        for msg in transfer_msgs(1, 3) {
            assert!(matches!(check(&c, &mut b, &msg, no_one), Verdict::Refuse(_)), "another shard: {msg:?}");
            assert!(matches!(check(&c, &mut a, &msg, no_one), Verdict::Refuse(_)), "from another group: {msg:?}");
        }
        assert!(matches!(check(&c, &mut b, &dispatch(1), no_one), Verdict::Close(_)), "peers do not dispatch");
    }

    /// A connection on the peer reserve proves it is a peer or is closed; it may ask for the
    /// status meanwhile.
    #[test]
    fn a_connection_on_the_peer_reserve_may_only_become_a_peer() {
        let hello = WireMsg::Client(ClientMsg::Hello { client: 5, proof: None, protocol: Protocol::Luigi });
        for msg in [hello, dispatch(5), WireMsg::Client(ClientMsg::Ping { sent_us: 1 })] {
            match on_reserve(&msg, 3584) {
                Some(Verdict::Close(why)) => assert!(why.why.contains("limit of 3584 client"), "{why:?}"),
                v => panic!("{msg:?} on the reserve: {v:?}"),
            }
        }
        assert_eq!(on_reserve(&WireMsg::Client(ClientMsg::Status), 1), None);
        let from = NodeId { shard: 1, replica: 0 };
        let good = peer_hello(from, "cluster secret 0123");
        assert_eq!(on_reserve(&good, 1), None, "judged by check");
        assert_eq!(check(&cfg(None), &mut pending(), &good, no_one), Verdict::PeerAuthenticated(from));
    }
}
