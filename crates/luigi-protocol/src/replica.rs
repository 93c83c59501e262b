//! Luigi's replica of a replicated shard: its protocol's part ([`LuigiProtocol`]) of the one
//! [`RoleMachine`] every protocol runs (DESIGN.md, failure handling): the shard leader or a
//! follower, over the same Raft log, switching as leadership moves.
//!
//! A replica starts as a follower applying committed records. When its log becomes leader and
//! an entry of the new term (the election no-op) is committed and applied, everything any
//! earlier leader made durable is in its state: it becomes a [`ShardLeader`] through
//! [`ShardLeader::recover`] (with the fast path, once it recovered what a majority's accepts
//! say may have been fast-committed). A leader that loses leadership drops its state (it may
//! have executed ahead of the log's `Applied` markers) and rebuilds a follower by replaying
//! its log from the start. A follower holds dispatches while it knows no leader
//! ([`FollowerDispatch::HoldWhileNoLeader`]), and with the fast path accepts them
//! ([`FastPathReplica`]).

use crate::fast::Acceptor;
use crate::leader::admissible::Admission;
use crate::leader::follower::Follower;
use crate::leader::{LeaderConfig, LeaderOutput, ShardLeader};
use crate::log::LogRecord;
use crate::log::{LogEntry, ReplicatedLog};
use crate::msg::PeerBatch;
use luigi_replica::FastAcceptCounts;
use luigi_store::Store;
use luigi_txn::msg::{ClientMsg, ReplicaStatus, StalledTxnInfo};
use luigi_txn::peer::{PeerFacts, PeerMsg, PeerVocabulary};
use luigi_txn::procedure::Registry;
use luigi_txn::types::{ClientId, ShardId, TimeUs, Timestamp, Txn, TxnId};
use std::sync::Arc;

use luigi_raft::{RaftError, RaftLog};
use luigi_replica::role_machine::other_leader;
pub use luigi_replica::{empty_store, InitialStore, ReplicaStats, SnapshotImage, SnapshotJob, Transition};
use luigi_replica::{
    AgreementCounters, BuildError, FastPathReplica, FollowerCore, FollowerDispatch, FollowerImages, ImageFork,
    LeaderCore, LeaderFigures, ReplayedExecutions, ReplicaFactory, ReplicaProtocol, ReplicaSetup, RoleMachine,
    ShardReplica, SnapshotView, TxnCount,
};

mod fast_path;

use fast_path::{acceptor_after_leading, empty_acceptor, fast_accept, fast_recovered, FastRecovery};

/// A replica of one Luigi shard.
pub type Replica = RoleMachine<LuigiProtocol>;

/// How Luigi's follower states are made: a [`Follower`] of the shard with its procedures.
#[derive(Clone)]
pub struct LuigiImages {
    shard: ShardId,
    registry: Registry,
    initial: InitialStore,
    /// The cluster's answer expiry: every follower state made here, live, rebuilt or
    /// replayed for a snapshot, forgets clients at the same age as the leader refuses them.
    answer_expiry_us: u64,
    /// How long stores keep replaced versions for snapshot reads (rule 23).
    retention_us: u64,
}

impl FollowerImages for LuigiImages {
    type Follower = Follower;

    fn initial(&self) -> &InitialStore {
        &self.initial
    }

    fn fresh(&self, mut store: Store) -> Follower {
        store.set_retention(self.retention_us);
        Follower::new(self.shard, store, self.registry.clone()).with_answer_expiry(self.answer_expiry_us)
    }

    fn load(&self, data: &[u8]) -> Result<Follower, String> {
        Follower::from_snapshot(self.shard, self.registry.clone(), data)
            .map(|f| f.with_answer_expiry(self.answer_expiry_us).with_retention(self.retention_us))
            .map_err(|e| e.to_string())
    }

    fn check(&self, index: u64, data: &[u8]) -> Result<(), String> {
        Follower::check_snapshot(self.shard, index, data).map_err(|e| e.to_string())
    }
}

impl FollowerCore for Follower {
    type Record = LogRecord;

    fn apply(&mut self, entry: &LogEntry) {
        Follower::apply(self, entry)
    }

