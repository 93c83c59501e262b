//! What a [`crate::ReplicaNode`] asks its shell to do.

use luigi_protocol::msg::ReplicationMsg;
use luigi_raft::{Ready, SnapshotData};
use luigi_replica::{SnapshotJob, Transition};
use luigi_txn::msg::ServerMsg;
use luigi_txn::peer::PeerMsg;
use luigi_txn::types::{ClientId, ShardId, Timestamp, TxnId};

use crate::snapshots::SnapshotCheck;
use luigi_txn::types::NodeId;

/// One thing to do, in the order the node produced it.
pub enum Effect {
    /// Send `msg` to client `client` (if it is not connected, drop it: the answer stays in
    /// the leader's table for the client's retry).
    ToClient {
        /// Destination.
        client: ClientId,
        /// Message.
        msg: ServerMsg,
    },
    /// Send `msg` (a watermark) to each of `clients`.
    ToClients {
        /// Destinations.
        clients: Vec<ClientId>,
        /// Message.
        msg: ServerMsg,
    },
    /// Send `msg` (a watermark) to every connected client.
    ToAllClients {
        /// Message.
        msg: ServerMsg,
    },
    /// Send agreement items to another shard's leader. If the link cannot take it, hand it
    /// back with [`crate::ReplicaNode::batch_refused`].
    ToPeer {
        /// The node believed to lead the shard.
        to: NodeId,
        /// The message (its protocol's batch, opaque here).
        batch: PeerMsg,
    },
    /// Send a replication message (Raft, a snapshot transfer's, a leader announcement). Best
    /// effort: Raft retransmits, transfers resend and time out, announcements are repeated on
    /// reconnect.
    Replicate {
        /// Destination.
        to: NodeId,
        /// Message.
        msg: ReplicationMsg,
    },
    /// Write a ready's snapshot, entries and hard state (see [`Persist`]).
    Persist(Persist),
    /// Save this snapshot durably and drop the log prefix it covers from the disk.
    SaveSnapshot(SnapshotData),
    /// Make a snapshot of the replica's state (slow for a large store: a shell with threads
    /// runs it off its event loop), then hand the result to
    /// [`crate::ReplicaNode::snapshot_made`].
    MakeSnapshot(SnapshotJob),
    /// Check or decode a snapshot received from another replica (slow for a large store: a
    /// shell with threads runs it off its event loop), then hand the result to
    /// [`crate::ReplicaNode::snapshot_checked`].
    CheckSnapshot(SnapshotCheck),
    /// Drop this former state of the replica (a follower state replaced by an installed
    /// snapshot) off the event loop: freeing a large store takes a while. A shell without
    /// threads drops it at once.
    Discard(Discarded),
    /// The replica's disk lost what it promised: mark its data directory damaged, so that a
    /// restart refuses it instead of running into the same error. The node stops.
    MarkDamaged {
        /// What happened.
        reason: String,
    },
    /// The replica started or stopped serving as its shard's leader (for logs and counters).
    Transition(Transition),
    /// The replica's state machine executed `id`'s piece at `ts` (as the leader, or as a
    /// follower applying the log). For observers (the simulator's checks, metrics); a new
    /// state machine (after a demotion or an installed snapshot) reports its replay again.
    Executed {
        /// The shard.
        shard: ShardId,
        /// The transaction.
        id: TxnId,
        /// Its timestamp.
        ts: Timestamp,
    },
}

/// State the node no longer needs (see [`Effect::Discard`]); dropping it frees it.
pub struct Discarded(#[allow(dead_code)] Box<dyn Send>);

impl Discarded {
    pub(crate) fn new(state: impl Send + 'static) -> Self {
        Discarded(Box::new(state))
    }
}

/// A write of one Raft ready (its messages already taken out). Write `accepts` to the accept
/// log, then `ready`'s snapshot, entries and hard state, in the order the effects came. If
/// `sync`, make it durable and then call [`crate::ReplicaNode::persisted`] with `number`
/// (several may be synced together and reported with the last number). A write of accepts
/// alone carries an empty ready and the number of the last ready issued.
pub struct Persist {
    /// The ready's number.
    pub number: u64,
    /// Whether the node waits for it to be durable.
    pub sync: bool,
    /// What to write.
    pub ready: Ready,
    /// Fast-path accept records for the accept log (`luigi-raft`'s `accepts`), first.
    pub accepts: Vec<Vec<u8>>,
    /// `accepts` are every accept record the replica still needs: once they are durable,
    /// the records written before them may go (`DiskStorage::write_accepts`).
    pub accepts_rewrite: bool,
}
