//! A shard leader beside the log it is lent ([`LeaderWithLog`]): for the leader's tests, the
//! fuzzers and the simulator's ideal-log model, which hold their own log next to the leader
//! the way a replica node holds its Raft log. [`ShardLeader`] holds no log: every call that
//! may propose or take committed records borrows one.

use std::ops::{Deref, DerefMut};

use luigi_store::Store;
use luigi_txn::msg::ClientMsg;
use luigi_txn::procedure::Registry;
use luigi_txn::types::{ClientId, TimeUs};

use super::follower::Handover;
use super::{LeaderConfig, LeaderOutput, ShardLeader};
use crate::log::{LogEntry, LogRecord, ReplicatedLog};
use crate::msg::PeerBatch;

/// A [`ShardLeader`] and its log: the leader's calls that need the log lend it this one; the
/// leader's other methods are reached through `Deref`.
pub struct LeaderWithLog<L: ReplicatedLog<LogRecord>> {
    /// The leader.
    pub leader: ShardLeader<L>,
    /// The log it is lent.
    pub log: L,
}

impl<L: ReplicatedLog<LogRecord>> LeaderWithLog<L> {
    /// See [`ShardLeader::new`].
    pub fn new(config: LeaderConfig, log: L, store: Store, registry: Registry) -> Self {
        LeaderWithLog { leader: ShardLeader::new(config, &log, store, registry), log }
    }

    /// See [`ShardLeader::recover`].
    pub fn recover(config: LeaderConfig, log: L, handover: Handover, now: TimeUs) -> Self {
        LeaderWithLog { leader: ShardLeader::recover(config, &log, handover, now), log }
    }

    /// See [`ShardLeader::on_client`].
    pub fn on_client(&mut self, now: TimeUs, client: ClientId, msg: ClientMsg, out: &mut Vec<LeaderOutput>) {
        self.leader.on_client(&mut self.log, now, client, msg, out);
    }

    /// See [`ShardLeader::on_peer`].
    pub fn on_peer(&mut self, now: TimeUs, batch: PeerBatch, out: &mut Vec<LeaderOutput>) {
        self.leader.on_peer(&mut self.log, now, batch, out);
    }

    /// See [`ShardLeader::tick`].
    pub fn tick(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        self.leader.tick(&mut self.log, now, out);
    }

    /// See [`ShardLeader::take_over_tail`].
    pub fn take_over_tail(&mut self, tail: Vec<LogEntry>) {
        self.leader.take_over_tail(&mut self.log, tail);
    }

    /// See [`ShardLeader::mark_applied`].
    pub fn mark_applied(&mut self) {
        self.leader.mark_applied(&mut self.log);
    }

    /// The log.
    pub fn log(&self) -> &L {
        &self.log
    }

    /// The log, to drive.
    pub fn log_mut(&mut self) -> &mut L {
        &mut self.log
    }

    /// Drops the leader and keeps its log.
    pub fn into_log(self) -> L {
        self.log
    }
}

impl<L: ReplicatedLog<LogRecord>> Deref for LeaderWithLog<L> {
    type Target = ShardLeader<L>;

    fn deref(&self) -> &ShardLeader<L> {
        &self.leader
    }
}

impl<L: ReplicatedLog<LogRecord>> DerefMut for LeaderWithLog<L> {
    fn deref_mut(&mut self) -> &mut ShardLeader<L> {
        &mut self.leader
    }
}
