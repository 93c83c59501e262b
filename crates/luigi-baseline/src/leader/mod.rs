//! [`BaseLeader`]: a baseline shard's serving leader. Its state is the [`ShardState`] at the
//! end of its log (it applies each record as it logs it), plus what lives only in its memory:
//! locks and versions, pieces executed and not prepared, the transactions it coordinates or
//! resolves, and the answers waiting for the log to commit.
//!
//! Methods live by concern: `dispatch` (a client's transaction, and the single-shard path),
//! `participant` (a piece's execution, prepare and decision), `coordinator` (the two rounds of
//! a cross-shard transaction), `resolver` (deciding from the participants' durable states).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::marker::PhantomData;
use std::sync::Arc;

use luigi_protocol::log::{LogEntry, LogError, ReplicatedLog};
use luigi_txn::keyhash::stable_key_hash;
use luigi_txn::msg::{ClientMsg, ServerMsg, TxnError, TxnReply};
use luigi_txn::procedure::Registry;
use luigi_txn::types::{ClientId, KeySet, ShardId, TimeUs, Txn, TxnId};

use crate::locks::{LockTable, Versions};
use crate::msg::{BaseBatch, BaseItem, BaseOutput, BaseState};
use crate::record::{BaseRecord, Write};
use crate::state::ShardState;
use crate::Mode;

mod coordinator;
mod dispatch;
mod participant;
mod resolver;

/// Items a leader handles for itself in one call, at most (its own shard's messages go
/// through a local inbox): a bound on the work of one event.
const INBOX_ROUNDS_MAX: usize = 1 << 16;

/// Items in one batch to another shard's leader, at most.
pub const PEER_BATCH_ITEMS_MAX: usize = 256;

/// Knobs of a baseline leader.
#[derive(Clone, Debug)]
pub struct BaseConfig {
    /// This shard.
    pub shard: ShardId,
    /// Shards in the cluster.
    pub shards: u32,
    /// Which baseline.
    pub mode: Mode,
    /// How long a round may take before its waiter acts: a coordinator still executing
    /// aborts, one preparing resolves; a participant whose prepared piece has no decision
    /// resolves it; a resolver asks its silent participants again.
    pub round_timeout_us: u64,
    /// A piece executed and not prepared within this long is dropped (its locks released).
    pub execution_ttl_us: u64,
    /// Transactions coordinated at once, at most (more are answered `Busy`).
    pub coordinating_max: usize,
    /// Pieces executed and not prepared, at most (more are refused as busy).
    pub executions_max: usize,
    /// Answers waiting for the log, at most (more are answered `Busy`).
    pub waits_max: usize,
}

impl BaseConfig {
    /// Defaults for `shard` of `shards` running `mode`.
    pub fn new(shard: ShardId, shards: u32, mode: Mode) -> Self {
        BaseConfig {
            shard,
            shards,
            mode,
            round_timeout_us: 1_000_000,
            execution_ttl_us: 5_000_000,
            coordinating_max: 1 << 16,
            executions_max: 1 << 16,
            waits_max: 1 << 18,
        }
    }
}

/// Counters of a baseline leader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BaseStats {
    /// Single-shard transactions (and direct pieces) installed.
    pub local_commits: u64,
    /// Cross-shard transactions this leader coordinated to a commit.
    pub coordinated_commits: u64,
    /// ... and to an abort (a conflict, a failed validation, a silent participant).
    pub coordinated_aborts: u64,
    /// Transactions refused at once on a lock conflict (single-shard, or a piece's execution).
    pub lock_conflicts: u64,
    /// Pieces whose OCC validation failed at prepare.
    pub validation_failures: u64,
    /// Resolutions started (a coordinator or participant timed out).
    pub resolutions: u64,
}

