//! The role machine of a shard replica, written once for every protocol: a follower applying
//! its Raft log's committed records until its log leads and the protocol says it may serve,
//! then the protocol's leader; a leader that loses leadership rebuilds its follower state by
//! replaying its log (it ran ahead of the log); a leader's snapshot replaces the follower
//! state; the replica's own snapshots are jobs that serialize a fork of the follower state
//! off the event loop (or, for a leader of a group of one, replay the log there); and
//! the [`ShardReplica`] the node drives is implemented once, for every
//! [`RoleMachine<P>`](RoleMachine) (`role_machine/shard_replica.rs`).
//!
//! A protocol ([`ReplicaProtocol`]) supplies its record type, its follower state
//! ([`FollowerCore`], made by its [`FollowerImages`]) and its leader state ([`LeaderCore`]),
//! when an elected replica may serve and how it takes office, and states its policies where
//! protocols differ: what a follower does with a dispatch while it knows no leader
//! ([`FollowerDispatch`]), and whether a rebuilt follower reports the executions of its replay
//! ([`ReplayedExecutions`]). Luigi's fast path is an optional extension
//! ([`ReplicaProtocol::fast_path`]) the node asks for.
//!
//! The role machine holds no log: the node owns the Raft log (a byte log, see
//! [`RaftLog`]) and lends it to every call that may propose, take committed records or read
//! the log's leadership; the protocol's cores propose and take their own record type through
//! the log's typed view ([`ReplicatedLog`]).
//!
//! ```text
//! on message:  replica.on_client(&mut log, ..) / on_peer(&mut log, ..) / log.step_bytes
//! then:        drive the log's readies (send, persist, advance), then replica.turn(&mut log, now, out)
//! ```

use bytes::Bytes;
use luigi_store::Store;
use luigi_txn::log::{LogEntry, ReplicatedLog};
use luigi_txn::msg::{ClientMsg, ServerMsg, TxnReply};
use luigi_txn::peer::ReplicaOutput;
use luigi_txn::types::{ClientId, ShardId, TimeUs, Timestamp, TxnId};

#[cfg(doc)]
use crate::replica_api::{FastPathReplica, ShardReplica};
use crate::replica_api::{LeaderTotals, SnapshotImage, SnapshotJob, Transition};
use crate::snapshot_reads::SnapshotReads;
use crate::waiting::{Held, Waiting};
use luigi_raft::{RaftError, RaftLog, Replay};

mod fast_path;
mod protocol;
mod read_only;
mod shard_replica;

pub use fast_path::FastPathProtocol;
pub use protocol::{
    FollowerCore, FollowerDispatch, FollowerImages, ImageFork, LeaderCore, OutputOf, ReplayedExecutions,
    ReplicaProtocol, ServeAhead, SnapshotView, WritePositions,
};

/// The peer batch type of protocol `P`.
pub type BatchOf<P> = <<P as ReplicaProtocol>::Leader as LeaderCore>::Batch;

/// Counters of role changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaStats {
    /// Times this replica became the serving leader.
    pub promotions: u64,
    /// Times it lost leadership and rebuilt its follower state.
    pub demotions: u64,
    /// Peer messages that did not decode into the protocol's batch (dropped, logged).
    pub undecodable_peer: u64,
}

/// What the replica is now.
#[allow(clippy::large_enum_variant)] // one per replica, swapped rarely
pub(crate) enum Role<P: ReplicaProtocol> {
    Leader(P::Leader),
    Follower(P::Follower),
    /// Only while switching (never observed outside a method).
    Switching,
}

/// One replica of a shard: protocol `P`'s follower or leader over the Raft log its node
/// owns and lends it.
pub struct RoleMachine<P: ReplicaProtocol> {
    pub(crate) protocol: P,
    pub(crate) role: Role<P>,
    committed: Vec<LogEntry<P::Record>>,
    /// Executions of the follower state not yet taken (see [`RoleMachine::take_executed`]).
    executed: Vec<(TxnId, Timestamp)>,
    /// Dispatches that came while no serving leader was known
    /// ([`FollowerDispatch::HoldWhileNoLeader`]).
    waiting: Waiting,
    /// Snapshot reads waiting for the safe time (DESIGN.md rule 23), whatever the role.
    reads: SnapshotReads,
    stats: ReplicaStats,
    /// The counters of the leader states it served with and dropped (see
    /// [`RoleMachine::leader_totals`]).
    retired: LeaderTotals,
    /// Scratch for the typed outputs the seam hands the node encoded.
    typed_out: Vec<OutputOf<P>>,
    /// Peer messages that do not decode are warned of at most once a second.
    pub(crate) undecodable_warns: luigi_txn::throttle::Throttle,
}