    fn take_executed(&mut self) -> Vec<(TxnId, Timestamp)> {
        Follower::take_executed(self)
    }

    fn applied_index(&self) -> u64 {
        self.stats().applied_index
    }

    fn image(&self) -> Vec<u8> {
        self.snapshot()
    }

    fn fork_image(&self) -> ImageFork {
        let fork = self.fork();
        Box::new(move || fork.image())
    }

    fn pong_watermark(&self) -> Timestamp {
        self.applied_ts()
    }

    fn store(&self) -> &Store {
        Follower::store(self)
    }

    fn status(&self, status: &mut ReplicaStatus) {
        (status.watermark, status.pending) = (self.applied_ts(), self.queued_len() as u64);
        (status.answer_clients, status.answers) = (self.answers().clients() as u64, self.answers().len() as u64);
    }

    fn check_invariants(&self) -> Result<(), String> {
        Follower::check_invariants(self)
    }

    fn stats_line(&self) -> Option<String> {
        Some(format!("{:?}", self.stats()))
    }

    fn snapshot_view(&self) -> Option<SnapshotView<'_>> {
        Some(Follower::snapshot_view(self))
    }
}

impl LeaderCore for ShardLeader<RaftLog> {
    type Record = LogRecord;
    type Batch = PeerBatch;

    fn on_client(
        &mut self,
        log: &mut RaftLog,
        now: TimeUs,
        client: ClientId,
        msg: ClientMsg,
        out: &mut Vec<LeaderOutput>,
    ) {
        ShardLeader::on_client(self, log, now, client, msg, out)
    }

    fn on_peer(&mut self, log: &mut RaftLog, now: TimeUs, batch: PeerBatch, out: &mut Vec<LeaderOutput>) {
        ShardLeader::on_peer(self, log, now, batch, out)
    }

    fn peer_leader_changed(&mut self, shard: ShardId) {
        ShardLeader::peer_leader_changed(self, shard)
    }

    fn tick(&mut self, log: &mut RaftLog, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        ShardLeader::tick(self, log, now, out)
    }

    fn next_deadline(&self) -> Option<TimeUs> {
        ShardLeader::next_deadline(self)
    }

    fn store(&self) -> &Store {
        ShardLeader::store(self)
    }

    fn status(&self, now: TimeUs, status: &mut ReplicaStatus) {
        let stalled = LeaderCore::stalled(self, now);
        status.serving = true;
        (status.watermark, status.pending, status.stalled_count) =
            (self.watermark(), self.pending_len() as u64, stalled.len() as u64);
        status.stalled = stalled.into_iter().take(STATUS_STALLED_MAX).collect();
        (status.answer_clients, status.answers) = (self.answers().clients() as u64, self.answers().len() as u64);
    }

    fn check_invariants(&self) -> Result<(), String> {
        ShardLeader::check_invariants(self)
    }

    fn stats_line(&self) -> String {
        format!("{:?}", self.stats())
    }

    fn figures(&self) -> LeaderFigures {
        LeaderFigures {
            pending: self.pending_len(),
            watermark: Some(self.watermark()),
            agreement: Some(agreement_counters(&self.stats())),
            txns: txn_counts(&self.stats()),
            held_us: Some(self.held_us()),
            procedure_commits: self.procedure_commits().clone(),
            ..LeaderFigures::default()
        }
    }

    fn stalled(&self, now: TimeUs) -> Vec<StalledTxnInfo> {
        ShardLeader::stalled(self, now, usize::MAX)
            .into_iter()
            .map(|t| StalledTxnInfo { id: t.id, shards: t.shards, age_us: t.age_us, durable: t.durable })
            .collect()
    }
    fn snapshot_view(&self) -> Option<SnapshotView<'_>> {
        Some(ShardLeader::snapshot_view(self))
    }
}

