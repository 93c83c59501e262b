//! One replica of a replicated shard: the shard leader or a follower, over the same Raft log,
//! switching as leadership moves (DESIGN.md, failure handling). Sans-I/O like its parts: the
//! runtime and the simulator drive it the same way:
//!
//! ```text
//! on message:  replica.on_client / on_peer / log_mut().step_bytes
//! then:        drive the log's readies (send, persist, advance), then replica.turn(now, out)
//! ```
//!
//! A replica starts as a follower applying committed records. When its log becomes leader and
//! an entry of the new term (the election no-op) is committed and applied, everything any
//! earlier leader made durable is in its state: it becomes a [`ShardLeader`] through
//! [`ShardLeader::recover`]. A leader that loses leadership drops its state (it may have
//! executed ahead of the log's `Applied` markers) and rebuilds a follower by replaying its
//! log from the start.

use luigi_proto::fast::{to_recover, AcceptRecord, Accepted, AcceptedTxn, Acceptor, NotAccepted};
use luigi_proto::leader::admissible::Admission;
use luigi_proto::leader::answers::Known;
use luigi_proto::leader::follower::{Follower, SnapshotError};
use luigi_proto::leader::{LeaderConfig, LeaderOutput, ShardLeader};
use luigi_proto::log::LogRecord;
use luigi_proto::log::{LogEntry, ReplicatedLog};
use luigi_proto::msg::{ClientMsg, PeerBatch, PeerItem, ReplicaStatus, ServerMsg, StalledTxnInfo};
use luigi_proto::procedure::Registry;
use luigi_proto::types::{ClientId, ShardId, TimeUs, Timestamp, Txn, TxnId};
use luigi_store::Store;
use std::any::Any;
use std::sync::Arc;

use crate::replica_api::{
    BuildError, LogControl, ReplicaFactory, ReplicaSetup, ShardReplica, SnapshotDecoder, StateBox,
};
pub use crate::replica_api::{SnapshotImage, SnapshotJob, Transition};
use crate::waiting::{Held, Waiting};
use crate::{RaftError, RaftLog, Replay};

/// Builds a shard's initial store: a workload's population (e.g. TPC-C's tables, generated
/// from a seed, the same on every replica), or an empty store. It is the state before the
/// log's first entry: a replica calls it when it starts without a snapshot, and when it
/// rebuilds its state by replaying its log from the start.
pub type InitialStore = Arc<dyn Fn() -> Store + Send + Sync>;

/// The [`InitialStore`] of a shard that starts empty.
pub fn empty_store() -> InitialStore {
    Arc::new(Store::new)
}

/// The replica index (from 0) of the leader `log` knows of; Raft ids are indexes + 1.
fn hint(log: &RaftLog) -> Option<u32> {
    log.leader_id().map(|id| (id - 1) as u32)
}

/// The other replica `log` knows to lead its group, if any: a client should go there. While
/// there is none (an election, or this replica won one and waits for its first commit),
/// dispatches wait here ([`Waiting`]).
fn other_leader(log: &RaftLog) -> Option<u32> {
    hint(log).filter(|_| !log.is_leader())
}

/// A replica's own snapshot in the making ([`Replica::own_snapshot_due`]): the follower
/// state at the job's index, rebuilt from the log's latest snapshot (or the initial store)
/// and the records handed out after it, then serialized. It holds only shared or owned data
/// (the replay shares the log's entry payloads and snapshot bytes), so taking it costs the
/// event loop a copy of the entries' headers, and the shell runs it on another thread while
/// the replica goes on.
fn follower_snapshot(
    index: u64,
    shard: ShardId,
    registry: Registry,
    initial: InitialStore,
    replay: Replay,
    answer_expiry_us: u64,
) -> Result<SnapshotImage, RaftError> {
    let records = replay.records()?;
    let follower = rebuild(shard, &registry, &initial, replay.snapshot_data(), &records, answer_expiry_us)?;
    let applied = follower.stats().applied_index;
    if applied != index {
        return Err(RaftError::Invalid(format!("the replay to index {index} rebuilt the state at index {applied}")));
    }
    Ok(SnapshotImage::new(index, follower.snapshot().into()))
}

/// The follower state of `shard` at the end of `entries`, which follow the snapshot `data`
/// (or the start of the log, from the `initial` store).
fn rebuild(
    shard: ShardId,
    registry: &Registry,
    initial: &InitialStore,
    data: Option<&[u8]>,
    entries: &[LogEntry],
    answer_expiry_us: u64,
) -> Result<Follower, RaftError> {
    let follower = match data {
        Some(data) => {
            Follower::from_snapshot(shard, registry.clone(), data).map_err(|e| RaftError::Invalid(e.to_string()))?
        }
        None => Follower::new(shard, initial(), registry.clone()),
    };
    let mut follower = follower.with_answer_expiry(answer_expiry_us);
    for e in entries {
        follower.apply(e);
    }
    Ok(follower)
}

/// What the replica is now.
#[allow(clippy::large_enum_variant)] // one per replica, swapped rarely
enum State {
    Leader(ShardLeader<RaftLog>),
    Follower(Follower, RaftLog),
    /// Only while switching (never observed outside a method).
    Switching,
}

/// Counters of role changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaStats {
    /// Times this replica became the serving leader.
    pub promotions: u64,
    /// Times it lost leadership and rebuilt its follower state.
    pub demotions: u64,
}

/// A replica of one shard.
pub struct Replica {
    config: LeaderConfig,
    registry: Registry,
    initial: InitialStore,
    state: State,
    committed: Vec<LogEntry>,
    /// Executions of the follower state not yet taken (see [`Replica::take_executed`]).
    executed: Vec<(TxnId, Timestamp)>,
    /// Dispatches that came while no serving leader was known.
    waiting: Waiting,
    /// The fast path's recovery round of the term this replica runs for, or leads and does
    /// not serve yet.
    recovery: Option<FastRecovery>,
    /// The fast path's accept rule and undecided accepts (DESIGN.md, the fast path), when
    /// the cluster runs it ([`LeaderConfig::fast_path`]); fed by the committed log while
    /// this replica follows.
    acceptor: Option<Acceptor>,
    /// A leader that serves before its recovered `PREPARE`s commit keeps the accepts it
    /// held until its commit reaches this index: dying first, it leaves them recoverable.
    accepts_kept_until: Option<u64>,
    /// The term this replica won and the index of the floor promise it proposed on winning
    /// it (DESIGN.md rule 8).
    own_floor: Option<(u64, u64)>,
    stats: ReplicaStats,
}