/// The replica index (from 0) of the leader `log` knows of; Raft ids are indexes + 1.
pub(crate) fn hint(log: &RaftLog) -> Option<u32> {
    log.leader_id().map(|id| (id - 1) as u32)
}

/// The other replica `log` knows to lead its group, if any: a client should go there.
pub fn other_leader(log: &RaftLog) -> Option<u32> {
    hint(log).filter(|_| !log.is_leader())
}

/// The follower state at the end of `entries`, which follow the snapshot `data` (or the start
/// of the log, from the initial store).
fn rebuild<I: FollowerImages>(
    images: &I,
    data: Option<&[u8]>,
    entries: &[LogEntry<<I::Follower as FollowerCore>::Record>],
) -> Result<I::Follower, RaftError> {
    let mut follower = image_at_snapshot(images, data)?;
    for e in entries {
        follower.apply(e);
    }
    Ok(follower)
}

/// The follower state of the snapshot `data` (or of the start of the log, from the initial
/// store).
fn image_at_snapshot<I: FollowerImages>(images: &I, data: Option<&[u8]>) -> Result<I::Follower, RaftError> {
    match data {
        Some(data) => images.load(data).map_err(RaftError::Invalid),
        None => Ok(images.fresh((images.initial())())),
    }
}

/// A replica's own snapshot in the making ([`RoleMachine::own_snapshot_due`]) when its state
/// ran ahead of its log (the leader of a group of one): the follower state at `index`, rebuilt
/// from the log's latest snapshot (or the initial store) and the records handed out after it,
/// then serialized. It holds only shared or owned data (the replay shares the log's entry
/// payloads and snapshot bytes), so taking it costs the event loop a copy of the entries'
/// headers, and the shell runs it on another thread.
fn replayed_snapshot<I: FollowerImages>(index: u64, images: &I, replay: &Replay) -> Result<SnapshotImage, RaftError> {
    // As `rebuild`, with each record decoded just before it is applied and dropped after.
    let mut follower = image_at_snapshot(images, replay.snapshot_data())?;
    for entry in replay.records_one_by_one::<<I::Follower as FollowerCore>::Record>() {
        follower.apply(&entry?);
    }
    let applied = follower.applied_index();
    if applied != index {
        return Err(RaftError::Invalid(format!("the replay to index {index} rebuilt the state at index {applied}")));
    }
    Ok(SnapshotImage::new(index, Bytes::from(follower.image())))
}

impl<P: ReplicaProtocol> RoleMachine<P> {
    /// A replica of `protocol` over `log` (its node's), starting as a follower: from the log's
    /// snapshot if it has one (a restart after compaction), else from the initial store.
    /// Committed records the log hands back (all of them after a restart) rebuild the rest.
    ///
    /// # Errors
    /// The log's snapshot does not load.
    pub fn start(protocol: P, log: &RaftLog) -> Result<Self, RaftError> {
        let images = protocol.images();
        let reads = SnapshotReads::new(protocol.snapshot_reads());
        let follower = match log.snapshot_data() {
            Some(data) => images.load(data).map_err(RaftError::Invalid)?,
            None => images.fresh((images.initial())()),
        };
        Ok(RoleMachine {
            protocol,
            role: Role::Follower(follower),
            committed: Vec::new(),
            executed: Vec::new(),
            waiting: Waiting::default(),
            reads,
            stats: ReplicaStats::default(),
            retired: LeaderTotals::default(),
            typed_out: Vec::new(),
            undecodable_warns: luigi_txn::throttle::Throttle::default(),
        })
    }

    /// The protocol's part.
    pub fn protocol(&self) -> &P {
        &self.protocol
    }

    /// The protocol's part, mutable (for the protocol's own extensions, e.g. its fast path).
    pub fn protocol_mut(&mut self) -> &mut P {
        &mut self.protocol
    }

