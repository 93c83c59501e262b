//! The load driver: `threads` OS threads, each with its own client (any protocol's, through
//! [`TxnConnector`] and [`TxnClient`]) keeping `in_flight` transactions outstanding with no
//! think time. A fixed
//! warm-up is not counted; then completions inside the measured interval are counted and
//! their latency (dispatch to answer, as the client sees it) recorded.
//!
//! After the measured interval no transaction is sent and the outstanding ones are drained
//! (not counted, except those answered `Rejected` or `Unknown`: sent during the run, their
//! failure belongs to it), so the servers are not left with unanswered work at shutdown.
//!
//! The load has a deadline: warm-up + measured interval + [`LoadOptions::grace`] after it
//! starts. A load thread still waiting for answers then (a stuck or unreachable cluster, a
//! client that no longer answers) stops, and the run fails with an error saying so instead
//! of hanging.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::stream::{FuturesUnordered, StreamExt};
use luigi_workloads::{TxnGenerator, TxnSpec};

use crate::client::{TxnClient, TxnConnector, TxnResult, TxnStatus};
use crate::stats::{Counters, LatencyRecorder};

/// How to drive the load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Client threads.
    pub threads: u32,
    /// Transactions each thread keeps outstanding.
    pub in_flight: u32,
    /// Not counted.
    pub warmup: Duration,
    /// Measured.
    pub duration: Duration,
    /// Client ids are `client_id_base + thread index` (unique per cluster run).
    pub client_id_base: u64,
    /// How long after the measured interval the load may take to end (connect, drain the
    /// outstanding transactions) before it is abandoned with an error. It must exceed the
    /// time the client takes to answer a transaction `Unknown` (its attempts times its retry
    /// timeout), so that a slow answer is not taken for a stuck cluster.
    pub grace: Duration,
}

/// What the load measured.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Latency of transactions answered in the measured interval.
    pub latency: LatencyRecorder,
    /// Outcome counts in the measured interval, plus the `Rejected` and `Unknown` answers
    /// drained after it.
    pub counters: Counters,
    /// Length of the measured interval actually observed.
    pub measured: Duration,
    /// The same, per kind of business transaction (its first step's procedure).
    pub by_kind: BTreeMap<String, KindReport>,
    /// Latency of the committed business transactions all of whose steps ran on one shard.
    pub single_shard_latency: LatencyRecorder,
    /// Latency of the committed ones with a step over several shards.
    pub cross_shard_latency: LatencyRecorder,
}

/// Outcome counts and latency of one kind of business transaction.
#[derive(Clone, Debug, Default)]
pub struct KindReport {
    /// Latency of the committed ones (first step's dispatch to last step's answer).
    pub latency: LatencyRecorder,
    /// Their outcomes.
    pub counters: Counters,
}

impl LoadReport {
    /// Counts one business transaction answered in the measured interval.
    fn count(&mut self, business: &Business, status: TxnStatus, latency: Duration) {
        if !self.by_kind.contains_key(&business.kind) {
            self.by_kind.insert(business.kind.clone(), KindReport::default());
        }
        let kind = self.by_kind.get_mut(&business.kind).expect("inserted above");
        if status == TxnStatus::Committed {
            let split = if business.cross { &mut self.cross_shard_latency } else { &mut self.single_shard_latency };
            split.record_duration(latency);
        }
        for (c, recorder) in [(&mut self.counters, &mut self.latency), (&mut kind.counters, &mut kind.latency)] {
            c.retries += u64::from(business.attempts.saturating_sub(business.steps));
            c.protocol_aborts += u64::from(business.protocol_aborts);
            match status {
                TxnStatus::Committed => {
                    c.committed += 1;
                    c.cross_shard += u64::from(business.cross);
                    c.second_round += u64::from(business.rounds > 1);
                    c.fast_path += u64::from(business.fast);
                    c.fast_path_asked += u64::from(business.asked_fast);
                    recorder.record_duration(latency);
                }
                TxnStatus::RolledBack => c.rolled_back += 1,
                TxnStatus::Aborted => c.aborted += 1,
                TxnStatus::Rejected => c.rejected += 1,
                TxnStatus::Unknown => c.unknown += 1,
            }
        }
    }
}

