//! A follower replica's state machine: it rebuilds the leader's store from the committed log
//! alone (DESIGN.md rules 5 and 6: execution is a deterministic function of the store and the
//! ordered log).
//!
//! `PREPARE` queues a transaction at its proposal, `DECIDE` moves it to its final timestamp,
//! `ABORT` drops it, and an `Applied { ts }` marker executes every queued transaction with a
//! timestamp at or below `ts` in (timestamp, id) order. The leader logs a marker only once its
//! watermark has passed `ts`, so by then every such transaction is decided, its records are
//! earlier in the log, and nothing new can land at or below `ts`: conflicting transactions run
//! in the leader's order and non-conflicting ones commute, so the stores are equal.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use luigi_store::{Key, Store, StoreFork, Value};
use serde::{Deserialize, Serialize};

use super::answers::{Answer, Answers};
use crate::log::{LogEntry, LogIndex, LogRecord};
use luigi_txn::msg::TxnError;
use luigi_txn::procedure::Registry;
use luigi_txn::types::{ShardId, Timestamp, Txn, TxnId};
use luigi_txn::Map;

/// Executions a follower remembers for [`Follower::take_executed`]; past it the oldest are
/// dropped (and counted), so a replica whose shell never drains the journal stays bounded.
pub const EXECUTED_JOURNAL_MAX: usize = 1 << 16;

/// Counters of a follower.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FollowerStats {
    /// Transactions executed.
    pub executed: u64,
    /// Transactions dropped by `ABORT`.
    pub aborted: u64,
    /// Highest log index applied.
    pub applied_index: u64,
}

/// A transaction prepared in the log and not executed or aborted yet.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Prepared {
    /// The transaction.
    pub txn: Arc<Txn>,
    /// Its logged proposal (its `PREPARE`).
    pub proposal: Timestamp,
    /// The final timestamp, if a `DECIDE` is logged.
    pub decided: Option<Timestamp>,
    /// From the `PREPARE` (echoed in its answer).
    pub arrival_delta_us: i64,
}

impl Prepared {
    /// Where it is ordered now.
    pub fn ts(&self) -> Timestamp {
        self.decided.unwrap_or(self.proposal)
    }
}

/// Everything a new leader takes over from the follower state it rebuilt (DESIGN.md,
/// failure handling).
pub struct Handover {
    /// The store as of the last `Applied` marker.
    pub store: Store,
    /// The procedures.
    pub registry: Registry,
    /// Answers of executed and refused transactions.
    pub answers: Answers,
    /// Prepared transactions not yet executed, in (timestamp, id) order.
    pub prepared: Vec<Prepared>,
    /// The last `Applied` marker: everything at or below it is executed.
    pub applied_ts: Timestamp,
    /// Highest committed `Floor` promise.
    pub floor: Timestamp,
    /// Nothing may be admitted at or below this.
    pub recovered_floor: Timestamp,
}

/// A follower's whole state at one log index: what a snapshot holds (DESIGN.md rule 6: the
/// store, the exactly-once answer table and the pending transactions), so that the log up to
/// that index can be dropped. Written from a [`FollowerFork`] ([`ImageOut`]).
#[derive(Deserialize)]
struct FollowerImage {
    shard: ShardId,
    applied_index: u64,
    applied_ts: Timestamp,
    max_ts_seen: Timestamp,
    floor: Timestamp,
    #[serde(with = "luigi_txn::byte_strings::pairs")]
    store: Vec<(Key, Value)>,
    answers: Answers,
    prepared: Vec<Prepared>,
}

/// A [`FollowerImage`] as written: the same fields in the same order, borrowed from a fork.
#[derive(Serialize)]
struct ImageOut<'a> {
    shard: ShardId,
    applied_index: u64,
    applied_ts: Timestamp,
    max_ts_seen: Timestamp,
    floor: Timestamp,
    #[serde(with = "luigi_txn::byte_strings::pairs")]
    store: Vec<(&'a [u8], &'a Value)>,
    answers: &'a Answers,
    prepared: &'a [Prepared],
}