/// Luigi's part of its replicas: the leader's configuration and procedures, the fast path's
/// acceptor and recovery round, and the floor promise a new leader proposes (rule 8).
pub struct LuigiProtocol {
    config: LeaderConfig,
    registry: Registry,
    images: LuigiImages,
    /// The fast path's recovery round of the term this replica runs for, or leads and does
    /// not serve yet.
    recovery: Option<FastRecovery>,
    /// The fast path's accept rule and undecided accepts (DESIGN.md, the fast path), when
    /// the cluster runs it ([`LeaderConfig::fast_path`]); fed by the committed log while
    /// this replica follows.
    acceptor: Option<Acceptor>,
    /// What the acceptor decided while this replica followed, for the life of the replica.
    accept_counts: FastAcceptCounts,
    /// A leader that serves before its recovered `PREPARE`s commit keeps the accepts it
    /// held until its commit reaches this index: dying first, it leaves them recoverable.
    accepts_kept_until: Option<u64>,
    /// The term this replica won and the index of the floor promise it proposed on winning
    /// it (DESIGN.md rule 8).
    own_floor: Option<(u64, u64)>,
}

impl LuigiProtocol {
    /// Luigi's part of a replica of `config.shard` running `registry`'s procedures over the
    /// `initial` store.
    pub fn new(config: LeaderConfig, registry: Registry, initial: InitialStore) -> Self {
        let acceptor = config.fast_path.then(|| empty_acceptor(&config));
        let answer_expiry_us = config.answer_expiry_us;
        let retention_us = config.snapshot_retention_us;
        let images =
            LuigiImages { shard: config.shard, registry: registry.clone(), initial, answer_expiry_us, retention_us };
        LuigiProtocol {
            config,
            registry,
            images,
            recovery: None,
            acceptor,
            accept_counts: FastAcceptCounts::default(),
            accepts_kept_until: None,
            own_floor: None,
        }
    }
}

impl ReplicaProtocol for LuigiProtocol {
    type Record = LogRecord;
    type Follower = Follower;
    type Leader = ShardLeader<RaftLog>;
    type Images = LuigiImages;
    /// The log's records after those applied: the fast path's recovered `PREPARE`s.
    type Handover = Vec<LogEntry>;

    const FOLLOWER_DISPATCH: FollowerDispatch = FollowerDispatch::HoldWhileNoLeader;
    const REPLAYED_EXECUTIONS: ReplayedExecutions = ReplayedExecutions::Reported;

    fn shard(&self) -> ShardId {
        self.config.shard
    }

    fn snapshot_reads(&self) -> luigi_replica::snapshot_reads::SnapshotReadConfig {
        let serve_before_safe_time = self.config.mutations.serve_reads_before_safe_time;
        luigi_replica::snapshot_reads::SnapshotReadConfig { serve_before_safe_time, ..Default::default() }
    }

    fn images(&self) -> &LuigiImages {
        &self.images
    }

    fn on_committed(&mut self, entry: &LogEntry) {
        if let Some(a) = self.acceptor.as_mut() {
            a.on_committed(self.config.shard, &entry.record);
        }
    }

    fn may_serve(&mut self, f: &Follower, log: &mut RaftLog, now: TimeUs) -> Result<Option<Vec<LogEntry>>, RaftError> {
        if log.is_leader() && self.own_floor.is_none_or(|(term, _)| term != log.term()) {
            // Its first floor promise leaves with its no-op and commits with it.
            // Proposed once serving, it committed a round trip later, and until then
            // the watermark stayed under the last leader's promise, so the first
            // answers after a failover waited for it (rule 8).
            log.resume_probes();
            if let Ok(index) = log.propose(LogRecord::Floor { ts: now.saturating_add(self.config.floor_lookahead_us) })
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
            return Ok(Some(log.records_after_handed_out()?));
        }
        Ok(None)
    }

    /// Takes office with the state applied so far and `tail`, the records after it (the
    /// fast path's recovered `PREPARE`s, not committed yet).
    fn take_office(
        &mut self,
        f: Follower,
        log: &mut RaftLog,
        now: TimeUs,
        tail: Vec<LogEntry>,
    ) -> ShardLeader<RaftLog> {
        // Serving before its recovered PREPAREs commit (they are its log's tail): the leader
        // takes them over as its own, and the accepts stay until they commit.
        let kept = self.recovery.as_ref().and_then(|r| r.proposed).filter(|last| *last > log.commit_index());
        let own_floor = self.own_floor.filter(|(term, _)| *term == log.term()).map(|(_, index)| index);
        let mut leader = ShardLeader::recover(self.config.clone(), log, f.into_handover(own_floor), now);
        leader.take_over_tail(log, tail);
        if self.acceptor.is_some() {
            // Recovery put every transaction that may have been fast-committed in earlier
            // terms into its log: once that commits, the accepts decide nothing more.
            self.accepts_kept_until = kept;
            if kept.is_none() {
                self.acceptor = Some(empty_acceptor(&self.config));
            }
        }
        self.recovery = None;
        leader
    }

