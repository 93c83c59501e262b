//! Replication messages from authenticated peers that the node could not take (a snapshot
//! that does not load, a misaddressed or garbled message): counted for the metrics
//! (`luigi_replication_messages_not_taken_total`) and warned of at most once a second, with
//! the count left unlogged since the last warning: a peer sending garbage must not flood the
//! log with a line per message.

use luigi_txn::throttle::Throttle;
use luigi_txn::types::TimeUs;
use tracing::warn;

use crate::config::NodeId;

/// The replication messages not taken so far, and when the last warning was logged.
#[derive(Debug, Default)]
pub(super) struct NotTaken {
    /// Messages not taken since the server started.
    pub(super) count: u64,
    warns: Throttle,
}

impl NotTaken {
    /// A message from `from` was not taken at `now`, for `error`.
    pub(super) fn record(&mut self, from: NodeId, error: &impl std::fmt::Display, now: TimeUs) {
        self.count += 1;
        if let Some(logged) = self.warns.occurred(now) {
            warn!(from = %from, error = %error, unlogged_before = logged.suppressed, "replication message not taken");
        }
    }
}
