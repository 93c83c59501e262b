//! The replicated-log seam, protocol-neutral: a shard leader appends records of its
//! protocol's type; once a record is committed (durable on the replicas the log requires) the
//! log hands it back and the leader acts on it. Nothing a client can observe depends on a
//! record that is not committed. Raft's log (`luigi_raft::RaftLog`) offers it for every record
//! type; Luigi's records and the in-memory log its tests use live in `luigi_protocol::log`.

pub use crate::progress::LogIndex;

/// A committed record and its position, for a protocol whose records are `R` (Luigi's
/// `luigi_protocol::log::LogEntry` defaults `R` to its own records).
#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry<R> {
    /// Position.
    pub index: LogIndex,
    /// Record.
    pub record: R,
}

/// Why the log refused a record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// This replica is not the leader of its group.
    #[error("not the leader")]
    NotLeader,
    /// Too many records are waiting to commit; try again after some commit.
    #[error("log backlog full ({0} records pending)")]
    Backlogged(usize),
}

/// A shard's replicated log as the leader sees it, replicating records of type `R`.
pub trait ReplicatedLog<R> {
    /// Appends `record`; it comes back from [`ReplicatedLog::take_committed`] once committed.
    fn propose(&mut self, record: R) -> Result<LogIndex, LogError>;
    /// Moves every newly committed entry, in log order, into `out`.
    fn take_committed(&mut self, out: &mut Vec<LogEntry<R>>);
    /// The term of the log's leader, the term every record proposed now belongs to (a
    /// log without terms, like `luigi_protocol::log::LocalLog`, is all term 0).
    fn term(&self) -> u64 {
        0
    }
}
