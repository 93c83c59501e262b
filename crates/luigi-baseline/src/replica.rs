//! [`BaseReplica`]: one replica of a baseline shard over its Raft log, the baseline's part
//! ([`BaseProtocol`]) of the one [`RoleMachine`] every protocol runs (`luigi_replica::role_machine`):
//! a follower applying committed records until its log leads and has applied everything
//! committed before its term, then a [`BaseLeader`]; a leader that loses leadership rebuilds
//! its follower state from its log (it ran ahead of it). Unlike Luigi's, a follower answers
//! every dispatch `NotLeader` ([`FollowerDispatch::AnswerNotLeader`]), and it has no fast path.
//! The replica node (`luigi-node`) drives it like Luigi's.

use luigi_protocol::log::LogEntry;
use luigi_raft::{RaftError, RaftLog};
use luigi_replica::{
    BuildError, FollowerCore, FollowerDispatch, FollowerImages, ImageFork, InitialStore, LeaderCore, LeaderFigures,
    ReplayedExecutions, ReplicaFactory, ReplicaProtocol, ReplicaSetup, RoleMachine, ShardReplica, TxnCount,
};
use luigi_store::Store;
use luigi_txn::msg::{ClientMsg, ReplicaStatus};
use luigi_txn::peer::{PeerFacts, PeerMsg, PeerVocabulary};
use luigi_txn::procedure::Registry;
use luigi_txn::types::{ClientId, ShardId, TimeUs, Timestamp, TxnId};

use crate::leader::{BaseConfig, BaseLeader};
use crate::msg::{BaseBatch, BaseOutput};
use crate::record::BaseRecord;
use crate::state::ShardState;

/// One replica of a baseline shard.
pub type BaseReplica = RoleMachine<BaseProtocol>;

/// How a baseline shard's follower states are made: a [`ShardState`] of the shard.
#[derive(Clone)]
pub struct BaseImages {
    shard: ShardId,
    initial: InitialStore,
}

impl FollowerImages for BaseImages {
    type Follower = ShardState;

    fn initial(&self) -> &InitialStore {
        &self.initial
    }

    fn fresh(&self, store: Store) -> ShardState {
        ShardState::new(self.shard, store)
    }

    fn load(&self, data: &[u8]) -> Result<ShardState, String> {
        ShardState::from_snapshot(self.shard, None, data).map_err(|e| e.to_string())
    }

    fn check(&self, index: u64, data: &[u8]) -> Result<(), String> {
        ShardState::from_snapshot(self.shard, Some(index), data).map(|_| ()).map_err(|e| e.to_string())
    }
}

impl FollowerCore for ShardState {
    type Record = BaseRecord;

    fn apply(&mut self, entry: &LogEntry<BaseRecord>) {
        ShardState::apply(self, entry)
    }

    fn take_executed(&mut self) -> Vec<(TxnId, Timestamp)> {
        ShardState::take_executed(self)
    }

    fn applied_index(&self) -> u64 {
        ShardState::applied_index(self)
    }

    fn image(&self) -> Vec<u8> {
        self.snapshot()
    }

    fn fork_image(&self) -> ImageFork {
        let fork = self.fork();
        Box::new(move || fork.image())
    }

    fn pong_watermark(&self) -> Timestamp {
        ShardState::applied_index(self)
    }

    fn store(&self) -> &Store {
        ShardState::store(self)
    }

    fn status(&self, status: &mut ReplicaStatus) {
        (status.watermark, status.pending) = (ShardState::applied_index(self), self.prepared().len() as u64);
    }

    fn check_invariants(&self) -> Result<(), String> {
        Ok(())
    }

    fn stats_line(&self) -> Option<String> {
        None
    }
}

impl LeaderCore for BaseLeader<RaftLog> {
    type Record = BaseRecord;
    type Batch = BaseBatch;

    fn on_client(
        &mut self,
        log: &mut RaftLog,
        now: TimeUs,
        client: ClientId,
        msg: ClientMsg,
        out: &mut Vec<BaseOutput>,
    ) {
        BaseLeader::on_client(self, log, now, client, msg, out)
    }

    fn on_peer(&mut self, log: &mut RaftLog, now: TimeUs, batch: BaseBatch, out: &mut Vec<BaseOutput>) {
        BaseLeader::on_peer(self, log, now, batch, out)
    }

    /// Nothing to do: items sent to the old leader are lost with it, and their senders'
    /// round timeouts (abort or resolution) take over.
    fn peer_leader_changed(&mut self, _shard: ShardId) {}

    fn tick(&mut self, log: &mut RaftLog, now: TimeUs, out: &mut Vec<BaseOutput>) {
        BaseLeader::tick(self, log, now, out)
    }

    fn next_deadline(&self) -> Option<TimeUs> {
        BaseLeader::next_deadline(self)
    }

