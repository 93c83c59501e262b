//! The seam between the load driver and a protocol's client: the driver submits
//! [`TxnSpec`]s to a [`TxnClient`] and counts the [`TxnResult`]s, whatever protocol answers
//! them. The runtime [`Client`] implements it here, for every protocol (it speaks its
//! cluster file's); [`ClusterConnector`] wraps it, on an OCC or 2PL cluster, in a
//! [`RetryingClient`] that submits a protocol-aborted transaction again as a new one (bounded
//! exponential backoff), so the driver, statistics and reports are the same for all.
//!
//! **Backpressure.** The driver keeps a fixed number of transactions outstanding per client
//! (closed loop) and submits a new one only when one is answered. A client that cannot take
//! more work yet simply makes the future of [`TxnClient::submit`] wait (Luigi's does while
//! its request queue is full); the wait counts in the transaction's latency.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::future::BoxFuture;
use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_txn::client_core::{Completion, TxnOutcome};
use luigi_txn::msg::TxnError;
use luigi_txn::procedure::ProcError;
use luigi_txn::types::{Protocol, ShardId};
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
    /// aborted it (e.g. an OCC validation failure after its last retry: then
    /// [`TxnResult::protocol_aborts`] is non-zero).
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
    /// Attempts the client made (1 = no retry): the first send and its resends after a retry
    /// timeout, summed over the submissions of a [`RetryingClient`].
    pub attempts: u32,
    /// Resends of the same transaction after a "not the leader" or "busy" answer or a lost
    /// link (the client core's resend rule; not in `attempts`), summed over the submissions.
    pub resends: u32,
    /// Times a [`RetryingClient`] submitted it again as a new transaction after a protocol
    /// abort.
    pub resubmissions: u32,
    /// Cross-shard agreement rounds it needed: 0 for a single-shard transaction, 1 when one
    /// round sufficed, 2 when a second was needed (for Luigi: the participants' proposals
    /// differed).
    pub rounds: u8,
    /// Every participant's answer committed on Luigi's fast path (DESIGN.md, the fast path).
    pub fast: bool,
    /// It asked for the fast path (DESIGN.md rule 20).
    pub asked_fast: bool,
    /// It was read at a snapshot from the nearest replicas (DESIGN.md rule 23).
    pub read_only: bool,
    /// Each participant's output, by shard, when it committed (empty otherwise): what a
    /// multi-step business transaction's next step is built from.
    pub outputs: Vec<(ShardId, Vec<u8>)>,
    /// Protocol aborts ([`TxnError::Aborted`]: a baseline's lock conflict or failed
    /// validation) on the way to this answer: the ones a [`RetryingClient`] submitted again,
    /// plus the last answer's own when it is one. Always 0 with Luigi.
    pub protocol_aborts: u32,
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
        let protocol_aborts = u32::from(done.outcome.protocol_abort().is_some());
        Self {
            status,
            attempts: done.attempts,
            resends: done.resends,
            resubmissions: 0,
            rounds: done.rounds,
            fast: done.fast,
            asked_fast: done.asked_fast,
            read_only: done.read_only,
            outputs,
            protocol_aborts,
        }
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

/// How a [`RetryingClient`] submits a protocol-aborted transaction again: at most
/// `attempts_max` submissions in all, the `n`-th retry after `backoff_initial * 2^(n-1)`,
/// capped at `backoff_max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Submissions of one business transaction step, the first included (at least 1).
    pub attempts_max: u32,
    /// Wait before the first retry.
    pub backoff_initial: Duration,
    /// Longest wait between two submissions.
    pub backoff_max: Duration,
}

impl RetryPolicy {
    /// Submissions per transaction by default.
    pub const ATTEMPTS: u32 = 5;
    /// Shortest first backoff (a loopback round trip is tens of µs: waiting less retries into
    /// the same conflict).
    pub const BACKOFF_MIN: Duration = Duration::from_micros(200);
    /// The cap, in first backoffs.
    pub const CAP_FACTOR: u32 = 16;

    /// The default for `config`'s network: the first backoff is about one client round trip,
    /// doubling up to [`RetryPolicy::CAP_FACTOR`] times that.
    pub fn for_cluster(config: &ClusterConfig) -> Self {
        let round_trip = Duration::from_micros(2 * config.scenario().delay().mean_us);
        let backoff_initial = round_trip.max(Self::BACKOFF_MIN);
        Self { attempts_max: Self::ATTEMPTS, backoff_initial, backoff_max: backoff_initial * Self::CAP_FACTOR }
    }

