//! What the simulator records for the checker: every transaction's dispatch and answers.

use luigi_txn::client_core::TxnOutcome;
use luigi_txn::types::{ShardId, ShardPiece, Timestamp, TxnId};

/// A point of the run: virtual time, and the simulator's step counter that orders events at
/// the same virtual time. "A before B" means `A < B` in (us, step) order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Moment {
    /// Virtual time, µs.
    pub us: u64,
    /// Global step counter.
    pub step: u64,
}

impl Moment {
    /// The moment `us` (step 0), for hand-made histories.
    pub fn at(us: u64) -> Self {
        Self { us, step: 0 }
    }
}

/// An answer a client got.
#[derive(Clone, Debug, PartialEq)]
pub struct AnswerRecord {
    /// When the coordinator reported it.
    pub at: Moment,
    /// What it reported.
    pub outcome: TxnOutcome,
    /// Dispatch attempts.
    pub attempts: u32,
    /// Read at a snapshot (DESIGN.md rule 23): ordered after every transaction at or below
    /// its timestamp, before every other.
    pub read_only: bool,
}

/// One submitted transaction and what became of it.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnRecord {
    /// Its id.
    pub id: TxnId,
    /// Procedure name.
    pub procedure: String,
    /// Procedure arguments.
    pub args: Vec<u8>,
    /// Participants with their key sets.
    pub pieces: Vec<ShardPiece>,
    /// When it was submitted to the coordinator (dispatched).
    pub dispatched: Moment,
    /// Every answer the client got (exactly one in a correct run).
    pub answers: Vec<AnswerRecord>,
}

impl TxnRecord {
    /// Its key set on `shard`, if `shard` participates.
    pub fn piece(&self, shard: ShardId) -> Option<&luigi_txn::types::KeySet> {
        self.pieces.iter().find(|p| p.shard == shard).map(|p| &p.keys)
    }

    /// Read at a snapshot (its answer says so).
    pub fn read_only(&self) -> bool {
        self.answers.first().is_some_and(|a| a.read_only)
    }

    /// Its place in the serial order, if it was ordered: its timestamp, and after the
    /// read-write transactions at that timestamp when it read at a snapshot (rule 23).
    pub fn order_key(&self) -> Option<(Timestamp, bool)> {
        self.ts().map(|ts| (ts, self.read_only()))
    }

    /// Final timestamp, if it was ordered.
    pub fn ts(&self) -> Option<Timestamp> {
        match self.answers.first().map(|a| &a.outcome) {
            Some(TxnOutcome::Ordered { ts, .. }) => Some(*ts),
            _ => None,
        }
    }
}

/// Every transaction of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// In submission order.
    pub txns: Vec<TxnRecord>,
}

impl History {
    /// Transactions ordered at a snapshot (DESIGN.md rule 23).
    pub fn read_only_answered(&self) -> u64 {
        self.txns.iter().filter(|t| t.read_only() && t.ts().is_some()).count() as u64
    }
}

/// Optional checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckOptions {
    /// Require `ts(A) < ts(B)` for every real-time ordered pair, not only for pairs that
    /// share a shard.
    pub realtime_across_shards: bool,
}

/// What the checker counted in a correct history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckSummary {
    /// Transactions ordered (committed or aborted by their procedure).
    pub ordered: u64,
    /// Ordered with every participant's procedure succeeding.
    pub committed: u64,
    /// Ordered with some participant's procedure failing (its writes undone there).
    pub proc_aborted: u64,
    /// Rejected at admission.
    pub rejected: u64,
    /// Largest final timestamp.
    pub max_ts: Timestamp,
    /// Conflict edges in the serialization graph.
    pub conflict_edges: u64,
}
