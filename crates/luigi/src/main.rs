//! The `luigi` command: run a server node, run a benchmark against a local cluster of server
//! processes (started from this same binary) or an existing one, look at a running cluster
//! (`status`), or read and write it (`get`, `put`, `scan`, `txn`).

mod help;
mod kv;
mod server;
mod status;
mod suite;
mod top;
mod ycsb;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use luigi_bench::micro::{run_micro, MicroRun};
use luigi_bench::options::{BenchOptions, BenchPlan, Target};
use luigi_bench::report::{
    protocol_label, read_json, render_cpu, render_kinds, render_latency_split, render_latency_split_markdown,
    render_side_by_side, render_table, write_json, BenchResult,
};
use luigi_bench::run::RunSpec;
use luigi_bench::tpcc::{check_cluster, conditions_skipped, render_conditions, run_tpcc, TpccOptions, TpccRun};
use luigi_bench::workload::micro::MicroOptions;
use luigi_runtime::config::ClusterConfig;
use luigi_wan::Scenario;

use help::{MICRO_HELP, TPCC_HELP};

/// mimalloc instead of the system allocator: transactions are decoded on connection threads and
/// freed on the event-loop thread, a pattern glibc's arenas handle poorly (it was about a third
/// of the server's time in profiles).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "luigi", version, about = "Luigi: geo-distributed transactional key-value store")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one server node of a cluster.
    Server(server::ServerArgs),
    /// Run a benchmark.
    #[command(subcommand)]
    Bench(Bench),
    /// Check a running cluster's data against a workload's consistency conditions.
    #[command(subcommand)]
    Check(Check),
    /// Show every replica of a running cluster and whether every shard has a leader.
    ///
    /// One line per replica: up or down, role, term, log indexes, watermark, queue and stuck
    /// transactions.
    #[command(after_help = status::STATUS_HELP)]
    Status(status::StatusArgs),
    /// A live view of a running cluster from its servers' metrics, refreshed every second.
    ///
    /// Per shard: leader, term, commits/s, commit latency, log sync time, hold queue,
    /// watermark lag, fast-path accepts per commit; per replica: role, clock offsets, or why it
    /// is down.
    #[command(after_help = top::TOP_HELP)]
    Top(top::TopArgs),
    /// Read one key (prints its value).
    #[command(after_help = kv::EXIT_HELP)]
    Get(kv::GetArgs),
    /// Write one key.
    #[command(after_help = kv::EXIT_HELP)]
    Put(kv::PutArgs),
    /// List the keys starting with a prefix, from every shard (`key<TAB>value` lines).
    ///
    /// One transaction over every shard: the entries are a consistent snapshot.
    #[command(after_help = kv::EXIT_HELP)]
    Scan(kv::ScanArgs),
    /// Run reads and writes as one atomic transaction (possibly across shards).
    ///
    /// The operations run in the order given, e.g. `luigi txn --put k1=v1 --put k2=v2 --get k3
    /// --cluster c.toml`; a --get after a --put of the same key reads the new value.
    #[command(after_help = kv::EXIT_HELP)]
    Txn(kv::TxnArgs),
    /// Re-render a `luigi bench suite` results directory (REPORT.md, points.csv, plots) from
    /// its records, or compare two (`--compare A B`).
    Report(suite::ReportArgs),
}

/// `--fast-path` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

/// `--durability` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DurabilityArg {
    Fsync,
    None,
}

impl DurabilityArg {
    pub(crate) fn wal(self) -> luigi_wal::Durability {
        match self {
            DurabilityArg::Fsync => luigi_wal::Durability::Fsync,
            DurabilityArg::None => luigi_wal::Durability::None,
        }
    }
}

#[derive(Subcommand)]
enum Bench {
    /// Micro benchmark: read/write transactions over a uniform (or Zipfian) key space.
    Micro(MicroArgs),
    /// TPC-C: the five transactions over warehouses partitioned by shard, then the twelve
    /// consistency conditions on the final state. The seeds' closed-loop client model (no
    /// keying or think times), not an audited tpmC.
    Tpcc(TpccArgs),
    /// YCSB: the core workloads A-F over a usertable, and the K2 mixes (k2-95-5, k2-50-50)
    /// of seed 003, reported per operation type and overall.
    Ycsb(ycsb::YcsbArgs),
    /// Renders results files (JSON, as `micro` and `tpcc` write them) side by side: one row
    /// per workload, shape, network and thread count, one column per protocol (tx/s / avg ms,
    /// aborts and retries).
    Compare(CompareArgs),
    /// Every experiment (the seeds' matrix for every protocol, the cross-shard study, seed
    /// 004, the scale study, commit latency, YCSB) into one results directory with REPORT.md,
    /// points.csv and plots; each point is a `luigi bench` subprocess. Exit 1 if a point failed.
    Suite(suite::SuiteArgs),
}

