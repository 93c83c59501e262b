//! [`BaseReplica`]: one replica of a baseline shard over its Raft log, the baseline's
//! counterpart of Luigi's `luigi_raft::replica::Replica`: a follower applying committed
//! records until its log leads and has applied everything committed before its term, then a
//! [`BaseLeader`]; a leader that loses leadership rebuilds its follower state from its log (it
//! ran ahead of it). The replica node (`luigi-node`) drives it like Luigi's.

use std::any::Any;
use std::sync::Arc;

use luigi_proto::leader::LeaderOutput;
use luigi_proto::log::{LogEntry, ReplicatedLog};
use luigi_proto::msg::{ClientMsg, PeerBatch, ReplicaStatus, ServerMsg, TxnReply};
use luigi_proto::procedure::Registry;
use luigi_proto::types::{ClientId, ShardId, TimeUs, Timestamp, TxnId};
use luigi_raft::replica::{InitialStore, ReplicaStats};
use luigi_raft::{
    BuildError, LogControl, RaftError, RaftLog, Replay, ReplicaFactory, ReplicaSetup, ShardReplica, SnapshotDecoder,
    SnapshotImage, SnapshotJob, StateBox, Transition,
};
use luigi_store::Store;

use crate::leader::{BaseConfig, BaseLeader};
use crate::record::BaseRecord;
use crate::state::{ImageError, ShardState};

/// A baseline shard's Raft log.
pub type BaseLog = RaftLog<BaseRecord>;

#[allow(clippy::large_enum_variant)] // one per replica, swapped rarely
enum Role {
    Leader(BaseLeader<BaseLog>),
    Follower(ShardState, BaseLog),
    /// Only while switching (never observed outside a method).
    Switching,
}

/// One replica of a baseline shard.
pub struct BaseReplica {
    config: BaseConfig,
    registry: Registry,
    initial: InitialStore,
    role: Role,
    committed: Vec<LogEntry<BaseRecord>>,
    executed: Vec<(TxnId, u64)>,
    stats: ReplicaStats,
}

/// The replica index (from 0) of the leader `log` knows of; Raft ids are indexes + 1.
fn hint(log: &BaseLog) -> Option<u32> {
    log.leader_id().map(|id| (id - 1) as u32)
}

/// The state at the end of `records`, which follow the snapshot `data` (or the `initial`
/// store).
fn rebuild(
    config: &BaseConfig,
    initial: &InitialStore,
    data: Option<&[u8]>,
    records: &[LogEntry<BaseRecord>],
) -> Result<ShardState, RaftError> {
    let mut state = match data {
        Some(data) => {
            ShardState::from_snapshot(config.shard, None, data).map_err(|e| RaftError::Invalid(e.to_string()))?
        }
        None => ShardState::new(config.shard, initial()),
    };
    for e in records {
        state.apply(e);
    }
    state.take_executed();
    Ok(state)
}

/// A baseline replica's own snapshot (see Luigi's `Replica::own_snapshot_due` for the why: a
/// replay on another thread, so the event loop never serializes a large store): the state at
/// `index`, rebuilt from the log's snapshot and the records after it, serialized.
fn make_snapshot(
    index: u64,
    config: &BaseConfig,
    initial: &InitialStore,
    replay: &Replay<BaseRecord>,
) -> Result<SnapshotImage, RaftError> {
    let records = replay.records()?;
    let state = rebuild(config, initial, replay.snapshot_data(), &records)?;
    if state.applied_index() != index {
        return Err(RaftError::Invalid(format!(
            "the replay to index {index} rebuilt the state at index {}",
            state.applied_index()
        )));
    }
    Ok(SnapshotImage::new(index, state.snapshot().into()))
}

/// Reads a baseline shard's snapshot images (off the event loop).
struct StateImages {
    shard: ShardId,
}

impl SnapshotDecoder for StateImages {
    fn check(&self, index: u64, data: &[u8]) -> Result<(), String> {
        ShardState::from_snapshot(self.shard, Some(index), data).map(|_| ()).map_err(|e| e.to_string())
    }

    fn decode(&self, data: &[u8]) -> Result<StateBox, String> {
        let state = ShardState::from_snapshot(self.shard, None, data).map_err(|e| e.to_string())?;
        Ok(Box::new(state))
    }
}