    fn store(&self) -> &Store {
        self.state().store()
    }

    fn status(&self, _now: TimeUs, status: &mut ReplicaStatus) {
        status.serving = true;
        status.watermark = self.state().applied_index();
        status.pending = self.pending_len() as u64;
    }

    fn check_invariants(&self) -> Result<(), String> {
        BaseLeader::check_invariants(self)
    }

    fn stats_line(&self) -> String {
        format!("{:?}", self.stats())
    }

    fn figures(&self) -> LeaderFigures {
        LeaderFigures {
            pending: self.pending_len(),
            prepared: self.state().prepared().keys().copied().collect(),
            locks_held: self.locks_held(),
            txns: txn_counts(&self.stats()),
            procedure_commits: self.procedure_commits().clone(),
            ..LeaderFigures::default()
        }
    }
}

/// The baseline's part of its replicas: its configuration and procedures.
pub struct BaseProtocol {
    config: BaseConfig,
    registry: Registry,
    images: BaseImages,
}

impl BaseProtocol {
    /// The part of a replica of `config.shard` running `registry`'s procedures over the
    /// `initial` store (a replica: `BaseReplica::start(BaseProtocol::new(..), &log)`).
    pub fn new(config: BaseConfig, registry: Registry, initial: InitialStore) -> Self {
        let images = BaseImages { shard: config.shard, initial };
        BaseProtocol { config, registry, images }
    }

    /// Its configuration.
    pub fn config(&self) -> &BaseConfig {
        &self.config
    }
}

impl ReplicaProtocol for BaseProtocol {
    type Record = BaseRecord;
    type Follower = ShardState;
    type Leader = BaseLeader<RaftLog>;
    type Images = BaseImages;
    type Handover = ();

    const FOLLOWER_DISPATCH: FollowerDispatch = FollowerDispatch::AnswerNotLeader;
    const REPLAYED_EXECUTIONS: ReplayedExecutions = ReplayedExecutions::Forgotten;

    fn shard(&self) -> ShardId {
        self.config.shard
    }

    fn images(&self) -> &BaseImages {
        &self.images
    }

    /// Once its log leads and has applied everything committed before its term.
    fn may_serve(&mut self, _state: &ShardState, log: &mut RaftLog, _now: TimeUs) -> Result<Option<()>, RaftError> {
        Ok(log.may_serve().then_some(()))
    }

    fn take_office(&mut self, state: ShardState, _log: &mut RaftLog, now: TimeUs, _: ()) -> BaseLeader<RaftLog> {
        BaseLeader::recover(self.config.clone(), self.registry.clone(), state, now)
    }
}

/// The baseline's replicas ([`BaseReplica`], proposing [`BaseRecord`]s to its node's
/// [`RaftLog`]) for one [`crate::Mode`]: the
/// [`ReplicaFactory`] a node of an `occ`, `2pl` or `direct` cluster is built with.
#[derive(Clone, Copy, Debug)]
pub struct BaseReplicas {
    /// Which baseline.
    pub mode: crate::Mode,
}

impl ReplicaFactory for BaseReplicas {
    fn name(&self) -> &'static str {
        self.mode.protocol().name()
    }

    fn peer_facts(&self, msg: &PeerMsg) -> PeerFacts {
        BaseBatch::decode(msg.clone()).map(|batch| batch.facts()).unwrap_or_default()
    }

    fn build(&self, setup: ReplicaSetup, log: &RaftLog) -> Result<Box<dyn ShardReplica>, BuildError> {
        let ReplicaSetup { shard, shards, round_timeout_us, registry, initial, .. } = setup;
        let mut config = BaseConfig::new(shard, shards, self.mode);
        // One round of the protocol takes a few one-way delays; the node's recovery timeout
        // (derived from the one-way delay) bounds it the way it bounds Luigi's agreement.
        config.round_timeout_us = round_timeout_us;
        config.execution_ttl_us = 2 * round_timeout_us;
        let replica = BaseReplica::start(BaseProtocol::new(config, registry, initial), log)
            .map_err(|source| BuildError { what: "loading its snapshot", source })?;
        Ok(Box::new(replica))
    }
}

/// A baseline leader's transaction counters by outcome and path, as the shells' metrics name
/// them (docs/METRICS.md): its aborts and lock conflicts under the same scheme as Luigi's.
fn txn_counts(stats: &crate::leader::BaseStats) -> Vec<TxnCount> {
    let count = |outcome, path, count| TxnCount { outcome, path, count };
    vec![
        count("committed", "any", stats.local_commits + stats.coordinated_commits),
        count("committed", "cross_shard", stats.coordinated_commits),
        count("aborted", "cross_shard", stats.coordinated_aborts),
        count("refused", "lock_conflict", stats.lock_conflicts),
        count("aborted", "validation", stats.validation_failures),
        count("resolved", "timeout", stats.resolutions),
    ]
}