/// A business transaction in progress: its steps so far.
#[derive(Clone, Debug)]
struct Business {
    /// Its kind: the first step's procedure.
    kind: String,
    /// When its first step was submitted.
    sent: Instant,
    /// Steps submitted so far.
    steps: u32,
    /// Attempts over its answered steps.
    attempts: u32,
    /// The most agreement rounds a step needed.
    rounds: u8,
    /// Some step spans several shards.
    cross: bool,
    /// Every answered step committed on the fast path.
    fast: bool,
    /// Every answered step asked for it.
    asked_fast: bool,
    /// Protocol aborts over its answered steps (each retried as a new transaction, but the
    /// last of a step that never committed).
    protocol_aborts: u32,
}

impl Business {
    /// Adds an answered step's attempts, rounds, path and aborts.
    fn absorb(&mut self, done: &TxnResult) {
        self.attempts += done.attempts;
        self.rounds = self.rounds.max(done.rounds);
        self.fast &= done.fast;
        self.asked_fast &= done.asked_fast;
        self.protocol_aborts = self.protocol_aborts.saturating_add(done.protocol_aborts);
    }

    fn start(first: &TxnSpec) -> Self {
        let cross = first.pieces.len() > 1;
        Self {
            kind: first.procedure.clone(),
            sent: Instant::now(),
            steps: 1,
            attempts: 0,
            rounds: 0,
            cross,
            fast: true,
            asked_fast: true,
            protocol_aborts: 0,
        }
    }
}

/// Live counters for a progress display.
#[derive(Debug, Default)]
pub struct Progress {
    /// Transactions answered as committed so far (warm-up included).
    pub committed: AtomicU64,
    /// Set when the measured interval has started.
    pub measuring: AtomicBool,
}

/// Runs the load through the clients `connector` makes, with one transaction generator per
/// thread from `make_workload`.
pub fn run_load(
    connector: &dyn TxnConnector,
    opts: &LoadOptions,
    make_workload: &(dyn Fn(u32) -> Box<dyn TxnGenerator> + Sync),
    progress: &Arc<Progress>,
) -> anyhow::Result<LoadReport> {
    let start = Instant::now();
    let measure_from = start + opts.warmup;
    let measure_until = measure_from + opts.duration;
    let deadline = measure_until + opts.grace;
    let reports = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..opts.threads)
            .map(|t| {
                let workload = make_workload(t);
                let progress = progress.clone();
                let client_id = opts.client_id_base + u64::from(t);
                scope.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                    let window = Window { measure_from, measure_until, deadline };
                    rt.block_on(thread_load(connector, client_id, opts.in_flight, workload, window, &progress))
                        .with_context(|| format!("load thread {t}"))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("load thread panicked"))))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let mut total = LoadReport { measured: opts.duration, ..LoadReport::default() };
    for r in reports {
        total.latency.merge(&r.latency);
        total.counters.merge(&r.counters);
        for (kind, k) in r.by_kind {
            let mine = total.by_kind.entry(kind).or_default();
            mine.latency.merge(&k.latency);
            mine.counters.merge(&k.counters);
        }
        total.single_shard_latency.merge(&r.single_shard_latency);
        total.cross_shard_latency.merge(&r.cross_shard_latency);
    }
    Ok(total)
}

/// When a load thread counts answers, and when it must have finished.
#[derive(Clone, Copy, Debug)]
struct Window {
    measure_from: Instant,
    measure_until: Instant,
    deadline: Instant,
}

