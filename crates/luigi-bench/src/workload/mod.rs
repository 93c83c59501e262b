//! Workloads: generators of transactions for the load driver.

pub mod micro;

use luigi_store::Key;

/// One transaction to run: a procedure call and its footprint.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnSpec {
    /// Registered procedure name.
    pub procedure: &'static str,
    /// Encoded arguments.
    pub args: Vec<u8>,
    /// Keys read.
    pub reads: Vec<Key>,
    /// Keys written.
    pub writes: Vec<Key>,
}

/// A transaction generator; one per load thread, seeded per thread.
pub trait Workload: Send {
    /// The next transaction.
    fn next_txn(&mut self) -> TxnSpec;
}
