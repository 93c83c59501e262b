//! `REPORT.md` of a results directory, rendered from its records alone (so `luigi report DIR`
//! re-renders it without running anything): the header (command, commit, machine, wall
//! time), failed points, the resends, resubmissions and failed answers of the points that had
//! any, the precision of repeated cells, the seeds' layouts (rows threads,
//! columns networks, cells `tx/s / avg ms`) per workload, shape and protocol, a ratio table
//! per protocol pair, the cross-shard table, the ratios against seed 000's published tables,
//! seed 004's table, the scale study, commit
//! latency in one-way delays and YCSB (with seed 003's K2 layout). A cell shows its first run (repeats feed the precision
//! section); a failed point shows as FAILED, never as an older figure.

use std::fmt::Write as _;

use crate::report::format_thousands;
use crate::suite::matrix::{
    remote_items_knob, seed_threads, Study, P99_MIN_COMMITTED, PROTOCOLS, REMOTE_ITEM_PCTS, SEED_NETS, SEED_SHAPES,
    YCSB_NETS, YCSB_VARIANTS,
};
use crate::suite::results::{PointRecord, SuiteDir};
use crate::suite::runner::format_duration;

/// One-way delay of the geo scenario (150 ms mean), the latency study's unit D.
pub const GEO_ONE_WAY_MS: f64 = 150.0;
/// The protocol pairs of the ratio tables.
pub const RATIO_PAIRS: [(&str, &str); 3] = [("luigi", "occ"), ("luigi", "2pl"), ("luigi", "direct")];

/// The whole report.
pub fn render(dir: &SuiteDir) -> String {
    let mut out = header(dir);
    out.push_str(&failed_section(dir));
    out.push_str(&counts_section(dir));
    out.push_str(&precision_section(dir));
    for (study, workload) in [(Study::SeedsMicro, "micro"), (Study::SeedsTpcc, "tpcc")] {
        if dir.points.iter().any(|r| r.point.study == study) {
            out.push_str(&seeds_section(dir, study, workload));
            out.push_str(&ratio_section(dir, study, workload));
        }
    }
    out.push_str(&cross_shard_section(dir));
    out.push_str(&against_seeds::section(dir));
    out.push_str(&seed004_section(dir));
    out.push_str(&scale_section(dir));
    out.push_str(&latency_section(dir));
    out.push_str(&ycsb_section(dir));
    out
}

/// `tx/s / avg ms`, FAILED, or `-` (not run).
fn tps_ms(r: Option<&PointRecord>) -> String {
    match r {
        None => "-".into(),
        Some(r) => match (r.tps(), r.avg_ms()) {
            (Some(tps), Some(ms)) => format!("{} / {ms:.1}", format_thousands(tps.round() as u64)),
            _ => "FAILED".into(),
        },
    }
}

/// A markdown table: `head` columns, then `rows`.
fn table(head: &[String], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n|", head.join(" | "));
    out.push_str(&"---|".repeat(head.len()));
    out.push('\n');
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
    out
}

fn header(dir: &SuiteDir) -> String {
    let i = &dir.info;
    let wall = i.wall_s();
    let ok = dir.points.iter().filter(|r| r.ok).count();
    let mut out = String::from("# Luigi benchmark suite report\n\n");
    let _ = writeln!(out, "- command: `{}`", i.command.join(" "));
    let _ = writeln!(out, "- git commit: `{}`", i.git_commit);
    let _ = writeln!(
        out,
        "- machine: {} cores, {:.1} GiB, {}",
        i.machine.cores,
        i.machine.memory_bytes as f64 / f64::from(1u32 << 30),
        i.machine.cpu_model
    );
    let _ = writeln!(
        out,
        "- wall time: {} (estimated {}); points: {} recorded, {ok} succeeded, {} failed",
        format_duration(wall as f64),
        format_duration(i.estimate_s),
        dir.points.len(),
        dir.points.len() - ok
    );
    out.push_str(
        "\nCells are `tx/s / avg ms` of committed transactions in the measured interval, each the first run of \
         its cell (repeats: see Precision). `direct` is not transactional (a lower bound). CPU per commit in \
         points.csv counts the whole process tree (start-up included): an upper bound; its client and servers \
         columns split it.\n\n",
    );
    out
}