/// A follower's state at one moment ([`Follower::fork`]), to serialize off the event loop:
/// its store a fork sharing memory with the live one, the rest copied.
pub struct FollowerFork {
    shard: ShardId,
    applied_index: u64,
    applied_ts: Timestamp,
    max_ts_seen: Timestamp,
    floor: Timestamp,
    store: StoreFork,
    answers: Answers,
    prepared: Vec<Prepared>,
}

impl FollowerFork {
    /// The snapshot image of the state it holds: the same state gives the same bytes (the
    /// store in key order, the prepared transactions in (timestamp, id) order).
    pub fn image(&self) -> Vec<u8> {
        let image = ImageOut {
            shard: self.shard,
            applied_index: self.applied_index,
            applied_ts: self.applied_ts,
            max_ts_seen: self.max_ts_seen,
            floor: self.floor,
            store: self.store.entries(),
            answers: &self.answers,
            prepared: &self.prepared,
        };
        postcard::to_stdvec(&image).expect("a follower image always serializes")
    }
}

/// Why a snapshot could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The bytes do not decode.
    #[error("snapshot does not decode: {0}")]
    Decode(String),
    /// It belongs to another shard.
    #[error("snapshot of shard {found}, expected shard {expected}")]
    WrongShard {
        /// Shard in the snapshot.
        found: ShardId,
        /// This replica's shard.
        expected: ShardId,
    },
}

/// The state a follower rebuilds from the committed log.
pub struct Follower {
    shard: ShardId,
    store: Store,
    registry: Registry,
    answers: Answers,
    order: BTreeSet<(Timestamp, TxnId)>,
    prepared: Map<TxnId, Prepared>,
    applied_ts: Timestamp,
    /// Highest timestamp in any record (a new leader admits only above it and above `floor`).
    max_ts_seen: Timestamp,
    floor: Timestamp,
    /// The index of the last `Floor` record applied, and the highest floor before it: a
    /// leader that proposed that record on winning does not hold its own promise against
    /// its admissions (see [`Follower::into_handover`]). Not in snapshots (a replica
    /// restored from one has not proposed the records after it).
    last_floor: (LogIndex, Timestamp),
    stats: FollowerStats,
    /// Executions not yet taken by [`Follower::take_executed`], oldest first (not part of
    /// the replicated state: a snapshot does not carry it).
    executed: VecDeque<(TxnId, Timestamp)>,
    /// Executions dropped from a full journal.
    executed_dropped: u64,
}

impl Follower {
    /// A follower of `shard` over `store` (empty, or loaded from a snapshot).
    pub fn new(shard: ShardId, store: Store, registry: Registry) -> Self {
        Self {
            shard,
            store,
            registry,
            answers: Answers::default(),
            order: BTreeSet::new(),
            prepared: Map::default(),
            applied_ts: 0,
            max_ts_seen: 0,
            floor: 0,
            last_floor: (0, 0),
            stats: FollowerStats::default(),
            executed: VecDeque::new(),
            executed_dropped: 0,
        }
    }

    /// Serializes the whole state (at [`FollowerStats::applied_index`]) for a snapshot.
    pub fn snapshot(&self) -> Vec<u8> {
        self.fork().image()
    }

    /// The whole state as it is now, to serialize later and elsewhere ([`FollowerFork::image`]
    /// gives what [`Follower::snapshot`] gives now): the store is forked (its chunks shared
    /// until written over), the answer table and the prepared transactions are copied.
    pub fn fork(&self) -> FollowerFork {
        FollowerFork {
            shard: self.shard,
            applied_index: self.stats.applied_index,
            applied_ts: self.applied_ts,
            max_ts_seen: self.max_ts_seen,
            floor: self.floor,
            store: self.store.fork(),
            answers: self.answers.clone(),
            prepared: self.order.iter().map(|(_, id)| self.prepared[id].clone()).collect(),
        }
    }

