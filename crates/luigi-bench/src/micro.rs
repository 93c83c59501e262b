//! `luigi bench micro`: start (or reuse) a cluster, drive the micro workload, report.
//!
//! A run is bounded: the local cluster gets [`READY_TIMEOUT`] to listen, every shard
//! [`PROBE_DEADLINE`] to commit a first transaction, and the load warm-up + duration + a grace
//! (see [`load_grace`]); a [`Watchdog`] ends the process past the sum of these plus
//! [`WATCHDOG_MARGIN`], should anything block beyond them. A run that commits nothing in its
//! measured interval is an error, not a row of zeros, and so is a run with transactions left
//! `Unknown` (the client got no complete answer within its give-up time: the cluster stalled
//! or lost servers, and the figures would average a working and a stuck cluster).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use luigi_proto::partition::{HashPartitioner, Partitioner};
use luigi_proto::types::{KeySet, ShardPiece};
use luigi_runtime::config::ClusterConfig;
use luigi_runtime::net::wan::Scenario;
use luigi_workloads::micro::{micro_key, Micro, MicroOp};
use luigi_workloads::{TxnGenerator, TxnSpec, Workload};
use serde_json::json;

use crate::cleanup::Watchdog;
use crate::client::{LuigiConnector, TxnConnector, TxnStatus};
use crate::cluster::{LocalCluster, READY_TIMEOUT};
use crate::driver::{run_load, LoadOptions, Progress};
use crate::report::{abort_rate, BenchResult};
use crate::workload::micro::MicroOptions;

/// Everything one micro run needs.
#[derive(Clone, Debug)]
pub struct MicroRun {
    /// Shards of the local cluster.
    pub shards: u32,
    /// Replicas per shard.
    pub replicas: u32,
    /// Client threads.
    pub threads: u32,
    /// Outstanding transactions per thread.
    pub in_flight: u32,
    /// Network scenario.
    pub net: Scenario,
    /// Measured interval.
    pub duration: Duration,
    /// Warm-up, not counted.
    pub warmup: Duration,
    /// Workload parameters.
    pub micro: MicroOptions,
    /// Coordinator headroom override (also over a cluster file's: the headroom is applied by
    /// the client's coordinator, the servers do not use it).
    pub headroom_us: Option<u64>,
    /// Run against the servers of this cluster file instead of starting a local cluster.
    pub cluster_file: Option<PathBuf>,
    /// Log durability of the started servers: "fsync" or "none".
    pub durability: &'static str,
    /// The `luigi` binary used to start servers.
    pub exe: PathBuf,
    /// Draw a progress bar.
    pub progress: bool,
}

/// How long every shard gets to commit a first transaction (leaders of replicated shards are
/// elected first).
pub const PROBE_DEADLINE: Duration = Duration::from_secs(60);
/// Least time the load may take past its measured interval (see [`load_grace`]).
pub const LOAD_GRACE_MIN: Duration = Duration::from_secs(15);
/// Time the watchdog adds to the sum of the run's own bounds.
pub const WATCHDOG_MARGIN: Duration = Duration::from_secs(30);

/// How long the load may take past its measured interval on `config` before the run fails:
/// [`LOAD_GRACE_MIN`] plus the time the client takes to give up on a transaction (its
/// attempts times its retry timeout), after which an unanswered transaction is answered
/// `Unknown` rather than left waiting.
pub fn load_grace(config: &ClusterConfig) -> Duration {
    LOAD_GRACE_MIN + client_give_up(config)
}

/// How long the client asks about a transaction before answering it `Unknown`: its attempts
/// times its retry timeout on `config`.
pub fn client_give_up(config: &ClusterConfig) -> Duration {
    let attempts = luigi_proto::coordinator::CoordinatorConfig::new(0).max_attempts;
    Duration::from_micros(config.retry_timeout_us().saturating_mul(u64::from(attempts)))
}