/// A piece executed here and not prepared yet: its writes stay buffered.
#[derive(Debug)]
struct Execution {
    txn: Arc<Txn>,
    writes: Vec<Write>,
    output: Result<Vec<u8>, TxnError>,
    read_locks: Vec<u64>,
    write_locks: Vec<u64>,
    /// OCC: the versions of the declared keys when it executed.
    versions: Vec<(u64, u64)>,
    /// 2PL: it holds its locks since it executed.
    locked: bool,
    acked_below: u64,
    at_us: TimeUs,
}

/// Something to send once the log has committed a given record.
#[derive(Debug)]
enum Wait {
    Client { client: ClientId, reply: TxnReply },
    Peer { to: ShardId, item: BaseItem },
}

/// The hashes of a piece's declared keys: (reads, writes). Stable, not keyed per process:
/// a `PREPARE` record carries them, and a new leader, another process, locks them again
/// (keyed per process, its locks missed the keys and a conflicting transaction ran through
/// a prepared one: `luigi/tests/baseline_failover.rs` lost an OCC transfer).
fn lock_keys(keys: &KeySet) -> (Vec<u64>, Vec<u64>) {
    let hashes = |list: &[Vec<u8>]| list.iter().map(|k| stable_key_hash(k)).collect();
    (hashes(&keys.reads), hashes(&keys.writes))
}

/// A baseline shard's serving leader, lent a log of type `L` by its caller.
pub struct BaseLeader<L> {
    config: BaseConfig,
    registry: Registry,
    /// The type of the log its caller lends it (it holds none).
    log_type: PhantomData<fn(&mut L)>,
    state: ShardState,
    locks: LockTable,
    versions: Versions,
    executions: BTreeMap<TxnId, Execution>,
    coordinating: BTreeMap<TxnId, coordinator::Coordination>,
    resolving: BTreeMap<TxnId, resolver::Resolution>,
    /// Records logged and not known committed: index → the transaction it is about.
    uncommitted: BTreeMap<u64, TxnId>,
    /// Pieces whose `Prepare` is logged and not committed.
    preparing: BTreeSet<TxnId>,
    /// Tombstones (`Abort` of a piece never prepared) logged and not committed.
    tombstoning: BTreeSet<TxnId>,
    /// When each prepared piece was first seen undecided (its resolution is due a round later).
    prepared_since: BTreeMap<TxnId, TimeUs>,
    /// Decisions the log refused (full): logged again at the next tick.
    unlogged_decisions: BTreeMap<TxnId, bool>,
    /// Sends waiting for the record at an index to commit.
    waits: BTreeMap<u64, Vec<Wait>>,
    waits_len: usize,
    /// The last index this leader logged (everything it installed is at or below it).
    last_logged: u64,
    committed_index: u64,
    outbox: BTreeMap<ShardId, Vec<BaseItem>>,
    inbox: VecDeque<BaseItem>,
    committed: Vec<LogEntry<BaseRecord>>,
    /// Single-shard reads run since the last pump, reported like installs (they change no
    /// state, but an observer ordering executions needs them): (transaction, the index of
    /// the barrier its answer waits for).
    reads: Vec<(TxnId, u64)>,
    now_us: TimeUs,
    stats: BaseStats,
    /// Its commits per stored procedure (counted with `stats`' commits), for the metrics.
    procedure_commits: luigi_replica::ProcedureCommits,
}