fn failed_section(dir: &SuiteDir) -> String {
    let failed: Vec<&PointRecord> = dir.points.iter().filter(|r| !r.ok).collect();
    let mut out = String::from("## Failed points\n\n");
    if failed.is_empty() {
        out.push_str("None.\n\n");
        return out;
    }
    let rows: Vec<Vec<String>> = failed
        .iter()
        .map(|r| {
            let why = r.error.clone().unwrap_or_default().replace('|', "\\|");
            vec![format!("`{}`", r.point.id), r.exit_code.map_or("signal".into(), |c| c.to_string()), why]
        })
        .collect();
    out.push_str(&table(&["point".into(), "exit".into(), "why".into()], &rows));
    out
}

/// The points (succeeded) that resent, resubmitted, or had refused or unknown answers: one
/// row each, so that the seeds' tables keep their width.
fn counts_section(dir: &SuiteDir) -> String {
    let mut out = String::from("## Resends, resubmissions and failed answers\n\n");
    out.push_str(
        "Per point, measured interval: protocol aborts (a baseline's lock conflict or failed validation); \
         resubmissions of those as new transactions; resends of the same transaction after a retry timeout, \
         and after a \"not the leader\" or \"busy\" answer or a lost link; refused and unknown answers, \
         with the warm-up's apart. Points with all of these 0 are not listed. Per second: \
         `points/<id>.samples.csv`; latency percentiles: `points/<id>.hgrm`.\n\n",
    );
    let rows: Vec<Vec<String>> = dir
        .points
        .iter()
        .filter_map(|r| r.measured().map(|b| (r, b)))
        .filter_map(|(r, b)| {
            let counts = [
                b.protocol_aborts,
                b.resubmissions,
                b.timeout_resends,
                b.resends,
                b.rejected,
                b.unknown,
                b.warmup_rejected,
                b.warmup_unknown,
            ];
            counts.iter().any(|&n| n > 0).then(|| {
                let cells = counts.iter().map(|&n| format_thousands(n));
                std::iter::once(format!("`{}`", r.point.id)).chain(cells).collect()
            })
        })
        .collect();
    if rows.is_empty() {
        out.push_str("None.\n\n");
        return out;
    }
    let head = [
        "point",
        "protocol aborts",
        "resubmits",
        "timeout resends",
        "resends",
        "rejected",
        "unknown",
        "warm-up rejected",
        "warm-up unknown",
    ];
    out.push_str(&table(&head.map(String::from), &rows));
    out
}

/// Mean and spread ((max - min) / mean) of `values`.
fn spread(values: &[f64]) -> (f64, f64) {
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    let max = values.iter().copied().fold(f64::MIN, f64::max);
    let min = values.iter().copied().fold(f64::MAX, f64::min);
    (mean, if mean > 0.0 { (max - min) / mean } else { 0.0 })
}

fn precision_section(dir: &SuiteDir) -> String {
    let mut cells: Vec<&str> = dir.points.iter().filter(|r| r.point.repeat > 1).map(|r| r.point.cell_id()).collect();
    cells.dedup();
    let mut out = String::from("## Precision: repeated cells\n\n");
    if cells.is_empty() {
        out.push_str("No cell was repeated in this run.\n\n");
        return out;
    }
    out.push_str(
        "Each repeated cell ran several times, each on a fresh cluster; the spread is (max - min) / mean over its \
         successful runs. Read every figure of the same kind of cell as that precise, no more.\n\n",
    );
    let mut rows = Vec::new();
    let mut spreads = Vec::new();
    for cell in cells {
        let runs: Vec<&PointRecord> = dir.points.iter().filter(|r| r.point.cell_id() == cell).collect();
        let tps: Vec<f64> = runs.iter().filter_map(|r| r.tps()).collect();
        let ms: Vec<f64> = runs.iter().filter_map(|r| r.avg_ms()).collect();
        let ((t_mean, t_spread), (m_mean, m_spread)) = (spread(&tps), spread(&ms));
        spreads.push(t_spread);
        rows.push(vec![
            format!("`{cell}`"),
            format!("{}/{}", tps.len(), runs.len()),
            format_thousands(t_mean.round() as u64),
            format!("{:.1} %", 100.0 * t_spread),
            format!("{m_mean:.1}"),
            format!("{:.1} %", 100.0 * m_spread),
        ]);
    }
    let head = ["cell", "ok/runs", "mean tx/s", "tx/s spread", "mean avg ms", "avg ms spread"];
    out.push_str(&table(&head.map(String::from), &rows));
    spreads.sort_by(f64::total_cmp);
    let median = spreads[spreads.len() / 2];
    let _ = writeln!(out, "Median throughput spread over the repeated cells: {:.1} %.\n", 100.0 * median);
    out
}