impl Replica {
    /// A replica over `log`, starting as a follower: from the log's snapshot if it has one
    /// (a restart after compaction), else from the `initial` store. Committed records the log
    /// hands back (all of them after a restart) rebuild the rest.
    ///
    /// # Errors
    /// The log's snapshot does not load.
    pub fn new(
        config: LeaderConfig,
        registry: Registry,
        initial: InitialStore,
        log: RaftLog,
    ) -> Result<Self, SnapshotError> {
        let follower = match log.snapshot_data() {
            Some(data) => Follower::from_snapshot(config.shard, registry.clone(), data)?,
            None => Follower::new(config.shard, initial(), registry.clone()),
        }
        .with_answer_expiry(config.answer_expiry_us);
        let acceptor = config.fast_path.then(|| empty_acceptor(&config));
        Ok(Self {
            config,
            registry,
            initial,
            state: State::Follower(follower, log),
            committed: Vec::new(),
            executed: Vec::new(),
            waiting: Waiting::default(),
            recovery: None,
            accepts_kept_until: None,
            own_floor: None,
            acceptor,
            stats: ReplicaStats::default(),
        })
    }

    /// The log installed a snapshot from the leader (this replica lagged behind its
    /// compaction): the follower state is replaced by the snapshot's. A replica still
    /// serving (its log stepped down in the same batch of messages) is demoted by it. Returns
    /// the replaced follower state (see [`Replica::install_follower`]).
    ///
    /// # Errors
    /// The snapshot does not load (the replica cannot go on).
    pub fn install_snapshot(&mut self, data: &[u8]) -> Result<Option<Follower>, SnapshotError> {
        let restored = Follower::from_snapshot(self.config.shard, self.registry.clone(), data)?;
        Ok(self.install_follower(restored))
    }

    /// As [`Replica::install_snapshot`], with the snapshot already decoded (off the event
    /// loop: decoding a large store's image takes a while) into `restored`, a follower of
    /// this shard with this replica's procedures. Returns the follower state it replaced
    /// (`None` if this replica was serving), for the caller to drop where it costs nothing:
    /// freeing a large store takes a while too.
    pub fn install_follower(&mut self, restored: Follower) -> Option<Follower> {
        let restored = restored.with_answer_expiry(self.config.answer_expiry_us);
        let (log, replaced) = match std::mem::replace(&mut self.state, State::Switching) {
            State::Follower(mut f, log) => {
                self.executed.extend(f.take_executed());
                (log, Some(f))
            }
            State::Leader(l) => {
                self.stats.demotions += 1;
                (l.into_log(), None)
            }
            State::Switching => unreachable!("not observable"),
        };
        self.state = State::Follower(restored, log);
        replaced
    }

    /// This replica's own snapshot, once the last record it applied reached `next_at`: a job
    /// that yields (index, bytes) for the shell to compact behind, run off the event loop.
    /// A follower's job rebuilds the state it holds at that index from its latest snapshot
    /// and the records after it (the log keeps both in memory until it compacts), so the
    /// replica never pauses to serialize a large store; the price is replaying a period of
    /// records a second time, on another core. A leader's state runs ahead of its log (it
    /// executes before it logs `Applied` markers), so a leader with followers takes none and
    /// compacts behind the snapshots they offer. The leader of a group of one has no
    /// followers, and takes the snapshot a follower would, the same way.
    ///
    /// # Errors
    /// An entry is missing from the log's memory (a bug).
    pub fn own_snapshot_due(&self, next_at: u64) -> Result<Option<SnapshotJob>, RaftError> {
        let Some((index, replay)) = self.log().own_snapshot_replay(self.is_serving(), next_at)? else {
            return Ok(None);
        };
        let (shard, registry, initial) = (self.config.shard, self.registry.clone(), self.initial.clone());
        let expiry = self.config.answer_expiry_us;
        Ok(Some(SnapshotJob::new(index, move || follower_snapshot(index, shard, registry, initial, replay, expiry))))
    }

    /// The Raft log (for the shell to step messages into and drive its readies).
    pub fn log_mut(&mut self) -> &mut RaftLog {
        match &mut self.state {
            State::Leader(l) => l.log_mut(),
            State::Follower(_, log) => log,
            State::Switching => unreachable!("not observable"),
        }
    }

    /// The Raft log, read-only (role, term, commit and applied indexes for status reports).
    pub fn log(&self) -> &RaftLog {
        match &self.state {
            State::Leader(l) => l.log(),
            State::Follower(_, log) => log,
            State::Switching => unreachable!("not observable"),
        }
    }

    /// True while this replica serves as the shard leader.
    pub fn is_serving(&self) -> bool {
        matches!(self.state, State::Leader(_))
    }

    /// The serving leader, if this replica is it.
    pub fn leader(&self) -> Option<&ShardLeader<RaftLog>> {
        match &self.state {
            State::Leader(l) => Some(l),
            State::Follower(..) | State::Switching => None,
        }
    }

    /// The follower state, if this replica is not serving.
    pub fn follower(&self) -> Option<&Follower> {
        match &self.state {
            State::Follower(f, _) => Some(f),
            State::Leader(_) | State::Switching => None,
        }
    }

    /// The store as this replica has it (a follower's lags the leader's).
    pub fn store(&self) -> &Store {
        match &self.state {
            State::Leader(l) => l.store(),
            State::Follower(f, _) => f.store(),
            State::Switching => unreachable!("not observable"),
        }
    }

    /// Role-change counters.
    pub fn stats(&self) -> ReplicaStats {
        self.stats
    }

    /// Which replica (index from 0) clients should try: the leader this replica knows of.
    pub fn leader_hint(&self) -> Option<u32> {
        hint(self.log())
    }

