//! A read-only transaction's piece on one shard, read at a snapshot timestamp by any replica
//! of the shard (DESIGN.md rule 23): the request ([`SnapshotRead`]) and its answer
//! ([`SnapshotReadReply`]).

use serde::{Deserialize, Serialize};

use crate::procedure::ProcError;
use crate::progress::LogPos;
use crate::types::{KeySet, ShardId, TimeUs, Timestamp, TxnId};

/// Read `procedure(args)` on `shard`, restricted to `keys` (reads only), as of snapshot `ts`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct SnapshotRead {
    /// The read-only transaction's id (the answer names it).
    pub id: TxnId,
    /// The shard asked.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
    pub shard: ShardId,
    /// Registered procedure name.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::procedure()"))]
    pub procedure: String,
    /// Procedure arguments.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::args()"))]
    pub args: Vec<u8>,
    /// The keys it reads on this shard (declared writes make it malformed).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::key_set()"))]
    pub keys: KeySet,
    /// The snapshot timestamp.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
    pub ts: Timestamp,
    /// The client's clock when it sent this (for its delay estimate).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
    pub sent_us: TimeUs,
}

impl SnapshotRead {
    /// What every replica checks before holding or running it: reads only, the key set's
    /// shape, the procedure name's and arguments' sizes, a non-zero timestamp.
    pub fn check_shape(&self) -> Result<(), String> {
        use crate::types::limits::*;
        if !self.keys.writes.is_empty() {
            return Err("a read-only transaction declares writes".into());
        }
        if self.procedure.len() > PROCEDURE_NAME_BYTES_MAX || self.args.len() > ARGS_BYTES_MAX {
            return Err("procedure name or arguments too large".into());
        }
        if self.ts == 0 {
            return Err("timestamp 0".into());
        }
        self.keys.check_shape()
    }
}

/// Why a replica did not serve a snapshot read. None of them is an outcome of the
/// transaction: the client may ask another replica, later, or take the read-write path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum ReadRefusal {
    /// The replica's table of waiting reads is full.
    Busy,
    /// Its safe time did not reach the snapshot within the wait bound.
    TimedOut {
        /// The replica's safe time when it gave up.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        safe_ts: Timestamp,
    },
    /// The snapshot lies further ahead of the replica's clock than it would wait.
    TooFarAhead {
        /// How far ahead, in microseconds.
        #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
        ahead_us: u64,
    },
    /// The request is malformed (see [`SnapshotRead::check_shape`]), or asks another shard.
    Malformed(#[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::text()"))] String),
    /// This cluster's protocol or configuration serves no snapshot reads.
    NotSupported(#[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::text()"))] String),
}

impl std::fmt::Display for ReadRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadRefusal::Busy => f.write_str("too many snapshot reads waiting at this replica"),
            ReadRefusal::TimedOut { safe_ts } => {
                write!(f, "the replica's safe time ({safe_ts}) did not reach the snapshot in time")
            }
            ReadRefusal::TooFarAhead { ahead_us } => {
                write!(f, "snapshot {:.1} ms ahead of the replica's clock", *ahead_us as f64 / 1e3)
            }
            ReadRefusal::Malformed(why) => write!(f, "malformed snapshot read: {why}"),
            ReadRefusal::NotSupported(why) => write!(f, "snapshot reads not supported: {why}"),
        }
    }
}

/// A replica's answer to a [`SnapshotRead`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct SnapshotReadReply {
    /// The read-only transaction.
    pub id: TxnId,
    /// The shard that answered.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
    pub shard: ShardId,
    /// The replica that answered (index from 0).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::replica()"))]
    pub replica: u32,
    /// The snapshot it read at.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
    pub ts: Timestamp,
    /// The procedure's result at the snapshot (a write it tried, or a snapshot older than the
    /// versions kept, is an error here), or why the replica did not serve it.
    pub outcome: Result<Result<Vec<u8>, ProcError>, ReadRefusal>,
    /// Server clock at arrival minus the request's `sent_us`.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::delta()"))]
    pub arrival_delta_us: i64,
    /// How long the read waited at the replica for its safe time (µs): informational (the
    /// client measures the whole round trip, wait included, to pick the soonest replica).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
    pub held_us: u64,
    /// The log position the values served rest on, while the serving leader does not know it
    /// committed (DESIGN.md rule 23 (e), rule 14): the client counts the answer only once the
    /// shard's progress reports prove it. `None`: it rests on committed records.
    pub position: Option<LogPos>,
}
