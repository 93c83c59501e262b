//! What travels between shards' replicas through the node, the wire and the simulator,
//! whatever the protocol: the neutral envelope [`PeerMsg`], whose protocol part is opaque
//! bytes (each protocol encodes and decodes its own vocabulary, [`PeerVocabulary`]), and the
//! node's own items beside it (the rule-14 progress report). [`ReplicaOutput`] is what a
//! replica asks its node to do, generic over the batch type so that a protocol's leader core
//! speaks its own typed batches and the replica seam carries them encoded ([`PeerOut`]).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::msg::ServerMsg;
use crate::progress::ProgressReport;
use crate::types::{ClientId, ShardId, Timestamp, TxnId};

/// A message from one shard's replica to another shard's, as the node, the wire and the
/// simulator carry it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct PeerMsg {
    /// Sending shard (the gate checks it against the connection's peer).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
    pub from: ShardId,
    /// What it carries.
    pub body: PeerBody,
}

/// The body of a [`PeerMsg`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum PeerBody {
    /// The protocol's own batch, encoded by the protocol ([`PeerVocabulary::encode`]); only
    /// the receiving replica decodes it.
    Protocol(
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::blob()"))]
        #[serde(with = "crate::byte_strings::one")]
        Vec<u8>,
    ),
    /// The sending replica's progress (DESIGN.md rule 14), produced by its node.
    Progress(ProgressReport),
}

/// A batch a replica sends to another shard, encoded, with what the node needs to know of
/// it as plain data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerOut {
    /// The message.
    pub msg: PeerMsg,
    /// The highest position of the sender's log the batch rests on (a proposal sent at
    /// admission, rule 14): it leaves once the log is durable there. 0: none.
    pub rests_on: u64,
}

/// What the simulator's fault injection asks of a batch (the points it kills a leader at),
/// as plain data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerFacts {
    /// Transactions this batch proposes or votes for (Luigi's `Propose`, a baseline's
    /// `Vote`): the sender's prepare is committed.
    pub proposals: Vec<TxnId>,
    /// The batch carries a decision (Luigi's `Confirm`, a baseline's `Decide`).
    pub decides: bool,
    /// Transactions the batch may admit at the receiver as a dispatch would (Luigi's
    /// `Recover`).
    pub admits: Vec<TxnId>,
}

/// Why a peer message did not decode into a protocol's batch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("peer message from shard {from} does not decode: {why}")]
pub struct PeerDecodeError {
    /// The envelope's sender.
    pub from: ShardId,
    /// Why.
    pub why: String,
}

/// `batch`, encoded with postcard, as a message from `from` (what a protocol's
/// [`PeerVocabulary::encode`] sends).
pub fn encode_batch<T: Serialize>(from: ShardId, batch: &T) -> PeerMsg {
    // A batch of plain data always encodes; an empty message would not decode and is
    // counted by the receiver.
    let bytes = postcard::to_stdvec(batch).unwrap_or_default();
    PeerMsg { from, body: PeerBody::Protocol(bytes) }
}

/// The batch `bytes` encode (postcard), from the envelope's sender `from`: an error if they
/// do not decode or if the batch names another sender (`sender`).
///
/// # Errors
/// Why it is not a batch of `from`'s.
pub fn decode_batch<T: DeserializeOwned>(
    from: ShardId,
    bytes: &[u8],
    sender: impl FnOnce(&T) -> ShardId,
) -> Result<T, PeerDecodeError> {
    let batch: T = postcard::from_bytes(bytes).map_err(|e| PeerDecodeError { from, why: e.to_string() })?;
    match sender(&batch) {
        named if named == from => Ok(batch),
        named => Err(PeerDecodeError { from, why: format!("the batch names shard {named} as its sender") }),
    }
}

/// A protocol's batch type: how it travels in a [`PeerMsg`].
pub trait PeerVocabulary: Sized {
    /// The batch, encoded, with the facts the node needs.
    fn encode(&self) -> PeerOut;

    /// The batch a message carries.
    ///
    /// # Errors
    /// The bytes do not decode, name another sender than the envelope, or the body is not
    /// something this protocol takes.
    fn decode(msg: PeerMsg) -> Result<Self, PeerDecodeError>;

    /// What the simulator's fault injection asks of it.
    fn facts(&self) -> PeerFacts;
}

