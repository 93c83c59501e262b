//! A closed-loop bank-transfer load over [`ACCOUNTS`] accounts, and the check that the final
//! balances are exactly the sum of the committed transfers (nothing answered lost or applied
//! twice): the workload of the partition and failover tests. [`TransferLoad::start`] takes the
//! function that runs one transfer, so a test that records its transactions (a history
//! recorder) runs the same load through it.
//!
//! Why transfers: every account's final balance is a sum over the committed transfers that
//! touch it, in any order. A lost answered transfer or one applied twice changes some balance.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use luigi_runtime::client::Client;
use luigi_txn::client_core::TxnOutcome;
use luigi_txn::types::Timestamp;
use luigi_workloads::procedures::TransferArgs;

use super::{read_balances, transfer};

/// Accounts the load moves money between.
pub const ACCOUNTS: u64 = 16;

/// A committed transfer: when it was submitted and answered, and the timestamp it got.
#[derive(Clone, Copy)]
pub struct Done {
    /// When the worker submitted it.
    pub submitted: Instant,
    /// The machine's clock (µs since the Unix epoch) when it was submitted.
    pub submitted_us: u64,
    /// When its answer came.
    pub at: Instant,
    /// Its final timestamp.
    pub ts: Timestamp,
    /// What it moved.
    pub args: TransferArgs,
}

impl Done {
    /// How far its timestamp lay ahead of the machine's clock at submission, in µs (the
    /// client's one-way delay estimate plus headroom, or a participant's later proposal).
    pub fn lead_us(&self) -> i64 {
        self.ts as i64 - self.submitted_us as i64
    }
}

/// The machine's clock in µs since the Unix epoch.
pub fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// Workers each running one transfer at a time until stopped.
pub struct TransferLoad {
    committed: Arc<Mutex<Vec<Done>>>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<Vec<TxnOutcome>>>,
}

impl TransferLoad {
    /// Starts `workers` workers on `rt`, each running its transfers through `client`.
    pub fn with_client(rt: &tokio::runtime::Runtime, client: &Client, workers: u64) -> TransferLoad {
        let client = client.clone();
        TransferLoad::start(rt, workers, move |args| {
            let client = client.clone();
            async move { transfer(&client, args).await }
        })
    }

    /// Starts `workers` workers on `rt`, each running its transfers through `run`.
    pub fn start<F, Fut>(rt: &tokio::runtime::Runtime, workers: u64, run: F) -> TransferLoad
    where
        F: Fn(TransferArgs) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = TxnOutcome> + Send + 'static,
    {
        let committed: Arc<Mutex<Vec<Done>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..workers)
            .map(|w| {
                let (run, committed, stop) = (run.clone(), committed.clone(), stop.clone());
                rt.spawn(async move {
                    let mut n = 0u64;
                    let mut other = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let from = (w * 7 + n * 3) % ACCOUNTS;
                        let to = (from + 1 + (n * 5 + w) % (ACCOUNTS - 1)) % ACCOUNTS;
                        let args = TransferArgs { from, to, amount: (n % 9 + 1) as i64 };
                        let (submitted, submitted_us) = (Instant::now(), wall_us());
                        match run(args).await {
                            TxnOutcome::Ordered { ts, results } if results.iter().all(|(_, r)| r.is_ok()) => {
                                let done = Done { submitted, submitted_us, at: Instant::now(), ts, args };
                                committed.lock().unwrap().push(done);
                            }
                            outcome => other.push(outcome),
                        }
                    }
                    other
                })
            })
            .collect();
        TransferLoad { committed, stop, workers: handles }
    }

    /// The transfers committed so far.
    pub fn committed(&self) -> Vec<Done> {
        self.committed.lock().unwrap().clone()
    }

    /// How many transfers committed so far.
    pub fn count(&self) -> usize {
        self.committed.lock().unwrap().len()
    }

    /// Stops the workers (each finishes its transfer) and returns what committed and the
    /// outcomes of the others.
    pub fn stop(self, rt: &tokio::runtime::Runtime) -> (Vec<Done>, Vec<TxnOutcome>) {
        self.stop.store(true, Ordering::Relaxed);
        let mut not_committed = Vec::new();
        for w in self.workers {
            not_committed.extend(rt.block_on(w).unwrap());
        }
        let done = self.committed.lock().unwrap().clone();
        (done, not_committed)
    }
}

/// Reads every account (a zero transfer returns both balances) and asserts that the balances
/// are the sum of the committed transfers `done`.
pub fn assert_balances(rt: &tokio::runtime::Runtime, client: &Client, done: &[Done]) {
    let expected = expected_balances(done);
    let read = read_balances(rt, client, (0..ACCOUNTS).step_by(2).map(|a| (a, a + 1)));
    let actual: Vec<i64> = (0..ACCOUNTS).map(|a| *read.get(&a).expect("every account read")).collect();
    assert_eq!(actual, expected, "balances differ from the committed transfers: something was lost or doubled");
}

/// Every account's balance as the sum of the committed transfers `done` (all start at 0).
pub fn expected_balances(done: &[Done]) -> Vec<i64> {
    let mut expected = vec![0i64; ACCOUNTS as usize];
    for d in done {
        expected[d.args.from as usize] -= d.args.amount;
        expected[d.args.to as usize] += d.args.amount;
    }
    expected
}

/// Asserts that no transfer in `not_committed` ended with an unknown outcome (every one got
/// a definite answer).
pub fn assert_no_unknown(not_committed: &[TxnOutcome]) {
    for o in not_committed {
        assert!(!matches!(o, TxnOutcome::Unknown(_)), "a transfer ended with an unknown outcome: {o:?}");
    }
}
