//! Messages between clients and shard replicas, for every protocol. One enum per direction;
//! the transport frames them in `luigi_runtime::wire::WireMsg` so every connection speaks
//! one type.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::procedure::ProcError;
use crate::progress::{LogPos, ProgressReport};
use crate::read_only::{SnapshotRead, SnapshotReadReply};
use crate::types::{ClientId, Protocol, ShardId, TimeUs, Timestamp, Txn, TxnId};

/// Client to leader.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum ClientMsg {
    /// First message on a client connection: who is talking.
    Hello {
        /// The client's id. The connection that says it first (while open) owns it: replies
        /// for that client go there, and no other connection may dispatch as it.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::client()"))]
        client: ClientId,
        /// HMAC-SHA256 of the connection's challenge under the cluster's client token, when
        /// the cluster has one (see `luigi_runtime::wire::WireMsg::Challenge`).
        proof: Option<[u8; 32]>,
        /// The protocol the client speaks: a server of a cluster running another one closes
        /// the connection and says why.
        protocol: Protocol,
    },
    /// A whole transaction. Sent again, unchanged, on retry.
    Dispatch {
        /// The transaction.
        txn: Arc<Txn>,
        /// The client's clock when it sent this message (for one-way-delay estimation).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        sent_us: TimeUs,
        /// Every sequence number of this client below this one has been answered, so the
        /// server may forget those answers.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::seq()"))]
        acked_below: u64,
        /// The client sent it to every replica of the shard and asks for the fast path
        /// (DESIGN.md rule 20): the followers accept it and the leader marks its answer.
        /// `false`: the leader's path alone (rule 14); a follower treats it as any dispatch
        /// (it names the leader).
        fast: bool,
    },
    /// Clock probe: the server answers with [`ServerMsg::Pong`].
    Ping {
        /// The client's clock at send time.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        sent_us: TimeUs,
    },
    /// Operator query: the replica answers with [`ServerMsg::Status`] on this connection,
    /// whatever its role. Needs no `Hello` and makes the sender no client of the shard.
    Status,
    /// A read-only transaction's piece, read at a snapshot by any replica, leader or follower
    /// (DESIGN.md rule 23). Answered with [`ServerMsg::SnapshotRead`].
    SnapshotRead(SnapshotRead),
}

/// Leader to client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum ServerMsg {
    /// The answer of one participant. Sent once the shard's watermark has passed `ts`.
    Reply(TxnReply),
    /// Answer to a ping.
    Pong {
        /// Shard that answered.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// Server clock at arrival minus the client's send clock: one-way delay plus offset.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::delta()"))]
        arrival_delta_us: i64,
        /// The ping's send time, echoed: the client measures the round trip, and a sample
        /// that waited in a buffer does not count (rule 1).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        sent_us: TimeUs,
        /// The shard's watermark as clients are told it: the timestamp at or below which it
        /// admits nothing any more (DESIGN.md rule 7).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        watermark: Timestamp,
    },
    /// The shard's watermark moved (sent periodically while the client has work there).
    Watermark {
        /// Shard.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// Its watermark as clients are told it: the timestamp at or below which it admits
        /// nothing any more (DESIGN.md rule 7; transactions below it may still be pending).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        watermark: Timestamp,
    },
    /// Answer to [`ClientMsg::Status`].
    Status(ReplicaStatus),
    /// A replica's progress (DESIGN.md rule 14): what proves a reply's position committed.
    Progress(ProgressReport),
    /// The leader of `shard` in `term` holds a committed floor promise `floor`: every later
    /// leader of the shard admits only above it (DESIGN.md rules 8 and 15).
    Promise {
        /// Shard.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// The promising leader's term.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        term: u64,
        /// The promise.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        floor: Timestamp,
    },
    /// A follower accepted `id` at the coordinator's `ts`, durably, with its order hash (the
    /// fast path, DESIGN.md "The fast path").
    FastAccept {
        /// Shard.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// The accepting replica (index from 0).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::replica()"))]
        replica: u32,
        /// Its Raft term when it accepted: only a leader's answer of the same term counts
        /// with it (a deposed leader's fast answer meets accepts of the new term, which the
        /// new leader's recovery has read or will see in its log).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
        term: u64,
        /// The transaction.
        id: TxnId,
        /// The coordinator's timestamp, unmoved.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ts: Timestamp,
        /// Its order hash at the follower.
        order: u64,
    },
    /// Answer to [`ClientMsg::SnapshotRead`] (DESIGN.md rule 23).
    SnapshotRead(SnapshotReadReply),
}

