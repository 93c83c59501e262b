//! What travels between servers: Luigi's leaders' peer batches (its agreement items, which
//! travel through the node opaque, encoded by [`PeerBatch`]'s [`PeerVocabulary`] in a
//! neutral [`luigi_txn::peer::PeerMsg`]), the replication layer's messages. The frame every
//! connection speaks is `luigi_runtime::wire::WireMsg`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use luigi_txn::peer::{
    decode_batch, encode_batch, PeerBody, PeerDecodeError, PeerFacts, PeerMsg, PeerOut, PeerVocabulary,
};
use luigi_txn::progress::{LogPos, ProgressReport};
use luigi_txn::types::{ShardId, TimeUs, Timestamp, Txn, TxnId};

/// Leader to leader: a batch of agreement items for one peer, with the sender's watermark.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct PeerBatch {
    /// Sending shard.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
    pub from: ShardId,
    /// The sender's watermark when it flushed the batch.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
    pub watermark: Timestamp,
    /// Items in the order they were produced.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::few::<PeerItem>()"))]
    pub items: Vec<PeerItem>,
}

impl PeerBatch {
    /// The highest position of the sender's log this batch's proposals rest on (a
    /// `Propose` sent at admission, rule 14), or 0.
    pub fn rests_on(&self) -> u64 {
        self.items
            .iter()
            .filter_map(|item| if let PeerItem::Propose { at: Some(pos), .. } = item { Some(pos.index) } else { None })
            .max()
            .unwrap_or(0)
    }
}

/// Luigi's batches travel as their postcard encoding; a node's progress report becomes a
/// batch of one [`PeerItem::Progress`].
impl PeerVocabulary for PeerBatch {
    fn encode(&self) -> PeerOut {
        PeerOut { msg: encode_batch(self.from, self), rests_on: self.rests_on() }
    }

    fn decode(msg: PeerMsg) -> Result<Self, PeerDecodeError> {
        let from = msg.from;
        match msg.body {
            PeerBody::Protocol(bytes) => decode_batch(from, &bytes, |b: &PeerBatch| b.from),
            PeerBody::Progress(report) => Ok(PeerBatch { from, watermark: 0, items: vec![PeerItem::Progress(report)] }),
        }
    }

    fn facts(&self) -> PeerFacts {
        let mut facts = PeerFacts::default();
        for item in &self.items {
            match item {
                PeerItem::Propose { id, .. } => facts.proposals.push(*id),
                PeerItem::Confirm { .. } => facts.decides = true,
                PeerItem::Recover { txn, .. } => facts.admits.push(txn.id),
                PeerItem::Executed { .. }
                | PeerItem::Refuse { .. }
                | PeerItem::Acknowledged { .. }
                | PeerItem::Applied { .. }
                | PeerItem::Progress(_)
                | PeerItem::FastAccept { .. } => {}
            }
        }
        facts
    }
}