impl BaseReplica {
    /// A replica over `log`, starting as a follower from the log's snapshot or the `initial`
    /// store.
    ///
    /// # Errors
    /// The log's snapshot does not load.
    pub fn new(
        config: BaseConfig,
        registry: Registry,
        initial: InitialStore,
        log: BaseLog,
    ) -> Result<Self, ImageError> {
        let state = match log.snapshot_data() {
            Some(data) => ShardState::from_snapshot(config.shard, None, data)?,
            None => ShardState::new(config.shard, initial()),
        };
        Ok(BaseReplica {
            config,
            registry,
            initial,
            role: Role::Follower(state, log),
            committed: Vec::new(),
            executed: Vec::new(),
            stats: ReplicaStats::default(),
        })
    }

    /// Decodes a snapshot of this shard (off the event loop: it reads the whole image).
    ///
    /// # Errors
    /// It does not decode or is another shard's (or, given, another index's).
    pub fn decode_snapshot(config: &BaseConfig, index: Option<u64>, data: &[u8]) -> Result<ShardState, ImageError> {
        ShardState::from_snapshot(config.shard, index, data)
    }

    /// Its configuration.
    pub fn config(&self) -> &BaseConfig {
        &self.config
    }

    /// Replaces the follower state by a decoded snapshot of the leader's (a lagging replica);
    /// a replica still serving is demoted by it. Returns the replaced state, to drop off the
    /// event loop.
    pub fn install(&mut self, restored: ShardState) -> Option<ShardState> {
        let (log, replaced) = match std::mem::replace(&mut self.role, Role::Switching) {
            Role::Follower(mut s, log) => {
                self.executed.extend(s.take_executed());
                (log, Some(s))
            }
            Role::Leader(l) => {
                self.stats.demotions += 1;
                (l.into_log(), None)
            }
            Role::Switching => unreachable!("not observable"),
        };
        self.role = Role::Follower(restored, log);
        replaced
    }

    /// This replica's own snapshot once the last record it applied reached `next_at` (a
    /// follower, or the leader of a group of one).
    ///
    /// # Errors
    /// An entry is missing from the log's memory (a bug).
    pub fn own_snapshot_due(&self, next_at: u64) -> Result<Option<SnapshotJob>, RaftError> {
        let Some((index, replay)) = self.log().own_snapshot_replay(self.is_serving(), next_at)? else {
            return Ok(None);
        };
        let (config, initial) = (self.config.clone(), self.initial.clone());
        Ok(Some(SnapshotJob::new(index, move || make_snapshot(index, &config, &initial, &replay))))
    }

    /// The Raft log.
    pub fn log(&self) -> &BaseLog {
        match &self.role {
            Role::Leader(l) => l.log(),
            Role::Follower(_, log) => log,
            Role::Switching => unreachable!("not observable"),
        }
    }

    /// The Raft log, to drive.
    pub fn log_mut(&mut self) -> &mut BaseLog {
        match &mut self.role {
            Role::Leader(l) => l.log_mut(),
            Role::Follower(_, log) => log,
            Role::Switching => unreachable!("not observable"),
        }
    }

    /// True while it serves as the shard leader.
    pub fn is_serving(&self) -> bool {
        matches!(self.role, Role::Leader(_))
    }

    /// The serving leader, if it is one.
    pub fn leader(&self) -> Option<&BaseLeader<BaseLog>> {
        match &self.role {
            Role::Leader(l) => Some(l),
            Role::Follower(..) | Role::Switching => None,
        }
    }