    /// A client's message. A non-serving replica answers a dispatch with `NotLeader` and the
    /// leader it knows of, or holds it while it knows none (see [`Waiting`]), and answers a
    /// ping with its applied watermark (a valid, if older, promise).
    pub fn on_client(&mut self, now: TimeUs, client: ClientId, msg: ClientMsg, out: &mut Vec<LeaderOutput>) {
        match &mut self.state {
            State::Leader(l) => l.on_client(now, client, msg, out),
            State::Follower(f, log) => match msg {
                ClientMsg::Hello { .. } | ClientMsg::Status => {} // status: answered by the shell
                ClientMsg::Ping { sent_us } => out.push(LeaderOutput::ToClient {
                    client,
                    msg: ServerMsg::pong(self.config.shard, now, sent_us, f.applied_ts()),
                }),
                ClientMsg::Dispatch { txn, sent_us, acked_below, fast } => {
                    let leader = other_leader(log);
                    if let (Some(acceptor), Some(_), true) = (self.acceptor.as_mut(), leader, fast) {
                        // The fast path: the client sent it to the leader too. A follower
                        // checks it as the leader does (rule 22): what the leader refuses
                        // must never be recovered from the followers' accepts.
                        let unchecked = self.config.mutations.skip_fast_accept_check;
                        if unchecked || Admission::new(&self.config, &self.registry).check(&txn, now).is_ok() {
                            let me = (log.id() - 1) as u32;
                            let term = log.term();
                            fast_accept(acceptor, (self.config.shard, me, term), now, client, &txn, out);
                        }
                        return;
                    }
                    let held = Held { arrived: now, client, txn, sent_us, acked_below, fast };
                    let refused = match leader {
                        Some(_) => Err(held),
                        None => self.waiting.hold(held),
                    };
                    if let Err(held) = refused {
                        out.push(not_leader(self.config.shard, leader, now, held));
                    }
                }
            },
            State::Switching => unreachable!("not observable"),
        }
    }

    /// Agreement items from another shard's leader; a non-serving replica drops them (the
    /// sender's recovery asks again).
    pub fn on_peer(&mut self, now: TimeUs, batch: PeerBatch, out: &mut Vec<LeaderOutput>) -> bool {
        match &mut self.state {
            State::Leader(l) => {
                l.on_peer(now, batch, out);
                true
            }
            State::Follower(..) => false,
            State::Switching => unreachable!("not observable"),
        }
    }

    /// Another shard has a new leader (see [`ShardLeader::peer_leader_changed`]); nothing to
    /// do unless this replica serves.
    pub fn peer_leader_changed(&mut self, shard: ShardId) {
        if let State::Leader(l) = &mut self.state {
            l.peer_leader_changed(shard);
        }
    }

    /// After the shell drove the log: applies committed records (follower), switches role if
    /// leadership moved, and ticks the leader. Returns the transition, if any.
    ///
    /// # Errors
    /// A demoted leader that cannot replay its log (a bad entry or snapshot) reports it
    /// rather than serve a wrong state.
    pub fn turn(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) -> Result<Option<Transition>, RaftError> {
        let mut transition = None;
        match &mut self.state {
            State::Follower(f, log) => {
                log.take_committed(&mut self.committed);
                for e in self.committed.drain(..) {
                    f.apply(&e);
                    if let Some(a) = self.acceptor.as_mut() {
                        a.on_committed(self.config.shard, &e.record);
                    }
                }
                self.executed.extend(f.take_executed());
                if log.is_leader() && self.own_floor.is_none_or(|(term, _)| term != log.term()) {
                    // Its first floor promise leaves with its no-op and commits with it.
                    // Proposed once serving, it committed a round trip later, and until then
                    // the watermark stayed under the last leader's promise, so the first
                    // answers after a failover waited for it (rule 8).
                    log.resume_probes();
                    if let Ok(index) =
                        log.propose(LogRecord::Floor { ts: now.saturating_add(self.config.floor_lookahead_us) })
                    {
                        self.own_floor = Some((log.term(), index));
                    }
                }
                // Everything committed must be applied before serving (see `may_serve`), and
                // with the fast path, what may have been fast-committed recovered (R1-R3):
                // from the election on, in parallel with the no-op.
                let skip = self.config.mutations.skip_fast_recovery;
                let admission = Admission::new(&self.config, &self.registry);
                if log.is_leader()
                    && fast_recovered(self.acceptor.as_ref(), &mut self.recovery, f, log, &admission, skip)?
                    && log.may_serve()
                {
                    let tail = log.records_after_handed_out()?;
                    self.promote(now, tail);
                    transition = Some(Transition::Promoted);
                }
            }
            State::Leader(l) => {
                if !l.log().is_leader() {
                    self.demote()?;
                    transition = Some(Transition::Demoted);
                } else if self.accepts_kept_until.is_some_and(|last| l.log().commit_index() >= last) {
                    // Its recovered PREPAREs are committed: the accepts decide nothing more.
                    self.accepts_kept_until = None;
                    self.acceptor = Some(empty_acceptor(&self.config));
                }
            }
            State::Switching => unreachable!("not observable"),
        }
        self.tend_waiting(now, out);
        if let State::Leader(l) = &mut self.state {
            l.tick(now, out);
        }
        Ok(transition)
    }

    /// Hands the waiting dispatches to this replica's leader state once it serves, answers
    /// them with the leader's name once another replica is known to lead, and answers those
    /// held too long without a name.
    fn tend_waiting(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        if self.waiting.is_empty() {
            return;
        }
        let shard = self.config.shard;
        match &mut self.state {
            State::Leader(l) => {
                for held in self.waiting.release() {
                    let (client, msg) = held.dispatch(now);
                    l.on_client(now, client, msg, out);
                }
            }
            State::Follower(_, log) => {
                let leader = other_leader(log);
                let answered: Vec<Held> = match leader {
                    Some(_) => self.waiting.release().collect(),
                    None => self.waiting.expired(now),
                };
                for held in answered {
                    out.push(not_leader(shard, leader, now, held));
                }
            }
            State::Switching => unreachable!("not observable"),
        }
    }

