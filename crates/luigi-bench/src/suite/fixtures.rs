//! Test fixtures: point records made up from the matrix's points, without running anything.

use std::collections::BTreeMap;

use crate::report::BenchResult;
use crate::stats::LatencySummary;
use crate::suite::matrix::{matrix, Point};
use crate::suite::results::{PointRecord, SuiteDir, SuiteInfo};

/// A result of `tps` committed per second at `avg_ms` on average (the other figures
/// derived from them).
pub fn result(point: &Point, tps: f64, avg_ms: f64) -> BenchResult {
    let avg_us = avg_ms * 1000.0;
    let committed = (tps * point.duration_s).round() as u64;
    BenchResult {
        protocol: point.protocol.clone(),
        transactional: point.protocol != "direct",
        workload: point.workload.clone(),
        shards: point.shards,
        replicas: point.replicas,
        threads: point.threads,
        in_flight: point.in_flight,
        net: point.net.clone(),
        durability: "fsync".into(),
        duration_s: point.duration_s,
        warmup_s: point.warmup_s,
        committed,
        rolled_back: 0,
        aborted: 0,
        timeout_resends: 0,
        resends: 0,
        resubmissions: 0,
        protocol_aborts: 0,
        rejected: 0,
        unknown: 0,
        warmup_rejected: 0,
        warmup_unknown: 0,
        throughput_tps: tps,
        abort_rate: 0.0,
        latency_us: LatencySummary {
            avg: avg_us,
            p50: avg_us as u64,
            p90: (avg_us * 1.5) as u64,
            p95: (avg_us * 1.7) as u64,
            p99: (avg_us * 2.0) as u64,
            stddev: avg_us / 4.0,
            p999: (avg_us * 3.0) as u64,
            max: (avg_us * 4.0) as u64,
        },
        cross_shard_committed: if point.shards > 1 { committed / 2 } else { 0 },
        single_shard_latency_us: LatencySummary::default(),
        cross_shard_latency_us: LatencySummary::default(),
        params: BTreeMap::new(),
        started_at_unix_s: 1_700_000_000,
        second_round_rate: 0.0,
        fast_path_rate: 0.0,
        fast_path_asked_rate: 0.0,
        by_kind: BTreeMap::new(),
        samples: Vec::new(),
        // Only the latency study's points (for its CDF plot): serde_json reads some of the
        // export's quantiles back one ulp off, which equality tests of other records would trip on.
        latency_percentiles: (point.study == crate::suite::matrix::Study::Latency).then(|| percentiles(avg_us)),
        client_cpu_s: 0.0,
        server_metrics: None,
        cpu: None,
    }
}

/// A percentile export of latencies spread evenly from half to twice `avg_us`.
fn percentiles(avg_us: f64) -> crate::hgrm::PercentileExport {
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).expect("3 significant figures is valid");
    for i in 0..100u32 {
        let _ = hist.record((avg_us * (0.5 + 1.5 * f64::from(i) / 99.0)).max(1.0) as u64);
    }
    crate::hgrm::PercentileExport::of(&hist)
}

/// A record of `point`: succeeded with `tps` / `avg_ms`, or failed (`None`).
pub fn record(point: &Point, figures: Option<(f64, f64)>) -> PointRecord {
    let result = figures.map(|(tps, ms)| result(point, tps, ms));
    let committed = result.as_ref().map_or(0, |r| r.committed);
    PointRecord {
        point: point.clone(),
        argv: std::iter::once("luigi".to_string()).chain(point.argv("x.json")).collect(),
        exit_code: Some(if figures.is_some() { 0 } else { 1 }),
        ok: figures.is_some(),
        error: figures.is_none().then(|| "exit 1: luigi: error: no transaction committed".to_string()),
        wall_s: point.estimate_s(),
        cpu_s: 1.5,
        cpu_us_per_commit: (committed > 0).then(|| 1.5e6 / committed as f64),
        started_at_unix_s: 1_700_000_000,
        result,
    }
}

/// Made-up figures for `p`: Luigi fastest, latency growing with the network.
pub fn figures(p: &Point) -> (f64, f64) {
    let speed = match p.protocol.as_str() {
        "luigi" => 1.0,
        "occ" => 0.5,
        "2pl" => 0.4,
        _ => 1.5,
    };
    let one_way = match p.net.as_str() {
        "same-region" => 2.0,
        "same-continent" => 30.0,
        "cross-continent" => 80.0,
        "geo" => 150.0,
        _ => 0.1,
    };
    let repeat = 1.0 + 0.01 * f64::from(p.repeat - 1);
    (1000.0 * speed * f64::from(p.threads) / f64::from(p.shards) * repeat, 3.0 * one_way / speed + 1.0)
}

/// A whole default suite of made-up records, with the ids in `failed` failed.
pub fn suite(failed: &[&str]) -> SuiteDir {
    let points =
        matrix(false).iter().map(|p| record(p, (!failed.contains(&p.id.as_str())).then(|| figures(p)))).collect();
    SuiteDir {
        info: SuiteInfo {
            command: vec!["luigi".into(), "bench".into(), "suite".into()],
            git_commit: "0123abcd".into(),
            started_at_unix_s: 1_700_000_000,
            ended_at_unix_s: 1_700_003_000,
            running_s: 0,
            points: 0,
            estimate_s: 3300.0,
            ..SuiteInfo::default()
        },
        points,
    }
}