    fn leading(&mut self, _l: &ShardLeader<RaftLog>, log: &RaftLog) {
        if self.accepts_kept_until.is_some_and(|last| log.commit_index() >= last) {
            // Its recovered PREPAREs are committed: the accepts decide nothing more.
            self.accepts_kept_until = None;
            self.acceptor = Some(empty_acceptor(&self.config));
        }
    }

    fn stepped_down(&mut self, l: &ShardLeader<RaftLog>, replayed: Option<&[LogEntry]>) {
        let mut votes = l.fast_votes();
        if self.accepts_kept_until.take().is_some() {
            // Deposed before its recovered PREPAREs committed: the accepts it kept stay
            // undecided, like its votes, until its log decides them.
            votes.extend(self.acceptor.as_ref().map(Acceptor::undecided_records).unwrap_or_default());
        }
        if let (Some(records), true) = (replayed, self.acceptor.is_some()) {
            self.acceptor = Some(acceptor_after_leading(&self.config, records, &votes));
        }
    }

    fn follower_offer(
        &mut self,
        log: &RaftLog,
        now: TimeUs,
        client: ClientId,
        txn: &Arc<Txn>,
        fast: bool,
        out: &mut Vec<LeaderOutput>,
    ) -> bool {
        let (Some(acceptor), Some(_), true) = (self.acceptor.as_mut(), other_leader(log), fast) else { return false };
        // The fast path: the client sent it to the leader too. A follower checks it as the
        // leader does (rule 22): what the leader refuses must never be recovered from the
        // followers' accepts.
        let unchecked = self.config.mutations.skip_fast_accept_check;
        if unchecked || Admission::new(&self.config, &self.registry).check(txn, now).is_ok() {
            let me = (log.id() - 1) as u32;
            let term = log.term();
            let counts = &mut self.accept_counts;
            fast_accept((acceptor, counts), (self.config.shard, me, term), now, client, txn, out);
        }
        true
    }

    fn fast_path(machine: &Replica) -> Option<&dyn FastPathReplica> {
        Some(machine)
    }

    fn fast_path_mut(machine: &mut Replica) -> Option<&mut dyn FastPathReplica> {
        Some(machine)
    }
}

/// A Luigi replica over `log` (its node's), starting as a follower: from the log's snapshot if it has one
/// (a restart after compaction), else from the `initial` store. Committed records the log
/// hands back (all of them after a restart) rebuild the rest.
///
/// # Errors
/// The log's snapshot does not load.
pub fn start(
    config: LeaderConfig,
    registry: Registry,
    initial: InitialStore,
    log: &RaftLog,
) -> Result<Replica, RaftError> {
    RoleMachine::start(LuigiProtocol::new(config, registry, initial), log)
}

/// A leader's counters of cross-shard agreement and recovery, as the shells read them.
fn agreement_counters(stats: &crate::leader::LeaderStats) -> AgreementCounters {
    AgreementCounters {
        cross_decided: stats.cross_decided,
        recover_sent: stats.recover_sent,
        recover_kept: stats.recover_kept,
        recover_acknowledged: stats.recover_acknowledged,
        recover_forgotten: stats.recover_forgotten,
        fast_proposals: stats.fast_proposals,
        early_answers: stats.early_answers,
    }
}

