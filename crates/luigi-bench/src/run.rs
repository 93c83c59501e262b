//! One benchmark run of any workload: start (or reuse) a cluster, wait until every shard
//! serves, drive the workload's generators, run a closing step (e.g. a consistency check)
//! against the same cluster, stop it. `luigi bench micro` and `luigi bench tpcc` are this run
//! with their own workload and report.
//!
//! A run is bounded: the local cluster gets [`READY_TIMEOUT`] to listen, every shard
//! [`PROBE_DEADLINE`] to commit a first transaction, and the load warm-up + duration + a grace
//! (see [`load_grace`]) and the closing step its own bound; a [`Watchdog`] ends the process
//! past the sum of these plus [`WATCHDOG_MARGIN`], should anything block beyond them. A run
//! that commits nothing in its measured interval is an error, not a row of zeros, and so is
//! a run with transactions left `Unknown` (the client got no complete answer within its
//! give-up time: the cluster stalled or lost servers, and the figures would average a
//! working and a stuck cluster).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use luigi_runtime::config::{ClusterConfig, LinkConfig, CLIENT_NODE};
use luigi_txn::partition::{HashPartitioner, Partitioner};
use luigi_txn::types::{KeySet, Protocol, ShardPiece};
use luigi_wan::Scenario;
use luigi_workloads::micro::{micro_key, Micro, MicroOp};
use luigi_workloads::{TxnGenerator, TxnSpec, Workload, WorkloadSpec};

use crate::cleanup::Watchdog;
use crate::client::{ClusterConnector, RetryPolicy, TxnConnector, TxnStatus};
use crate::cluster::{LocalCluster, READY_TIMEOUT};
use crate::cpu::{CpuInterval, CpuSample};
use crate::driver::{run_load, KindReport, LoadOptions, LoadReport, Progress};
use crate::report::{abort_rate, BenchResult, KindResult};
use crate::server_metrics::{self, ServerDeltas};

/// The shape of one run, whatever the workload.
#[derive(Clone, Debug)]
pub struct RunSpec {
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
    /// Coordinator headroom override (also over a cluster file's: the headroom is applied by
    /// the client's coordinator, the servers do not use it).
    pub headroom_us: Option<u64>,
    /// Adaptive headroom override (`[protocol] adaptive_headroom`), also over a cluster
    /// file's: the client's coordinator applies it.
    pub adaptive_headroom: Option<bool>,
    /// Read-only path override (`[protocol] read_only_path`): written into the local
    /// cluster's file (absent: on for Luigi); over a cluster file's, this client's only.
    pub read_only_path: Option<bool>,
    /// The clock bound written into the local cluster's file (`[protocol]
    /// max_clock_offset_us`; absent: the default).
    pub max_clock_offset_us: Option<u64>,
    /// The client next to this replica of every shard of the local cluster (`[[links]]` with
    /// no delay between `client` and it, both ways; [`client_near`]).
    pub client_near: Option<u32>,
    /// Run against the servers of this cluster file instead of starting a local cluster.
    pub cluster_file: Option<PathBuf>,
    /// The protocol: written into the local cluster's file; a cluster file's must be it.
    pub protocol: Protocol,
    /// Log durability of the started servers: "fsync" or "none".
    pub durability: &'static str,
    /// Luigi's fast path on the local cluster (`[protocol] fast_path`); a cluster file's
    /// own setting decides for its servers.
    pub fast_path: bool,
    /// The `luigi` binary used to start servers.
    pub exe: PathBuf,
    /// Draw a progress bar.
    pub progress: bool,
    /// Open loop at this rate, transactions per second (`None`: closed loop; see
    /// [`crate::open_loop`]).
    pub rate_tps: Option<f64>,
    /// The servers serve their metrics (a local cluster) and the run scrapes them at the
    /// start and the end of its measured interval ([`crate::server_metrics`]); off, neither
    /// (`luigi bench --metrics off`: what serving them costs, at saturation).
    pub metrics: bool,
}

/// What a run measured, before the workload turns it into a report.
#[derive(Debug)]
pub struct Measured {
    /// The load's counts and latencies.
    pub report: LoadReport,
    /// The cluster it ran against.
    pub config: ClusterConfig,
    /// From the start of the run (servers started, populated, elected) until every shard
    /// committed a first transaction.
    pub ready: Duration,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_at_unix_s: u64,
    /// The servers' metrics over the measured interval (`None` with `--metrics off`, or a
    /// cluster whose servers serve none).
    pub server_metrics: Option<ServerDeltas>,
    /// The client's and the local servers' CPU time over the measured interval (`None` if
    /// the load failed before its end).
    pub cpu: Option<CpuInterval>,
}