/// An effect of a replica (or of a protocol's leader core, with its own batch type `B`) for
/// its node to carry out.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplicaOutput<B> {
    /// Send `msg` to client `client`.
    ToClient {
        /// Destination.
        client: ClientId,
        /// Message.
        msg: ServerMsg,
    },
    /// Send `msg` to every connected client.
    ToAllClients {
        /// Message.
        msg: ServerMsg,
    },
    /// Send `msg` to each of `clients`.
    ToClients {
        /// Destinations.
        clients: Vec<ClientId>,
        /// Message.
        msg: ServerMsg,
    },
    /// Send `msg` to client `client` once `record` (if any) and everything written to the
    /// accept log before it are durable there (a follower's `FastAccept`; DESIGN.md, the
    /// fast path).
    ToClientDurably {
        /// Destination.
        client: ClientId,
        /// Message.
        msg: ServerMsg,
        /// An accept record (Luigi's `fast::AcceptRecord`, encoded) to write first.
        record: Option<Vec<u8>>,
    },
    /// Send `batch` to the leader of `shard` once `records` and everything written to the
    /// accept log before them are durable there (a leader's marked proposal after its vote,
    /// a follower's `FastAccept` to another participant; DESIGN.md rules 16 and 17).
    ToPeerDurably {
        /// Destination shard.
        shard: ShardId,
        /// The batch.
        batch: B,
        /// Accept records (encoded) to write first.
        records: Vec<Vec<u8>>,
    },
    /// Send `batch` to the leader of `shard`.
    ToPeer {
        /// Destination shard.
        shard: ShardId,
        /// The batch.
        batch: B,
    },
    /// This leader just executed transaction `id`'s piece on `shard` at its final timestamp
    /// `ts` (its answer goes out later, once the watermark passes `ts`). Nothing to send: an
    /// observation for checkers and metrics (the simulator compares execution orders with
    /// it); a shell that only moves messages ignores it. Emitted once per execution, in
    /// execution order; a transaction re-executed by a later leader after a failover (its
    /// `Applied` marker was not committed) is reported again by that leader.
    Executed {
        /// The shard whose piece ran.
        shard: ShardId,
        /// The transaction.
        id: TxnId,
        /// Its final timestamp.
        ts: Timestamp,
    },
}

impl<B: PeerVocabulary> ReplicaOutput<B> {
    /// The same output with its batch, if any, encoded for the node.
    pub fn encoded(self) -> ReplicaOutput<PeerOut> {
        match self {
            ReplicaOutput::ToClient { client, msg } => ReplicaOutput::ToClient { client, msg },
            ReplicaOutput::ToAllClients { msg } => ReplicaOutput::ToAllClients { msg },
            ReplicaOutput::ToClients { clients, msg } => ReplicaOutput::ToClients { clients, msg },
            ReplicaOutput::ToClientDurably { client, msg, record } => {
                ReplicaOutput::ToClientDurably { client, msg, record }
            }
            ReplicaOutput::ToPeerDurably { shard, batch, records } => {
                ReplicaOutput::ToPeerDurably { shard, batch: batch.encode(), records }
            }
            ReplicaOutput::ToPeer { shard, batch } => ReplicaOutput::ToPeer { shard, batch: batch.encode() },
            ReplicaOutput::Executed { shard, id, ts } => ReplicaOutput::Executed { shard, id, ts },
        }
    }
}

/// A replica's outputs as the node takes them: batches encoded.
pub type NodeOutput = ReplicaOutput<PeerOut>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary of one number per batch, for the envelope's tests.
    #[derive(Debug, PartialEq)]
    struct Num(u8);

    impl PeerVocabulary for Num {
        fn encode(&self) -> PeerOut {
            PeerOut { msg: PeerMsg { from: 1, body: PeerBody::Protocol(vec![self.0]) }, rests_on: u64::from(self.0) }
        }
        fn decode(msg: PeerMsg) -> Result<Self, PeerDecodeError> {
            match msg.body {
                PeerBody::Protocol(b) if b.len() == 1 => Ok(Num(b[0])),
                PeerBody::Protocol(_) | PeerBody::Progress(_) => {
                    Err(PeerDecodeError { from: msg.from, why: "not one byte".into() })
                }
            }
        }
        fn facts(&self) -> PeerFacts {
            PeerFacts::default()
        }
    }

    #[test]
    fn encoding_an_output_encodes_its_batch_and_keeps_everything_else() {
        let out = ReplicaOutput::ToPeer { shard: 2, batch: Num(7) }.encoded();
        let ReplicaOutput::ToPeer { shard: 2, batch } = out else { panic!("{out:?}") };
        assert_eq!(batch.rests_on, 7);
        assert_eq!(Num::decode(batch.msg), Ok(Num(7)));
        let executed = ReplicaOutput::<Num>::Executed { shard: 1, id: TxnId { client: 1, seq: 2 }, ts: 3 }.encoded();
        assert_eq!(executed, ReplicaOutput::Executed { shard: 1, id: TxnId { client: 1, seq: 2 }, ts: 3 });
    }

    #[test]
    fn an_envelope_survives_the_wire_encoding() {
        let msg = PeerMsg { from: 3, body: PeerBody::Protocol(vec![1, 2, 3]) };
        let bytes = postcard::to_stdvec(&msg).unwrap();
        assert_eq!(postcard::from_bytes::<PeerMsg>(&bytes).unwrap(), msg);
    }
}