    /// Checks that `bytes` are a snapshot of `shard` at log index `index` (what a leader
    /// verifies before it keeps a follower's snapshot and compacts its log behind it).
    pub fn check_snapshot(shard: ShardId, index: u64, bytes: &[u8]) -> Result<(), SnapshotError> {
        let image: FollowerImage = postcard::from_bytes(bytes).map_err(|e| SnapshotError::Decode(e.to_string()))?;
        if image.shard != shard {
            return Err(SnapshotError::WrongShard { found: image.shard, expected: shard });
        }
        if image.applied_index != index {
            let why = format!("it holds the state at index {}, offered as index {index}", image.applied_index);
            return Err(SnapshotError::Decode(why));
        }
        Ok(())
    }

    /// Sets the cluster's answer expiry (`LeaderConfig::answer_expiry_us`; not in snapshots):
    /// a follower must forget a client no sooner than its leader would.
    pub fn set_answer_expiry(&mut self, expiry_us: u64) {
        self.answers.set_expiry(expiry_us);
    }

    /// As [`Follower::set_answer_expiry`], for chaining.
    #[must_use]
    pub fn with_answer_expiry(mut self, expiry_us: u64) -> Self {
        self.set_answer_expiry(expiry_us);
        self
    }

    /// Sets how long its store keeps replaced versions for snapshot reads (rule 23; not in
    /// snapshots, a setting of the cluster).
    #[must_use]
    pub fn with_retention(mut self, retention_us: u64) -> Self {
        self.store.set_retention(retention_us);
        self
    }

    /// A follower restored from [`Follower::snapshot`] bytes; entries after the snapshot's
    /// index follow with [`Follower::apply`].
    pub fn from_snapshot(shard: ShardId, registry: Registry, bytes: &[u8]) -> Result<Self, SnapshotError> {
        let image: FollowerImage = postcard::from_bytes(bytes).map_err(|e| SnapshotError::Decode(e.to_string()))?;
        if image.shard != shard {
            return Err(SnapshotError::WrongShard { found: image.shard, expected: shard });
        }
        let mut store = Store::new();
        for (k, v) in image.store {
            store.put(k, v);
        }
        // The image is the state at its marker: no versions below it (rule 23).
        store.forget_below(image.applied_ts);
        let mut f = Follower::new(shard, store, registry);
        f.answers = image.answers;
        f.applied_ts = image.applied_ts;
        f.max_ts_seen = image.max_ts_seen;
        f.floor = image.floor;
        f.stats.applied_index = image.applied_index;
        for p in image.prepared {
            f.order.insert((p.ts(), p.txn.id));
            f.prepared.insert(p.txn.id, p);
        }
        Ok(f)
    }

