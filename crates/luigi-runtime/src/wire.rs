//! The frame every connection speaks ([`WireMsg`]): the client-facing messages, the leaders'
//! peer batches, the replication layer's messages, and the gate's own frames (the
//! challenge, a peer's proof, a refusal). Only the runtime frames and parses it; the
//! simulator hands the inner messages over directly.

use serde::{Deserialize, Serialize};

use luigi_protocol::msg::ReplicationMsg;
use luigi_txn::msg::{ClientMsg, ServerMsg};
use luigi_txn::peer::PeerMsg;
use luigi_txn::types::ShardId;

/// Every frame on a Luigi connection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum WireMsg {
    /// From a client.
    Client(ClientMsg),
    /// To a client.
    Server(ServerMsg),
    /// Between shards' replicas: the protocol's batch (opaque here: the receiving replica
    /// decodes it) or a progress report.
    Peer(PeerMsg),
    /// Replication and routing between servers: Raft within a shard, snapshot transfers
    /// within a shard, and leader announcements across shards. Kept apart from Luigi's own
    /// messages: any protocol replicated the same way uses them unchanged.
    Replication(ReplicationMsg),
    /// First frame a server sends on every connection it accepts: the nonce a client (with a
    /// client token) or a peer server proves its key over.
    Challenge {
        /// Unique per connection of this server.
        nonce: [u8; 16],
    },
    /// A server's answer to the challenge on its outbound link to another server:
    /// HMAC-SHA256 under the cluster secret over the nonce, the acceptor's and the sender's
    /// node. Only after it are server-to-server messages accepted on that connection.
    PeerHello {
        /// The sender's shard.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "luigi_protocol::arbitrary::shard()"))]
        shard: ShardId,
        /// The sender's replica index.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "luigi_protocol::arbitrary::replica()"))]
        replica: u32,
        /// The proof.
        proof: [u8; 32],
    },
    /// A message was refused (malformed, unauthenticated, not allowed on this connection):
    /// why, for the sender's log.
    Refused {
        /// What was wrong.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "luigi_protocol::arbitrary::text()"))]
        reason: String,
    },
}
