//! What every protocol's client core is to the shells that drive it, protocol-neutral:
//! the [`ClientCore`] trait (the tokio client and the simulator drive any protocol's client
//! through it alone) and the [`InFlightTable`] that owns the retry rules once (see
//! [`table`]). Luigi's `Coordinator` (`luigi_protocol::coordinator`) and the baselines'
//! `BaseClient` (`luigi_baseline::base_client`) each keep only their own policy: when a
//! transaction is complete, and where its dispatch goes. The factory that picks one by the
//! cluster's protocol is `luigi_baseline::client_for`, beside the replicas' `luigi_node::replicas_for`.

mod outputs;
pub mod routes;
pub mod table;

pub use outputs::{ClientOutput, Completion, TxnOutcome, NOT_LEADER_RESENDS_MAX, UNRESOLVED_MAX};
pub use routes::ClientRoutes;

pub use table::{DispatchTo, Flight, FlightCounts, FlightPolicy, InFlightTable, InvalidPieces, Reported, RetryKnobs};

use crate::msg::ServerMsg;
use crate::types::{ClientId, Protocol, ShardId, ShardPiece, TimeUs, TxnId};

/// What the shells read of an [`InFlightTable`], whatever the protocol's entries hold.
pub trait FlightsView {
    /// Transactions submitted and not answered yet (no `Done`).
    fn in_flight(&self) -> usize;
    /// Transactions answered but not acknowledgeable yet.
    fn unresolved(&self) -> usize;
    /// False while too many transactions are unresolved.
    fn can_submit(&self) -> bool;
}

impl<X> FlightsView for InFlightTable<X> {
    fn in_flight(&self) -> usize {
        InFlightTable::in_flight(self)
    }

    fn unresolved(&self) -> usize {
        InFlightTable::unresolved(self)
    }

    fn can_submit(&self) -> bool {
        InFlightTable::can_submit(self)
    }
}

/// Counters every client core reports; a protocol without the thing counted reports 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCounters {
    /// The in-flight table's counters (submitted, retries, unknown, resolved).
    pub flights: FlightCounts,
    /// Transactions completed on the fast path.
    pub fast: u64,
    /// Transactions that asked for the fast path.
    pub fanned_out: u64,
    /// Of the fast ones, those completed on an early answer.
    pub early: u64,
    /// Transactions whose participants answered with different timestamps (a protocol bug).
    pub ts_mismatch: u64,
    /// Luigi: first answers that reached their leader after their timestamp, of
    /// transactions stamped to arrive before it (DESIGN.md rule 1).
    pub late_arrivals: u64,
    /// Luigi: the headroom those transactions were stamped with, summed, µs.
    pub headroom_us_sum: u64,
}

/// A client's protocol core, sans I/O: what the shells (the tokio client, the simulator)
/// call. Every effect comes out as [`ClientOutput`]s: dispatches to send by shard (the
/// shell's routes pick the replica), and the answers to give.
pub trait ClientCore: Send {
    /// This client's id.
    fn client(&self) -> ClientId;

    /// The protocol it speaks.
    fn protocol(&self) -> Protocol;

    /// Starts a transaction calling `procedure(args)` over `pieces` (one per participant);
    /// refuses malformed pieces ([`InFlightTable::issue`]) without sending anything.
    fn submit(
        &mut self,
        now: TimeUs,
        procedure: &str,
        args: Vec<u8>,
        pieces: Vec<ShardPiece>,
        out: &mut Vec<ClientOutput>,
    ) -> Result<TxnId, InvalidPieces>;

    /// Handles a message from a server.
    fn on_message(&mut self, now: TimeUs, msg: ServerMsg, out: &mut Vec<ClientOutput>);

    /// Does the time-driven work due at `now` (resends, unknown outcomes, keepalives).
    fn tick(&mut self, now: TimeUs, out: &mut Vec<ClientOutput>);

    /// The earliest time [`ClientCore::tick`] has work to do.
    fn next_deadline(&self) -> Option<TimeUs>;

    /// The shell lost (or regained) its link to the replica it sends `shard`'s messages
    /// to: dispatches waiting on `shard` are sent again soon.
    fn shard_unreachable(&mut self, now: TimeUs, shard: ShardId);

    /// The shell's link to replica `replica` of `shard` went down (`up` false) or came up:
    /// a protocol that picks replicas itself (snapshot reads, DESIGN.md rule 23) avoids a
    /// replica it cannot reach and sends what waits there elsewhere.
    fn replica_link(&mut self, _now: TimeUs, _shard: ShardId, _replica: u32, _up: bool) {}

    /// Its in-flight table (what the accessors below read).
    fn table(&self) -> &dyn FlightsView;

    /// False while [`UNRESOLVED_MAX`](crate::client_core::UNRESOLVED_MAX) transactions are
    /// unresolved: the shell holds new submissions until some resolve (each holds the
    /// acknowledgement of every later one).
    fn can_submit(&self) -> bool {
        self.table().can_submit()
    }

    /// Transactions submitted and not answered yet (no `Done`).
    fn in_flight(&self) -> usize {
        self.table().in_flight()
    }

    /// Transactions answered (unknown, or rejected by some participant) still waiting for
    /// a participant's answer before they can be acknowledged.
    fn unresolved(&self) -> usize {
        self.table().unresolved()
    }

    /// Checks the invariants that hold between steps, and describes the first one broken.
    fn check_invariants(&self) -> Result<(), String>;

    /// Counters.
    fn counters(&self) -> ClientCounters;

    /// The protocol's own counters in full, for a stuck run's report.
    fn stats_line(&self) -> String;

    /// A ping to `shard` to seed a one-way-delay estimate before the first transaction; a
    /// protocol that stamps nothing sends none.
    fn ping(&self, _now: TimeUs, _shard: ShardId, _out: &mut Vec<ClientOutput>) {}

    /// The one-way-delay estimate towards `shard` at `now`, if the protocol keeps one.
    fn owd_estimate_us(&self, _now: TimeUs, _shard: ShardId) -> Option<i64> {
        None
    }
}

#[cfg(test)]
mod tests;