/// One replica's state as an operator sees it (`luigi status`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct ReplicaStatus {
    /// Its shard.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
    pub shard: ShardId,
    /// Its index in the shard's replica list (from 0).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::replica()"))]
    pub replica: u32,
    /// The transaction protocol it runs (`luigi`, `occ`, `2pl`, `direct`).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::text()"))]
    pub protocol: String,
    /// Its Raft role.
    pub role: ReplicaRole,
    /// True while it serves as the shard leader: a Raft leader is elected first and serves
    /// once it has applied everything committed before its term.
    pub serving: bool,
    /// Raft term.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
    pub term: u64,
    /// The replica (index from 0) it believes leads the shard, if it knows one.
    pub leader: Option<u32>,
    /// Highest log index known committed.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
    pub commit_index: u64,
    /// Highest log index applied (handed to the shard leader or follower state).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
    pub applied_index: u64,
    /// Watermark: a serving leader's (everything at or below it executed; clients are told
    /// the later bound where admission closed, DESIGN.md rule 7), the last applied marker on
    /// a follower.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
    pub watermark: Timestamp,
    /// The replica's clock when it answered (the watermark's lag is `clock_us - watermark`).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
    pub clock_us: TimeUs,
    /// Transactions admitted and not executed yet (a follower: prepared and not executed).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
    pub pending: u64,
    /// Transactions pending on a serving leader for longer than a normal agreement takes.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
    pub stalled_count: u64,
    /// The oldest of them, oldest first (a few).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::few::<StalledTxnInfo>()"))]
    pub stalled: Vec<StalledTxnInfo>,
    /// Clients with an answer table here (each expires two minutes of watermark after its
    /// newest transaction: DESIGN.md rule 7, expiry).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
    pub answer_clients: u64,
    /// Answers kept here, not yet acknowledged or expired.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
    pub answers: u64,
    /// Its clock's measured offsets to the other replicas of its group (DESIGN.md rule 22).
    pub clock: ClockStatus,
}

/// A replica's clock as its group measures it (in a [`ReplicaStatus`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct ClockStatus {
    /// The clock bound, µs (`[protocol] max_clock_offset_us`).
    pub bound_us: u64,
    /// Its clock is beyond the bound from a majority of its group: it does not lead.
    pub beyond_bound: bool,
    /// Its fresh offset estimates, one per peer measured (replica order).
    pub peers: Vec<PeerClockOffset>,
}

/// One peer's clock as a replica measured it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct PeerClockOffset {
    /// The peer (index from 0 in the shard's replica list).
    pub replica: u32,
    /// The peer's clock minus this replica's, µs.
    pub offset_us: i64,
    /// The estimate's error bound (half the round trip of its sample), µs.
    pub error_us: u64,
}

/// A Raft role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum ReplicaRole {
    /// Raft leader (serving, or about to: see [`ReplicaStatus::serving`]).
    Leader,
    /// Follows a leader or waits for one.
    Follower,
    /// Running an election.
    Candidate,
    /// Polling its peers before an election (pre-vote).
    PreCandidate,
}

/// A stalled transaction in a [`ReplicaStatus`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct StalledTxnInfo {
    /// The transaction.
    pub id: TxnId,
    /// Its participants.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::few::<ShardId>()"))]
    pub shards: Vec<ShardId>,
    /// How long it has been pending on this leader.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
    pub age_us: u64,
    /// Its `PREPARE` is committed on this shard.
    pub durable: bool,
}