    /// Its state (a follower's lags the leader's, which runs at the end of its log).
    pub fn state(&self) -> &ShardState {
        match &self.role {
            Role::Leader(l) => l.state(),
            Role::Follower(s, _) => s,
            Role::Switching => unreachable!("not observable"),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        self.state().store()
    }

    /// Role-change counters.
    pub fn stats(&self) -> ReplicaStats {
        self.stats
    }

    /// The replica clients should try.
    pub fn leader_hint(&self) -> Option<u32> {
        hint(self.log())
    }

    /// A client's message; a replica that does not serve answers a dispatch `NotLeader`.
    pub fn on_client(&mut self, now: TimeUs, client: ClientId, msg: ClientMsg, out: &mut Vec<LeaderOutput>) {
        let shard = self.config.shard;
        match &mut self.role {
            Role::Leader(l) => l.on_client(now, client, msg, out),
            Role::Follower(s, log) => match msg {
                ClientMsg::Hello { .. } | ClientMsg::Status => {}
                ClientMsg::Ping { sent_us } => out.push(LeaderOutput::ToClient {
                    client,
                    msg: ServerMsg::pong(shard, now, sent_us, s.applied_index()),
                }),
                ClientMsg::Dispatch { txn, sent_us, .. } => out.push(LeaderOutput::ToClient {
                    client,
                    msg: ServerMsg::Reply(TxnReply::not_leader(txn.id, shard, hint(log), now, sent_us)),
                }),
            },
            Role::Switching => unreachable!("not observable"),
        }
    }

    /// Items from another shard's leader; dropped unless serving (their senders time out).
    pub fn on_peer(&mut self, now: TimeUs, batch: PeerBatch, out: &mut Vec<LeaderOutput>) -> bool {
        match &mut self.role {
            Role::Leader(l) => {
                l.on_peer(now, batch, out);
                true
            }
            Role::Follower(..) => false,
            Role::Switching => unreachable!("not observable"),
        }
    }

    /// After the shell drove the log: applies committed records (follower), switches role if
    /// leadership moved, ticks the leader.
    ///
    /// # Errors
    /// A demoted leader that cannot rebuild from its log.
    pub fn turn(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) -> Result<Option<Transition>, RaftError> {
        let mut transition = None;
        match &mut self.role {
            Role::Follower(s, log) => {
                log.take_committed(&mut self.committed);
                for e in self.committed.drain(..) {
                    s.apply(&e);
                }
                self.executed.extend(s.take_executed());
                if log.may_serve() {
                    self.promote(now);
                    transition = Some(Transition::Promoted);
                }
            }
            Role::Leader(l) => {
                if !l.log().is_leader() {
                    self.demote()?;
                    transition = Some(Transition::Demoted);
                }
            }
            Role::Switching => unreachable!("not observable"),
        }
        if let Role::Leader(l) = &mut self.role {
            l.tick(now, out);
        }
        Ok(transition)
    }

    /// Installs the follower state made since the last call: (transaction, log index). A
    /// serving leader reports its own as `LeaderOutput::Executed`.
    pub fn take_executed(&mut self) -> Vec<(TxnId, u64)> {
        if let Role::Follower(s, _) = &mut self.role {
            self.executed.extend(s.take_executed());
        }
        std::mem::take(&mut self.executed)
    }

    /// When [`BaseReplica::turn`] has timed work.
    pub fn next_deadline(&self) -> Option<TimeUs> {
        match &self.role {
            Role::Leader(l) => l.next_deadline(),
            Role::Follower(..) | Role::Switching => None,
        }
    }

    fn promote(&mut self, now: TimeUs) {
        let Role::Follower(s, log) = std::mem::replace(&mut self.role, Role::Switching) else {
            unreachable!("promote is called on a follower")
        };
        self.role = Role::Leader(BaseLeader::recover(self.config.clone(), self.registry.clone(), log, s, now));
        self.stats.promotions += 1;
    }

    fn demote(&mut self) -> Result<(), RaftError> {
        let Role::Leader(l) = std::mem::replace(&mut self.role, Role::Switching) else {
            unreachable!("demote is called on a leader")
        };
        let mut log = l.into_log();
        let rebuilt = log
            .replay_for_rebuild()
            .and_then(|replay| rebuild(&self.config, &self.initial, replay.snapshot_data(), &replay.records()?));
        match rebuilt {
            Ok(state) => {
                self.role = Role::Follower(state, log);
                self.stats.demotions += 1;
                Ok(())
            }
            Err(e) => {
                self.role = Role::Follower(ShardState::new(self.config.shard, Store::new()), log);
                Err(e)
            }
        }
    }
}

impl ShardReplica for BaseReplica {
    fn log(&self) -> &dyn LogControl {
        BaseReplica::log(self)
    }

    fn log_mut(&mut self) -> &mut dyn LogControl {
        BaseReplica::log_mut(self)
    }

    fn on_client(&mut self, now: TimeUs, client: ClientId, msg: ClientMsg, out: &mut Vec<LeaderOutput>) {
        BaseReplica::on_client(self, now, client, msg, out)
    }