/// The seeds' layout for one workload: per shape and protocol, rows threads, columns nets.
fn seeds_section(dir: &SuiteDir, study: Study, workload: &str) -> String {
    let mut out = format!("## {workload}: the seeds' layout (rows threads, columns networks, `tx/s / avg ms`)\n\n");
    let mut head = vec!["threads".to_string()];
    head.extend(SEED_NETS.iter().map(|n| n.to_string()));
    for shape in SEED_SHAPES {
        let (shards, replicas) = (shape.shards, shape.replicas);
        for protocol in PROTOCOLS {
            let at = |threads: u32, net: &str| dir.seeds_cell(study, shape, protocol, threads, net);
            if seed_threads(study).iter().all(|&t| SEED_NETS.iter().all(|n| at(t, n).is_none())) {
                continue;
            }
            let _ = writeln!(out, "### {workload}, {shards} shard(s) x {replicas} replica(s), {protocol}\n");
            let rows: Vec<Vec<String>> = seed_threads(study)
                .iter()
                .map(|&t| {
                    let mut row = vec![t.to_string()];
                    row.extend(SEED_NETS.iter().map(|n| tps_ms(at(t, n))));
                    row
                })
                .collect();
            out.push_str(&table(&head, &rows));
        }
    }
    out
}

/// `a / b` of throughput and of average latency, per cell of the seeds' layout.
fn ratio_section(dir: &SuiteDir, study: Study, workload: &str) -> String {
    let mut out = format!(
        "## {workload}: ratios per protocol pair (throughput ratio, average-latency ratio; > 1x: the first has \
         more)\n\n"
    );
    let mut head = vec!["shape".to_string(), "threads".to_string()];
    head.extend(SEED_NETS.iter().map(|n| n.to_string()));
    for (a, b) in RATIO_PAIRS {
        let mut rows = Vec::new();
        for shape in SEED_SHAPES {
            let (shards, replicas) = (shape.shards, shape.replicas);
            for &threads in seed_threads(study) {
                let at = |protocol: &str, net: &str| dir.seeds_cell(study, shape, protocol, threads, net);
                let cells: Vec<String> = SEED_NETS.iter().map(|n| ratio(at(a, n), at(b, n))).collect();
                if cells.iter().all(|c| c == "-") {
                    continue;
                }
                let mut row = vec![format!("{shards}x{replicas}"), threads.to_string()];
                row.extend(cells);
                rows.push(row);
            }
        }
        if !rows.is_empty() {
            let _ = writeln!(out, "### {workload}: {a} / {b}\n");
            out.push_str(&table(&head, &rows));
        }
    }
    out
}

/// `2.31x tx/s, 0.45x ms`, FAILED (either failed), or `-`.
fn ratio(a: Option<&PointRecord>, b: Option<&PointRecord>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => match (a.tps(), b.tps(), a.avg_ms(), b.avg_ms()) {
            (Some(ta), Some(tb), Some(ma), Some(mb)) if tb > 0.0 && mb > 0.0 => {
                format!("{:.2}x, {:.2}x", ta / tb, ma / mb)
            }
            _ => "FAILED".into(),
        },
        _ => "-".into(),
    }
}

