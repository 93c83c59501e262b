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
    AgreementCounters, BuildError, FastPathReplica, FollowerCore, FollowerDispatch, FollowerImages, LeaderCore,
    LeaderFigures, ReplayedExecutions, ReplicaFactory, ReplicaProtocol, ReplicaSetup, RoleMachine, ShardReplica,
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
}

impl FollowerImages for LuigiImages {
    type Follower = Follower;

    fn initial(&self) -> &InitialStore {
        &self.initial
    }

    fn fresh(&self, store: Store) -> Follower {
        Follower::new(self.shard, store, self.registry.clone()).with_answer_expiry(self.answer_expiry_us)
    }

    fn load(&self, data: &[u8]) -> Result<Follower, String> {
        Follower::from_snapshot(self.shard, self.registry.clone(), data)
            .map(|f| f.with_answer_expiry(self.answer_expiry_us))
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
            ..LeaderFigures::default()
        }
    }

    fn stalled(&self, now: TimeUs) -> Vec<StalledTxnInfo> {
        ShardLeader::stalled(self, now, usize::MAX)
            .into_iter()
            .map(|t| StalledTxnInfo { id: t.id, shards: t.shards, age_us: t.age_us, durable: t.durable })
            .collect()
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
        let images = LuigiImages { shard: config.shard, registry: registry.clone(), initial, answer_expiry_us };
        LuigiProtocol { config, registry, images, recovery: None, acceptor, accepts_kept_until: None, own_floor: None }
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
            fast_accept(acceptor, (self.config.shard, me, term), now, client, txn, out);
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
        fast_proposals: stats.fast_proposals,
        early_answers: stats.early_answers,
    }
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
mod tests {
    use std::sync::Arc;

    use crate::fast::AcceptRecord;
    use luigi_txn::msg::ServerMsg;
    use luigi_txn::types::{KeySet, ShardPiece, Txn, TxnId};
    use luigi_workloads::procedures::{micro_key, Micro, MicroOp};

    use super::*;
    use luigi_raft::RaftConfig;

    /// A one-voter group's replica and its node's log; readies are "persisted" at once.
    struct Lone {
        r: Replica,
        log: RaftLog,
    }

    fn lone_over(config: LeaderConfig, recovered: Option<luigi_raft::RecoveredState>) -> Lone {
        let log = RaftLog::new(RaftConfig::new(1, vec![1], 7), recovered).unwrap();
        let r = start(config, luigi_workloads::procedures::builtins(), empty_store(), &log).unwrap();
        Lone { r, log }
    }

    fn lone_replica() -> Lone {
        lone_over(LeaderConfig::new(0, 1), None)
    }