    /// Replaces the follower state by the leader's snapshot, already decoded (off the event
    /// loop: decoding a large store's image takes a while) into `restored`. A replica still
    /// serving (its log stepped down in the same batch of messages) is demoted by it. Returns
    /// the follower state it replaced (`None` if this replica was serving), for the caller to
    /// drop where it costs nothing: freeing a large store takes a while too.
    pub fn install_follower(&mut self, restored: P::Follower) -> Option<P::Follower> {
        let replaced = match std::mem::replace(&mut self.role, Role::Switching) {
            Role::Follower(mut f) => {
                self.executed.extend(f.take_executed());
                Some(f)
            }
            Role::Leader(l) => {
                self.retire(&l);
                self.stats.demotions += 1;
                None
            }
            Role::Switching => unreachable!("not observable"),
        };
        self.role = Role::Follower(restored);
        replaced
    }

    /// This replica's own snapshot, once the last record it applied reached `next_at`: a job
    /// that yields (index, bytes) for the shell to compact behind, run off the event loop.
    /// A follower's job serializes a fork of the state it holds at that index
    /// ([`FollowerCore::fork_image`]: its store shares memory with the live one until written
    /// over), so the replica never pauses to serialize a large store and runs no record
    /// twice. A leader's state runs ahead of its log, so a leader with followers takes none
    /// and compacts behind the snapshots they offer. The leader of a group of one has no
    /// followers, and takes the snapshot a follower would: its job rebuilds that state from
    /// the latest snapshot and the records after it (the log keeps both in memory until it
    /// compacts), replaying a period of records a second time, on another core.
    ///
    /// # Errors
    /// An entry is missing from the log's memory (a bug).
    pub fn own_snapshot_due(&self, log: &RaftLog, next_at: u64) -> Result<Option<SnapshotJob>, RaftError> {
        let Some(index) = log.own_snapshot_index(self.is_serving(), next_at) else {
            return Ok(None);
        };
        // A follower holds the state at the last record handed out: it serializes a fork of
        // it (rule 11); no record runs twice.
        if let Role::Follower(f) = &self.role {
            if f.applied_index() == index {
                let fork = f.fork_image();
                return Ok(Some(SnapshotJob::new(index, move || Ok(SnapshotImage::new(index, Bytes::from(fork()))))));
            }
        }
        let replay = log.own_snapshot_replay(index)?;
        let images = self.protocol.images().clone();
        Ok(Some(SnapshotJob::new(index, move || replayed_snapshot(index, &images, &replay))))
    }

    /// True while this replica serves as the shard leader.
    pub fn is_serving(&self) -> bool {
        matches!(self.role, Role::Leader(_))
    }

    /// The serving leader, if this replica is it.
    pub fn leader(&self) -> Option<&P::Leader> {
        match &self.role {
            Role::Leader(l) => Some(l),
            Role::Follower(..) | Role::Switching => None,
        }
    }

    /// The follower state, if this replica is not serving.
    pub fn follower(&self) -> Option<&P::Follower> {
        match &self.role {
            Role::Follower(f) => Some(f),
            Role::Leader(_) | Role::Switching => None,
        }
    }

    /// The store as this replica has it (a follower's lags the leader's).
    pub fn store(&self) -> &Store {
        match &self.role {
            Role::Leader(l) => l.store(),
            Role::Follower(f) => f.store(),
            Role::Switching => unreachable!("not observable"),
        }
    }

    /// Role-change counters.
    pub fn stats(&self) -> ReplicaStats {
        self.stats
    }

    /// The counters of every leader state this replica served with since it started, the
    /// serving one's included: a new leader state counts from 0, so a dropped one's final
    /// counters are kept here and these never go back.
    pub fn leader_totals(&self) -> LeaderTotals {
        let mut totals = self.retired.clone();
        if let Some(l) = self.leader() {
            totals.add(&l.figures());
        }
        totals
    }

    /// Keeps the final counters of `leader`, a leader state being dropped.
    fn retire(&mut self, leader: &P::Leader) {
        self.retired.add(&leader.figures());
    }

    /// Which replica (index from 0) clients should try: the leader `log` (this replica's)
    /// knows of.
    pub fn leader_hint(&self, log: &RaftLog) -> Option<u32> {
        hint(log)
    }