/// Runs one micro benchmark configuration and returns its measured result.
///
/// Fails if the run does not finish within its bounds (see the module documentation), if no
/// transaction commits in the measured interval, or if transactions are left `Unknown`.
pub fn run_micro(run: &MicroRun) -> anyhow::Result<BenchResult> {
    let started_at_unix_s = luigi_runtime::clock::now_us() / 1_000_000;
    // The cluster file, or that of the local cluster to start (its addresses are set then).
    let config = match &run.cluster_file {
        Some(path) => {
            let mut config = ClusterConfig::load(path)?;
            if run.headroom_us.is_some() {
                config.protocol.headroom_us = run.headroom_us;
            }
            config
        }
        None => {
            let mut config = ClusterConfig::local(run.shards, run.net, &vec![0; run.shards as usize]);
            config.protocol.headroom_us = run.headroom_us;
            for shard in &mut config.shards {
                shard.replicas = vec!["127.0.0.1:0".into(); run.replicas as usize];
            }
            config
        }
    };
    // The watchdog: every bound of the run, plus a margin.
    let grace = load_grace(&config);
    let start_up = if run.cluster_file.is_some() { Duration::ZERO } else { READY_TIMEOUT };
    let bound = start_up + PROBE_DEADLINE + run.warmup + run.duration + grace + WATCHDOG_MARGIN;
    let _watchdog = Watchdog::arm(
        bound,
        format!(
            "the micro run did not finish within {}s (start-up, first commits, warm-up {}s, duration {}s, grace {}s): \
             the cluster is stuck or unreachable; stopped",
            bound.as_secs(),
            run.warmup.as_secs_f64(),
            run.duration.as_secs_f64(),
            grace.as_secs()
        ),
    );
    let (mut local, config) = match &run.cluster_file {
        Some(_) => (None, config),
        None => {
            let cluster =
                LocalCluster::start(&run.exe, config, run.durability).context("starting the local cluster")?;
            let config = cluster.config().clone();
            (Some(cluster), config)
        }
    };
    let shards = config.shard_count();
    let replicas = config.shards[0].replicas.len() as u32;
    let connector = LuigiConnector { cluster: &config };
    wait_until_serving(&connector, shards).context("waiting for every shard to commit a first transaction")?;
    let opts = LoadOptions {
        threads: run.threads,
        in_flight: run.in_flight,
        warmup: run.warmup,
        duration: run.duration,
        client_id_base: luigi_runtime::clock::now_us() << 8,
        grace,
    };
    let workload = run.micro.workload(shards)?;
    let make = move |t: u32| -> Box<dyn TxnGenerator> { workload.generator(0x5eed + u64::from(t)) };
    let progress = Arc::new(Progress::default());
    let bar = run.progress.then(|| progress_bar(run));
    let report = std::thread::scope(|scope| {
        let load = scope.spawn(|| run_load(&connector, &opts, &make, &progress));
        if let Some(bar) = &bar {
            watch(bar, &progress, &load, run.warmup + run.duration);
        }
        load.join().unwrap_or_else(|_| Err(anyhow::anyhow!("load driver panicked")))
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(cluster) = &mut local {
        cluster.check_alive()?;
        cluster.stop();
    }
    let report = report?;
    let c = report.counters;
    let measured_s = report.measured.as_secs_f64();
    anyhow::ensure!(
        c.committed > 0,
        "no transaction committed in the {measured_s}s measured interval ({} aborted, {} rejected, {} unknown): \
         the cluster is not serving, or the interval is shorter than a transaction's latency",
        c.aborted,
        c.rejected,
        c.unknown
    );
    anyhow::ensure!(
        c.unknown == 0,
        "{} transaction(s) got no complete answer within the client's give-up time ({}s): the cluster stalled or \
         lost servers during the run, its figures are not a measurement ({} committed)",
        c.unknown,
        client_give_up(&config).as_secs_f64(),
        c.committed
    );
    let mut params = BTreeMap::new();
    params.insert("keys".into(), json!(run.micro.keys));
    params.insert("ops".into(), json!(run.micro.ops));
    params.insert("read_ratio".into(), json!(run.micro.read_ratio));
    params.insert("cross_shard_pct".into(), json!(if shards > 1 { run.micro.cross_shard_pct } else { 0 }));
    params.insert("zipf".into(), json!(run.micro.zipf));
    params.insert("headroom_us".into(), json!(config.headroom_us()));
    params.insert("cross_shard_committed".into(), json!(c.cross_shard));
    params.insert("second_round_committed".into(), json!(c.second_round));
    Ok(BenchResult {
        protocol: "luigi".into(),
        workload: "micro".into(),
        shards,
        replicas,
        threads: run.threads,
        in_flight: run.in_flight,
        net: config.net.clone(),
        durability: run.durability.into(),
        duration_s: measured_s,
        warmup_s: run.warmup.as_secs_f64(),
        committed: c.committed,
        aborted: c.aborted,
        retries: c.retries,
        rejected: c.rejected,
        unknown: c.unknown,
        throughput_tps: c.committed as f64 / measured_s,
        abort_rate: abort_rate(c.committed, c.aborted),
        latency_us: report.latency.summary(),
        params,
        started_at_unix_s,
        second_round_rate: if c.cross_shard == 0 { 0.0 } else { c.second_round as f64 / c.cross_shard as f64 },
    })
}

/// Waits until every shard has a leader that commits: one read-only transaction per shard
/// must be answered (leaders of replicated shards are elected first). Without this, the
/// transactions sent while elections run would be counted with their election wait.
fn wait_until_serving(connector: &dyn TxnConnector, shards: u32) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let probe = async {
        let client = connector.connect(luigi_runtime::clock::now_us() << 8 | 0xff).await?;
        let partitioner = HashPartitioner::new(shards);
        for shard in 0..shards {
            let key = (0..).find(|k| partitioner.shard_of(&micro_key(*k)) == shard).expect("every shard owns keys");
            let args = postcard::to_stdvec(&vec![MicroOp { key, write: None }])?;
            let pieces = vec![ShardPiece { shard, keys: KeySet::new(vec![micro_key(key)], vec![]) }];
            let started = Instant::now();
            loop {
                let probe = TxnSpec { procedure: Micro::NAME.to_string(), args: args.clone(), pieces: pieces.clone() };
                let done = client.submit(probe).await?;
                if done.status == TxnStatus::Committed {
                    break;
                }
                anyhow::ensure!(started.elapsed() < PROBE_DEADLINE, "shard {shard} answered {:?}", done.status);
            }
        }
        Ok(())
    };
    rt.block_on(async {
        match tokio::time::timeout(PROBE_DEADLINE, probe).await {
            Ok(probed) => probed,
            Err(_) => anyhow::bail!("no answer within {PROBE_DEADLINE:?}: the cluster is stuck or unreachable"),
        }
    })
}

fn progress_bar(run: &MicroRun) -> ProgressBar {
    let total = (run.warmup + run.duration).as_secs().max(1);
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>28} [{bar:30}] {pos}/{len}s {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(format!("micro {}sh {}t {}", run.shards, run.threads, run.net));
    bar
}

fn watch<T>(bar: &ProgressBar, progress: &Progress, load: &std::thread::ScopedJoinHandle<'_, T>, total: Duration) {
    let start = Instant::now();
    let mut last = (Instant::now(), 0u64);
    while !load.is_finished() {
        std::thread::sleep(Duration::from_millis(250));
        let committed = progress.committed.load(Ordering::Relaxed);
        let dt = last.0.elapsed().as_secs_f64();
        if dt >= 1.0 {
            let tps = (committed - last.1) as f64 / dt;
            let phase = if progress.measuring.load(Ordering::Relaxed) { "measuring" } else { "warm-up" };
            bar.set_message(format!("{phase} {tps:>9.0} tx/s"));
            last = (Instant::now(), committed);
        }
        bar.set_position(start.elapsed().min(total).as_secs());
    }
}