    fn drive(log: &mut RaftLog) {
        while let Some(rd) = log.ready().unwrap() {
            log.advance(rd.number);
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

    /// Drives `n` and turns it at `now` until nothing is left to do; returns the replies.
    fn settle(n: &mut Lone, now: TimeUs) -> Vec<LeaderOutput> {
        let mut out = Vec::new();
        for _ in 0..8 {
            drive(&mut n.log);
            n.r.turn(&mut n.log, now, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn the_leader_of_a_group_of_one_snapshots_what_a_follower_would_hold() {
        let mut n = lone_replica();
        n.log.campaign().unwrap();
        settle(&mut n, 100);
        assert!(n.r.is_serving());
        // The election's no-op and the new leader's floor promise.
        let elected_at = n.log.handed_out();
        assert!(n.r.own_snapshot_due(&n.log, elected_at + 1).unwrap().is_none(), "not due yet");
        let mut out = Vec::new();
        for seq in 1..=5 {
            n.r.on_client(&mut n.log, 1_000 * seq, 4, dispatch(seq), &mut out);
        }
        // Long after every timestamp: executed, answered, and covered by an Applied marker.
        out.extend(settle(&mut n, 60_000_000));
        let replies = out.iter().filter(|o| matches!(o, LeaderOutput::ToClient { msg: ServerMsg::Reply(_), .. }));
        assert_eq!(replies.count(), 5, "{out:?}");
        let index = n.log.handed_out();
        assert!(index > elected_at + 5, "the writes and a marker are logged");
        let job = n.r.own_snapshot_due(&n.log, index).unwrap().expect("due");
        assert_eq!(job.index(), index);
        // More writes before the job runs (as while it runs on another thread) change nothing in it.
        n.r.on_client(&mut n.log, 10_000, 4, dispatch(6), &mut Vec::new());
        settle(&mut n, 70_000_000);
        let image = std::thread::spawn(move || job.run()).join().unwrap().unwrap();
        assert_eq!(image.crc32, crc32fast::hash(&image.data));
        let (at, data) = (image.index, image.data);
        assert_eq!(at, index);
        let value = |store: &Store| store.get(&micro_key(1)).map(|v| v.as_slice().to_vec());
        let image = Follower::from_snapshot(0, luigi_workloads::procedures::builtins(), &data).unwrap();
        assert_eq!(value(image.store()), Some(5u64.to_le_bytes().to_vec()), "the state at the job's index");
        assert_eq!(value(n.r.store()), Some(6u64.to_le_bytes().to_vec()));

        // Compacted behind it, the log restarts from the snapshot and the entries after it.
        let snap = n.log.compact(at, data).unwrap();
        let log = &n.log;
        let entries =
            (at + 1..=log.last_index()).map(|i| luigi_raft::codec::encode_entry(&log.entry(i).unwrap())).collect();
        let recovered = luigi_raft::RecoveredState {
            hard_state: luigi_raft::HardState { term: log.term(), vote: 1, commit: at },
            snapshot: Some(snap),
            entries,
            applied: 0,
            rejoining: false,
        };
        let mut restarted = lone_over(LeaderConfig::new(0, 1), Some(recovered));
        restarted.log.campaign().unwrap();
        settle(&mut restarted, 60_000_100);
        assert!(restarted.r.is_serving());
        assert_eq!(restarted.r.store().get(&micro_key(1)), n.r.store().get(&micro_key(1)));
    }

    /// Rule 22 (issue 26): an accept of a malformed transaction in the accept log (written
    /// by a replica that did not check it, as before rule 22) is never recovered: its leader
    /// refused it, and the client was told it would run nowhere. Unsorted keys once made a
    /// new leader execute part of such a transaction.
    #[test]
    fn a_new_leader_recovers_no_malformed_accept() {
        let config = LeaderConfig { fast_path: true, ..LeaderConfig::new(0, 1) };
        let mut n = lone_over(config, None);
        let ClientMsg::Dispatch { txn, .. } = dispatch(1) else { unreachable!() };
        let unsorted = KeySet { reads: vec![], writes: vec![micro_key(2), micro_key(1)] };
        let bad = Txn { pieces: vec![ShardPiece { shard: 0, keys: unsorted }], ts: 500, ..(*txn).clone() };
        let good = Txn { id: TxnId { client: 4, seq: 2 }, ts: 600, ..(*txn).clone() };
        let records: Vec<(u64, Vec<u8>)> = [bad, good]
            .into_iter()
            .enumerate()
            .map(|(n, t)| (n as u64, AcceptRecord { ts: t.ts, txn: Arc::new(t) }.encode()))
            .collect();
        n.r.restore_accepts(&records).unwrap();
        assert_eq!(n.r.protocol().acceptor.as_ref().unwrap().undecided().len(), 2);
        n.log.campaign().unwrap();
        let mut out = settle(&mut n, 100);
        assert!(n.r.is_serving(), "{out:?}");
        out.extend(settle(&mut n, 10_000));
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
    fn through_the_seam_a_peer_message_that_does_not_decode_is_counted_and_dropped_never_a_panic() {
        use luigi_txn::peer::PeerBody;
        let mut n = lone_replica();
        n.log.campaign().unwrap();
        drive(&mut n.log);
        assert_eq!(n.r.turn(&mut n.log, 300, &mut Vec::new()).unwrap(), Some(Transition::Promoted));
        let seam: &mut dyn ShardReplica = &mut n.r;
        let mut out = Vec::new();
        let garbled = PeerMsg { from: 1, body: PeerBody::Protocol(vec![0xff; 3]) };
        assert!(!seam.on_peer(&mut n.log, 310, garbled, &mut out), "a garbled batch is not taken");
        // A batch naming another sender than its envelope is refused too.
        let forged = PeerMsg { from: 2, ..PeerBatch { from: 1, watermark: 0, items: vec![] }.encode().msg };
        assert!(!seam.on_peer(&mut n.log, 320, forged, &mut out));
        let good = PeerBatch { from: 1, watermark: 0, items: vec![] }.encode().msg;
        assert!(seam.on_peer(&mut n.log, 330, good, &mut out), "a serving replica takes a batch that decodes");
        assert_eq!(n.r.stats().undecodable_peer, 2);
        assert!(n.r.is_serving());
    }

    #[test]
    fn a_follower_answers_not_leader_then_serves_once_its_term_has_a_commit() {
        let mut n = lone_replica();
        let mut out = Vec::new();
        // No leader known: the dispatch waits for one (see `Waiting`).
        n.r.on_client(&mut n.log, 100, 4, dispatch(1), &mut out);
        assert!(out.is_empty(), "{out:?}");
        n.r.turn(&mut n.log, 150, &mut out).unwrap();
        assert!(out.is_empty(), "still no leader: {out:?}");
        assert!(!n.r.on_peer(&mut n.log, 100, PeerBatch { from: 1, watermark: 0, items: vec![] }, &mut out));

        n.log.campaign().unwrap();
        assert!(n.log.is_leader());
        // Leader in Raft, but its term's no-op is not committed and applied yet.
        assert_eq!(n.r.turn(&mut n.log, 200, &mut out).unwrap(), None);
        assert!(!n.r.is_serving());
        drive(&mut n.log);
        assert_eq!(n.r.turn(&mut n.log, 300, &mut out).unwrap(), Some(Transition::Promoted));
        assert!(n.r.is_serving());
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
        other.r.on_client(&mut other.log, 100, 4, dispatch(9), &mut Vec::new());
        let mut late = Vec::new();
        other.r.turn(&mut other.log, 100 + luigi_replica::waiting::WAITING_US_MAX + 1, &mut late).unwrap();
        assert!(
            matches!(late.as_slice(), [LeaderOutput::ToClient { client: 4, msg: ServerMsg::Reply(reply) }]
                if reply.outcome == Err(luigi_txn::msg::TxnError::NotLeader { hint: None }) && reply.arrival_delta_us == 10),
            "{late:?}"
        );
        assert_eq!(n.r.leader_hint(&n.log), Some(0));
        assert_eq!((n.log.role(), n.log.term()), (luigi_raft::Role::Leader, 1));
        assert_eq!(n.log.handed_out(), n.log.commit_index(), "everything committed was applied");
        out.clear();
        n.r.on_client(&mut n.log, 400, 4, dispatch(2), &mut out);
        // Rule 14: admitted, executed and answered at once (its timestamp has passed), before
        // its PREPARE commits: the answer names its position.
        let [LeaderOutput::Executed { ts: 400, .. }, answer] = out.as_slice() else { panic!("{out:?}") };
        assert!(matches!(reply(answer), Some((2, 400, Some(_)))), "{out:?}");
        assert!(n.log.commit_index() < n.log.last_index(), "not committed yet");
        assert_eq!(n.r.leader().unwrap().pending_len(), 0);
        settle(&mut n, 500);
        assert_eq!(n.log.commit_index(), n.log.last_index());
        assert_eq!(n.r.stats(), ReplicaStats { promotions: 1, demotions: 0, undecodable_peer: 0 });
    }

    /// The node's log holds bytes: a committed record that is not a Luigi record (another
    /// protocol's, or an incompatible build's) stops the replica with `BadEntry` naming it,
    /// from its turn and from every later ready of the log, and panics nowhere.
    #[test]
    fn a_committed_record_that_does_not_decode_stops_the_replica_with_an_error() {
        let mut n = lone_replica();
        n.log.campaign().unwrap();
        settle(&mut n, 100);
        assert!(n.r.is_serving());
        let bad = n.log.propose_bytes(vec![0xff; 4]).unwrap();
        drive(&mut n.log);
        let fatal = |e: &RaftError| matches!(e, RaftError::BadEntry { index, .. } if *index == bad);
        let err = n.r.turn(&mut n.log, 200, &mut Vec::new()).unwrap_err();
        assert!(fatal(&err), "{err}");
        assert!(n.log.ready().err().is_some_and(|e| fatal(&e)), "the log reports it from then on");
    }
}
