//! The report's section against seed 000's published tables ([`crate::suite::seeds`]): every
//! measured cell of the seeds' layouts as a ratio to the seed's cell (throughput ratio,
//! average-latency ratio), and the cross-shard study beside the seed's.

use std::fmt::Write as _;

use super::table;
use crate::suite::matrix::{Study, REMOTE_ITEM_PCTS, SEED_NETS};
use crate::suite::results::{PointRecord, SuiteDir};
use crate::suite::seeds::{PublishedCell, PUBLISHED, PUBLISHED_CROSS_SHARD, PUBLISHED_THREADS};

/// `ours / seed`: `0.53x, 1.21x` (throughput, average latency), FAILED, or `-` (not run).
fn against(ours: Option<&PointRecord>, seed: PublishedCell) -> String {
    match ours {
        None => "-".into(),
        Some(r) => match (r.tps(), r.avg_ms()) {
            (Some(tps), Some(ms)) => format!("{:.2}x, {:.2}x", tps / seed.tps, ms / seed.avg_ms),
            _ => "FAILED".into(),
        },
    }
}

/// The whole section, or nothing if the run has no seeds-layout or cross-shard point.
pub(super) fn section(dir: &SuiteDir) -> String {
    let mut out = String::from(
        "## Against seed 000's published tables (ours / seed: throughput ratio, average-latency ratio)\n\n\
         Seed 000's figures came from a build that executed nothing (docs/DESIGN.md): read a ratio as where a \
         measured cell stands against the shape the seed claimed. Seed 000's Mako is set beside our `occ`. Rows \
         threads, columns networks; `-`: not measured in this run.\n\n",
    );
    let mut any = false;
    let mut head = vec!["threads".to_string()];
    head.extend(SEED_NETS.iter().map(|n| n.to_string()));
    for t in PUBLISHED {
        let study = if t.workload == "tpcc" { Study::SeedsTpcc } else { Study::SeedsMicro };
        let rows: Vec<Vec<String>> = PUBLISHED_THREADS
            .iter()
            .zip(t.cells)
            .map(|(&threads, cells)| {
                let at = |net: &str| dir.seeds_cell(study, t.shape, t.ours, threads, net);
                let mut row = vec![threads.to_string()];
                row.extend(SEED_NETS.iter().zip(cells).map(|(net, seed)| against(at(net), seed)));
                row
            })
            .filter(|row| row[1..].iter().any(|c| c != "-"))
            .collect();
        if rows.is_empty() {
            continue;
        }
        any = true;
        let _ = writeln!(
            out,
            "### {} {}: {} / seed 000's {} (its table at line {})\n",
            t.workload, t.shape, t.ours, t.system, t.line
        );
        out.push_str(&table(&head, &rows));
    }
    let cross = cross_shard(dir);
    any |= !cross.is_empty();
    out.push_str(&cross);
    if any {
        out
    } else {
        String::new()
    }
}

/// The cross-shard study beside the seed's: ours (`luigi`, `occ`) and seed 000's (Luigi,
/// Mako), `tx/s / avg ms`.
fn cross_shard(dir: &SuiteDir) -> String {
    let cell = |protocol: &str, pct: u32| dir.cross_shard_cell(protocol, pct);
    let rows: Vec<Vec<String>> = PUBLISHED_CROSS_SHARD
        .iter()
        .filter(|p| REMOTE_ITEM_PCTS.contains(&p.remote_pct))
        .filter(|p| cell("luigi", p.remote_pct).is_some() || cell("occ", p.remote_pct).is_some())
        .map(|p| {
            let mako_ms = p.mako_avg_ms.map_or("<1".to_string(), |ms| format!("{ms:.0}"));
            vec![
                format!("{} %", p.remote_pct),
                super::tps_ms(cell("luigi", p.remote_pct)),
                format!("{:.0} / {:.0}", p.luigi.tps, p.luigi.avg_ms),
                super::tps_ms(cell("occ", p.remote_pct)),
                format!("{} / {mako_ms}", p.mako_tps),
            ]
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let head = ["remote items", "luigi (ours)", "Luigi (seed 000)", "occ (ours)", "Mako (seed 000)"].map(String::from);
    format!("### The cross-shard study beside seed 000's (`tx/s / avg ms`)\n\n{}", table(&head, &rows))
}