/// One agreement message between participant leaders (DESIGN.md rule 4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum PeerItem {
    /// I prepared `id` with proposal `ts`. Sent at admission (DESIGN.md rule 14): `at` is the
    /// position of my `PREPARE`, and the receiver uses the proposal only once my shard's
    /// progress reports prove it committed. `None`: the `PREPARE` is committed already.
    Propose {
        /// Transaction.
        id: TxnId,
        /// The sender's proposal.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ts: Timestamp,
        /// Where the sender's `PREPARE` is, if it may not be committed yet.
        at: Option<LogPos>,
        /// Marked fast (DESIGN.md rule 16, the cross-shard fast path): the transaction is
        /// fast-eligible at the sender (its proposal is the coordinator's timestamp, F2
        /// holds) and the sender's vote for it is durable. The receiver may use it before
        /// its proof once every follower of the sender's term accepted it (rule 18).
        fast: bool,
    },
    /// I durably adopted the final timestamp `ts` of `id` (my `DECIDE` is committed).
    Confirm {
        /// Transaction.
        id: TxnId,
        /// Final timestamp.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ts: Timestamp,
    },
    /// Recovery (DESIGN.md, failure handling): my `PREPARE` of `txn` is committed with
    /// proposal `ts` and its agreement stalled (or I am a new leader that found it
    /// undecided in my log). Answer with what you know: your proposal (and `Confirm` if you
    /// adopted a final timestamp), the final timestamp if you executed it, `Refuse` if you
    /// refused or aborted it; if you never saw it, prepare it now.
    Recover {
        /// The whole transaction, so that a participant that never got its dispatch (the
        /// coordinator died) can prepare it.
        txn: Arc<Txn>,
        /// The sender's logged proposal.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ts: Timestamp,
    },
    /// Answer to `Recover`: I executed `id` at its final timestamp `ts` (the maximum of all
    /// proposals, adopted by every participant).
    Executed {
        /// Transaction.
        id: TxnId,
        /// Final timestamp.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ts: Timestamp,
    },
    /// I refused `id` at admission; it will never be prepared here, so abort it.
    Refuse {
        /// Transaction.
        id: TxnId,
        /// Why (passed on to the client).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::text()"))]
        reason: String,
    },
    /// Answer to `Recover`: I answered `id` and its client has acknowledged that answer, and
    /// I keep no outcome of it (kept until every other participant applied past it, so a
    /// recovering participant is not told this; counted, nothing is inferred from it).
    Acknowledged {
        /// Transaction.
        id: TxnId,
    },
    /// My shard's committed `Applied` marker is at `ts` (sent when it moves, and to a new
    /// leader): the receiver stops keeping cross-shard outcomes my recovery could need up to
    /// there (DESIGN.md rule 9; `leader::outcomes`).
    Applied {
        /// The sender's committed marker.
        ts: Timestamp,
    },
    /// A replica of the sending shard reports its progress (DESIGN.md rule 14): what proves
    /// that shard's proposals committed. Sent by followers and leaders alike.
    Progress(ProgressReport),
    /// A follower of the sending shard accepted cross-shard transaction `id` at `ts` in its
    /// Raft term `term`, durably (DESIGN.md rule 17: the fast path's `FastAccept`, sent to
    /// the other participants' leaders too).
    FastAccept {
        /// The accepting replica (index from 0).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::replica()"))]
        replica: u32,
        /// Its Raft term when it accepted.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        term: u64,
        /// Transaction.
        id: TxnId,
        /// The timestamp it accepted at (the coordinator's).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ts: Timestamp,
    },
}

