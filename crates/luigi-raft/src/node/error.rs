//! [`RaftError`].

use raft::eraftpb::MessageType;

#[cfg(doc)]
use super::RaftLog;
use crate::codec::DecodeError;

/// Errors of [`RaftLog`].
#[derive(Debug, thiserror::Error)]
pub enum RaftError {
    /// The configuration is invalid.
    #[error("invalid raft config: {0}")]
    Config(String),
    /// The recovered state is inconsistent (names what is wrong).
    #[error("inconsistent recovered raft state: {0}")]
    Recovered(String),
    /// Incoming bytes are not a raft message.
    #[error("undecodable raft message: {0}")]
    Decode(#[from] DecodeError),
    /// A message addressed to another replica.
    #[error("raft message for replica {to} delivered to replica {id}")]
    Misrouted {
        /// The message's destination.
        to: u64,
        /// This replica.
        id: u64,
    },
    /// A message from an id that is not a voter of this group.
    #[error("raft message from {0}, which is not a voter of this group")]
    UnknownPeer(u64),
    /// A message type peers may not send (proposals enter only through `propose`).
    #[error("raft message type {0:?} is not accepted from peers")]
    Forbidden(MessageType),
    /// raft-rs refused a call.
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    /// A committed entry does not decode as the log's record type. Fatal for this replica:
    /// the log was written by an incompatible build (or with another record type).
    #[error("committed entry {index} does not decode as a log record: {reason}")]
    BadEntry {
        /// Its index.
        index: u64,
        /// The decoder's complaint.
        reason: String,
    },
    /// A request that does not fit the log (e.g. compacting past what was applied).
    #[error("{0}")]
    Invalid(String),
    /// The leader says entries are committed on this replica that its log does not hold:
    /// it acknowledged them once and lost them since (a truncated log, deleted files). Fatal:
    /// every later call fails the same way; the replica must be rebuilt from its peers.
    #[error(
        "this replica lost acknowledged log entries: the leader (replica {leader}, term {term}) counts \
         entries up to index {commit} as held here, but the log ends at index {last_index}"
    )]
    LostEntries {
        /// The leader that said so.
        leader: u64,
        /// Its term.
        term: u64,
        /// The commit index it sent, at most what this replica acknowledged to it.
        commit: u64,
        /// This replica's last log index.
        last_index: u64,
    },
}
