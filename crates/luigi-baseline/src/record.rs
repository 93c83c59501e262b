//! What a baseline shard logs. Every record a client's answer depends on is committed before
//! the answer leaves.

use luigi_store::{Key, Value};
use luigi_txn::types::{ShardId, TxnId};
use serde::{Deserialize, Serialize};

/// A write: the key and its new value (`None`: deleted).
pub type Write = (Key, Option<Value>);

/// A record of a baseline shard's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BaseRecord {
    /// A transaction that ran on this shard alone (or a direct piece): its writes, installed
    /// on the leader when it was logged.
    Local {
        /// The transaction.
        id: TxnId,
        /// Its writes.
        #[serde(with = "luigi_txn::byte_strings::writes")]
        writes: Vec<Write>,
        /// The procedure's output (a retry of the dispatch is answered with it).
        #[serde(with = "luigi_txn::byte_strings::one")]
        output: Vec<u8>,
        /// The client holds every answer below this sequence number (see
        /// `ClientMsg::Dispatch`): older outcomes of the client may be forgotten.
        acked_below: u64,
    },
    /// This shard's piece of a cross-shard transaction is prepared: its writes wait for the
    /// decision, its declared keys stay locked until then (a new leader locks them again).
    Prepare {
        /// The transaction.
        id: TxnId,
        /// Its participants (the first coordinates).
        shards: Vec<ShardId>,
        /// The piece's writes.
        #[serde(with = "luigi_txn::byte_strings::writes")]
        writes: Vec<Write>,
        /// The piece's output.
        #[serde(with = "luigi_txn::byte_strings::one")]
        output: Vec<u8>,
        /// Hashes of the keys declared for reading (shared locks).
        read_locks: Vec<u64>,
        /// Hashes of the keys declared for writing (exclusive locks).
        write_locks: Vec<u64>,
        /// As in `Local`.
        acked_below: u64,
    },
    /// The prepared piece of `id` commits: its writes are installed.
    Commit {
        /// The transaction.
        id: TxnId,
    },
    /// A single-shard transaction that changed nothing (a read, or a procedure that failed)
    /// is answered once this is committed: it orders the answer after everything the leader
    /// logged before it, and a leader that lost its group (it can commit nothing) never
    /// answers from a state a newer leader has moved past. Changes no state.
    Barrier {
        /// The transaction answered.
        id: TxnId,
    },
    /// `id` aborts here: a prepared piece is dropped, and a piece not prepared never will be
    /// (this shard refuses to prepare it from now on).
    Abort {
        /// The transaction.
        id: TxnId,
        /// Why (the answer to a retry).
        reason: String,
    },
}

impl BaseRecord {
    /// The transaction the record is about.
    pub fn id(&self) -> TxnId {
        match self {
            BaseRecord::Local { id, .. }
            | BaseRecord::Prepare { id, .. }
            | BaseRecord::Commit { id }
            | BaseRecord::Barrier { id }
            | BaseRecord::Abort { id, .. } => *id,
        }
    }
}
