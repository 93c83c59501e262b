//! `luigi bench ycsb`: its options and its command.

use clap::Args;
use luigi_bench::options::Target;
use luigi_bench::report::{render_cpu, render_kinds, render_latency_split, render_table};
use luigi_bench::workload::ycsb::YcsbOptions;
use luigi_bench::ycsb::{run_ycsb, YcsbRun};
use luigi_workloads::ycsb::{CoreWorkload, Distribution};

use super::help::MICRO_HELP;
use super::{bench_runs, RunArgs};

/// `luigi bench ycsb` options: see also `YcsbOptions::validate` in luigi-bench.
#[derive(Args)]
#[command(after_help = MICRO_HELP)]
pub struct YcsbArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Workload: a (50 % read, 50 % update), b (95/5), c (read only), d (95 % read latest, 5 %
    /// insert), e (95 % scan, 5 % insert), f (50 % read, 50 % read-modify-write), k2-95-5 and
    /// k2-50-50 (seed 003's read/update mixes).
    #[arg(long, default_value = "a")]
    workload: CoreWorkload,
    /// Request distribution: uniform, zipfian (scrambled, constant 0.99) or latest [default:
    /// the workload's: latest for d, zipfian for the others].
    #[arg(long)]
    dist: Option<Distribution>,
    /// Records loaded into the usertable, 1 to 10000000 [default: 1000, as YCSB's workload
    /// files]. Not with --cluster (the file's [workload] decides).
    #[arg(long)]
    records: Option<u64>,
    /// Fields per record [default: 10]. Not with --cluster.
    #[arg(long)]
    field_count: Option<u32>,
    /// Bytes per field [default: 100]. Not with --cluster.
    #[arg(long)]
    field_length: Option<u32>,
    /// Operations per transaction, all of the type drawn from the mix, on distinct records,
    /// 1 to 1000.
    #[arg(long, default_value_t = 1)]
    ops_per_txn: u32,
    /// Longest scan (a scan's length is uniform from 1 to it), 1 to 10000.
    #[arg(long, default_value_t = 100)]
    max_scan_length: u32,
}

/// Runs `luigi bench ycsb`.
pub fn ycsb(args: YcsbArgs) -> anyhow::Result<()> {
    let ycsb = YcsbOptions {
        workload: args.workload,
        dist: args.dist,
        records: args.records,
        field_count: args.field_count,
        field_length: args.field_length,
        ops_per_txn: args.ops_per_txn,
        max_scan_length: args.max_scan_length,
    };
    // Everything is checked before the first run starts anything.
    let options = args.run.options(&ycsb.label());
    let plan = options.validate()?;
    match &plan.target {
        Target::Local { shards, .. } => ycsb.validate(Some(*shards), None)?,
        Target::File { config, .. } => ycsb.validate(None, Some(config.as_ref()))?,
    };
    let results = bench_runs(&plan, !args.run.no_progress, |run| run_ycsb(&YcsbRun { run, ycsb: ycsb.clone() }))?;
    println!("{}", render_table(&results));
    println!("{}", render_latency_split(&results));
    print!("{}", render_cpu(&results));
    for r in &results {
        println!("{}", render_kinds(r));
    }
    println!("results written to {}", plan.json.display());
    Ok(())
}