    /// A client's message. A non-serving replica answers a ping with its follower state's
    /// watermark (a valid, if older, promise) and a dispatch as its protocol says
    /// ([`FollowerDispatch`], after the fast path's offer).
    pub fn on_client(
        &mut self,
        log: &mut RaftLog,
        now: TimeUs,
        client: ClientId,
        msg: ClientMsg,
        out: &mut Vec<OutputOf<P>>,
    ) {
        let shard = self.protocol.shard();
        if let ClientMsg::SnapshotRead(read) = msg {
            // Any replica, whatever its role, and no log record (rule 23).
            return self.on_snapshot_read(log, now, client, read, out);
        }
        match &mut self.role {
            Role::Leader(l) => l.on_client(log, now, client, msg, out),
            Role::Follower(f) => match msg {
                ClientMsg::Hello { .. } | ClientMsg::Status => {} // status: answered by the shell
                ClientMsg::SnapshotRead(_) => unreachable!("taken above"),
                ClientMsg::Ping { sent_us } => out.push(OutputOf::<P>::ToClient {
                    client,
                    msg: ServerMsg::pong(shard, now, sent_us, f.pong_watermark()),
                }),
                ClientMsg::Dispatch { txn, sent_us, acked_below, fast } => {
                    let log = &*log;
                    if self.protocol.follower_offer(log, now, client, &txn, fast, out) {
                        return;
                    }
                    match P::FOLLOWER_DISPATCH {
                        FollowerDispatch::AnswerNotLeader => out.push(OutputOf::<P>::ToClient {
                            client,
                            msg: ServerMsg::Reply(TxnReply::not_leader(txn.id, shard, hint(log), now, sent_us)),
                        }),
                        FollowerDispatch::HoldWhileNoLeader => {
                            let leader = other_leader(log);
                            let held = Held { arrived: now, client, txn, sent_us, acked_below, fast };
                            let refused = match leader {
                                Some(_) => Err(held),
                                None => self.waiting.hold(held),
                            };
                            if let Err(held) = refused {
                                out.push(not_leader(shard, leader, now, held));
                            }
                        }
                    }
                }
            },
            Role::Switching => unreachable!("not observable"),
        }
    }

    /// Agreement items from another shard's leader; a non-serving replica drops them (the
    /// sender's recovery or round timeout asks again).
    pub fn on_peer(&mut self, log: &mut RaftLog, now: TimeUs, batch: BatchOf<P>, out: &mut Vec<OutputOf<P>>) -> bool {
        match &mut self.role {
            Role::Leader(l) => {
                l.on_peer(log, now, batch, out);
                true
            }
            Role::Follower(..) => false,
            Role::Switching => unreachable!("not observable"),
        }
    }

    /// Another shard has a new leader; nothing to do unless this replica serves.
    pub fn peer_leader_changed(&mut self, shard: ShardId) {
        if let Role::Leader(l) = &mut self.role {
            l.peer_leader_changed(shard);
        }
    }

    /// After the shell drove the log: applies committed records (follower), switches role if
    /// leadership moved, and ticks the leader. Returns the transition, if any.
    ///
    /// # Errors
    /// A demoted leader that cannot replay its log (a bad entry or snapshot) reports it
    /// rather than serve a wrong state; so does a replica whose log handed back a committed
    /// record that does not decode ([`RaftLog::undecodable`]).
    pub fn turn(
        &mut self,
        log: &mut RaftLog,
        now: TimeUs,
        out: &mut Vec<OutputOf<P>>,
    ) -> Result<Option<Transition>, RaftError> {
        let mut transition = None;
        match &mut self.role {
            Role::Follower(f) => {
                log.take_committed(&mut self.committed);
                for e in self.committed.drain(..) {
                    f.apply(&e);
                    self.protocol.on_committed(&e);
                }
                self.executed.extend(f.take_executed());
                if let Some(bad) = log.undecodable() {
                    return Err(bad);
                }
                if let Some(handover) = self.protocol.may_serve(f, log, now)? {
                    self.promote(log, now, handover);
                    transition = Some(Transition::Promoted);
                }
            }
            Role::Leader(l) => {
                if !log.is_leader() {
                    self.demote(log)?;
                    transition = Some(Transition::Demoted);
                } else {
                    self.protocol.leading(l, log);
                }
            }
            Role::Switching => unreachable!("not observable"),
        }
        self.tend_waiting(log, now, out);
        if let Role::Leader(l) = &mut self.role {
            l.tick(log, now, out);
        }
        self.tend_reads(log, now, out);
        match log.undecodable() {
            Some(bad) => Err(bad),
            None => Ok(transition),
        }
    }

