//! The seam between the load driver and a protocol's client: the driver submits
//! [`TxnSpec`]s to a [`TxnClient`] and counts the [`TxnResult`]s, whatever protocol answers
//! them. Luigi's [`Client`] implements it here; a baseline (OCC, 2PL) client implements the
//! same two traits and the driver, statistics and reports are unchanged.
//!
//! **Backpressure.** The driver keeps a fixed number of transactions outstanding per client
//! (closed loop) and submits a new one only when one is answered. A client that cannot take
//! more work yet simply makes the future of [`TxnClient::submit`] wait (Luigi's does while
//! its request queue is full); the wait counts in the transaction's latency.

use std::sync::Arc;

use anyhow::Context;
use futures::future::BoxFuture;
use luigi_proto::coordinator::{Completion, TxnOutcome};
use luigi_proto::msg::TxnError;
use luigi_proto::procedure::ProcError;
use luigi_proto::types::ShardId;
use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_workloads::TxnSpec;

/// How a transaction ended, as the driver counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnStatus {
    /// Committed: every participant's procedure succeeded and the result is durable.
    Committed,
    /// Decided and rolled back on purpose by its procedure on every participant that did not
    /// commit it (a user abort, e.g. TPC-C's 1 % of NewOrders with an unused item): the
    /// workload's expected outcome, not a failure.
    RolledBack,
    /// Decided but not committed: a procedure failed (its writes are undone), or the protocol
    /// aborted it (e.g. an OCC validation failure after its last retry).
    Aborted,
    /// Refused before executing anywhere; it never will.
    Rejected,
    /// No complete answer within the client's give-up time: it may or may not have executed.
    Unknown,
}

/// The answer to one submitted transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnResult {
    /// How it ended.
    pub status: TxnStatus,
    /// Attempts the client made (1 = no retry).
    pub attempts: u32,
    /// Cross-shard agreement rounds it needed: 0 for a single-shard transaction, 1 when one
    /// round sufficed, 2 when a second was needed (for Luigi: the participants' proposals
    /// differed).
    pub rounds: u8,
    /// Each participant's output, by shard, when it committed (empty otherwise): what a
    /// multi-step business transaction's next step is built from.
    pub outputs: Vec<(ShardId, Vec<u8>)>,
}

impl From<&Completion> for TxnResult {
    fn from(done: &Completion) -> Self {
        let status = match &done.outcome {
            TxnOutcome::Ordered { .. } if done.outcome.is_committed() => TxnStatus::Committed,
            TxnOutcome::Ordered { results, .. } if results.iter().all(|(_, r)| is_ok_or_user_abort(r)) => {
                TxnStatus::RolledBack
            }
            TxnOutcome::Ordered { .. } => TxnStatus::Aborted,
            TxnOutcome::Rejected(_) => TxnStatus::Rejected,
            TxnOutcome::Unknown(_) => TxnStatus::Unknown,
        };
        let outputs = match &done.outcome {
            TxnOutcome::Ordered { results, .. } if status == TxnStatus::Committed => {
                results.iter().filter_map(|(shard, r)| r.as_ref().ok().map(|out| (*shard, out.clone()))).collect()
            }
            TxnOutcome::Ordered { .. } | TxnOutcome::Rejected(_) | TxnOutcome::Unknown(_) => Vec::new(),
        };
        Self { status, attempts: done.attempts, rounds: done.rounds, outputs }
    }
}

/// True for a participant's result that committed or that its procedure aborted on purpose.
fn is_ok_or_user_abort(result: &Result<Vec<u8>, TxnError>) -> bool {
    matches!(result, Ok(_) | Err(TxnError::Proc(ProcError::UserAbort(_))))
}

/// A protocol's client as the load driver uses it.
pub trait TxnClient: Send + Sync {
    /// Submits `txn` and resolves to its answer once the client has one (every transaction is
    /// answered once: committed, aborted, rejected or unknown). An error means the client
    /// itself stopped working (not a transaction failure) and ends the load.
    fn submit(&self, txn: TxnSpec) -> BoxFuture<'static, anyhow::Result<TxnResult>>;
}

/// Makes the clients of the load threads: each thread calls [`TxnConnector::connect`] once,
/// inside its own (current-thread) tokio runtime.
pub trait TxnConnector: Sync {
    /// A client with id `client_id` (unique in the cluster).
    fn connect(&self, client_id: u64) -> BoxFuture<'_, anyhow::Result<Arc<dyn TxnClient>>>;
}

impl TxnClient for Client {
    fn submit(&self, txn: TxnSpec) -> BoxFuture<'static, anyhow::Result<TxnResult>> {
        let client = self.clone();
        Box::pin(async move {
            let done = client.execute_pieces(&txn.procedure, txn.args, txn.pieces).await.context("client stopped")?;
            Ok(TxnResult::from(&done))
        })
    }
}

/// Connects Luigi [`Client`]s to a cluster.
#[derive(Clone, Copy, Debug)]
pub struct LuigiConnector<'a> {
    /// The cluster.
    pub cluster: &'a ClusterConfig,
}

impl TxnConnector for LuigiConnector<'_> {
    fn connect(&self, client_id: u64) -> BoxFuture<'_, anyhow::Result<Arc<dyn TxnClient>>> {
        Box::pin(async move {
            let client = Client::connect(self.cluster, client_id).await?;
            Ok(Arc::new(client) as Arc<dyn TxnClient>)
        })
    }
}