    /// Applies one committed entry; entries must come in log order.
    pub fn apply(&mut self, entry: &LogEntry) {
        assert!(entry.index > self.stats.applied_index, "log entries applied out of order");
        self.stats.applied_index = entry.index;
        match &entry.record {
            LogRecord::Prepare { txn, ts, arrival_delta_us, acked_below } => {
                self.max_ts_seen = self.max_ts_seen.max(*ts);
                // The leader admits only above its watermark, and markers never exceed it.
                assert!(
                    *ts > self.applied_ts,
                    "shard {}: PREPARE of {:?} at {ts} at or below the applied marker {}",
                    self.shard,
                    txn.id,
                    self.applied_ts
                );
                // Everything this follower has answered was executed at or below a marker,
                // which the leader's watermark had passed: the leader forgot those too.
                self.answers.forget_acked(txn.id.client, *acked_below, Timestamp::MAX);
                self.answers.heard(txn.id.client, *ts);
                if !self.prepared.contains_key(&txn.id) {
                    let p = Prepared {
                        txn: txn.clone(),
                        proposal: *ts,
                        decided: None,
                        arrival_delta_us: *arrival_delta_us,
                    };
                    self.order.insert((*ts, txn.id));
                    self.prepared.insert(txn.id, p);
                }
            }
            LogRecord::Decide { id, ts } => {
                self.max_ts_seen = self.max_ts_seen.max(*ts);
                if let Some(p) = self.prepared.get_mut(id) {
                    assert!(self.order.remove(&(p.ts(), *id)), "queued at its position");
                    p.decided = Some(*ts);
                    self.order.insert((*ts, *id));
                }
            }
            LogRecord::Abort { id } => {
                if let Some(p) = self.prepared.remove(id) {
                    self.order.remove(&(p.ts(), *id));
                    let refusal = Answer::refusal("aborted by recovery".into(), p.arrival_delta_us);
                    self.answers.insert(*id, refusal, p.txn.ts);
                    self.stats.aborted += 1;
                }
            }
            LogRecord::Refuse { id, reason, arrival_delta_us, ts, others } => {
                // The leader refuses only what it does not hold prepared.
                debug_assert!(!self.prepared.contains_key(id), "shard {}: refused prepared {id:?}", self.shard);
                self.answers.insert(*id, Answer::refusal(reason.clone(), *arrival_delta_us), *ts);
                self.answers.refused_cross(*id, reason.clone(), *ts, others);
            }
            LogRecord::Floor { ts } => {
                self.last_floor = (entry.index, self.floor);
                self.floor = self.floor.max(*ts);
            }
            LogRecord::Applied { ts } => {
                self.execute_up_to(*ts);
                // Expiry follows the markers, as the leader's follows its watermark.
                self.answers.expire_at(*ts);
            }
            LogRecord::PeerApplied { shard, ts } => self.answers.peer_applied(*shard, *ts),
        }
    }

    fn execute_up_to(&mut self, ts: Timestamp) {
        while let Some(&(at, id)) = self.order.first() {
            if at > ts {
                break;
            }
            self.order.pop_first();
            let p = self.prepared.remove(&id).expect("ordered transactions are prepared");
            let txn = &p.txn;
            let keys = txn.piece(self.shard).expect("queued transactions are participants");
            // Deterministic: the same outcome the leader computed, kept for retries.
            let outcome = self
                .registry
                .execute_at(&txn.procedure, &txn.args, &mut self.store, keys, self.shard, at)
                .map_err(TxnError::from);
            let rounds = match (txn.is_cross_shard(), p.decided) {
                (false, _) => 0,
                (true, None) => 1,
                (true, Some(_)) => 2,
            };
            self.answers.insert(id, Answer { ts: at, outcome, arrival_delta_us: p.arrival_delta_us, rounds }, txn.ts);
            if txn.is_cross_shard() {
                let shards: Vec<_> = txn.shards().collect();
                self.answers.executed_cross(self.shard, id, at, &shards);
            }
            self.stats.executed += 1;
            if self.executed.len() >= EXECUTED_JOURNAL_MAX {
                self.executed.pop_front();
                self.executed_dropped += 1;
            }
            self.executed.push_back((id, at));
        }
        self.applied_ts = self.applied_ts.max(ts);
    }

    /// The transactions executed since the last call, in execution order, each with the
    /// timestamp it ran at: the follower's counterpart of the leader's
    /// [`LeaderOutput::Executed`](super::LeaderOutput::Executed) effect (a follower applies
    /// records without an output vector). At most [`EXECUTED_JOURNAL_MAX`] are kept between
    /// calls; see [`Follower::executed_dropped`].
    pub fn take_executed(&mut self) -> Vec<(TxnId, Timestamp)> {
        self.executed.drain(..).collect()
    }

    /// Executions dropped from the journal because it was full (nobody took them in time).
    pub fn executed_dropped(&self) -> u64 {
        self.executed_dropped
    }