/// One participant's answer to a transaction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct TxnReply {
    /// The transaction.
    pub id: TxnId,
    /// The answering shard.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
    pub shard: ShardId,
    /// The final timestamp (0 when rejected before admission).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
    pub ts: Timestamp,
    /// What the procedure returned on this shard.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::outcome()"))]
    #[serde(with = "crate::byte_strings::outcome")]
    pub outcome: Result<Vec<u8>, TxnError>,
    /// The shard's watermark as clients are told it (where admission closed, DESIGN.md rule
    /// 7) when it answered; `>= ts` unless rejected.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
    pub watermark: Timestamp,
    /// Server clock at the first arrival of the dispatch minus the client's send clock.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::delta()"))]
    pub arrival_delta_us: i64,
    /// Agreement rounds this transaction needed: 0 single shard (or refused), 1 cross-shard
    /// with equal proposals, 2 when proposals differed (DECIDE and confirmations).
    pub rounds: u8,
    /// The log position this answer depends on, if it may not be committed yet (DESIGN.md
    /// rule 14): the coordinator uses the answer only once the shard's progress reports
    /// prove it committed. `None`: everything it depends on is committed.
    pub position: Option<LogPos>,
    /// The fast path's order hash, when this answer is fast-eligible (DESIGN.md, "Planned,
    /// not built: the fast path"): the leader kept the coordinator's timestamp and admitted
    /// nothing conflicting above it first. `None` on every other answer.
    pub order: Option<u64>,
    /// An early answer (DESIGN.md rule 21): worked out before the transaction was decided
    /// here, on another shard's marked proposal not usable yet, and not executed yet. It
    /// counts only if the whole transaction commits on the fast path; otherwise the
    /// leader's regular answer follows.
    pub early: bool,
}

/// `now - sent_us` as a signed delay, µs (a client's clock may be ahead of the server's):
/// saturating at `i64`'s ends, since `sent_us` comes from the wire and may be anything.
pub fn arrival_delta_us(now: TimeUs, sent_us: TimeUs) -> i64 {
    let delta = i128::from(now) - i128::from(sent_us);
    delta.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl ServerMsg {
    /// A replica of `shard`'s answer, at `now`, to a ping sent at the client's `sent_us`, with
    /// the watermark it can promise (every protocol's replica answers so).
    pub fn pong(shard: ShardId, now: TimeUs, sent_us: TimeUs, watermark: Timestamp) -> Self {
        ServerMsg::Pong { shard, arrival_delta_us: arrival_delta_us(now, sent_us), sent_us, watermark }
    }
}

impl TxnReply {
    /// The answer of a replica that does not serve its shard to a dispatch of `id` sent at
    /// the client's `sent_us` and arriving at `now`: nothing was stored, try `hint` (every
    /// protocol's replica answers so).
    pub fn not_leader(id: TxnId, shard: ShardId, hint: Option<u32>, now: TimeUs, sent_us: TimeUs) -> Self {
        TxnReply {
            id,
            shard,
            ts: 0,
            outcome: Err(TxnError::NotLeader { hint }),
            watermark: 0,
            arrival_delta_us: arrival_delta_us(now, sent_us),
            rounds: 0,
            position: None,
            order: None,
            early: false,
        }
    }
}

/// Why a participant did not return a procedure result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum TxnError {
    /// The procedure failed or aborted; its writes on this shard were undone.
    #[error(transparent)]
    Proc(#[from] ProcError),
    /// Refused at admission; never ordered or executed on this shard.
    #[error("rejected: {0}")]
    Rejected(String),
    /// A retry of an answer the client had already acknowledged (and the server forgot).
    #[error("answer already acknowledged and discarded")]
    Forgotten,
    /// A dispatch this shard does not know, stamped so long ago that its client's answers
    /// may have expired here (DESIGN.md rule 7, expiry): it may or may not have executed,
    /// and it is not executed now. Definite for the server, unknown for the client.
    #[error("answer expired: {0}")]
    Expired(String),
    /// This server is not (or not yet) its shard's leader; nothing was stored, try again
    /// (the coordinator resends after its retry timeout).
    #[error("not the leader of its shard")]
    NotLeader {
        /// The replica (index from 0) this one believes leads, if it knows one.
        hint: Option<u32>,
    },
    /// The leader's log is full (its followers are slow or unreachable); nothing was stored,
    /// try again soon (the coordinator treats it like `NotLeader`).
    #[error("shard busy: {0}")]
    Busy(String),
    /// The protocol aborted the transaction (a baseline's lock conflict, failed validation or
    /// lost coordinator): none of its writes is installed anywhere, and none ever will be.
    /// The client may submit it again as a new transaction. Luigi never answers this.
    #[error("aborted: {0}")]
    Aborted(String),
}