/// One load thread: keeps `in_flight` business transactions going through one client until
/// the measured interval ends, counting the answers within it.
async fn thread_load(
    connector: &dyn TxnConnector,
    client_id: u64,
    in_flight: u32,
    mut workload: Box<dyn TxnGenerator>,
    window: Window,
    progress: &Progress,
) -> anyhow::Result<LoadReport> {
    let Window { measure_until, deadline, .. } = window;
    let overdue = |outstanding: usize| {
        anyhow::anyhow!(
            "the load did not finish {:.0?} after the measured interval ({outstanding} transaction(s) unanswered): \
             the cluster is stuck or unreachable",
            deadline - measure_until
        )
    };
    let client: Arc<dyn TxnClient> = match tokio::time::timeout_at(deadline.into(), connector.connect(client_id)).await
    {
        Ok(client) => client.context("load client")?,
        Err(_) => return Err(overdue(0)),
    };
    let mut report = LoadReport::default();
    let mut running = FuturesUnordered::new();
    let launch = |spec: TxnSpec, business: Business| {
        let answer = client.submit(spec.clone());
        async move {
            let done = answer.await;
            (spec, business, Instant::now(), done)
        }
    };
    for _ in 0..in_flight {
        let spec = workload.next_txn()?;
        let business = Business::start(&spec);
        running.push(launch(spec, business));
    }
    loop {
        let next = match tokio::time::timeout_at(deadline.into(), running.next()).await {
            Ok(next) => next,
            Err(_) => return Err(overdue(running.len())),
        };
        let Some((spec, mut business, answered, done)) = next else { break }; // drained
        let done = done?;
        business.absorb(&done);
        // A committed step may have a next one: the business transaction goes on.
        if done.status == TxnStatus::Committed {
            if let Some(step) = workload.next_step(&spec, &done.outputs)? {
                business.steps += 1;
                business.cross |= step.pieces.len() > 1;
                running.push(launch(step, business));
                continue;
            }
        }
        tally(&mut report, progress, window, &business, done.status, answered);
        if answered < measure_until {
            let spec = workload.next_txn()?;
            let business = Business::start(&spec);
            running.push(launch(spec, business));
        }
    }
    Ok(report)
}

/// Counts a business transaction that ended with `status` at `answered`: in the report if
/// within the measured interval (a refusal or an unknown outcome after it too: a stalled
/// cluster shows there), in the progress shown either way.
fn tally(
    report: &mut LoadReport,
    progress: &Progress,
    window: Window,
    business: &Business,
    status: TxnStatus,
    answered: Instant,
) {
    let counted = answered >= window.measure_from && answered < window.measure_until;
    if answered >= window.measure_from {
        progress.measuring.store(true, Ordering::Relaxed);
    }
    if status == TxnStatus::Committed {
        progress.committed.fetch_add(1, Ordering::Relaxed);
    }
    if counted {
        report.count(business, status, answered - business.sent);
    } else if answered >= window.measure_until {
        // Drained: a stalled cluster shows here (its transactions come back unknown).
        match status {
            TxnStatus::Rejected => report.counters.rejected += 1,
            TxnStatus::Unknown => report.counters.unknown += 1,
            TxnStatus::Committed | TxnStatus::RolledBack | TxnStatus::Aborted => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClusterConnector;
    use luigi_runtime::config::ClusterConfig;
    use luigi_wan::Scenario;
    use luigi_workloads::micro::{MicroConfig, MicroGenerator};

    #[test]
    fn a_cluster_that_never_answers_fails_the_load_at_its_deadline() {
        // Connections succeed (the kernel accepts them) but nothing is ever answered, not
        // even the challenge a server sends first: the client never gets to dispatch.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let config = ClusterConfig::local(1, Scenario::None, &[silent.local_addr().unwrap().port()]);
        let opts = LoadOptions {
            threads: 2,
            in_flight: 4,
            warmup: Duration::ZERO,
            duration: Duration::from_millis(200),
            client_id_base: 1 << 8,
            grace: Duration::from_millis(500),
        };
        let make = |t: u32| -> Box<dyn TxnGenerator> {
            Box::new(MicroGenerator::new(MicroConfig::default(), 1, u64::from(t)))
        };
        let started = Instant::now();
        let err = run_load(&ClusterConnector { cluster: &config }, &opts, &make, &Arc::new(Progress::default()))
            .expect_err("cannot finish");
        let msg = format!("{err:#}");
        assert!(msg.contains("did not finish"), "{msg}");
        assert!(started.elapsed() < Duration::from_secs(5), "stopped at its deadline: {:?}", started.elapsed());
    }
}