/// A closing step: what it does with a client connector to the cluster.
pub type ClosingStep<'a, T> = Box<dyn FnOnce(&dyn TxnConnector) -> anyhow::Result<T> + 'a>;

/// What a run does with the cluster after the load (before a local cluster stops), with a
/// client connector to it, and how long it may take.
pub struct Closing<'a, T> {
    /// The bound on it (counted into the watchdog's).
    pub bound: Duration,
    /// The step.
    pub step: ClosingStep<'a, T>,
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
/// `Unknown` rather than left waiting, plus the backoffs of a protocol-aborted one's retries.
pub fn load_grace(config: &ClusterConfig) -> Duration {
    let backoffs = match config.protocol() {
        Protocol::Luigi | Protocol::Direct => Duration::ZERO,
        Protocol::Occ | Protocol::TwoPl => RetryPolicy::for_cluster(config).total_backoff(),
    };
    LOAD_GRACE_MIN + client_give_up(config) + backoffs
}

/// How long the client asks about a transaction before answering it `Unknown`: its attempts
/// times its retry timeout on `config`.
pub fn client_give_up(config: &ClusterConfig) -> Duration {
    let attempts = luigi_protocol::coordinator::CoordinatorConfig::new(0).max_attempts;
    Duration::from_micros(config.retry_timeout_us().saturating_mul(u64::from(attempts)))
}

/// Runs `workload` on the cluster of `run` (a local one hosting `hosted`, if given, or the
/// cluster file's), then `closing` against the same cluster. Load thread `t` draws from
/// `workload.generator(seed_base + t)`.
///
/// Fails if the run does not finish within its bounds (see the module documentation), if no
/// transaction commits in the measured interval, if transactions are left `Unknown`, or if
/// the closing step fails.
pub fn run_workload<T>(
    run: &RunSpec,
    label: &str,
    workload: Arc<dyn Workload>,
    hosted: Option<WorkloadSpec>,
    closing: Closing<'_, T>,
) -> anyhow::Result<(Measured, T)> {
    let started_at_unix_s = luigi_runtime::clock::now_us() / 1_000_000;
    let started = Instant::now();
    let config = cluster_config(run, hosted)?;
    // The watchdog: every bound of the run, plus a margin.
    let grace = load_grace(&config);
    let _watchdog = watchdog(run, label, grace, closing.bound);
    let (mut local, config) = match &run.cluster_file {
        Some(_) => (None, config),
        None => {
            let cluster = LocalCluster::start(&run.exe, config, run.durability, run.metrics)
                .context("starting the local cluster")?;
            let config = cluster.config().clone();
            (Some(cluster), config)
        }
    };
    let shards = config.shard_count();
    let connector = ClusterConnector { cluster: &config };
    // A local cluster's servers were just started and may still be building their initial
    // state: connecting is retried. A cluster file's servers are running already.
    let patient = local.is_some();
    wait_until_serving(&connector, shards, patient).context("waiting for every shard to commit a first transaction")?;
    let ready = started.elapsed();
    let opts = LoadOptions {
        threads: run.threads,
        in_flight: run.in_flight,
        warmup: run.warmup,
        duration: run.duration,
        client_id_base: luigi_runtime::clock::now_us() << 8,
        grace,
        rate_tps: run.rate_tps,
    };
    let make = move |t: u32| -> Box<dyn TxnGenerator> { workload.generator(0x5eed + u64::from(t)) };
    let scraped = if run.metrics { server_metrics::targets(&config) } else { Vec::new() };
    let pids = local.as_ref().map(LocalCluster::pids).unwrap_or_default();
    let (report, server_metrics, cpu) = drive_load(run, label, &connector, &opts, &make, &scraped, &pids);
    let closed = report.as_ref().ok().map(|_| (closing.step)(&connector));
    if let Some(cluster) = &mut local {
        cluster.check_alive()?;
        cluster.stop();
    }
    let report = report?;
    check_measured(&report, &config)?;
    let closed = closed.expect("the load succeeded")?;
    Ok((Measured { report, config, ready, started_at_unix_s, server_metrics, cpu }, closed))
}