fn cross_shard_section(dir: &SuiteDir) -> String {
    let points: Vec<&PointRecord> = dir.points.iter().filter(|r| r.point.study == Study::CrossShard).collect();
    if points.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## Cross-shard study: TPC-C NewOrder only, 2 shards x 3 replicas, geo, 8 threads\n\nCells: `tx/s / avg ms \
         {share of commits that were cross-shard}`.\n\n",
    );
    // In the matrix's order (5, 10, 15, 20 %), not the ids' (which sort 20 before 5).
    let pcts: Vec<u32> = REMOTE_ITEM_PCTS
        .iter()
        .copied()
        .filter(|&pct| points.iter().any(|r| r.point.knob.as_deref() == Some(remote_items_knob(pct).as_str())))
        .collect();
    let mut head = vec!["remote items".to_string()];
    head.extend(PROTOCOLS.iter().map(|p| p.to_string()));
    let rows: Vec<Vec<String>> = pcts
        .iter()
        .map(|&pct| {
            let mut row = vec![format!("{pct} %")];
            for protocol in PROTOCOLS {
                let r = dir.cross_shard_cell(protocol, pct);
                let mut cell = tps_ms(r);
                if let Some(b) = r.and_then(PointRecord::measured) {
                    let share = 100.0 * b.cross_shard_committed as f64 / b.committed.max(1) as f64;
                    let _ = write!(cell, " {{{share:.0} %}}");
                }
                row.push(cell);
            }
            row
        })
        .collect();
    out.push_str(&table(&head, &rows));
    out
}

fn seed004_section(dir: &SuiteDir) -> String {
    let points: Vec<&PointRecord> =
        dir.points.iter().filter(|r| r.point.study == Study::Seed004 && r.point.repeat == 1).collect();
    if points.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## Seed 004: direct RPC against two-phase commit over two databases\n\nEach transaction writes one key on \
         each of 2 shards of 1 replica, on loopback (`none`), durability `none` (the seed's databases were in \
         memory), one transaction in flight per client. Seed 004 measured direct 51.1 µs / 19,569 req/s and 2PC \
         296.8 µs / 3,367 req/s sequentially, 951.3 µs / 10,444 req/s with 10 clients.\n\n",
    );
    let head = ["clients", "protocol", "tx/s", "mean µs", "median µs", "p95 µs", "stddev µs"].map(String::from);
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|r| {
            let mut row = vec![r.point.threads.to_string(), r.point.protocol.clone()];
            match r.measured() {
                Some(b) => row.extend([
                    format_thousands(b.throughput_tps.round() as u64),
                    format!("{:.0}", b.latency_us.avg),
                    b.latency_us.p50.to_string(),
                    b.latency_us.p95.to_string(),
                    format!("{:.0}", b.latency_us.stddev),
                ]),
                None => row.extend(["FAILED".into(), "".into(), "".into(), "".into(), "".into()]),
            }
            row
        })
        .collect();
    out.push_str(&table(&head, &rows));
    out
}

fn scale_section(dir: &SuiteDir) -> String {
    let points: Vec<&PointRecord> = dir.points.iter().filter(|r| r.point.study == Study::Scale).collect();
    if points.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## Scale study: micro under geo, 8 threads, Luigi\n\nShards 1-8 of 3 replicas, and 3-7 replicas on one \
         shard; every transaction touches every shard (all replicas run on this one machine).\n\n",
    );
    let head = ["shape", "processes", "tx/s", "avg ms", "p99 ms"].map(String::from);
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|r| {
            let p = &r.point;
            let mut row = vec![format!("{}x{}", p.shards, p.replicas), (p.shards * p.replicas).to_string()];
            match r.measured() {
                Some(b) => row.extend([
                    format_thousands(b.throughput_tps.round() as u64),
                    format!("{:.1}", b.latency_us.avg / 1000.0),
                    format!("{:.1}", b.latency_us.p99 as f64 / 1000.0),
                ]),
                None => row.extend(["FAILED".into(), "".into(), "".into()]),
            }
            row
        })
        .collect();
    out.push_str(&table(&head, &rows));
    out
}

fn latency_section(dir: &SuiteDir) -> String {
    if !dir.points.iter().any(|r| r.point.study == Study::Latency) {
        return String::new();
    }
    let mut out = format!(
        "## Commit latency in one-way delays (D = {GEO_ONE_WAY_MS} ms, geo: 150 ms +- 20 every hop)\n\nOne client \
         thread, a few transactions in flight over 100,000 keys (no contention, no queueing). Cells: `avg / p50 / \
         p90 [/ p99]` in D, then the committed count n; p99 only with n >= {P99_MIN_COMMITTED}.\n\n"
    );
    let mut head = vec!["shape".to_string()];
    head.extend(PROTOCOLS.iter().map(|p| p.to_string()));
    let d = GEO_ONE_WAY_MS * 1000.0;
    let rows: Vec<Vec<String>> = SEED_SHAPES
        .iter()
        .map(|&shape| {
            let mut row = vec![shape.to_string()];
            for protocol in PROTOCOLS {
                let r = dir.first(|r| {
                    let p = &r.point;
                    p.study == Study::Latency && p.shape() == shape && p.protocol == protocol
                });
                row.push(match r {
                    None => "-".into(),
                    Some(r) => match r.measured() {
                        None => "FAILED".into(),
                        Some(b) => {
                            let l = &b.latency_us;
                            let mut s = format!("{:.2} / {:.2} / {:.2}", l.avg / d, l.p50 as f64 / d, l.p90 as f64 / d);
                            if b.committed >= P99_MIN_COMMITTED {
                                let _ = write!(s, " / {:.2}", l.p99 as f64 / d);
                            }
                            let _ = write!(s, " (n={})", b.committed);
                            s
                        }
                    },
                });
            }
            row
        })
        .collect();
    out.push_str(&table(&head, &rows));
    out
}

/// `tx/s / p50 / p99 ms` of a YCSB cell, FAILED, or `-`.
fn tps_p50_p99(r: Option<&PointRecord>) -> String {
    match r {
        None => "-".into(),
        Some(r) => match r.measured() {
            None => "FAILED".into(),
            Some(b) => format!(
                "{} / {:.1} / {:.1}",
                format_thousands(b.throughput_tps.round() as u64),
                b.latency_us.p50 as f64 / 1000.0,
                b.latency_us.p99 as f64 / 1000.0
            ),
        },
    }
}

fn ycsb_section(dir: &SuiteDir) -> String {
    if !dir.points.iter().any(|r| r.point.study == Study::Ycsb) {
        return String::new();
    }
    let mut out = String::from(
        "## YCSB: workloads A-F and seed 003's K2 mixes\n\n2 shards x 3 replicas, 8 threads x 200 in flight, one \
         operation per transaction, YCSB's default table (1,000 records of 10 fields of 100 bytes); A-C, E, F \
         zipfian, D latest; under `geo` the default suite runs the zipfian K2 mixes and `--extended` every \
         variant (a `-` is a cell this run did not measure). Cells: `tx/s / p50 / p99 ms`.\n\n",
    );
    let mut head = vec!["workload".to_string()];
    head.extend(PROTOCOLS.iter().map(|p| p.to_string()));
    for net in YCSB_NETS {
        let rows: Vec<Vec<String>> = YCSB_VARIANTS
            .iter()
            .map(|(label, _)| {
                let mut row = vec![label.to_string()];
                row.extend(PROTOCOLS.iter().map(|p| tps_p50_p99(dir.ycsb_cell(net, label, p))));
                row
            })
            .collect();
        let _ = writeln!(out, "### `{net}`\n");
        out.push_str(&table(&head, &rows));
    }
    out.push_str(&k2_layout(dir));
    out
}

/// Seed 003's K2 layout on loopback: per mix and protocol, throughput, latency p50 / p90 /
/// p99 / p99.9 in µs and aborts per second, with K2's own figures quoted (RDMA, many cores).
fn k2_layout(dir: &SuiteDir) -> String {
    let mut out = String::from(
        "### The K2 layout (`none`)\n\nSeed 003 (K2, RDMA cluster) reported, as tx/s and p50 / p90 / p99 / p99.9 \
         µs: {95,5,uniform} 2.55M, 28 / 36 / 86 / 117; {50,50,uniform} 1.43M, 55 / 93 / 161 / 279; \
         {95,5,szipfian} 250K, 26 / 36 / 86 / 216; {50,50,szipfian} 47.3K, 55 / 80 / 112 / 716. Here: one \
         2-core machine, every replica a process, fsync.\n\n",
    );
    let head = ["mix", "protocol", "tx/s", "p50 / p90 / p99 / p99.9 µs", "aborts/s"].map(String::from);
    let mut rows = Vec::new();
    for (label, _) in YCSB_VARIANTS.iter().filter(|(l, _)| l.starts_with("k2-")) {
        for protocol in PROTOCOLS {
            let mut row = vec![label.to_string(), protocol.to_string()];
            match dir.ycsb_cell("none", label, protocol) {
                None => row.extend(["-".into(), "".into(), "".into()]),
                Some(r) => match r.measured() {
                    None => row.extend(["FAILED".into(), "".into(), "".into()]),
                    Some(b) => {
                        let l = &b.latency_us;
                        let aborts = (b.aborted + b.protocol_aborts) as f64 / b.duration_s.max(f64::MIN_POSITIVE);
                        row.extend([
                            format_thousands(b.throughput_tps.round() as u64),
                            format!("{} / {} / {} / {}", l.p50, l.p90, l.p99, l.p999),
                            format!("{aborts:.0}"),
                        ]);
                    }
                },
            }
            rows.push(row);
        }
    }
    out.push_str(&table(&head, &rows));
    out
}

mod against_seeds;
#[cfg(test)]
mod tests;