    fn on_peer(&mut self, now: TimeUs, batch: PeerBatch, out: &mut Vec<LeaderOutput>) -> bool {
        BaseReplica::on_peer(self, now, batch, out)
    }

    /// Nothing to do: items sent to the old leader are lost with it, and their senders'
    /// round timeouts (abort or resolution) take over.
    fn peer_leader_changed(&mut self, _shard: ShardId) {}

    fn turn(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) -> Result<Option<Transition>, RaftError> {
        BaseReplica::turn(self, now, out)
    }

    fn take_executed(&mut self) -> Vec<(TxnId, Timestamp)> {
        BaseReplica::take_executed(self)
    }

    fn next_deadline(&self) -> Option<TimeUs> {
        BaseReplica::next_deadline(self)
    }

    fn is_serving(&self) -> bool {
        BaseReplica::is_serving(self)
    }

    fn leader_hint(&self) -> Option<u32> {
        BaseReplica::leader_hint(self)
    }

    fn store(&self) -> &Store {
        BaseReplica::store(self)
    }

    fn own_snapshot_due(&self, next_at: u64) -> Result<Option<SnapshotJob>, RaftError> {
        BaseReplica::own_snapshot_due(self, next_at)
    }

    fn snapshot_decoder(&self) -> Arc<dyn SnapshotDecoder> {
        Arc::new(StateImages { shard: self.config.shard })
    }

    fn install_snapshot(&mut self, data: &[u8]) -> Result<Option<StateBox>, RaftError> {
        let state =
            ShardState::from_snapshot(self.config.shard, None, data).map_err(|e| RaftError::Invalid(e.to_string()))?;
        Ok(self.install(state).map(|old| Box::new(old) as StateBox))
    }

    fn install_decoded(&mut self, state: StateBox) -> Result<Option<StateBox>, RaftError> {
        let state = state
            .downcast::<ShardState>()
            .map_err(|_| RaftError::Invalid("a decoded snapshot of another protocol".into()))?;
        Ok(self.install(*state).map(|old| Box::new(old) as StateBox))
    }

    fn status(&self, _now: TimeUs, status: &mut ReplicaStatus) {
        match &self.role {
            Role::Leader(l) => {
                status.serving = true;
                status.watermark = l.state().applied_index();
                status.pending = l.pending_len() as u64;
            }
            Role::Follower(s, _) => (status.watermark, status.pending) = (s.applied_index(), s.prepared().len() as u64),
            Role::Switching => {}
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match &self.role {
            Role::Leader(l) => l.check_invariants(),
            Role::Follower(..) | Role::Switching => Ok(()),
        }
    }

    fn stats_line(&self) -> String {
        match &self.role {
            Role::Leader(l) => format!("{:?} {:?}", l.stats(), self.stats),
            Role::Follower(..) | Role::Switching => format!("{:?}", self.stats),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The baseline's replicas ([`BaseReplica`] over a [`BaseLog`]) for one [`crate::Mode`]: the
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

    fn build(&self, setup: ReplicaSetup) -> Result<Box<dyn ShardReplica>, BuildError> {
        let ReplicaSetup { raft, recovered, leader, registry, initial, .. } = setup;
        let log = RaftLog::new_typed(raft, Some(recovered))
            .map_err(|source| BuildError { what: "opening the log", source })?;
        let mut config = BaseConfig::new(leader.shard, leader.shards, self.mode);
        // One round of the protocol takes a few one-way delays; the leader's recovery timeout
        // (derived from the one-way delay) bounds it the way it bounds Luigi's agreement.
        config.round_timeout_us = leader.recover_after_us;
        config.execution_ttl_us = 2 * leader.recover_after_us;
        let replica = BaseReplica::new(config, registry, initial, log)
            .map_err(|e| BuildError { what: "loading its snapshot", source: RaftError::Invalid(e.to_string()) })?;
        Ok(Box::new(replica))
    }
}

/// The replica factory of `protocol`: Luigi's, or the baseline's for its mode. The server and
/// the simulator build their nodes with it, so a cluster runs the protocol its file names.
pub fn replicas_for(protocol: luigi_proto::types::Protocol) -> Arc<dyn ReplicaFactory> {
    match crate::Mode::of(protocol) {
        Some(mode) => Arc::new(BaseReplicas { mode }),
        None => Arc::new(luigi_raft::replica::LuigiReplicas),
    }
}