    /// The accept records found on disk at restart: undecided again until the replayed log
    /// decides them (a replica without the fast path ignores them: they are from a run that
    /// had it, and a cluster never turns it off with transactions in flight).
    ///
    /// # Errors
    /// A record that does not decode.
    pub fn restore_accepts(&mut self, records: &[(u64, Vec<u8>)]) -> Result<(), String> {
        let Some(acceptor) = self.acceptor.as_mut() else { return Ok(()) };
        for (n, bytes) in records {
            let r = AcceptRecord::decode(bytes).map_err(|e| format!("accept record {n}: {e}"))?;
            if let Some(keys) = r.txn.piece(self.config.shard) {
                acceptor.restore(&r, keys);
            }
        }
        Ok(())
    }

    /// The term whose fast-path recovery round waits for other replicas' accepts, if any
    /// (see [`ShardReplica::accepts_wanted`]).
    pub fn accepts_wanted(&self) -> Option<u64> {
        self.acceptor.as_ref()?;
        // Asked from the candidacy on, beside the vote requests: an answer does not depend on
        // this replica's log, and counts only if it wins this term (the other replica
        // answers once its own term has reached it, as granting the vote makes it).
        let State::Follower(_, log) = &self.state else { return None };
        if !running_for_or_leading(log) {
            return None;
        }
        let heard = self.recovery.as_ref().filter(|r| r.term == log.term()).map_or(0, |r| r.others.len());
        (heard + 1 < majority(log)).then(|| log.term())
    }

    /// `replica`'s undecided accepts, asked about in `term` (ignored unless this replica runs
    /// for or leads `term` and has not proposed its recovery yet).
    ///
    /// # Errors
    /// An undecodable record: the whole answer is dropped (the question is asked again).
    pub fn accepts_from(&mut self, replica: u32, term: u64, records: &[Vec<u8>]) -> Result<(), String> {
        let State::Follower(_, log) = &self.state else { return Ok(()) };
        if !running_for_or_leading(log) || log.term() != term {
            return Ok(());
        }
        let rec = FastRecovery::of_term(&mut self.recovery, term);
        if rec.proposed.is_some() {
            return Ok(());
        }
        let set = records
            .iter()
            .map(|b| AcceptRecord::decode(b).map(|r| (r.txn, r.ts)))
            .collect::<Result<Vec<AcceptedTxn>, _>>()
            .map_err(|e| format!("undecodable accepts from replica {replica}: {e}"))?;
        rec.others.insert(replica, set);
        Ok(())
    }

    /// What this replica answers a new leader's recovery round of `term`: its undecided
    /// accepts and, while its leader state is still in place (its log may have moved to the
    /// new term already), that leader's votes not known committed. `None` while its own term
    /// is older than `term`: only from that term on has it made every accept and vote of the
    /// earlier terms it ever will (its later accepts carry the new term, and a leader state
    /// of an older term no longer votes), so the answer cannot miss one that a fast commit
    /// of an earlier term counted.
    pub fn accepts_of(&self, term: u64) -> Option<Vec<AcceptRecord>> {
        if self.log().term() < term && !self.config.mutations.answer_accepts_in_old_term {
            return None;
        }
        Some(self.live_accepts())
    }

    /// Every accept record this replica still needs: its undecided accepts and its leader
    /// state's votes not known committed.
    pub fn live_accepts(&self) -> Vec<AcceptRecord> {
        let mut records = self.acceptor.as_ref().map(Acceptor::undecided_records).unwrap_or_default();
        if let State::Leader(l) = &self.state {
            records.extend(l.fast_votes());
        }
        records
    }

    /// The fast path's undecided accepts, `(ts, id)` in order (none without it).
    pub fn undecided_accepts(&self) -> Vec<(Timestamp, TxnId)> {
        self.acceptor.as_ref().map(Acceptor::undecided).unwrap_or_default()
    }

    /// The transactions the follower state executed (applying `Applied` markers) since the
    /// last call, in execution order. A serving leader reports its own executions as
    /// [`LeaderOutput::Executed`] outputs instead.
    pub fn take_executed(&mut self) -> Vec<(TxnId, Timestamp)> {
        if let State::Follower(f, _) = &mut self.state {
            self.executed.extend(f.take_executed());
        }
        std::mem::take(&mut self.executed)
    }

    /// When [`Replica::turn`] has timed work (a leader's next deadline).
    pub fn next_deadline(&self) -> Option<TimeUs> {
        match &self.state {
            State::Leader(l) => l.next_deadline(),
            State::Follower(..) | State::Switching => None,
        }
    }

    /// Takes office with the state applied so far and `tail`, the records after it (the
    /// fast path's recovered `PREPARE`s, not committed yet).
    fn promote(&mut self, now: TimeUs, tail: Vec<LogEntry>) {
        let State::Follower(f, log) = std::mem::replace(&mut self.state, State::Switching) else {
            unreachable!("promote is called on a follower")
        };
        // Serving before its recovered PREPAREs commit (they are its log's tail): the leader
        // takes them over as its own, and the accepts stay until they commit.
        let kept = self.recovery.as_ref().and_then(|r| r.proposed).filter(|last| *last > log.commit_index());
        let own_floor = self.own_floor.filter(|(term, _)| *term == log.term()).map(|(_, index)| index);
        let mut leader = ShardLeader::recover(self.config.clone(), log, f.into_handover(own_floor), now);
        leader.take_over_tail(tail);
        self.state = State::Leader(leader);
        if self.acceptor.is_some() {
            // Recovery put every transaction that may have been fast-committed in earlier
            // terms into its log: once that commits, the accepts decide nothing more.
            self.accepts_kept_until = kept;
            if kept.is_none() {
                self.acceptor = Some(empty_acceptor(&self.config));
            }
        }
        self.recovery = None;
        self.stats.promotions += 1;
    }