/// Server-to-server messages of the replication layer (framed as `luigi_runtime::wire::WireMsg::Replication`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum ReplicationMsg {
    /// Between the replicas of one shard: the sender's connection to its leader of `term`
    /// broke (a replica that lost its own too may start the election at once; see
    /// `luigi-raft`'s `RaftLog::peer_lost_leader`).
    LeaderLost {
        /// The shard whose group this is.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// Sending replica (Raft id, from 1).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::raft_id()"))]
        from: u64,
        /// The term of the leader lost.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        term: u64,
        /// The term and index of the sender's last log entry (the most up-to-date log of
        /// those that lost the leader runs first: the others can vote for it).
        last: (u64, u64),
    },
    /// Between the replicas of one shard: an encoded Raft message.
    Raft {
        /// The shard whose group this is.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// Sending replica (Raft id, from 1).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::raft_id()"))]
        from: u64,
        /// The Raft message, protobuf-encoded.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::blob()"))]
        #[serde(with = "luigi_txn::byte_strings::one")]
        bytes: Vec<u8>,
    },
    /// Between the replicas of one shard, sender to receiver: a snapshot transfer starts (or
    /// its sender asks where it stands: sent again, it is answered with the receiver's
    /// progress). Its data follows in [`ReplicationMsg::SnapshotChunk`]s once the receiver
    /// acknowledged this (see `luigi-node`'s `snapshot_transfer` for the protocol).
    SnapshotBegin {
        /// The shard whose group this is.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// Sending replica (Raft id, from 1).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::raft_id()"))]
        from: u64,
        /// The transfer, numbered by its sender.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        transfer: TransferId,
        /// What the snapshot is for.
        kind: SnapshotKind,
        /// Last log index the snapshot covers.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        index: u64,
        /// Size of the whole snapshot, bytes.
        total_bytes: u64,
        /// Size of every chunk but the last, bytes.
        chunk_bytes: u32,
        /// CRC-32 (IEEE) of the whole snapshot.
        crc32: u32,
    },
    /// Sender to receiver: chunk `seq` (from 0) of a snapshot transfer.
    SnapshotChunk {
        /// The shard whose group this is.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// Sending replica (Raft id, from 1).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::raft_id()"))]
        from: u64,
        /// The transfer.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        transfer: TransferId,
        /// The chunk's number: it holds bytes `seq * chunk_bytes ..` of the snapshot.
        seq: u32,
        /// CRC-32 (IEEE) of `data`.
        crc32: u32,
        /// The bytes.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::blob()"))]
        #[serde(with = "luigi_txn::byte_strings::one")]
        data: Vec<u8>,
    },
    /// Receiver to sender: every chunk below `next` is held (`next` = the chunk count: the
    /// whole snapshot is held and its checksum matched).
    SnapshotAck {
        /// The shard whose group this is.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// Sending replica of this acknowledgement (Raft id, from 1): the receiver.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::raft_id()"))]
        from: u64,
        /// The transfer (the sender's number).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        transfer: TransferId,
        /// The first chunk not held.
        next: u32,
        /// Send again from `next` now (the answer to a `SnapshotBegin`, or chunk `next` was
        /// lost or damaged).
        resend: bool,
    },
    /// Sender to receiver: the transfer is abandoned (the receiver drops what it holds).
    SnapshotCancel {
        /// The shard whose group this is.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// Sending replica (Raft id, from 1).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::raft_id()"))]
        from: u64,
        /// The transfer.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        transfer: TransferId,
    },
    /// Receiver to sender: the transfer is refused, and over.
    SnapshotRefuse {
        /// The shard whose group this is.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// Sending replica of this refusal (Raft id, from 1): the receiver.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::raft_id()"))]
        from: u64,
        /// The transfer (the sender's number).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        transfer: TransferId,
        /// Why.
        reason: SnapshotRefusal,
    },
    /// Between servers of different shards: replica `replica` of `shard` now serves as its
    /// leader; send agreement batches for `shard` there.
    LeaderIs {
        /// The shard.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// Its serving replica (index from 0).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::replica()"))]
        replica: u32,
        /// The Raft term it leads in: an announcement from an older term is stale.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        term: u64,
    },
    /// Between the replicas of one shard: a candidate for (or the leader of) `term`, before
    /// it serves, asks for the receiver's undecided fast-path accepts and votes (DESIGN.md,
    /// the fast path, R1-R3).
    AcceptsQuery {
        /// The shard whose group this is.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// The asking replica (Raft id, from 1).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::raft_id()"))]
        from: u64,
        /// Its term.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        term: u64,
    },
    /// Between the replicas of one shard, about once a second to each peer: the sender's
    /// clock, for the receiver to echo (DESIGN.md rule 22: servers measure their clock
    /// offsets to their peers; see `luigi-node`'s `clock_offsets`).
    ClockProbe {
        /// The shard whose group this is.
        shard: ShardId,
        /// Sending replica (Raft id, from 1).
        from: u64,
        /// The sender's clock when it sent the probe, µs.
        sent_us: TimeUs,
    },
    /// The answer to [`ReplicationMsg::ClockProbe`]: the probe's time, echoed, and the
    /// answering replica's clock when it answered.
    ClockEcho {
        /// The shard whose group this is.
        shard: ShardId,
        /// The answering replica (Raft id, from 1).
        from: u64,
        /// The probe's `sent_us`, unchanged.
        probe_sent_us: TimeUs,
        /// The answering replica's clock when it answered, µs.
        echo_us: TimeUs,
    },
    /// The answer to [`ReplicationMsg::AcceptsQuery`]: every undecided accept record
    /// (`fast::AcceptRecord`, encoded) of the answering replica.
    Accepts {
        /// The shard whose group this is.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// The answering replica (Raft id, from 1).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::raft_id()"))]
        from: u64,
        /// The term asked about.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        term: u64,
        /// The records.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::accept_records()"))]
        #[serde(with = "luigi_txn::byte_strings::list")]
        records: Vec<Vec<u8>>,
    },
}

/// A snapshot transfer's number, chosen by its sender.
pub type TransferId = u64;

/// What a transferred snapshot is for (see [`ReplicationMsg::SnapshotBegin`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum SnapshotKind {
    /// The leader's snapshot, for a follower that lags behind its compaction. Once whole, the
    /// follower steps it into Raft as this `MsgSnapshot`, whose data travelled apart.
    Install {
        /// The Raft `MsgSnapshot` without its data (its metadata), protobuf-encoded.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::blob()"))]
        #[serde(with = "luigi_txn::byte_strings::one")]
        envelope: Vec<u8>,
    },
    /// A follower's own snapshot, offered to its leader, which cannot snapshot its own state
    /// (it runs ahead of the log's `Applied` markers) and compacts its log behind this one.
    Offer,
}

/// Why a receiver refused a snapshot transfer (see [`ReplicationMsg::SnapshotRefuse`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum SnapshotRefusal {
    /// It receives as many transfers as it may at once.
    Busy,
    /// It does not take this kind now (an offer to a replica that does not lead, a leader's
    /// snapshot to the leader).
    Unwanted,
    /// The snapshot is larger than it takes.
    TooLarge,
    /// The transfer's description does not add up (chunk size, count, envelope).
    Malformed,
    /// The reassembled snapshot does not match its checksum.
    Corrupt,
    /// It knows no such transfer (it restarted, or dropped it after a silence).
    Unknown,
}