/// A serving Luigi leader's [`LeaderStats`](crate::leader::LeaderStats) read back from its
/// figures (the inverse of `txn_counts` and `agreement_counters`): how a shell that holds the
/// replica as a `dyn ShardReplica` (the simulator's reports) reads every counter. `None`
/// if `figures` carry no agreement counters (not Luigi's leader).
pub fn leader_stats(figures: &LeaderFigures) -> Option<crate::leader::LeaderStats> {
    let a = figures.agreement?;
    let count = |outcome: &str, path: &str| {
        figures.txns.iter().find(|t| t.outcome == outcome && t.path == path).map_or(0, |t| t.count)
    };
    Some(crate::leader::LeaderStats {
        admitted: count("admitted", "any"),
        bumped: count("admitted", "bumped"),
        bumped_late: count("admitted", "bumped_late"),
        bumped_floor: count("admitted", "bumped_floor"),
        bumped_conflict: count("admitted", "bumped_conflict"),
        executed: count("committed", "any"),
        rejected: count("rejected", "any"),
        malformed: count("rejected", "malformed"),
        ahead_of_clock: count("refused", "clock_horizon"),
        expired: count("expired", "any"),
        duplicates: count("duplicate", "any"),
        cross_decided: a.cross_decided,
        cross_differed: count("decided", "second_round"),
        aborted: count("aborted", "cross_shard"),
        early_overflow: count("refused", "early_buffer_full"),
        recover_sent: a.recover_sent,
        recover_forgotten: a.recover_forgotten,
        recover_kept: a.recover_kept,
        recover_acknowledged: a.recover_acknowledged,
        outcomes_full: count("refused", "outcomes_full"),
        fast_proposals: a.fast_proposals,
        early_answers: a.early_answers,
        fast_asked: count("fast_path", "asked"),
        fast_ineligible: count("fast_path", "ineligible"),
        fast_unclean: count("fast_path", "unclean"),
        fast_marked: count("fast_path", "marked"),
    })
}

/// A leader's transaction counters by outcome and path, as the shells' metrics name them
/// (docs/METRICS.md).
fn txn_counts(stats: &crate::leader::LeaderStats) -> Vec<TxnCount> {
    let count = |outcome, path, count| TxnCount { outcome, path, count };
    vec![
        count("admitted", "any", stats.admitted),
        count("admitted", "bumped", stats.bumped),
        count("admitted", "bumped_late", stats.bumped_late),
        count("admitted", "bumped_floor", stats.bumped_floor),
        count("admitted", "bumped_conflict", stats.bumped_conflict),
        count("committed", "any", stats.executed),
        count("rejected", "any", stats.rejected),
        count("rejected", "malformed", stats.malformed),
        count("refused", "clock_horizon", stats.ahead_of_clock),
        count("refused", "outcomes_full", stats.outcomes_full),
        count("refused", "early_buffer_full", stats.early_overflow),
        count("expired", "any", stats.expired),
        count("duplicate", "any", stats.duplicates),
        count("decided", "cross_shard", stats.cross_decided),
        count("decided", "second_round", stats.cross_differed),
        count("aborted", "cross_shard", stats.aborted),
        count("answered", "early", stats.early_answers),
        count("proposal_used", "fast", stats.fast_proposals),
        count("fast_path", "asked", stats.fast_asked),
        count("fast_path", "ineligible", stats.fast_ineligible),
        count("fast_path", "unclean", stats.fast_unclean),
        count("fast_path", "marked", stats.fast_marked),
    ]
}

/// Stalled transactions listed (oldest first) in a status report.
pub const STATUS_STALLED_MAX: usize = 5;

/// Luigi's replicas ([`Replica`], proposing [`crate::log::LogRecord`]s to its node's [`RaftLog`]):
/// the [`ReplicaFactory`] a node builds over its leader configuration (`luigi_node::NodeConfig::leader`).
#[derive(Clone, Debug)]
pub struct LuigiReplicas {
    /// The shard leader's configuration.
    pub leader: LeaderConfig,
}

impl ReplicaFactory for LuigiReplicas {
    fn name(&self) -> &'static str {
        "luigi"
    }

    fn progress_reports(&self) -> bool {
        true
    }

    fn peer_facts(&self, msg: &PeerMsg) -> PeerFacts {
        PeerBatch::decode(msg.clone()).map(|batch| batch.facts()).unwrap_or_default()
    }

    fn build(&self, setup: ReplicaSetup, log: &RaftLog) -> Result<Box<dyn ShardReplica>, BuildError> {
        let ReplicaSetup { registry, initial, .. } = setup;
        let replica = start(self.leader.clone(), registry, initial, log)
            .map_err(|source| BuildError { what: "loading its snapshot", source })?;
        Ok(Box::new(replica))
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_read_only;
