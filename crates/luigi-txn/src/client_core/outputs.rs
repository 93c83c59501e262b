//! What a client core reports to its shell: every transaction ends with one
//! [`ClientOutput::Done`] and, if that said `Unknown`, a later [`ClientOutput::Resolved`].
//! Protocol-neutral: Luigi's coordinator and the baselines' client report the same.

use crate::msg::{ClientMsg, TxnError};
use crate::procedure::ProcError;
use crate::types::{ShardId, TimeUs, Timestamp, TxnId};

/// Resends after "not the leader" (or "busy") answers before a transaction is reported as
/// unknown (with the default 50 ms delay: about 10 s without a leader).
pub const NOT_LEADER_RESENDS_MAX: u32 = 200;

/// Transactions reported to the caller (unknown, or rejected by one participant) whose
/// other participants have not answered yet, at most. They hold `acked_below` down, so the
/// shell stops submitting while this many are outstanding (see
/// [`ClientCore::can_submit`](crate::client_core::ClientCore::can_submit)).
pub const UNRESOLVED_MAX: usize = 1 << 16;

/// An effect of the coordinator.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientOutput {
    /// Send `msg` to the leader of `shard`.
    Send {
        /// Destination shard (its current leader).
        shard: ShardId,
        /// Message.
        msg: ClientMsg,
    },
    /// Send `msg` to replica `replica` (index from 0) of `shard`, whatever its role: a
    /// snapshot read goes to the nearest replica (DESIGN.md rule 23).
    SendTo {
        /// Destination shard.
        shard: ShardId,
        /// Destination replica of it.
        replica: u32,
        /// Message.
        msg: ClientMsg,
    },
    /// A transaction finished: its one answer to the caller.
    Done(Completion),
    /// A transaction reported [`TxnOutcome::Unknown`] earlier has a known outcome now
    /// ([`TxnOutcome::Ordered`] or [`TxnOutcome::Rejected`]).
    Resolved(Completion),
}

/// A finished transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// Its id.
    pub id: TxnId,
    /// When it was submitted (coordinator clock).
    pub submitted_us: TimeUs,
    /// Dispatch attempts made (1 = no retry): the first send and the resends after a retry
    /// timeout.
    pub attempts: u32,
    /// Resends of it after a "not the leader" or "busy" answer or a lost link (not counted
    /// in `attempts`: the same transaction sent again soon, to whichever replica the shell
    /// picks next).
    pub resends: u32,
    /// Agreement rounds the participants needed (0 single shard, 1 equal proposals, 2 differed).
    pub rounds: u8,
    /// Every participant's answer committed on the fast path (DESIGN.md, the fast path).
    pub fast: bool,
    /// It asked for the fast path (rule 20: its dispatches went to every replica).
    pub asked_fast: bool,
    /// It was read at a snapshot (DESIGN.md rule 23): `Ordered { ts, .. }` then places it
    /// after every transaction at or below `ts` and before every other.
    pub read_only: bool,
    /// What happened.
    pub outcome: TxnOutcome,
}

/// The answer to a transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum TxnOutcome {
    /// Ordered at `ts` and answered by every participant (committed, even if the procedure
    /// itself failed or aborted on some shard: see the per-shard results). A baseline's
    /// protocol abort ([`TxnError::Aborted`], never from Luigi) comes as this too, with every
    /// participant's result `Err(TxnError::Aborted)`: decided, nothing installed anywhere
    /// (see [`TxnOutcome::protocol_abort`] and `luigi_baseline::base_client`).
    Ordered {
        /// Final timestamp.
        ts: Timestamp,
        /// Each participant's result, by shard.
        results: Vec<(ShardId, Result<Vec<u8>, TxnError>)>,
    },
    /// Refused by a participant: executed on no participant, and never will be (the refusal
    /// is durable in that participant's log before it is sent).
    Rejected(String),
    /// No complete answer after every attempt (no leader, unreachable shard): the
    /// transaction may have executed or may still execute. The coordinator keeps its id and
    /// keeps asking; the outcome follows as [`ClientOutput::Resolved`] once learned.
    Unknown(String),
}

impl TxnOutcome {
    /// True when ordered and every participant's procedure succeeded.
    pub fn is_committed(&self) -> bool {
        matches!(self, TxnOutcome::Ordered { results, .. } if results.iter().all(|(_, r)| r.is_ok()))
    }

    /// True when ordered but some participant's procedure aborted or failed.
    pub fn is_aborted(&self) -> bool {
        matches!(self, TxnOutcome::Ordered { results, .. } if results.iter().any(|(_, r)| r.is_err()))
    }

    /// The reason, when the protocol aborted the transaction ([`TxnError::Aborted`]: a
    /// baseline's lock conflict or failed validation). Final for this transaction id; the
    /// business transaction may be submitted again as a new one.
    pub fn protocol_abort(&self) -> Option<&str> {
        match self {
            TxnOutcome::Ordered { results, .. } => {
                results.iter().find_map(
                    |(_, r)| {
                        if let Err(TxnError::Aborted(why)) = r {
                            Some(why.as_str())
                        } else {
                            None
                        }
                    },
                )
            }
            TxnOutcome::Rejected(_) | TxnOutcome::Unknown(_) => None,
        }
    }

    /// The user-abort reason, if a procedure aborted on purpose.
    pub fn user_abort(&self) -> Option<&str> {
        match self {
            TxnOutcome::Ordered { results, .. } => results.iter().find_map(|(_, r)| {
                if let Err(TxnError::Proc(ProcError::UserAbort(why))) = r {
                    Some(why.as_str())
                } else {
                    None
                }
            }),
            TxnOutcome::Rejected(_) | TxnOutcome::Unknown(_) => None,
        }
    }
}