    fn demote(&mut self) -> Result<(), RaftError> {
        let State::Leader(l) = std::mem::replace(&mut self.state, State::Switching) else {
            unreachable!("demote is called on a leader")
        };
        let mut votes = l.fast_votes();
        if self.accepts_kept_until.take().is_some() {
            // Deposed before its recovered PREPAREs committed: the accepts it kept stay
            // undecided, like its votes, until its log decides them.
            votes.extend(self.acceptor.as_ref().map(Acceptor::undecided_records).unwrap_or_default());
        }
        let mut log = l.into_log();
        let empty = Follower::new(self.config.shard, Store::new(), self.registry.clone());
        let rebuilt = log.replay_for_rebuild().and_then(|replay| {
            let records = replay.records()?;
            let follower = rebuild(
                self.config.shard,
                &self.registry,
                &self.initial,
                replay.snapshot_data(),
                &records,
                self.config.answer_expiry_us,
            )?;
            Ok((follower, records))
        });
        match rebuilt {
            Ok((follower, records)) => {
                if self.acceptor.is_some() {
                    self.acceptor = Some(acceptor_after_leading(&self.config, &records, &votes));
                }
                self.state = State::Follower(follower, log);
                self.stats.demotions += 1;
                Ok(())
            }
            Err(e) => {
                // Keep a consistent (if empty) follower so the shell can report and stop.
                self.state = State::Follower(empty, log);
                Err(e)
            }
        }
    }
}

/// A new leader's fast-path recovery round (DESIGN.md, the fast path, R1-R3).
#[derive(Debug)]
struct FastRecovery {
    term: u64,
    /// The undecided accepts heard from the other replicas (its own are read when it has
    /// heard enough).
    others: std::collections::BTreeMap<u32, Vec<AcceptedTxn>>,
    /// Recovered and proposed: the index the new leader's log must commit before it serves,
    /// once every one is.
    proposed: Option<u64>,
    /// Those proposed so far (a full log refuses some: the rest go at a later turn), and the
    /// highest index they took.
    done: std::collections::BTreeSet<TxnId>,
    last_index: u64,
}

impl FastRecovery {
    /// The round of `term` (a new one if `slot` holds another term's or none).
    fn of_term(slot: &mut Option<FastRecovery>, term: u64) -> &mut FastRecovery {
        if slot.as_ref().is_none_or(|r| r.term != term) {
            *slot = Some(FastRecovery {
                term,
                others: Default::default(),
                proposed: None,
                done: Default::default(),
                last_index: 0,
            });
        }
        slot.as_mut().expect("just set")
    }
}

/// Replicas of `log`'s group that make a majority.
fn majority(log: &RaftLog) -> usize {
    log.voters().len() / 2 + 1
}

/// Whether `log` runs for or holds leadership in its term (a candidate or the leader).
fn running_for_or_leading(log: &RaftLog) -> bool {
    matches!(log.role(), crate::Role::Candidate | crate::Role::Leader)
}

/// Whether a replica elected in `log.term()` (with everything handed out applied to `f`)
/// has recovered what a majority's accepts say may have been fast-committed: with the fast
/// path, it reads a majority's undecided accepts and prepares what `to_recover` returns
/// before anything else it admits; it serves with those records as its log's tail, not
/// waiting for them to commit (one round trip more after the no-op, since raft-rs probes a
/// follower until it answers the no-op's append). Without the fast path, at once. It
/// need not wait for its no-op: its whole log (the state applied and the records after it,
/// committed or not) is what it will commit, and R1-R3 read that.
///
/// # Errors
/// The log's tail does not decode (see [`RaftLog::records_after_handed_out`]).
fn fast_recovered(
    acceptor: Option<&Acceptor>,
    recovery: &mut Option<FastRecovery>,
    f: &Follower,
    log: &mut RaftLog,
    admission: &Admission,
    skip_recovery: bool,
) -> Result<bool, RaftError> {
    let Some(acceptor) = acceptor else { return Ok(true) };
    let rec = FastRecovery::of_term(recovery, log.term());
    if rec.proposed.is_some() {
        return Ok(true);
    }
    if rec.others.len() + 1 < majority(log) {
        return Ok(false);
    }
    let own: Vec<AcceptedTxn> = acceptor.undecided_records().into_iter().map(|r| (r.txn, r.ts)).collect();
    let sets: Vec<Vec<AcceptedTxn>> = std::iter::once(own).chain(rec.others.values().cloned()).collect();
    let mut records = f.recovery_records();
    records.extend(log.records_after_handed_out()?.into_iter().map(|e| e.record));
    let mut recovered = to_recover(f.shard(), &sets, &records, |id| f.answers().known(id) != Known::Unknown);
    if skip_recovery {
        recovered.clear(); // the mutation: a broken rule the simulator must catch
    }
    // A malformed transaction was refused by every leader, so it never committed fast: an
    // accept of it (written by a replica that did not check, or by an older version) is
    // never prepared (rule 22). Its timestamp is not checked again: an accepted one passed
    // the horizon where it was accepted, and may have committed.
    recovered.retain(|(txn, _)| admission.check_malformed(txn).is_ok());
    for (txn, ts) in recovered {
        if rec.done.contains(&txn.id) {
            continue;
        }
        let id = txn.id;
        match log.propose(LogRecord::Prepare { txn, ts, arrival_delta_us: 0, acked_below: 0 }) {
            Ok(index) => {
                rec.done.insert(id);
                rec.last_index = rec.last_index.max(index);
            }
            Err(_) => return Ok(false), // a full backlog: the rest at a later turn
        }
    }
    // Every recovered PREPARE is in the log: the leader serves with them as its log's tail
    // (the answers wait for their positions, rule 14), keeping the accepts until they commit.
    rec.proposed = Some(rec.last_index);
    Ok(true)
}

/// An acceptor holding nothing, with the mutation of rule H the config may set.
fn empty_acceptor(config: &LeaderConfig) -> Acceptor {
    Acceptor::new(config.mutations.fast_hashes_direct_predecessors)
}

/// A stepped-down leader's acceptor: its order table rebuilt from the committed records
/// `replayed`, and its own fast answers whose `PREPARE` is not known committed (`votes`)
/// undecided, like accepts, until its log decides them.
fn acceptor_after_leading(config: &LeaderConfig, replayed: &[LogEntry], votes: &[AcceptRecord]) -> Acceptor {
    let shard = config.shard;
    let mut acceptor = empty_acceptor(config);
    for e in replayed {
        acceptor.on_committed(shard, &e.record);
    }
    for vote in votes {
        if let Some(keys) = vote.txn.piece(shard) {
            acceptor.restore(vote, keys);
        }
    }
    acceptor
}