/// `luigi bench compare` options.
#[derive(Args)]
struct CompareArgs {
    /// Results files (JSON arrays written by `luigi bench micro|tpcc|ycsb --json`).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print the single- versus cross-shard latency split of every run instead (avg, p50,
    /// p99 of each, protocol aborts, aborts, retries).
    #[arg(long)]
    split: bool,
}

/// The options of every `luigi bench` command: the cluster, the client threads, the timing,
/// the results file. Every value is checked before anything starts (no server, no
/// directory): see `BenchOptions::validate` in luigi-bench.
#[derive(Args)]
struct RunArgs {
    /// Shards in the local cluster, 1 to 64 [default: 1]. Not with --cluster.
    #[arg(long)]
    shards: Option<u32>,
    /// Replicas per shard of the local cluster, 1 to 7 [default: 1]. Not with --cluster.
    #[arg(long)]
    replicas: Option<u32>,
    /// Client threads, 1 to 1024; a comma-separated list runs each in turn (e.g. 1,2,4,8).
    #[arg(long, default_value = "1", value_delimiter = ',')]
    threads: Vec<u32>,
    /// Transactions each thread keeps outstanding, 1 to 100000 (and at most 1000000 over all
    /// threads): each holds client memory until answered, and past the cluster's capacity more
    /// only queue up.
    #[arg(long, default_value_t = 200)]
    in_flight: u32,
    /// Network scenario(s) of the local cluster: none, same-region, same-continent,
    /// cross-continent, geo [default: same-region]. Not with --cluster.
    #[arg(long, value_delimiter = ',')]
    net: Option<Vec<Scenario>>,
    /// Measured seconds, 0.1 to 86400 (a day).
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true)]
    duration: f64,
    /// Warm-up seconds (not counted), 0 to 86400 (a day).
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    warmup: f64,
    /// Coordinator headroom in µs, at most 60000000 (60 s) (default: per scenario). Also with
    /// --cluster: it overrides the cluster file's, for this client only (the headroom is
    /// applied by the client's coordinator; the servers do not use it).
    #[arg(long)]
    headroom_us: Option<u64>,
    /// The headroom follows the measured lateness per shard, from the configured headroom
    /// up, and single-shard transactions without the fast path are not held (`[protocol]
    /// adaptive_headroom`; DESIGN.md rule 1) [default: on, or the cluster file's]. Also with
    /// --cluster: for this client only. `off`: every transaction gets the fixed headroom.
    #[arg(long, value_name = "on|off")]
    adaptive_headroom: Option<OnOff>,
    /// Results file (JSON array, one object per run); checked writable before the first run
    /// [default: results/<workload>.json].
    #[arg(long)]
    json: Option<PathBuf>,
    /// Use the servers of this cluster file instead of starting a local cluster: the file
    /// and its servers decide the shards, replicas, network scenario and durability, so
    /// --shards, --replicas, --net and --durability are refused with it.
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Log durability of the servers started (every shard logs through Raft, one replica or
    /// more) [default: fsync]. Not with --cluster.
    #[arg(long)]
    durability: Option<DurabilityArg>,
    /// Do not draw a progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Open loop: start this many transactions per second over all threads on a fixed schedule,
    /// latency counted from each one's intended start; --in-flight is then each thread's bound
    /// (starts it delays and those never started are counted) [default: closed loop].
    #[arg(long, value_name = "TX_PER_S", allow_negative_numbers = true)]
    rate: Option<f64>,
    /// Transaction protocol: luigi, occ (optimistic concurrency control with two-phase
    /// commit), 2pl (two-phase locking, no-wait, with two-phase commit) or direct (no
    /// transaction: each shard runs its piece at once; a lower bound, not transactional)
    /// [default: luigi]. A comma-separated list runs each in turn for every network and thread
    /// count, side by side (e.g. luigi,occ,2pl,direct). Written into the local cluster's
    /// file; with --cluster the file's [protocol] kind decides, and --protocol may only
    /// repeat it.
    #[arg(long)]
    protocol: Option<String>,
    /// Luigi's fast path in the local cluster's file (`[protocol] fast_path`; DESIGN.md "The
    /// fast path") [default: on for Luigi's runs, on shards of 3 replicas or more]. `off`
    /// measures rule 14's path alone. Not with --cluster (the file decides).
    #[arg(long, value_name = "on|off")]
    fast_path: Option<OnOff>,
    /// The servers' Prometheus metrics (docs/METRICS.md): a local cluster's servers serve
    /// them, and the run scrapes every server at the start and the end of its measured
    /// interval and records the differences in its result [default: on]. `off` measures
    /// what serving them costs.
    #[arg(long, value_name = "on|off")]
    metrics: Option<OnOff>,
    /// Luigi's read-only path (`[protocol] read_only_path`; DESIGN.md rule 23): read-only
    /// transactions read a snapshot at a replica of each shard, and the servers keep versions
    /// for them [default: off, or the cluster file's]. Written into the local cluster's file;
    /// `on` is Luigi's only. With --cluster, `off` is for this client only.
    #[arg(long, value_name = "on|off")]
    read_only_path: Option<OnOff>,
    /// The clock bound, µs (`[protocol] max_clock_offset_us`; DESIGN.md rule 22), at most
    /// 60000000: a snapshot read (rule 23) waits about this long [default: 500000]. Written
    /// into the local cluster's file; not with --cluster.
    #[arg(long)]
    max_clock_offset_us: Option<u64>,
    /// Put the client next to this replica of every shard (0 is the first, the initial
    /// leader): no delay between the client and it, both ways, while every other link keeps
    /// the scenario's (`[[links]]` in the local cluster's file) [default: none]. Not with
    /// --cluster (write the links into its file).
    #[arg(long, value_name = "REPLICA_INDEX")]
    client_near: Option<u32>,
}