    /// Hands the waiting dispatches to this replica's leader state once it serves, answers
    /// them with the leader's name once another replica is known to lead, and answers those
    /// held too long without a name.
    fn tend_waiting(&mut self, log: &mut RaftLog, now: TimeUs, out: &mut Vec<OutputOf<P>>) {
        if self.waiting.is_empty() {
            return;
        }
        let shard = self.protocol.shard();
        match &mut self.role {
            Role::Leader(l) => {
                for held in self.waiting.release() {
                    let (client, msg) = held.dispatch(now);
                    l.on_client(log, now, client, msg, out);
                }
            }
            Role::Follower(_) => {
                let leader = other_leader(log);
                let answered: Vec<Held> = match leader {
                    Some(_) => self.waiting.release().collect(),
                    None => self.waiting.expired(now),
                };
                for held in answered {
                    out.push(not_leader(shard, leader, now, held));
                }
            }
            Role::Switching => unreachable!("not observable"),
        }
    }

    /// The transactions the follower state executed since the last call, in execution order.
    /// A serving leader reports its own executions as `ReplicaOutput::Executed` outputs
    /// instead.
    pub fn take_executed(&mut self) -> Vec<(TxnId, Timestamp)> {
        if let Role::Follower(f) = &mut self.role {
            self.executed.extend(f.take_executed());
        }
        std::mem::take(&mut self.executed)
    }

    /// When [`RoleMachine::turn`] has timed work (a leader's next deadline).
    pub fn next_deadline(&self) -> Option<TimeUs> {
        let role = match &self.role {
            Role::Leader(l) => l.next_deadline(),
            Role::Follower(..) | Role::Switching => None,
        };
        match (role, self.reads.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes office with the state applied so far and what the protocol handed over.
    fn promote(&mut self, log: &mut RaftLog, now: TimeUs, handover: P::Handover) {
        let Role::Follower(f) = std::mem::replace(&mut self.role, Role::Switching) else {
            unreachable!("promote is called on a follower")
        };
        self.role = Role::Leader(self.protocol.take_office(f, log, now, handover));
        self.stats.promotions += 1;
    }

    /// Stops serving: drops the leader state (it may have executed ahead of its log) and
    /// rebuilds a follower by replaying the log from its snapshot (or the start).
    fn demote(&mut self, log: &mut RaftLog) -> Result<(), RaftError> {
        let Role::Leader(l) = std::mem::replace(&mut self.role, Role::Switching) else {
            unreachable!("demote is called on a leader")
        };
        self.retire(&l);
        let images = self.protocol.images();
        let rebuilt = log.replay_for_rebuild().and_then(|replay| {
            let records = replay.records::<P::Record>()?;
            let follower = rebuild(images, replay.snapshot_data(), &records)?;
            Ok((follower, records))
        });
        match rebuilt {
            Ok((mut follower, records)) => {
                if P::REPLAYED_EXECUTIONS == ReplayedExecutions::Forgotten {
                    follower.take_executed();
                }
                self.protocol.stepped_down(&l, Some(&records));
                self.role = Role::Follower(follower);
                self.stats.demotions += 1;
                Ok(())
            }
            Err(e) => {
                self.protocol.stepped_down(&l, None);
                // Keep a consistent (if empty) follower so the shell can report and stop.
                let empty = self.protocol.images().fresh(Store::new());
                self.role = Role::Follower(empty);
                Err(e)
            }
        }
    }
}

/// The `NotLeader` answer to `held`, naming `leader`.
fn not_leader<B>(shard: ShardId, leader: Option<u32>, now: TimeUs, held: Held) -> ReplicaOutput<B> {
    let (client, msg) = held.not_leader(shard, leader, now);
    ReplicaOutput::ToClient { client, msg }
}