/// A follower's answer to a fast-path dispatch of `txn` from `client` arriving at `now`,
/// from replica `me` of `shard` in `term`: a `FastAccept` once its record is durable (a
/// repeat goes out after the next sync), to the client and, for a cross-shard transaction,
/// to the other participants' leaders (DESIGN.md rule 17); or nothing when rule F0 refuses
/// it (the leader's answer takes rule 14's path).
fn fast_accept(
    acceptor: &mut Acceptor,
    (shard, me, term): (ShardId, u32, u64),
    now: TimeUs,
    client: ClientId,
    txn: &Arc<Txn>,
    out: &mut Vec<LeaderOutput>,
) {
    let Some(keys) = txn.piece(shard) else { return };
    let (accepted, record) = match acceptor.offer(now, txn, keys) {
        Ok(a) => (a, Some(AcceptRecord { txn: txn.clone(), ts: txn.ts }.encode())),
        Err(NotAccepted::Again(a)) => (a, None),
        Err(NotAccepted::Late | NotAccepted::Overtaken | NotAccepted::Full | NotAccepted::Tangled) => return,
    };
    let Accepted { id, ts, order } = accepted;
    out.push(LeaderOutput::ToClientDurably {
        client,
        msg: ServerMsg::FastAccept { shard, replica: me, term, id, ts, order },
        record,
    });
    for other in txn.shards().filter(|s| *s != shard) {
        let batch =
            PeerBatch { from: shard, watermark: 0, items: vec![PeerItem::FastAccept { replica: me, term, id, ts }] };
        out.push(LeaderOutput::ToPeerDurably { shard: other, batch, records: Vec::new() });
    }
}

/// The `NotLeader` answer to `held`, naming `leader`.
fn not_leader(shard: ShardId, leader: Option<u32>, now: TimeUs, held: Held) -> LeaderOutput {
    let (client, msg) = held.not_leader(shard, leader, now);
    LeaderOutput::ToClient { client, msg }
}

/// Stalled transactions listed (oldest first) in a status report.
pub const STATUS_STALLED_MAX: usize = 5;

/// Luigi's snapshot images: a [`Follower`] of the shard, serialized
/// ([`Follower::snapshot`]).
struct FollowerImages {
    shard: ShardId,
    registry: Registry,
}

impl SnapshotDecoder for FollowerImages {
    fn check(&self, index: u64, data: &[u8]) -> Result<(), String> {
        Follower::check_snapshot(self.shard, index, data).map_err(|e| e.to_string())
    }

