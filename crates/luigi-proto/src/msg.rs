//! Messages between clients (coordinators) and shard leaders. One enum per direction; the
//! transport frames a [`WireMsg`] so every connection speaks one type.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::procedure::ProcError;
use crate::progress::{LogPos, ProgressReport};
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
        /// the cluster has one (see [`WireMsg::Challenge`]).
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
        /// The shard's watermark.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        watermark: Timestamp,
    },
    /// The shard's watermark moved (sent periodically while the client has work there).
    Watermark {
        /// Shard.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// Its watermark.
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
    /// Watermark: the published one on a serving leader, the last applied marker on a
    /// follower.
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
    pub outcome: Result<Vec<u8>, TxnError>,
    /// The shard's watermark when it answered; `>= ts` unless rejected.
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
    /// A baseline protocol's message (OCC or 2PL with two-phase commit, see
    /// [`BaseItem`]). A Luigi leader drops it: servers of one cluster run one protocol.
    Base(BaseItem),
}

/// Two-phase-commit messages of the baseline protocols (`luigi-baseline`: OCC and 2PL), between
/// a transaction's coordinator (the leader of its first participant shard) and the leaders of
/// its participants. They travel in [`PeerBatch`]es like Luigi's agreement items.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum BaseItem {
    /// Coordinator to participant: execute your piece of `txn` on your current state and
    /// keep its writes buffered (2PL: take its locks first, no-wait).
    Execute {
        /// The whole transaction.
        txn: Arc<Txn>,
        /// The client's acknowledgement (see [`ClientMsg::Dispatch`]).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::seq()"))]
        acked_below: u64,
    },
    /// Participant to coordinator: the piece's output, or why it did not run (its
    /// procedure failed, or a lock was held).
    Executed {
        /// Transaction.
        id: TxnId,
        /// The output, or the error.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::outcome()"))]
        outcome: Result<Vec<u8>, TxnError>,
    },
    /// Coordinator to participant: lock and validate the piece executed for `id`, and log
    /// its writes durably (the vote follows once the record is committed).
    Prepare {
        /// Transaction.
        id: TxnId,
    },
    /// Participant to coordinator: `Ok` once the piece is durably prepared, or why not
    /// (the refusal is durable too: the participant will never prepare `id`).
    Vote {
        /// Transaction.
        id: TxnId,
        /// Prepared, or why not.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::vote()"))]
        outcome: Result<(), String>,
    },
    /// The decision on `id`, to every participant.
    Decide {
        /// Transaction.
        id: TxnId,
        /// Commit (else abort).
        commit: bool,
    },
    /// Coordinator to participant: `id` ended before any prepare (a piece failed or could
    /// not lock); drop its buffered execution and locks.
    Release {
        /// Transaction.
        id: TxnId,
    },
    /// A resolver (a coordinator that timed out, or a participant whose prepared piece waited
    /// too long for a decision) asks for a participant's durable state of `id`. A participant
    /// that never prepared it first logs that it never will.
    Status {
        /// Transaction.
        id: TxnId,
    },
    /// Answer to `Status`.
    StatusIs {
        /// Transaction.
        id: TxnId,
        /// The participant's durable state.
        state: BaseState,
    },
}

/// A participant's durable state of a transaction (see [`BaseItem::StatusIs`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum BaseState {
    /// Prepared (its writes are logged and its locks held), with the piece's output.
    Prepared {
        /// The piece's output.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::blob()"))]
        output: Vec<u8>,
    },
    /// Committed, with the piece's output.
    Committed {
        /// The piece's output.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::blob()"))]
        output: Vec<u8>,
    },
    /// Aborted, or never to be prepared.
    Aborted,
}

/// Every frame on a Luigi connection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum WireMsg {
    /// From a client.
    Client(ClientMsg),
    /// To a client.
    Server(ServerMsg),
    /// Between shard leaders.
    Peer(PeerBatch),
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
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
        shard: ShardId,
        /// The sender's replica index.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::replica()"))]
        replica: u32,
        /// The proof.
        proof: [u8; 32],
    },
    /// A message was refused (malformed, unauthenticated, not allowed on this connection):
    /// why, for the sender's log.
    Refused {
        /// What was wrong.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::text()"))]
        reason: String,
    },
}

/// Server-to-server messages of the replication layer (see [`WireMsg::Replication`]).
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