/// Whether the clients of `run` read transactions without writes at a snapshot (Luigi's
/// read-only path, DESIGN.md rule 23): the run's override, else the cluster file's switch
/// (off on a local cluster unless asked).
pub fn reads_at_snapshot(run: &RunSpec, file: Option<&ClusterConfig>) -> bool {
    match (run.read_only_path, file) {
        (Some(on), _) => on && run.protocol == Protocol::Luigi,
        (None, Some(file)) => file.read_only_path(),
        (None, None) => false,
    }
}

/// The cluster file of `run`, or that of the local cluster to start (its addresses are set
/// then), hosting `hosted`.
fn cluster_config(run: &RunSpec, hosted: Option<WorkloadSpec>) -> anyhow::Result<ClusterConfig> {
    Ok(match &run.cluster_file {
        Some(path) => {
            let mut config = ClusterConfig::load(path)?;
            anyhow::ensure!(
                config.protocol() == run.protocol,
                "the servers of {} run {}, not {} (its [protocol] kind)",
                path.display(),
                config.protocol(),
                run.protocol
            );
            if run.headroom_us.is_some() {
                config.protocol.headroom_us = run.headroom_us;
            }
            if run.adaptive_headroom.is_some() {
                config.protocol.adaptive_headroom = run.adaptive_headroom;
            }
            if run.read_only_path.is_some() {
                config.protocol.read_only_path = run.read_only_path;
            }
            config
        }
        None => {
            let mut config = ClusterConfig::local(run.shards, run.net, &vec![0; run.shards as usize]);
            config.protocol.headroom_us = run.headroom_us;
            config.protocol.adaptive_headroom = run.adaptive_headroom;
            config.set_protocol(run.protocol);
            // Written either way, so that the file says what ran.
            config.protocol.fast_path = Some(run.fast_path && run.protocol == Protocol::Luigi);
            config.protocol.read_only_path = Some(reads_at_snapshot(run, None));
            config.protocol.max_clock_offset_us = run.max_clock_offset_us;
            config.workload = hosted;
            for shard in &mut config.shards {
                shard.replicas = vec!["127.0.0.1:0".into(); run.replicas as usize];
            }
            if let Some(replica) = run.client_near {
                client_near(&mut config, replica);
            }
            config
        }
    })
}

/// Puts the client next to replica `replica` of every shard of `config`: a `[[links]]`
/// override with no delay from `client` to `s<shard>r<replica>` and back, every other link
/// left to the scenario (`luigi bench --client-near`). `client` stands for every client.
pub fn client_near(config: &mut ClusterConfig, replica: u32) {
    for shard in 0..config.shard_count() {
        let node = luigi_txn::types::NodeId { shard, replica }.name();
        for (from, to) in [(CLIENT_NODE.to_string(), node.clone()), (node, CLIENT_NODE.to_string())] {
            config.links.push(LinkConfig { from, to, mean_us: 0, jitter_us: 0 });
        }
    }
}

/// Arms the run's watchdog: every bound of the run (`grace` for the load, `closing` for
/// the closing step), plus a margin.
fn watchdog(run: &RunSpec, label: &str, grace: Duration, closing: Duration) -> Watchdog {
    let start_up = if run.cluster_file.is_some() { Duration::ZERO } else { READY_TIMEOUT };
    let bound = start_up + PROBE_DEADLINE + run.warmup + run.duration + grace + closing + WATCHDOG_MARGIN;
    Watchdog::arm(
        bound,
        format!(
            "the {label} run did not finish within {}s (start-up, first commits, warm-up {}s, duration {}s, grace {}s, \
             closing {}s): the cluster is stuck or unreachable; stopped",
            bound.as_secs(),
            run.warmup.as_secs_f64(),
            run.duration.as_secs_f64(),
            grace.as_secs(),
            closing.as_secs()
        ),
    )
}

