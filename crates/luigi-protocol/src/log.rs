//! Luigi's log records, and the replicated-log seam (`luigi_txn::log`, protocol-neutral)
//! with Luigi's records as its default. A shard leader appends records; once a record is
//! committed (durable on the replicas the log requires) the log hands it back and the leader
//! acts on it. Nothing a client can observe depends on a record that is not committed.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use luigi_txn::types::{ShardId, Timestamp, Txn, TxnId};

/// Position of a record in a shard's log, from 1 (defined beside the positions progress
/// reports prove committed).
pub use luigi_txn::progress::LogIndex;

/// A record of a shard's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum LogRecord {
    /// The transaction was admitted with this proposed timestamp.
    Prepare {
        /// The whole transaction (followers replay it).
        txn: Arc<Txn>,
        /// The proposal.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ts: Timestamp,
        /// Server clock at first arrival minus client send clock (echoed in the reply).
        /// Durable because a later leader answers with it: one that takes the transaction
        /// over from its replay echoes it, and a first attempt's answer is a one-way-delay
        /// sample for the coordinator (DESIGN.md rule 6).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::delta()"))]
        arrival_delta_us: i64,
        /// The dispatch's acknowledgement: the client holds every answer below this sequence
        /// number (followers prune their answer tables with it, like the leader).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::seq()"))]
        acked_below: u64,
    },
    /// Cross-shard proposals differed; this is the final timestamp.
    Decide {
        /// The transaction.
        id: TxnId,
        /// Final timestamp.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ts: Timestamp,
    },
    /// Recovery aborted the transaction before any shard executed it.
    Abort {
        /// The transaction.
        id: TxnId,
    },
    /// The leader refused the transaction (it was never prepared here and never will be).
    /// Logged before the refusal is told to anyone, so a new leader refuses a retry too
    /// instead of admitting what a client was told would never run.
    Refuse {
        /// The transaction.
        id: TxnId,
        /// Why (the client's answer).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::text()"))]
        reason: String,
        /// Echoed in the answer, also by a later leader or a follower that replayed the
        /// record (as `Prepare`'s).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::delta()"))]
        arrival_delta_us: i64,
        /// The refused transaction's timestamp (its coordinator's): the refusal is kept until
        /// its client's answers expire past it (DESIGN.md rule 7, expiry).
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ts: Timestamp,
        /// The other participants: a cross-shard refusal is kept for their recoveries until
        /// each has applied past it (`leader::outcomes`).
        others: Vec<ShardId>,
    },
    /// Every transaction with a final timestamp at or below `ts` is decided and executed on
    /// the leader (its watermark passed `ts`): followers execute the pending ones now, in
    /// (timestamp, id) order, and reach the leader's state.
    Applied {
        /// The leader's watermark.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ts: Timestamp,
    },
    /// Lets the leader publish watermarks up to `ts` (so the watermark advances while idle);
    /// a leader elected later admits nothing at or below it, which keeps every published
    /// watermark's promise across failover.
    Floor {
        /// The promised floor.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ts: Timestamp,
    },
    /// Shard `shard`'s leader reported its committed `Applied` marker at `ts`: the
    /// cross-shard outcomes kept for its recovery up to there are forgotten (replicas forget
    /// at this record, so every replica keeps the same; `leader::outcomes`).
    PeerApplied {
        /// The other shard.
        shard: ShardId,
        /// Its committed marker.
        ts: Timestamp,
    },
}

/// The neutral seam (`luigi_txn::log`), re-exported where Luigi's records live.
pub use luigi_txn::log::{LogError, ReplicatedLog};

/// A committed record and its position (`luigi_txn::log::LogEntry`), Luigi's [`LogRecord`] by
/// default.
pub type LogEntry<R = LogRecord> = luigi_txn::log::LogEntry<R>;

/// An in-memory log where a record commits as soon as it is appended, for the protocol's
/// tests and the simulator; servers log every shard, one replica or more, through Raft
/// (`luigi-raft`). Bounded like every queue. Holds Luigi's [`LogRecord`]s unless built with
/// [`LocalLog::new_typed`].
#[derive(Debug)]
pub struct LocalLog<R = LogRecord> {
    next_index: LogIndex,
    committed: VecDeque<LogEntry<R>>,
    capacity: usize,
}

impl LocalLog {
    /// A log of [`LogRecord`]s that holds at most `capacity` records not yet taken.
    pub fn new(capacity: usize) -> Self {
        Self::new_typed(capacity)
    }
}

impl<R> LocalLog<R> {
    /// A log of `R` records that holds at most `capacity` records not yet taken.
    pub fn new_typed(capacity: usize) -> Self {
        assert!(capacity > 0);
        Self { next_index: 1, committed: VecDeque::new(), capacity }
    }
}

impl Default for LocalLog {
    fn default() -> Self {
        Self::new(1 << 20)
    }
}

impl<R> ReplicatedLog<R> for LocalLog<R> {
    fn propose(&mut self, record: R) -> Result<LogIndex, LogError> {
        if self.committed.len() >= self.capacity {
            return Err(LogError::Backlogged(self.committed.len()));
        }
        let index = self.next_index;
        self.next_index += 1;
        self.committed.push_back(LogEntry { index, record });
        Ok(index)
    }

    fn take_committed(&mut self, out: &mut Vec<LogEntry<R>>) {
        out.extend(self.committed.drain(..));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_log_commits_in_order_and_is_bounded() {
        let mut log = LocalLog::new(2);
        assert_eq!(log.propose(LogRecord::Floor { ts: 1 }), Ok(1));
        assert_eq!(log.propose(LogRecord::Floor { ts: 2 }), Ok(2));
        assert_eq!(log.propose(LogRecord::Floor { ts: 3 }), Err(LogError::Backlogged(2)));
        let mut out = Vec::new();
        log.take_committed(&mut out);
        assert_eq!(out.iter().map(|e| e.index).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(log.propose(LogRecord::Floor { ts: 3 }), Ok(3));
    }

    #[test]
    fn local_log_holds_any_record_type() {
        let mut log = LocalLog::<&str>::new_typed(4);
        assert_eq!(log.propose("prepare"), Ok(1));
        assert_eq!(log.propose("commit"), Ok(2));
        let mut out = Vec::new();
        log.take_committed(&mut out);
        assert_eq!(out, vec![LogEntry { index: 1, record: "prepare" }, LogEntry { index: 2, record: "commit" }]);
    }
}