impl<L: ReplicatedLog<BaseRecord>> BaseLeader<L> {
    /// The leader of a shard whose state, everything committed before this leader's term
    /// applied, is `state`; its caller holds the shard's log and lends it to every call that
    /// may propose or take committed records. The prepared pieces in it lock their keys
    /// again and get a decision (from their coordinator or, a round later, by resolution).
    pub fn recover(config: BaseConfig, registry: Registry, state: ShardState, now: TimeUs) -> Self {
        assert_eq!(config.shard, state.shard(), "a leader serves its own shard's state");
        let mut locks = LockTable::new();
        let mut prepared_since = BTreeMap::new();
        for (id, p) in state.prepared() {
            let relocked = locks.try_lock(*id, &p.read_locks, &p.write_locks);
            assert!(relocked.is_ok(), "prepared pieces hold compatible locks: {id:?}");
            prepared_since.insert(*id, now);
        }
        let last_logged = state.applied_index();
        BaseLeader {
            config,
            registry,
            log_type: PhantomData,
            state,
            locks,
            versions: Versions::default(),
            executions: BTreeMap::new(),
            coordinating: BTreeMap::new(),
            resolving: BTreeMap::new(),
            uncommitted: BTreeMap::new(),
            preparing: BTreeSet::new(),
            tombstoning: BTreeSet::new(),
            prepared_since,
            unlogged_decisions: BTreeMap::new(),
            waits: BTreeMap::new(),
            waits_len: 0,
            last_logged,
            committed_index: last_logged,
            outbox: BTreeMap::new(),
            inbox: VecDeque::new(),
            committed: Vec::new(),
            reads: Vec::new(),
            now_us: now,
            stats: BaseStats::default(),
            procedure_commits: luigi_replica::ProcedureCommits::default(),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &BaseConfig {
        &self.config
    }

    /// The state at the end of its log.
    pub fn state(&self) -> &ShardState {
        &self.state
    }

    /// Counters.
    pub fn stats(&self) -> BaseStats {
        self.stats
    }

    /// Its commits per stored procedure (local and coordinated, as `stats` counts them).
    pub fn procedure_commits(&self) -> &luigi_replica::ProcedureCommits {
        &self.procedure_commits
    }

    /// Transactions in its care: coordinated, resolved, executed and not prepared, prepared
    /// and not decided.
    pub fn pending_len(&self) -> usize {
        self.coordinating.len() + self.resolving.len() + self.executions.len() + self.state.prepared().len()
    }

    /// Keys with a lock held (a healed cluster with nothing in its care holds none).
    pub fn locks_held(&self) -> usize {
        self.locks.len()
    }

    /// When [`BaseLeader::tick`] next has work: the earliest round timeout.
    pub fn next_deadline(&self) -> Option<TimeUs> {
        let round = self.config.round_timeout_us;
        let coord = self.coordinating.values().map(|c| c.deadline_us).min();
        let resolve = self.resolving.values().map(|r| r.next_ask_us).min();
        let prepared = self.prepared_since.values().min().map(|t| t + round);
        let executions = self.executions.values().map(|e| e.at_us + self.config.execution_ttl_us).min();
        let retry = (!self.unlogged_decisions.is_empty()).then_some(self.now_us + round / 10);
        [coord, resolve, prepared, executions, retry].into_iter().flatten().min()
    }

    // ---- inputs ----

    /// A client's message.
    pub fn on_client(&mut self, log: &mut L, now: TimeUs, client: ClientId, msg: ClientMsg, out: &mut Vec<BaseOutput>) {
        self.now_us = self.now_us.max(now);
        match msg {
            ClientMsg::Hello { .. } | ClientMsg::Status => {} // the shell answers status
            // The role machine answers it: not supported by this protocol (DESIGN.md rule 23).
            ClientMsg::SnapshotRead(_) => {}
            ClientMsg::Ping { sent_us } => out.push(BaseOutput::ToClient {
                client,
                msg: ServerMsg::pong(self.config.shard, now, sent_us, self.committed_index),
            }),
            // The baselines have no fast path: `fast` is moot.
            ClientMsg::Dispatch { txn, sent_us, acked_below, fast: _ } => {
                let arrival = luigi_txn::msg::arrival_delta_us(now, sent_us);
                self.on_dispatch(log, client, txn, arrival, acked_below, out);
            }
        }
        self.pump(log, out);
    }

    /// Items from another shard's leader.
    pub fn on_peer(&mut self, log: &mut L, now: TimeUs, batch: BaseBatch, out: &mut Vec<BaseOutput>) {
        self.now_us = self.now_us.max(now);
        let from = batch.from;
        for item in batch.items {
            self.on_item(log, from, item, out);
        }
        self.pump(log, out);
    }

    /// Timers and the log's progress.
    pub fn tick(&mut self, log: &mut L, now: TimeUs, out: &mut Vec<BaseOutput>) {
        self.now_us = self.now_us.max(now);
        self.expire_executions();
        self.coordinator_timeouts(out);
        self.resolve_stale_prepares();
        self.resolver_resends();
        self.log_unlogged_decisions(log);
        self.pump(log, out);
    }

    fn on_item(&mut self, log: &mut L, from: ShardId, item: BaseItem, out: &mut Vec<BaseOutput>) {
        match item {
            BaseItem::Execute { txn, acked_below } => self.on_execute(from, txn, acked_below),
            BaseItem::Executed { id, outcome } => self.on_executed(from, id, outcome, out),
            BaseItem::Prepare { id } => self.on_prepare(log, from, id),
            BaseItem::Vote { id, outcome } => self.on_vote(from, id, outcome, out),
            BaseItem::Decide { id, commit } => self.on_decide(log, id, commit),
            BaseItem::Release { id } => self.on_release(id),
            BaseItem::Status { id } => self.on_status(log, from, id, out),
            BaseItem::StatusIs { id, state } => self.on_status_is(from, id, state, out),
        }
    }

    // ---- plumbing ----

    /// Sends `item` to the leader of `to` (this leader's own items go through its inbox).
    fn send(&mut self, to: ShardId, item: BaseItem) {
        if to == self.config.shard {
            self.inbox.push_back(item);
        } else {
            self.outbox.entry(to).or_default().push(item);
        }
    }

    /// Handles its own items, releases what the log committed, and sends the batches.
    fn pump(&mut self, log: &mut L, out: &mut Vec<BaseOutput>) {
        for _ in 0..INBOX_ROUNDS_MAX {
            let Some(item) = self.inbox.pop_front() else { break };
            self.on_item(log, self.config.shard, item, out);
        }
        assert!(self.inbox.is_empty(), "a leader's own messages settle within {INBOX_ROUNDS_MAX} rounds");
        self.take_committed(log, out);
        // Items to itself released by the log (a vote to its own coordinator).
        for _ in 0..INBOX_ROUNDS_MAX {
            let Some(item) = self.inbox.pop_front() else { break };
            self.on_item(log, self.config.shard, item, out);
        }
        for (shard, items) in std::mem::take(&mut self.outbox) {
            // Bounded batches: a frame stays small whatever the load.
            for chunk in items.chunks(PEER_BATCH_ITEMS_MAX) {
                let batch = BaseBatch { from: self.config.shard, items: chunk.to_vec() };
                out.push(BaseOutput::ToPeer { shard, batch });
            }
        }
        for (id, index) in self.state.take_executed() {
            out.push(BaseOutput::Executed { shard: self.config.shard, id, ts: index });
        }
        for (id, index) in self.reads.drain(..) {
            out.push(BaseOutput::Executed { shard: self.config.shard, id, ts: index });
        }
    }

    /// Logs `record` and applies it to the state (the leader's state is its log's end).
    fn log_record(&mut self, log: &mut L, record: BaseRecord) -> Result<u64, LogError> {
        let id = record.id();
        let index = log.propose(record.clone())?;
        assert!(index > self.last_logged, "log indexes grow");
        self.last_logged = index;
        self.uncommitted.insert(index, id);
        self.state.apply(&LogEntry { index, record });
        Ok(index)
    }

    /// Sends `wait` once everything this leader logged so far is committed (at once if it is).
    fn after_log(&mut self, wait: Wait, out: &mut Vec<BaseOutput>) {
        if self.last_logged <= self.committed_index {
            self.release(wait, out);
        } else {
            self.wait_for(self.last_logged, wait);
        }
    }

    fn wait_for(&mut self, index: u64, wait: Wait) {
        self.waits.entry(index).or_default().push(wait);
        self.waits_len += 1;
    }

    fn release(&mut self, wait: Wait, out: &mut Vec<BaseOutput>) {
        match wait {
            Wait::Client { client, reply } => out.push(BaseOutput::ToClient { client, msg: ServerMsg::Reply(reply) }),
            Wait::Peer { to, item } => self.send(to, item),
        }
    }

    /// The log's newly committed records: their waits are released.
    fn take_committed(&mut self, log: &mut L, out: &mut Vec<BaseOutput>) {
        log.take_committed(&mut self.committed);
        let committed = std::mem::take(&mut self.committed);
        for e in &committed {
            self.committed_index = self.committed_index.max(e.index);
            // A record this leader logged comes back as it was logged (a leader's entries are
            // not replaced while it leads; one that lost leadership is dropped by its replica).
            if let Some(id) = self.uncommitted.remove(&e.index) {
                assert_eq!(id, e.record.id(), "the record at {} is the one logged there", e.index);
                match &e.record {
                    BaseRecord::Prepare { id, .. } => {
                        self.preparing.remove(id);
                    }
                    BaseRecord::Abort { id, .. } => {
                        self.tombstoning.remove(id);
                    }
                    BaseRecord::Local { .. } | BaseRecord::Commit { .. } | BaseRecord::Barrier { .. } => {}
                }
            }
        }
        self.committed = committed;
        self.committed.clear();
        let released: Vec<u64> = self.waits.range(..=self.committed_index).map(|(i, _)| *i).collect();
        for index in released {
            for wait in self.waits.remove(&index).unwrap_or_default() {
                self.waits_len -= 1;
                self.release(wait, out);
            }
        }
    }

    fn reply(&self, id: TxnId, shard: ShardId, outcome: Result<Vec<u8>, TxnError>, arrival: i64) -> TxnReply {
        let rounds = 0;
        TxnReply {
            id,
            shard,
            ts: 0,
            outcome,
            watermark: 0,
            arrival_delta_us: arrival,
            rounds,
            position: None,
            order: None,
            early: false,
        }
    }

    /// One reply per participant of `txn`, each with `outcome(shard)`.
    fn replies(
        &self,
        txn: &Txn,
        arrival: i64,
        mut outcome: impl FnMut(ShardId) -> Result<Vec<u8>, TxnError>,
    ) -> Vec<TxnReply> {
        let shards: Vec<ShardId> = if txn.pieces.is_empty() { vec![self.config.shard] } else { txn.shards().collect() };
        shards.into_iter().map(|s| self.reply(txn.id, s, outcome(s), arrival)).collect()
    }

    /// Checks the leader's invariants (tests and the simulator call it after every step).
    ///
    /// # Errors
    /// The first broken invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (id, p) in self.state.prepared() {
            if self.locks.conflict(*id, &p.read_locks, &p.write_locks).is_some() {
                return Err(format!("prepared {id:?} does not hold its locks"));
            }
        }
        if self.waits_len != self.waits.values().map(Vec::len).sum::<usize>() {
            return Err("wait count drifted".into());
        }
        if self.committed_index > self.last_logged {
            return Err(format!("committed {} past logged {}", self.committed_index, self.last_logged));
        }
        Ok(())
    }
}

/// The state a resolver learns, as a message.
/// `Ok(Some)`: durable and known; `Ok(None)`: unknown here; `Err(())`: logged, not durable yet
/// (a prepare or a tombstone: ask again).
fn status_of(
    state: &ShardState,
    preparing: &BTreeSet<TxnId>,
    tombstoning: &BTreeSet<TxnId>,
    id: TxnId,
) -> Result<Option<BaseState>, ()> {
    use crate::state::Outcome;
    if let Some(p) = state.prepared().get(&id) {
        if preparing.contains(&id) {
            return Err(());
        }
        return Ok(Some(BaseState::Prepared { output: p.output.clone() }));
    }
    match state.outcome(id) {
        Some(Outcome::Committed { output }) => Ok(Some(BaseState::Committed { output: output.clone() })),
        Some(Outcome::Aborted { .. }) if tombstoning.contains(&id) => Err(()),
        Some(Outcome::Aborted { .. }) => Ok(Some(BaseState::Aborted)),
        None => Ok(None),
    }
}