/// Runs the load (with a progress bar if `run` asks for one), scrapes the servers
/// `scraped` at the start and the end of its measured interval (none: no scrape), and
/// reads the CPU time of this process and of the servers `pids` at both ends.
fn drive_load(
    run: &RunSpec,
    label: &str,
    connector: &ClusterConnector<'_>,
    opts: &LoadOptions,
    make: &(dyn Fn(u32) -> Box<dyn TxnGenerator> + Sync),
    scraped: &[server_metrics::Target],
    pids: &[u32],
) -> (anyhow::Result<LoadReport>, Option<ServerDeltas>, Option<CpuInterval>) {
    let progress = Arc::new(Progress::default());
    let bar = run.progress.then(|| progress_bar(run, label));
    let (report, deltas, cpu) = std::thread::scope(|scope| {
        let load = scope.spawn(|| run_load(connector, opts, make, &progress));
        let cpu = scope.spawn(|| cpu_interval(pids, opts.warmup, opts.duration));
        let scrapes =
            (!scraped.is_empty()).then(|| scope.spawn(|| scrape_interval(scraped, opts.warmup, opts.duration)));
        if let Some(bar) = &bar {
            watch(bar, &progress, &load, run.warmup + run.duration);
        }
        let report = load.join().unwrap_or_else(|_| Err(anyhow::anyhow!("load driver panicked")));
        // The load ends after its measured interval, so the CPU reader has read both ends
        // (unless the load failed early: its figures are not used then).
        let cpu = if report.is_ok() { cpu.join().ok() } else { None };
        (report, scrapes.and_then(|s| s.join().ok()), cpu)
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    (report, deltas, cpu)
}

/// The CPU time of this process and of the servers `pids` between the start of the measured
/// interval (after `warmup`) and its end (`duration` later), timed like [`scrape_interval`].
fn cpu_interval(pids: &[u32], warmup: Duration, duration: Duration) -> CpuInterval {
    let started = Instant::now();
    std::thread::sleep(warmup);
    let start = CpuSample::take(pids);
    std::thread::sleep((warmup + duration).saturating_sub(started.elapsed()));
    CpuInterval::between(&start, &CpuSample::take(pids))
}

/// Scrapes `targets` when the measured interval starts (after `warmup`) and when it ends
/// (`duration` later), and returns the differences.
fn scrape_interval(targets: &[server_metrics::Target], warmup: Duration, duration: Duration) -> ServerDeltas {
    let started = Instant::now();
    std::thread::sleep(warmup);
    let start = server_metrics::read(targets);
    // The interval is timed from the load's start: the first scrape's own time is not added.
    std::thread::sleep((warmup + duration).saturating_sub(started.elapsed()));
    ServerDeltas::between(&start, &server_metrics::read(targets))
}

/// The measured interval is a measurement: something committed, nothing left unknown.
fn check_measured(report: &LoadReport, config: &ClusterConfig) -> anyhow::Result<()> {
    let c = &report.counters;
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
        client_give_up(config).as_secs_f64(),
        c.committed
    );
    Ok(())
}

impl Measured {
    /// The report's fields every workload fills the same way; `params` are the workload's.
    pub fn result(&self, run: &RunSpec, workload: &str, params: BTreeMap<String, serde_json::Value>) -> BenchResult {
        let c = &self.report.counters;
        let measured_s = self.report.measured.as_secs_f64();
        let mut params = params;
        params.insert("headroom_us".into(), serde_json::json!(self.config.headroom_us()));
        params.insert("adaptive_headroom".into(), serde_json::json!(self.config.adaptive_headroom()));
        params.insert("cross_shard_committed".into(), serde_json::json!(c.cross_shard));
        params.insert("second_round_committed".into(), serde_json::json!(c.second_round));
        params.insert("fast_path_committed".into(), serde_json::json!(c.fast_path));
        params.insert("fast_path_asked_committed".into(), serde_json::json!(c.fast_path_asked));
        params.insert("fast_path".into(), serde_json::json!(self.config.fast_path()));
        params.insert("read_only_path".into(), serde_json::json!(self.config.read_only_path()));
        // Committed transactions read at a snapshot, and their share of the committed ones.
        params.insert("read_only_committed".into(), serde_json::json!(c.read_only));
        let read_only_share = if c.committed == 0 { 0.0 } else { c.read_only as f64 / c.committed as f64 };
        params.insert("read_only_share".into(), serde_json::json!(read_only_share));
        params.insert("client_near".into(), serde_json::json!(run.client_near));
        params.insert("max_clock_offset_us".into(), serde_json::json!(self.config.tuning().max_clock_offset_us));
        params.insert("ready_s".into(), serde_json::json!(self.ready.as_secs_f64()));
        params.insert("metrics".into(), serde_json::json!(if run.metrics { "on" } else { "off" }));
        if let Some(open) = &self.report.open_loop {
            // The open loop's figures: its target, and what its bound held back.
            params.insert("rate_tps".into(), serde_json::json!(open.rate_tps));
            params.insert("open_loop_bound".into(), serde_json::json!(run.in_flight));
            params.insert("open_loop_delayed".into(), serde_json::json!(open.delayed));
            params.insert("open_loop_unstarted".into(), serde_json::json!(open.unstarted));
        }
        let protocol = self.config.protocol();
        BenchResult {
            protocol: protocol.name().into(),
            transactional: protocol.is_transactional(),
            workload: workload.into(),
            shards: self.config.shard_count(),
            replicas: self.config.shards[0].replicas.len() as u32,
            threads: run.threads,
            in_flight: run.in_flight,
            net: self.config.net.clone(),
            durability: run.durability.into(),
            duration_s: measured_s,
            warmup_s: run.warmup.as_secs_f64(),
            committed: c.committed,
            rolled_back: c.rolled_back,
            aborted: c.aborted,
            timeout_resends: c.timeout_resends,
            resends: c.resends,
            resubmissions: c.resubmissions,
            protocol_aborts: c.protocol_aborts,
            rejected: c.rejected,
            unknown: c.unknown,
            warmup_rejected: self.report.warmup.rejected,
            warmup_unknown: self.report.warmup.unknown,
            throughput_tps: c.committed as f64 / measured_s,
            abort_rate: abort_rate(c.committed, c.aborted),
            latency_us: self.report.latency.summary(),
            cross_shard_committed: c.cross_shard,
            single_shard_latency_us: self.report.single_shard_latency.summary(),
            cross_shard_latency_us: self.report.cross_shard_latency.summary(),
            params,
            started_at_unix_s: self.started_at_unix_s,
            second_round_rate: if c.cross_shard == 0 { 0.0 } else { c.second_round as f64 / c.cross_shard as f64 },
            fast_path_rate: if c.committed == 0 { 0.0 } else { c.fast_path as f64 / c.committed as f64 },
            fast_path_asked_rate: if c.committed == 0 { 0.0 } else { c.fast_path_asked as f64 / c.committed as f64 },
            by_kind: self.by_kind(false),
            samples: self.report.samples.samples(),
            latency_percentiles: Some(self.report.latency.percentiles()),
            client_cpu_s: crate::cpu::own_cpu_s(),
            server_metrics: self.server_metrics.clone(),
            cpu: self.cpu,
        }
    }

    /// The figures per kind of business transaction, when there are several kinds (or
    /// `always`).
    pub fn by_kind(&self, always: bool) -> BTreeMap<String, KindResult> {
        if self.report.by_kind.len() < 2 && !always {
            return BTreeMap::new();
        }
        let measured_s = self.report.measured.as_secs_f64();
        let kind = |k: &KindReport| KindResult {
            committed: k.counters.committed,
            rolled_back: k.counters.rolled_back,
            aborted: k.counters.aborted,
            rejected: k.counters.rejected,
            unknown: k.counters.unknown,
            timeout_resends: k.counters.timeout_resends,
            resends: k.counters.resends,
            resubmissions: k.counters.resubmissions,
            protocol_aborts: k.counters.protocol_aborts,
            cross_shard: k.counters.cross_shard,
            throughput_tps: k.counters.committed as f64 / measured_s,
            latency_us: k.latency.summary(),
            latency_percentiles: Some(k.latency.percentiles()),
        };
        self.report.by_kind.iter().map(|(name, k)| (name.clone(), kind(k))).collect()
    }
}

/// Waits until every shard has a leader that commits: one read-only transaction per shard
/// must be answered (leaders of replicated shards are elected first). Without this, the
/// transactions sent while elections run would be counted with their election wait.
///
/// With `patient`, connecting is retried until [`PROBE_DEADLINE`] (servers just started,
/// populating a workload, answer after seconds); otherwise the client's own connect timeout
/// decides (an unreachable running cluster is reported at once).
fn wait_until_serving(connector: &dyn TxnConnector, shards: u32, patient: bool) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let probe = async {
        let started = Instant::now();
        let client = loop {
            match connector.connect(luigi_runtime::clock::now_us() << 8 | 0xff).await {
                Ok(client) => break client,
                Err(e) if patient && started.elapsed() + Duration::from_secs(10) < PROBE_DEADLINE => {
                    tracing::debug!("the cluster does not answer yet: {e:#}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        };
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

fn progress_bar(run: &RunSpec, label: &str) -> ProgressBar {
    let total = (run.warmup + run.duration).as_secs().max(1);
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>28} [{bar:30}] {pos}/{len}s {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(format!("{} {label} {}sh {}t {}", run.protocol, run.shards, run.threads, run.net));
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

#[cfg(test)]
mod tests;
