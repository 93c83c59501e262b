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
    /// The next transaction, or why none can be drawn (e.g. the key space is too small or too
    /// skewed to find the keys it needs): the run stops with that error.
    fn next_txn(&mut self) -> anyhow::Result<TxnSpec>;
}