    /// The wait before retry `retry` (1 = the first retry).
    pub fn backoff(&self, retry: u32) -> Duration {
        assert!(retry >= 1, "retries count from 1");
        let factor = 1u32.checked_shl(retry - 1).unwrap_or(u32::MAX);
        self.backoff_initial.saturating_mul(factor).min(self.backoff_max)
    }

    /// The most a transaction waits in backoffs (every retry taken).
    pub fn total_backoff(&self) -> Duration {
        (1..self.attempts_max).map(|r| self.backoff(r)).sum()
    }
}

/// A [`TxnClient`] that submits a protocol-aborted transaction ([`TxnResult::protocol_aborts`])
/// again, as a new transaction (a new id: the abort is final for the old one), under a
/// [`RetryPolicy`]. Its answer spans every submission: attempts, resends and protocol aborts
/// summed, the resubmissions counted, the last submission's status and outputs (`Aborted` when every submission was aborted).
pub struct RetryingClient {
    inner: Arc<dyn TxnClient>,
    policy: RetryPolicy,
}

impl RetryingClient {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn TxnClient>, policy: RetryPolicy) -> Self {
        assert!(policy.attempts_max >= 1, "at least one submission");
        Self { inner, policy }
    }
}

impl TxnClient for RetryingClient {
    fn submit(&self, txn: TxnSpec) -> BoxFuture<'static, anyhow::Result<TxnResult>> {
        let (inner, policy) = (self.inner.clone(), self.policy);
        Box::pin(async move {
            let (mut attempts, mut resends, mut protocol_aborts) = (0u32, 0u32, 0u32);
            let mut submissions = 1;
            loop {
                let answer = inner.submit(txn.clone()).await?;
                attempts = attempts.saturating_add(answer.attempts);
                resends = resends.saturating_add(answer.resends);
                protocol_aborts = protocol_aborts.saturating_add(answer.protocol_aborts);
                if answer.protocol_aborts == 0 || submissions >= policy.attempts_max {
                    let resubmissions = submissions - 1;
                    return Ok(TxnResult { attempts, resends, resubmissions, protocol_aborts, ..answer });
                }
                tokio::time::sleep(policy.backoff(submissions)).await;
                submissions += 1;
            }
        })
    }
}

/// Connects runtime [`Client`]s to a cluster, speaking its protocol; on an OCC or 2PL
/// cluster each is wrapped in a [`RetryingClient`] ([`RetryPolicy::for_cluster`]).
#[derive(Clone, Copy, Debug)]
pub struct ClusterConnector<'a> {
    /// The cluster.
    pub cluster: &'a ClusterConfig,
}

