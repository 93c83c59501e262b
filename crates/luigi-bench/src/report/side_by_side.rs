//! Several protocols' results side by side, one column per protocol ([`render_side_by_side`]).

use std::collections::BTreeMap;

use super::{format_thousands, ms, protocol_label, BenchResult};

/// What makes two results the same cell of a side-by-side comparison: everything but the
/// protocol (the workload's own knobs included, e.g. TPC-C's remote-item share).
#[derive(PartialEq, Eq)]
struct Cell {
    workload: String,
    shards: u32,
    replicas: u32,
    net: String,
    threads: u32,
    in_flight: u32,
    /// The compared workload knobs, as `name=value` words.
    knobs: String,
}

/// The cell `r` belongs to.
fn cell_key(r: &BenchResult) -> Cell {
    let knobs: Vec<String> = r
        .params
        .iter()
        .filter(|(k, _)| PARAMS_COMPARED.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    Cell {
        workload: r.workload.clone(),
        shards: r.shards,
        replicas: r.replicas,
        net: r.net.clone(),
        threads: r.threads,
        in_flight: r.in_flight,
        knobs: knobs.join(" "),
    }
}

/// Workload knobs that tell cells apart in [`render_side_by_side`].
const PARAMS_COMPARED: [&str; 9] =
    ["keys", "ops", "read_ratio", "cross_shard_pct", "remote_item_pct", "mix", "dist", "records", "ops_per_txn"];

/// `results` side by side as a markdown table: one row per cell (workload, shape, network,
/// threads, knobs), one column per protocol in the order first seen, each "tx/s / avg ms",
/// with the share of business transactions the protocol aborted (after retries), the
/// resubmissions after protocol aborts per committed transaction when there were any, and (several shards) the share of the
/// committed transactions that were cross-shard.
pub fn render_side_by_side(results: &[BenchResult]) -> String {
    let mut protocols: Vec<String> = Vec::new();
    let mut rows: Vec<(Cell, BTreeMap<String, &BenchResult>)> = Vec::new();
    for r in results {
        let label = protocol_label(r);
        if !protocols.contains(&label) {
            protocols.push(label.clone());
        }
        let key = cell_key(r);
        match rows.iter_mut().find(|(k, _)| *k == key) {
            Some((_, by)) => {
                by.insert(label, r);
            }
            None => rows.push((key, BTreeMap::from([(label, r)]))),
        }
    }
    let mut out = String::from("| workload | shape | net | threads | in-flight | knobs |");
    for p in &protocols {
        out.push_str(&format!(" {p} |"));
    }
    out.push_str("\n|---|---|---|---|---|---|");
    out.push_str(&"---|".repeat(protocols.len()));
    out.push('\n');
    for (Cell { workload, shards, replicas, net, threads, in_flight, knobs }, by) in &rows {
        out.push_str(&format!("| {workload} | {shards}x{replicas} | {net} | {threads} | {in_flight} | {knobs} |"));
        for p in &protocols {
            let cell = match by.get(p) {
                Some(r) => {
                    let mut s =
                        format!("{} / {}", format_thousands(r.throughput_tps.round() as u64), ms(r.latency_us.avg));
                    if r.aborted > 0 {
                        s.push_str(&format!(" ({:.1} % aborted)", r.abort_rate * 100.0));
                    }
                    if r.resubmissions > 0 && r.committed > 0 {
                        let per = r.resubmissions as f64 / r.committed as f64;
                        s.push_str(&format!(" [{per:.2} resubmits/commit]"));
                    }
                    // Which transactions committed matters as much as how many: a protocol
                    // that starves its cross-shard transactions shows it here.
                    if r.shards > 1 && r.committed > 0 {
                        let cross = r.cross_shard_committed as f64 / r.committed as f64 * 100.0;
                        s.push_str(&format!(" {{{cross:.1} % cross}}"));
                    }
                    s
                }
                None => "-".into(),
            };
            out.push_str(&format!(" {cell} |"));
        }
        out.push('\n');
    }
    out
}