    /// Checks what holds after every applied entry, and describes the first thing broken:
    /// the execution order and the prepared transactions agree (each queued once, at its
    /// decided timestamp or else its proposal); everything still queued is above the last
    /// `Applied` marker (rule 6: a marker executes everything at or below it, and nothing is
    /// prepared below one) and at most the highest timestamp seen (what a new leader's
    /// floor rests on, rule 8); the execution journal is within its bound.
    pub fn check_invariants(&self) -> Result<(), String> {
        let broken = |what: String| format!("shard {} follower: {what}", self.shard);
        if self.order.len() != self.prepared.len() {
            return Err(broken(format!("{} queued, {} prepared", self.order.len(), self.prepared.len())));
        }
        for &(ts, id) in &self.order {
            let Some(p) = self.prepared.get(&id) else {
                return Err(broken(format!("{id:?} queued at {ts} but not prepared")));
            };
            if p.ts() != ts {
                return Err(broken(format!("{id:?} queued at {ts} but prepared at {}", p.ts())));
            }
            if ts <= self.applied_ts || ts > self.max_ts_seen {
                let (applied, seen) = (self.applied_ts, self.max_ts_seen);
                return Err(broken(format!("{id:?} queued at {ts}, outside (marker {applied}, highest seen {seen}]")));
            }
        }
        if self.executed.len() > EXECUTED_JOURNAL_MAX {
            return Err(broken(format!("{} executions journaled", self.executed.len())));
        }
        Ok(())
    }

    /// What a new leader's fast-path recovery (`fast::to_recover`) needs of the log this
    /// state was rebuilt from: a `PREPARE` per prepared transaction at its current
    /// timestamp, and the last `Applied` marker (executed and refused ones are in
    /// [`Follower::answers`]).
    pub fn recovery_records(&self) -> Vec<LogRecord> {
        let mut out: Vec<LogRecord> = self
            .prepared
            .values()
            .map(|p| LogRecord::Prepare {
                txn: p.txn.clone(),
                ts: p.ts(),
                arrival_delta_us: p.arrival_delta_us,
                acked_below: 0,
            })
            .collect();
        out.push(LogRecord::Applied { ts: self.applied_ts });
        out
    }

    /// This replica's shard.
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// The last `Applied` marker: everything at or below it is executed here.
    pub fn applied_ts(&self) -> Timestamp {
        self.applied_ts
    }

    /// The rebuilt store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// What snapshot reads are served from at this follower (DESIGN.md rule 23): its store,
    /// its procedures and its safe time, the last `Applied` marker it applied.
    pub fn snapshot_view(&self) -> luigi_replica::SnapshotView<'_> {
        luigi_replica::SnapshotView {
            store: &self.store,
            registry: &self.registry,
            safe_ts: self.applied_ts,
            ahead: None,
        }
    }

    /// The answer table rebuilt from the log.
    pub fn answers(&self) -> &Answers {
        &self.answers
    }

    /// Counters.
    pub fn stats(&self) -> FollowerStats {
        self.stats
    }

    /// Transactions prepared and not yet executed or aborted.
    pub fn queued_len(&self) -> usize {
        self.order.len()
    }

    /// The admission floor a leader taking over from this state must respect: above every
    /// timestamp in the log and above every logged floor promise.
    pub fn recovered_floor(&self) -> Timestamp {
        self.max_ts_seen.max(self.floor)
    }

    /// Hands the rebuilt state to a new leader. Call only once every committed record is
    /// applied (for Raft: after an entry of the new leader's term committed).
    ///
    /// `own_floor` is the index of the floor promise the new leader proposed on winning, if
    /// it is applied here and is the last: its promise bounds its watermark (`floor`), not its
    /// admissions, which only later leaders must keep above it.
    pub fn into_handover(self, own_floor: Option<LogIndex>) -> Handover {
        let recovered_floor = match own_floor {
            Some(index) if index == self.last_floor.0 => self.max_ts_seen.max(self.last_floor.1),
            _ => self.recovered_floor(),
        };
        let Follower { store, registry, answers, order, mut prepared, applied_ts, floor, .. } = self;
        let prepared =
            order.iter().map(|(_, id)| prepared.remove(id).expect("ordered transactions are prepared")).collect();
        Handover { store, registry, answers, prepared, applied_ts, floor, recovered_floor }
    }
}

#[cfg(test)]
#[path = "tests_follower.rs"]
mod tests;