    fn decode(&self, data: &[u8]) -> Result<StateBox, String> {
        match Follower::from_snapshot(self.shard, self.registry.clone(), data) {
            Ok(follower) => Ok(Box::new(follower)),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl ShardReplica for Replica {
    fn log(&self) -> &dyn LogControl {
        Replica::log(self)
    }

    fn log_mut(&mut self) -> &mut dyn LogControl {
        Replica::log_mut(self)
    }

    fn on_client(&mut self, now: TimeUs, client: ClientId, msg: ClientMsg, out: &mut Vec<LeaderOutput>) {
        Replica::on_client(self, now, client, msg, out)
    }

    fn on_peer(&mut self, now: TimeUs, batch: PeerBatch, out: &mut Vec<LeaderOutput>) -> bool {
        Replica::on_peer(self, now, batch, out)
    }

    fn peer_leader_changed(&mut self, shard: ShardId) {
        Replica::peer_leader_changed(self, shard)
    }

    fn turn(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) -> Result<Option<Transition>, RaftError> {
        Replica::turn(self, now, out)
    }

    fn take_executed(&mut self) -> Vec<(TxnId, Timestamp)> {
        Replica::take_executed(self)
    }

    fn next_deadline(&self) -> Option<TimeUs> {
        Replica::next_deadline(self)
    }

    fn is_serving(&self) -> bool {
        Replica::is_serving(self)
    }

    fn leader_hint(&self) -> Option<u32> {
        Replica::leader_hint(self)
    }

    fn store(&self) -> &Store {
        Replica::store(self)
    }

    fn own_snapshot_due(&self, next_at: u64) -> Result<Option<SnapshotJob>, RaftError> {
        Replica::own_snapshot_due(self, next_at)
    }

    fn snapshot_decoder(&self) -> Arc<dyn SnapshotDecoder> {
        Arc::new(FollowerImages { shard: self.config.shard, registry: self.registry.clone() })
    }

    fn install_snapshot(&mut self, data: &[u8]) -> Result<Option<StateBox>, RaftError> {
        let replaced = Replica::install_snapshot(self, data).map_err(|e| RaftError::Invalid(e.to_string()))?;
        Ok(replaced.map(|f| Box::new(f) as StateBox))
    }

    fn install_decoded(&mut self, state: StateBox) -> Result<Option<StateBox>, RaftError> {
        let restored = state
            .downcast::<Follower>()
            .map_err(|_| RaftError::Invalid("the decoded snapshot is not a Luigi follower state".into()))?;
        Ok(self.install_follower(*restored).map(|f| Box::new(f) as StateBox))
    }

    fn status(&self, now: TimeUs, status: &mut ReplicaStatus) {
        match &self.state {
            State::Leader(l) => {
                let stalled = l.stalled(now, usize::MAX);
                status.serving = true;
                (status.watermark, status.pending, status.stalled_count) =
                    (l.watermark(), l.pending_len() as u64, stalled.len() as u64);
                status.stalled = stalled
                    .into_iter()
                    .take(STATUS_STALLED_MAX)
                    .map(|t| StalledTxnInfo { id: t.id, shards: t.shards, age_us: t.age_us, durable: t.durable })
                    .collect();
                (status.answer_clients, status.answers) = (l.answers().clients() as u64, l.answers().len() as u64);
            }
            State::Follower(f, _) => {
                (status.watermark, status.pending) = (f.applied_ts(), f.queued_len() as u64);
                (status.answer_clients, status.answers) = (f.answers().clients() as u64, f.answers().len() as u64);
            }
            State::Switching => {}
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match &self.state {
            State::Leader(l) => l.check_invariants(),
            State::Follower(f, _) => f.check_invariants(),
            State::Switching => Ok(()),
        }
    }

    fn restore_accepts(&mut self, records: &[(u64, Vec<u8>)]) -> Result<(), String> {
        Replica::restore_accepts(self, records)
    }

    fn accepts_wanted(&self) -> Option<u64> {
        Replica::accepts_wanted(self)
    }

    fn accepts_live(&self) -> Vec<Vec<u8>> {
        self.live_accepts().iter().map(AcceptRecord::encode).collect()
    }

    fn accepts_of(&self, term: u64) -> Option<Vec<Vec<u8>>> {
        Some(Replica::accepts_of(self, term)?.iter().map(AcceptRecord::encode).collect())
    }

    fn accepts_from(&mut self, replica: u32, term: u64, records: &[Vec<u8>]) -> Result<(), String> {
        Replica::accepts_from(self, replica, term, records)
    }

    fn stats_line(&self) -> String {
        match &self.state {
            State::Leader(l) => format!("{:?} {:?}", l.stats(), self.stats),
            State::Follower(f, _) => format!("{:?} {:?}", f.stats(), self.stats),
            State::Switching => format!("{:?}", self.stats),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Luigi's replicas ([`Replica`] over a [`RaftLog`] of [`luigi_proto::log::LogRecord`]s):
/// the default [`ReplicaFactory`].
#[derive(Clone, Copy, Debug, Default)]
pub struct LuigiReplicas;

impl ReplicaFactory for LuigiReplicas {
    fn name(&self) -> &'static str {
        "luigi"
    }

    fn progress_reports(&self) -> bool {
        true
    }

    fn build(&self, setup: ReplicaSetup) -> Result<Box<dyn ShardReplica>, BuildError> {
        let ReplicaSetup { raft, recovered, leader, registry, initial, .. } = setup;
        let log =
            RaftLog::new(raft, Some(recovered)).map_err(|source| BuildError { what: "opening the log", source })?;
        let replica = Replica::new(leader, registry, initial, log)
            .map_err(|e| BuildError { what: "loading its snapshot", source: RaftError::Invalid(e.to_string()) })?;
        Ok(Box::new(replica))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use luigi_proto::procedures::{micro_key, Micro, MicroOp};
    use luigi_proto::types::{KeySet, ShardPiece, Txn, TxnId};

    use super::*;
    use crate::RaftConfig;

    /// A one-voter group: the replica elects itself; readies are "persisted" at once.
    fn lone_replica() -> Replica {
        let log = RaftLog::new(RaftConfig::new(1, vec![1], 7), None).unwrap();
        Replica::new(LeaderConfig::new(0, 1), Registry::with_builtins(), empty_store(), log).unwrap()
    }

    fn drive(r: &mut Replica) {
        while let Some(rd) = r.log_mut().ready().unwrap() {
            r.log_mut().advance(rd.number);
        }
    }

    fn dispatch(seq: u64) -> ClientMsg {
        let ops = vec![MicroOp { key: 1, write: Some(seq) }];
        let txn = Arc::new(Txn {
            id: TxnId { client: 4, seq },
            procedure: Micro::NAME.into(),
            args: postcard::to_stdvec(&ops).unwrap(),
            pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(vec![], vec![micro_key(1)]) }],
            ts: 1,
        });
        ClientMsg::Dispatch { txn, sent_us: 90, acked_below: 1, fast: true }
    }

    /// Drives `r` and turns it at `now` until nothing is left to do; returns the replies.
    fn settle(r: &mut Replica, now: TimeUs) -> Vec<LeaderOutput> {
        let mut out = Vec::new();
        for _ in 0..8 {
            drive(r);
            r.turn(now, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn the_leader_of_a_group_of_one_snapshots_what_a_follower_would_hold() {
        let mut r = lone_replica();
        r.log_mut().campaign().unwrap();
        settle(&mut r, 100);
        assert!(r.is_serving());
        // The election's no-op and the new leader's floor promise.
        let elected_at = r.log_mut().handed_out();
        assert!(r.own_snapshot_due(elected_at + 1).unwrap().is_none(), "not due yet");
        let mut out = Vec::new();
        for seq in 1..=5 {
            r.on_client(1_000 * seq, 4, dispatch(seq), &mut out);
        }
        // Long after every timestamp: executed, answered, and covered by an Applied marker.
        out.extend(settle(&mut r, 60_000_000));
        let replies = out.iter().filter(|o| matches!(o, LeaderOutput::ToClient { msg: ServerMsg::Reply(_), .. }));
        assert_eq!(replies.count(), 5, "{out:?}");
        let index = r.log_mut().handed_out();
        assert!(index > elected_at + 5, "the writes and a marker are logged");
        let job = r.own_snapshot_due(index).unwrap().expect("due");
        assert_eq!(job.index(), index);
        // More writes before the job runs (as while it runs on another thread) change nothing in it.
        r.on_client(10_000, 4, dispatch(6), &mut Vec::new());
        settle(&mut r, 70_000_000);
        let image = std::thread::spawn(move || job.run()).join().unwrap().unwrap();
        assert_eq!(image.crc32, crc32fast::hash(&image.data));
        let (at, data) = (image.index, image.data);
        assert_eq!(at, index);
        let value = |store: &Store| store.get(&micro_key(1)).map(|v| v.as_slice().to_vec());
        let image = Follower::from_snapshot(0, Registry::with_builtins(), &data).unwrap();
        assert_eq!(value(image.store()), Some(5u64.to_le_bytes().to_vec()), "the state at the job's index");
        assert_eq!(value(r.store()), Some(6u64.to_le_bytes().to_vec()));

        // Compacted behind it, the log restarts from the snapshot and the entries after it.
        let snap = r.log_mut().compact(at, data).unwrap();
        let log = r.log_mut();
        let entries = (at + 1..=log.last_index()).map(|i| crate::codec::encode_entry(&log.entry(i).unwrap())).collect();
        let recovered = crate::RecoveredState {
            hard_state: crate::HardState { term: log.term(), vote: 1, commit: at },
            snapshot: Some(snap),
            entries,
            applied: 0,
            rejoining: false,
        };
        let log = RaftLog::new(RaftConfig::new(1, vec![1], 7), Some(recovered)).unwrap();
        let mut restarted =
            Replica::new(LeaderConfig::new(0, 1), Registry::with_builtins(), empty_store(), log).unwrap();
        restarted.log_mut().campaign().unwrap();
        settle(&mut restarted, 60_000_100);
        assert!(restarted.is_serving());
        assert_eq!(restarted.store().get(&micro_key(1)), r.store().get(&micro_key(1)));
    }

    /// Rule 22 (issue 26): an accept of a malformed transaction in the accept log (written
    /// by a replica that did not check it, as before rule 22) is never recovered: its leader
    /// refused it, and the client was told it would run nowhere. Unsorted keys once made a
    /// new leader execute part of such a transaction.
    #[test]
    fn a_new_leader_recovers_no_malformed_accept() {
        let log = RaftLog::new(RaftConfig::new(1, vec![1], 7), None).unwrap();
        let config = LeaderConfig { fast_path: true, ..LeaderConfig::new(0, 1) };
        let mut r = Replica::new(config, Registry::with_builtins(), empty_store(), log).unwrap();
        let ClientMsg::Dispatch { txn, .. } = dispatch(1) else { unreachable!() };
        let unsorted = KeySet { reads: vec![], writes: vec![micro_key(2), micro_key(1)] };
        let bad = Txn { pieces: vec![ShardPiece { shard: 0, keys: unsorted }], ts: 500, ..(*txn).clone() };
        let good = Txn { id: TxnId { client: 4, seq: 2 }, ts: 600, ..(*txn).clone() };
        let records: Vec<(u64, Vec<u8>)> = [bad, good]
            .into_iter()
            .enumerate()
            .map(|(n, t)| (n as u64, AcceptRecord { ts: t.ts, txn: Arc::new(t) }.encode()))
            .collect();
        r.restore_accepts(&records).unwrap();
        assert_eq!(r.acceptor.as_ref().unwrap().undecided().len(), 2);
        r.log_mut().campaign().unwrap();
        let mut out = settle(&mut r, 100);
        assert!(r.is_serving(), "{out:?}");
        out.extend(settle(&mut r, 10_000));
        let executed: Vec<u64> = out
            .iter()
            .filter_map(|o| match o {
                LeaderOutput::Executed { id, .. } => Some(id.seq),
                _ => None,
            })
            .collect();
        assert_eq!(executed, vec![2], "only the well-formed accept is recovered: {out:?}");
    }

    #[test]
    fn a_follower_answers_not_leader_then_serves_once_its_term_has_a_commit() {
        let mut r = lone_replica();
        let mut out = Vec::new();
        // No leader known: the dispatch waits for one (see `Waiting`).
        r.on_client(100, 4, dispatch(1), &mut out);
        assert!(out.is_empty(), "{out:?}");
        r.turn(150, &mut out).unwrap();
        assert!(out.is_empty(), "still no leader: {out:?}");
        assert!(!r.on_peer(100, PeerBatch { from: 1, watermark: 0, items: vec![] }, &mut out));

        r.log_mut().campaign().unwrap();
        assert!(r.log_mut().is_leader());
        // Leader in Raft, but its term's no-op is not committed and applied yet.
        assert_eq!(r.turn(200, &mut out).unwrap(), None);
        assert!(!r.is_serving());
        drive(&mut r);
        assert_eq!(r.turn(300, &mut out).unwrap(), Some(Transition::Promoted));
        assert!(r.is_serving());
        // The dispatch that waited is admitted the moment the replica serves (its timestamp
        // has passed: moved up to the clock, not above the floor promise the replica proposed
        // on winning, which bounds only later leaders' admissions), executed, and answered:
        // that promise committed with the no-op, so the watermark passes it at once (rule 8).
        let reply = |o: &LeaderOutput| match o {
            LeaderOutput::ToClient { client: 4, msg: ServerMsg::Reply(r) } => Some((r.id.seq, r.ts, r.position)),
            _ => None,
        };
        let [LeaderOutput::Executed { ts: 300, .. }, answer] = out.as_slice() else { panic!("{out:?}") };
        assert!(matches!(reply(answer), Some((1, 300, Some(_)))), "answered, naming its position: {out:?}");
        // A replica that knows no leader and waited too long says so, without a hint.
        let mut other = lone_replica();
        other.on_client(100, 4, dispatch(9), &mut Vec::new());
        let mut late = Vec::new();
        other.turn(100 + crate::waiting::WAITING_US_MAX + 1, &mut late).unwrap();
        assert!(
            matches!(late.as_slice(), [LeaderOutput::ToClient { client: 4, msg: ServerMsg::Reply(reply) }]
                if reply.outcome == Err(luigi_proto::msg::TxnError::NotLeader { hint: None }) && reply.arrival_delta_us == 10),
            "{late:?}"
        );
        assert_eq!(r.leader_hint(), Some(0));
        assert_eq!((r.log().role(), r.log().term()), (crate::Role::Leader, 1));
        assert_eq!(r.log().handed_out(), r.log().commit_index(), "everything committed was applied");
        out.clear();
        r.on_client(400, 4, dispatch(2), &mut out);
        // Rule 14: admitted, executed and answered at once (its timestamp has passed), before
        // its PREPARE commits: the answer names its position.
        let [LeaderOutput::Executed { ts: 400, .. }, answer] = out.as_slice() else { panic!("{out:?}") };
        assert!(matches!(reply(answer), Some((2, 400, Some(_)))), "{out:?}");
        assert!(r.log().commit_index() < r.log().last_index(), "not committed yet");
        assert_eq!(r.leader().unwrap().pending_len(), 0);
        settle(&mut r, 500);
        assert_eq!(r.log().commit_index(), r.log().last_index());
        assert_eq!(r.stats(), ReplicaStats { promotions: 1, demotions: 0 });
    }
}
