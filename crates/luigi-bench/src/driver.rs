//! The load driver: `threads` OS threads, each with its own client (coordinator and
//! connections) keeping `in_flight` transactions outstanding with no think time. A fixed
//! warm-up is not counted; then completions inside the measured interval are counted and
//! their latency (dispatch to answer, as the client sees it) recorded.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::stream::{FuturesUnordered, StreamExt};
use luigi_proto::coordinator::TxnOutcome;
use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;

use crate::stats::{Counters, LatencyRecorder};
use crate::workload::Workload;

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
}

/// What the load measured.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Latency of transactions answered in the measured interval.
    pub latency: LatencyRecorder,
    /// Outcome counts in the measured interval.
    pub counters: Counters,
    /// Length of the measured interval actually observed.
    pub measured: Duration,
}

/// Live counters for a progress display.
#[derive(Debug, Default)]
pub struct Progress {
    /// Transactions answered as committed so far (warm-up included).
    pub committed: AtomicU64,
    /// Set when the measured interval has started.
    pub measuring: AtomicBool,
}

/// Runs the load against `cluster`, with one workload per thread from `make_workload`.
pub fn run_load(
    cluster: &ClusterConfig,
    opts: &LoadOptions,
    make_workload: &(dyn Fn(u32) -> Box<dyn Workload> + Sync),
    progress: &Arc<Progress>,
) -> anyhow::Result<LoadReport> {
    let start = Instant::now();
    let measure_from = start + opts.warmup;
    let measure_until = measure_from + opts.duration;
    let reports = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..opts.threads)
            .map(|t| {
                let workload = make_workload(t);
                let progress = progress.clone();
                let client_id = opts.client_id_base + u64::from(t);
                scope.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                    rt.block_on(thread_load(
                        cluster,
                        client_id,
                        opts.in_flight,
                        workload,
                        measure_from,
                        measure_until,
                        &progress,
                    ))
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
    }
    Ok(total)
}

async fn thread_load(
    cluster: &ClusterConfig,
    client_id: u64,
    in_flight: u32,
    mut workload: Box<dyn Workload>,
    measure_from: Instant,
    measure_until: Instant,
    progress: &Progress,
) -> anyhow::Result<LoadReport> {
    let client = Client::connect(cluster, client_id).await.context("load client")?;
    let mut report = LoadReport::default();
    let mut running = FuturesUnordered::new();
    let launch = |spec: crate::workload::TxnSpec| {
        let client = client.clone();
        async move {
            let sent = Instant::now();
            let done = client.execute(spec.procedure, spec.args, spec.reads, spec.writes).await;
            (sent, Instant::now(), done)
        }
    };
    for _ in 0..in_flight {
        running.push(launch(workload.next_txn()?));
    }
    while let Some((sent, answered, done)) = running.next().await {
        let done = done.context("client stopped")?;
        let counted = answered >= measure_from && answered < measure_until;
        if answered >= measure_from {
            progress.measuring.store(true, Ordering::Relaxed);
        }
        let committed = done.outcome.is_committed();
        if committed {
            progress.committed.fetch_add(1, Ordering::Relaxed);
        }
        if counted {
            let c = &mut report.counters;
            c.retries += u64::from(done.attempts - 1);
            match &done.outcome {
                TxnOutcome::Ordered { .. } if committed => {
                    c.committed += 1;
                    c.cross_shard += u64::from(done.rounds > 0);
                    c.second_round += u64::from(done.rounds > 1);
                    report.latency.record_duration(answered - sent);
                }
                TxnOutcome::Ordered { .. } => c.aborted += 1,
                TxnOutcome::Rejected(_) => c.rejected += 1,
                TxnOutcome::Unknown(_) => c.unknown += 1,
            }
        }
        if answered < measure_until {
            running.push(launch(workload.next_txn()?));
        }
        // Past the interval: let the outstanding ones drain instead of abandoning them, so
        // the servers are not left with unanswered work at shutdown; stop after a grace.
        if answered >= measure_until + Duration::from_secs(5) {
            break;
        }
    }
    Ok(report)
}