impl TxnConnector for ClusterConnector<'_> {
    fn connect(&self, client_id: u64) -> BoxFuture<'_, anyhow::Result<Arc<dyn TxnClient>>> {
        Box::pin(async move {
            let client = Arc::new(Client::connect(self.cluster, client_id).await?);
            Ok(match client.protocol() {
                // Luigi never aborts a transaction; direct has nothing to abort.
                Protocol::Luigi | Protocol::Direct => client as Arc<dyn TxnClient>,
                Protocol::Occ | Protocol::TwoPl => {
                    Arc::new(RetryingClient::new(client, RetryPolicy::for_cluster(self.cluster))) as Arc<dyn TxnClient>
                }
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Instant;

    use luigi_txn::client_core::TxnOutcome;
    use luigi_txn::types::TxnId;

    use super::*;

    /// Aborts its first `aborts` submissions, then commits; counts submissions.
    struct Aborting {
        aborts: u32,
        submitted: Arc<AtomicU32>,
    }

    impl TxnClient for Aborting {
        fn submit(&self, _txn: TxnSpec) -> BoxFuture<'static, anyhow::Result<TxnResult>> {
            let n = self.submitted.fetch_add(1, Ordering::SeqCst);
            let outcome = if n < self.aborts {
                TxnOutcome::Ordered { ts: 0, results: vec![(0, Err(TxnError::Aborted("conflict".into())))] }
            } else {
                TxnOutcome::Ordered { ts: 5, results: vec![(0, Ok(vec![7]))] }
            };
            let done = Completion {
                id: TxnId { client: 1, seq: u64::from(n) + 1 },
                submitted_us: 0,
                attempts: 2,
                resends: 1,
                rounds: 0,
                fast: false,
                asked_fast: false,
                read_only: false,
                outcome,
            };
            Box::pin(async move { Ok(TxnResult::from(&done)) })
        }
    }

    fn spec() -> TxnSpec {
        TxnSpec { procedure: "p".into(), args: vec![], pieces: vec![] }
    }

    const POLICY: RetryPolicy = RetryPolicy {
        attempts_max: 5,
        backoff_initial: Duration::from_millis(1),
        backoff_max: Duration::from_millis(4),
    };

    fn run(aborts: u32) -> (TxnResult, u32, Duration) {
        let submitted = Arc::new(AtomicU32::new(0));
        let inner = Arc::new(Aborting { aborts, submitted: submitted.clone() });
        let client = RetryingClient::new(inner, POLICY);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let started = Instant::now();
        let result = rt.block_on(client.submit(spec())).unwrap();
        (result, submitted.load(Ordering::SeqCst), started.elapsed())
    }

    #[test]
    fn a_protocol_abort_is_an_aborted_status_with_its_count() {
        let (result, submitted, _) = run(1);
        assert_eq!(submitted, 2);
        assert_eq!((result.status, result.protocol_aborts, result.attempts), (TxnStatus::Committed, 1, 4));
        assert_eq!((result.resubmissions, result.resends), (1, 2), "one resubmission; each submission's resend");
        let aborted = Completion {
            id: TxnId { client: 1, seq: 1 },
            submitted_us: 0,
            attempts: 1,
            resends: 0,
            rounds: 1,
            fast: false,
            asked_fast: false,
            read_only: false,
            outcome: TxnOutcome::Ordered { ts: 0, results: vec![(0, Err(TxnError::Aborted("x".into())))] },
        };
        let r = TxnResult::from(&aborted);
        assert_eq!((r.status, r.protocol_aborts), (TxnStatus::Aborted, 1));
        // A procedure's own failure is no protocol abort: not retried.
        let failed = Completion {
            outcome: TxnOutcome::Ordered {
                ts: 3,
                results: vec![(0, Err(TxnError::Proc(ProcError::UserAbort("u".into()))))],
            },
            ..aborted
        };
        let r = TxnResult::from(&failed);
        assert_eq!((r.status, r.protocol_aborts), (TxnStatus::RolledBack, 0));
    }

    #[test]
    fn aborts_are_retried_with_growing_backoff_until_one_commits() {
        for aborts in 0..POLICY.attempts_max {
            let (result, submitted, took) = run(aborts);
            assert_eq!(submitted, aborts + 1, "one new submission per abort");
            assert_eq!(result.status, TxnStatus::Committed);
            assert_eq!(result.outputs, vec![(0, vec![7])], "the committed submission's outputs");
            assert_eq!((result.protocol_aborts, result.attempts), (aborts, 2 * (aborts + 1)));
            assert_eq!((result.resubmissions, result.resends), (aborts, aborts + 1), "counted apart");
            let waited: Duration = (1..=aborts).map(|r| POLICY.backoff(r)).sum();
            assert!(took >= waited, "backed off {waited:?}, took {took:?}");
        }
    }

    #[test]
    fn the_retries_are_bounded_and_the_last_abort_is_reported() {
        let (result, submitted, took) = run(100);
        assert_eq!(submitted, POLICY.attempts_max);
        assert_eq!(result.status, TxnStatus::Aborted);
        assert_eq!((result.protocol_aborts, result.attempts), (5, 10));
        assert_eq!(result.resubmissions, POLICY.attempts_max - 1, "the last abort is not resubmitted");
        assert!(result.outputs.is_empty());
        assert!(took >= POLICY.total_backoff());
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        let b: Vec<u64> = (1..=5).map(|r| POLICY.backoff(r).as_millis() as u64).collect();
        assert_eq!(b, vec![1, 2, 4, 4, 4]);
        assert_eq!(POLICY.backoff(u32::MAX), POLICY.backoff_max, "no overflow");
        assert_eq!(POLICY.total_backoff(), Duration::from_millis(1 + 2 + 4 + 4));
        let geo = ClusterConfig::local(1, luigi_wan::Scenario::Geo, &[1]);
        let p = RetryPolicy::for_cluster(&geo);
        let mean = luigi_wan::Scenario::Geo.delay().mean_us;
        assert_eq!(p.backoff_initial, Duration::from_micros(2 * mean).max(RetryPolicy::BACKOFF_MIN));
        assert_eq!((p.attempts_max, p.backoff_max), (5, p.backoff_initial * 16));
        let lan = ClusterConfig::local(1, luigi_wan::Scenario::None, &[1]);
        assert_eq!(RetryPolicy::for_cluster(&lan).backoff_initial, RetryPolicy::BACKOFF_MIN);
    }
}