/// `luigi bench micro` options: see also `MicroOptions::validate` in luigi-bench.
#[derive(Args)]
#[command(after_help = MICRO_HELP)]
struct MicroArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Key space size, from twice --ops to 2^53.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Operations per transaction, 1 to 1000.
    #[arg(long, default_value_t = 10)]
    ops: u32,
    /// Share of operations that are reads, 0 to 1.
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    read_ratio: f64,
    /// Percentage of transactions touching every shard (with several shards), 0 to 100.
    #[arg(long, default_value_t = 100)]
    cross_shard: u32,
    /// Zipfian skew of key choice, a finite exponent from 0 (uniform) to 3 (e.g. 0.99);
    /// uniform when absent. Past 3 nearly every draw is one of the hottest few keys and a
    /// transaction cannot find its distinct keys.
    #[arg(long, allow_negative_numbers = true)]
    zipf: Option<f64>,
}

/// `luigi bench tpcc` options (docs/TPCC.md).
#[derive(Args)]
#[command(after_help = TPCC_HELP)]
struct TpccArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Warehouses of the local cluster, warehouse w on shard (w - 1) % shards, at least one
    /// per shard [default: one per shard, as in the seeds]. Not with --cluster (the file's
    /// [workload] decides).
    #[arg(long)]
    warehouses: Option<u32>,
    /// Shrinks items, customers and orders per district (1 = the spec's 100 000 items, 3 000
    /// customers and orders per district) [default: 1]. Not with --cluster.
    #[arg(long, allow_negative_numbers = true)]
    scale: Option<f64>,
    /// Percentage of NewOrder lines supplied by another warehouse (spec: 1).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    remote_item_pct: f64,
    /// Percentage of Payments for a customer of another warehouse (spec: 15).
    #[arg(long, default_value_t = 15.0, allow_negative_numbers = true)]
    remote_payment_pct: f64,
    /// Transaction mix: standard (45 % NewOrder, 43 % Payment, 4 % each of OrderStatus,
    /// Delivery, StockLevel), new-order (NewOrder only) or read-mostly (40 % each of
    /// OrderStatus and StockLevel, the read-only ones; 10 % NewOrder, 9 % Payment, 1 %
    /// Delivery).
    #[arg(long, default_value = "standard")]
    mix: String,
}

/// `luigi check` subcommands.
#[derive(Subcommand)]
enum Check {
    /// Check TPC-C's twelve consistency conditions (clause 3.3.2) on a running cluster that
    /// hosts TPC-C (its file has a [workload] table with kind = "tpcc"), through one read-only
    /// transaction over every shard. Exit 1 if a condition fails.
    Tpcc(CheckTpccArgs),
}

#[derive(Args)]
struct CheckTpccArgs {
    /// Cluster file (TOML).
    #[arg(long)]
    cluster: PathBuf,
}

