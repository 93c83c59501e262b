//! The fast path's optional extension for every [`RoleMachine`] whose protocol has one: the
//! protocol states its part ([`FastPathProtocol`], over the whole machine: it reads the role
//! and its own state), and the machine is the [`FastPathReplica`] the node asks for.

use luigi_raft::RaftLog;

use super::{ReplicaProtocol, RoleMachine};
use crate::replica_api::{FastAcceptCounts, FastPathReplica};

/// A protocol's fast path as its role machine runs it: each method is
/// [`FastPathReplica`]'s, over `machine`.
pub trait FastPathProtocol: ReplicaProtocol {
    /// See [`FastPathReplica::accepts_wanted`].
    fn accepts_wanted(machine: &RoleMachine<Self>, log: &RaftLog) -> Option<u64>;

    /// See [`FastPathReplica::accept_counts`].
    fn accept_counts(machine: &RoleMachine<Self>) -> FastAcceptCounts;

    /// See [`FastPathReplica::accepts_live`].
    fn accepts_live(machine: &RoleMachine<Self>) -> Vec<Vec<u8>>;

    /// See [`FastPathReplica::accepts_of`].
    fn accepts_of(machine: &RoleMachine<Self>, log: &RaftLog, term: u64) -> Option<Vec<Vec<u8>>>;

    /// See [`FastPathReplica::accepts_from`].
    ///
    /// # Errors
    /// A record that does not decode (the answer is dropped).
    fn accepts_from(
        machine: &mut RoleMachine<Self>,
        log: &RaftLog,
        replica: u32,
        term: u64,
        records: &[Vec<u8>],
    ) -> Result<(), String>;

    /// See [`FastPathReplica::restore_accepts`].
    ///
    /// # Errors
    /// A record that does not decode (a damaged accept log).
    fn restore_accepts(machine: &mut RoleMachine<Self>, records: &[(u64, Vec<u8>)]) -> Result<(), String>;
}

impl<P: FastPathProtocol> FastPathReplica for RoleMachine<P> {
    fn accepts_wanted(&self, log: &RaftLog) -> Option<u64> {
        P::accepts_wanted(self, log)
    }

    fn accept_counts(&self) -> FastAcceptCounts {
        P::accept_counts(self)
    }

    fn accepts_live(&self) -> Vec<Vec<u8>> {
        P::accepts_live(self)
    }

    fn accepts_of(&self, log: &RaftLog, term: u64) -> Option<Vec<Vec<u8>>> {
        P::accepts_of(self, log, term)
    }

    fn accepts_from(&mut self, log: &RaftLog, replica: u32, term: u64, records: &[Vec<u8>]) -> Result<(), String> {
        P::accepts_from(self, log, replica, term, records)
    }

    fn restore_accepts(&mut self, records: &[(u64, Vec<u8>)]) -> Result<(), String> {
        P::restore_accepts(self, records)
    }
}