fn main() -> ExitCode {
    // First, before anything hashes: this process's tables are keyed by a random seed.
    luigi_txn::keyhash::seed_randomly();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The client commands print results, not logs (RUST_LOG still turns them on).
    let quiet = !matches!(cli.command, Command::Server(_) | Command::Bench(_));
    let default_filter = if quiet { "error" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into());
    // Colours only on a terminal: logs written to files stay greppable.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
    let result = match cli.command {
        Command::Server(args) => server::server(args).map(|()| ExitCode::SUCCESS),
        Command::Bench(Bench::Micro(args)) => micro(args).map(|()| ExitCode::SUCCESS),
        Command::Bench(Bench::Tpcc(args)) => tpcc(args),
        Command::Bench(Bench::Ycsb(args)) => ycsb::ycsb(args).map(|()| ExitCode::SUCCESS),
        Command::Bench(Bench::Compare(args)) => compare(args).map(|()| ExitCode::SUCCESS),
        Command::Bench(Bench::Suite(args)) => suite::suite(args),
        Command::Report(args) => suite::report(args),
        Command::Check(command) => check(command),
        Command::Status(args) => status::status(args),
        Command::Top(args) => top::top(args),
        Command::Get(args) => kv::get(args),
        Command::Put(args) => kv::put(args),
        Command::Scan(args) => kv::scan(args),
        Command::Txn(args) => {
            let txn = matches.subcommand_matches("txn").expect("the txn sub-command was parsed");
            kv::txn(args, txn)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("luigi: error: {e:#}");
            if e.is::<kv::OutcomeUnknown>() {
                ExitCode::from(kv::EXIT_UNKNOWN)
            } else if quiet {
                ExitCode::from(kv::EXIT_ERROR) // `get` uses 1 for "not found"
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

impl RunArgs {
    /// The shared options, for `workload`'s default results file.
    fn options(&self, workload: &str) -> BenchOptions {
        BenchOptions {
            shards: self.shards,
            replicas: self.replicas,
            net: self.net.clone(),
            durability: self.durability.map(|d| match d {
                DurabilityArg::Fsync => "fsync",
                DurabilityArg::None => "none",
            }),
            threads: self.threads.clone(),
            in_flight: self.in_flight,
            duration_s: self.duration,
            warmup_s: self.warmup,
            headroom_us: self.headroom_us,
            adaptive_headroom: self.adaptive_headroom.map(|a| a == OnOff::On),
            json: self.json.clone().unwrap_or_else(|| PathBuf::from(format!("results/{workload}.json"))),
            cluster: self.cluster.clone(),
            protocol: self.protocol.clone(),
            fast_path: self.fast_path.map(|f| f == OnOff::On),
            rate: self.rate,
            metrics: self.metrics.map(|m| m == OnOff::On),
            read_only_path: self.read_only_path.map(|r| r == OnOff::On),
            max_clock_offset_us: self.max_clock_offset_us,
            client_near: self.client_near,
        }
    }
}

/// One run per network scenario and thread count of `plan`, each made by `run_one`, its
/// result printed and appended to the results file as it comes.
fn bench_runs(
    plan: &BenchPlan,
    progress: bool,
    mut run_one: impl FnMut(RunSpec) -> anyhow::Result<BenchResult>,
) -> anyhow::Result<Vec<BenchResult>> {
    let exe = std::env::current_exe().context("cannot locate the luigi binary")?;
    let (nets, replicas, durability, fast_path, client_near, cluster_file) = match &plan.target {
        Target::Local { replicas, nets, durability, fast_path, client_near, .. } => {
            (nets.clone(), *replicas, *durability, *fast_path, *client_near, None)
        }
        // The servers' durability is their own --durability, which the client cannot see.
        Target::File { path, config } => {
            let replicas = config.shards[0].replicas.len() as u32;
            (vec![config.scenario()], replicas, "unknown", config.fast_path(), None, Some(path.clone()))
        }
    };
    let mut results: Vec<BenchResult> = Vec::new();
    for &net in &nets {
        for (&threads, &protocol) in plan.threads.iter().flat_map(|t| plan.protocols.iter().map(move |p| (t, p))) {
            let run = RunSpec {
                shards: plan.shards(),
                replicas,
                threads,
                in_flight: plan.in_flight,
                net,
                duration: plan.duration,
                warmup: plan.warmup,
                headroom_us: plan.headroom_us,
                adaptive_headroom: plan.adaptive_headroom,
                read_only_path: plan.read_only_path,
                max_clock_offset_us: plan.max_clock_offset_us,
                client_near,
                cluster_file: cluster_file.clone(),
                protocol,
                durability,
                fast_path,
                exe: exe.clone(),
                progress,
                rate_tps: plan.rate_tps,
                metrics: plan.metrics,
            };
            let result = run_one(run)?;
            eprintln!(
                "{}: {} shard(s) x {} replica(s), {} thread(s), {}: {:.0} tx/s, avg {:.2} ms, p99 {:.2} ms",
                protocol_label(&result),
                result.shards,
                result.replicas,
                result.threads,
                result.net,
                result.throughput_tps,
                result.latency_us.avg / 1000.0,
                result.latency_us.p99 as f64 / 1000.0
            );
            if let Some(line) = luigi_bench::open_loop::summary_line(&result) {
                eprintln!("  {line}");
            }
            results.push(result);
            write_json(&plan.json, &results)?;
        }
    }
    Ok(results)
}

fn compare(args: CompareArgs) -> anyhow::Result<()> {
    let mut results = Vec::new();
    for file in &args.files {
        results.extend(read_json(file)?);
    }
    anyhow::ensure!(
        !results.is_empty(),
        "no results in {}",
        args.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    if args.split {
        print!("{}", render_latency_split_markdown(&results));
    } else {
        print!("{}", render_side_by_side(&results));
    }
    Ok(())
}

fn micro(args: MicroArgs) -> anyhow::Result<()> {
    // Everything is checked before the first run starts anything.
    let options = args.run.options("micro");
    let workload = MicroOptions {
        keys: args.keys,
        ops: args.ops,
        read_ratio: args.read_ratio,
        cross_shard_pct: args.cross_shard,
        zipf: args.zipf,
    };
    let plan = options.validate()?;
    workload.validate(plan.shards())?;
    let results =
        bench_runs(&plan, !args.run.no_progress, |run| run_micro(&MicroRun { run, micro: workload.clone() }))?;
    println!("{}", render_table(&results));
    println!("{}", render_latency_split(&results));
    print!("{}", render_cpu(&results));
    println!("results written to {}", plan.json.display());
    Ok(())
}

fn tpcc(args: TpccArgs) -> anyhow::Result<ExitCode> {
    // Everything is checked before the first run starts anything.
    let options = args.run.options("tpcc");
    let mix = args.mix.parse().map_err(|e| anyhow::anyhow!("invalid --mix {}: {e}", args.mix))?;
    let tpcc = TpccOptions {
        warehouses: args.warehouses,
        scale: args.scale,
        remote_item_pct: args.remote_item_pct,
        remote_payment_pct: args.remote_payment_pct,
        mix,
    };
    let plan = options.validate()?;
    match &plan.target {
        Target::Local { shards, .. } => tpcc.validate(Some(*shards), None)?,
        Target::File { config, .. } => tpcc.validate(None, Some(config.as_ref()))?,
    };
    let mut failed = Vec::new();
    let results = bench_runs(&plan, !args.run.no_progress, |run| {
        let run_protocol = run.protocol;
        let (result, conditions) = run_tpcc(&TpccRun { run, tpcc: tpcc.clone() })?;
        let Some(conditions) = conditions else {
            eprintln!("{}", conditions_skipped(run_protocol).unwrap_or_default());
            return Ok(result);
        };
        eprint!("{}", render_conditions(&conditions));
        if conditions.iter().any(|c| !c.passed) {
            failed.push(format!(
                "{} shard(s) x {} replica(s), {} thread(s), {}",
                result.shards, result.replicas, result.threads, result.net
            ));
        }
        Ok(result)
    })?;
    println!("{}", render_table(&results));
    println!("{}", render_latency_split(&results));
    print!("{}", render_cpu(&results));
    for r in &results {
        println!("{}", render_kinds(r));
        let figure = |name: &str| r.params.get(name).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
        println!(
            "tpmC (committed NewOrders per minute, closed loop, not audited): {:.0}; cross-shard: {:.1} % of committed\n",
            figure("tpmc"),
            100.0 * figure("cross_shard_share")
        );
    }
    println!("results written to {}", plan.json.display());
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("TPC-C consistency conditions FAILED in: {}", failed.join("; "));
        Ok(ExitCode::FAILURE)
    }
}

fn check(command: Check) -> anyhow::Result<ExitCode> {
    match command {
        Check::Tpcc(args) => {
            let config = ClusterConfig::load(&args.cluster)?;
            let (conditions, seconds) = check_cluster(&config)?;
            print!("{}", render_conditions(&conditions));
            let failed = conditions.iter().filter(|c| !c.passed).count();
            println!("{} of {} conditions hold (read in {seconds:.1} s)", conditions.len() - failed, conditions.len());
            Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
    }
}
