//! `luigi status`: one line per replica of a cluster file, and whether every shard can serve.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use luigi_runtime::config::ClusterConfig;
use luigi_runtime::status::{cluster_status, largest_offset, ClusterHealth, ReplicaReport, STATUS_TIMEOUT_DEFAULT};
use luigi_txn::msg::{ReplicaRole, ReplicaStatus};
use serde_json::json;

/// Stalled transactions shown per replica in the table (`--json` has all the replica sent).
const STALLED_SHOWN: usize = 3;

/// Appended to `luigi status --help`.
pub const STATUS_HELP: &str = "\
Columns: shard, replica, address; up, or down with the reason; role: leader, leader-elect
(elected, serves once it has applied the log), follower, candidate, pre-candidate (polling
before an election); Raft term; commit and applied log indexes; watermark (µs) and its lag
behind the replica's clock (ms; a follower shows its last applied marker); transactions
queued (pending on a leader, prepared and not executed on a follower); answers kept and the
clients they belong to (a client's expire two minutes after its newest transaction);
the replica's clock: its largest measured offset to a peer of its group (ms: the peer's
clock minus its own, ± the measurement's error; `-` before the first measurement), and
BEYOND when its clock is beyond the clock bound (`max_clock_offset_us`) from a majority of
its group (it then does not lead); transactions stuck on
a leader longer than a normal agreement: how many, then the oldest (client/seq, age,
participant shards).

Exit status:
  0  every shard has a leader and every replica answered
  1  some shard has no leader, some replica is down, some shard's watermark has been
     stuck for longer than three election timeouts, or some replica's clock is beyond the
     clock bound from its group (one-line summary on standard error, naming the
     transaction that holds the watermark, the replica and its offset)
  2  error (e.g. a bad cluster file)";

#[derive(Args)]
pub struct StatusArgs {
    /// Cluster file (TOML) of the running servers.
    #[arg(long)]
    cluster: PathBuf,
    /// Print JSON (one object) instead of the table.
    #[arg(long)]
    json: bool,
    /// Milliseconds to wait for each replica to accept the connection, and again to answer.
    #[arg(long, default_value_t = STATUS_TIMEOUT_DEFAULT.as_millis() as u64)]
    timeout_ms: u64,
}

pub fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let config = ClusterConfig::load(&args.cluster)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the runtime")?;
    let reports = rt.block_on(cluster_status(&config, Duration::from_millis(args.timeout_ms.max(1))));
    // A watermark behind its leader's clock by more than three election timeouts is stuck:
    // longer than a failover, so something holds it.
    let tuning = config.tuning();
    let stuck_after_us = 3 * tuning.raft_tick_us * tuning.election_ticks as u64;
    let health = ClusterHealth::of(config.shard_count(), &reports, stuck_after_us);
    let summary = health.summary(reports.len());
    if args.json {
        let replicas: Vec<_> = reports.iter().map(report_json).collect();
        let shards: Vec<_> =
            health.leaders.iter().enumerate().map(|(s, l)| json!({ "shard": s, "leader": l })).collect();
        let doc = json!({ "healthy": health.is_healthy(), "summary": summary, "shards": shards, "replicas": replicas });
        println!("{doc}");
    } else {
        print!("{}", render_table(&reports));
        let mut protocols: Vec<&str> =
            reports.iter().filter_map(|r| r.status.as_ref().ok()).map(|s| s.protocol.as_str()).collect();
        protocols.sort_unstable();
        protocols.dedup();
        if !protocols.is_empty() {
            println!("protocol: {}", protocols.join(", "));
        }
        if health.is_healthy() {
            println!("cluster ok: {summary}");
        }
    }
    if health.is_healthy() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("luigi: cluster degraded: {summary}");
        Ok(ExitCode::FAILURE)
    }
}

fn role_name(s: &ReplicaStatus) -> &'static str {
    match (s.role, s.serving) {
        (_, true) => "leader",
        (ReplicaRole::Leader, false) => "leader-elect",
        (ReplicaRole::Follower, false) => "follower",
        (ReplicaRole::Candidate, false) => "candidate",
        (ReplicaRole::PreCandidate, false) => "pre-candidate",
    }
}

/// The watermark's lag behind the replica's clock, in ms (`None` before any watermark).
fn lag_ms(s: &ReplicaStatus) -> Option<f64> {
    (s.watermark > 0).then(|| (s.clock_us as f64 - s.watermark as f64) / 1000.0)
}

/// The largest measured offset to a peer, `+2000.1±0.2` (ms), then `BEYOND` if the replica's
/// clock is beyond the bound from its group; `-` before any measurement.
fn clock(s: &ReplicaStatus) -> String {
    let largest = largest_offset(&s.clock.peers).map_or_else(
        || "-".to_string(),
        |p| format!("{:+.1}±{:.1}", p.offset_us as f64 / 1e3, p.error_us as f64 / 1e3),
    );
    if s.clock.beyond_bound {
        format!("{largest} BEYOND")
    } else {
        largest
    }
}

fn stuck(s: &ReplicaStatus) -> String {
    if !s.serving {
        return "-".into();
    }
    if s.stalled_count == 0 {
        return "0".into();
    }
    let oldest: Vec<String> = s
        .stalled
        .iter()
        .take(STALLED_SHOWN)
        .map(|t| {
            let shards: Vec<String> = t.shards.iter().map(u32::to_string).collect();
            format!("{}/{} {:.1}s shards {}", t.id.client, t.id.seq, t.age_us as f64 / 1e6, shards.join(","))
        })
        .collect();
    format!("{} (oldest: {})", s.stalled_count, oldest.join("; "))
}

const HEADER: [&str; 14] = [
    "SHARD",
    "REPLICA",
    "ADDRESS",
    "STATE",
    "ROLE",
    "TERM",
    "COMMIT",
    "APPLIED",
    "WATERMARK",
    "LAG(ms)",
    "QUEUE",
    "ANSWERS",
    "CLOCK(ms)",
    "STUCK",
];

/// The table: aligned columns; a down replica's line ends with `down (reason)`.
fn render_table(reports: &[ReplicaReport]) -> String {
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let mut row = vec![r.node.shard.to_string(), r.node.replica.to_string(), r.addr.to_string()];
            match &r.status {
                Ok(s) => row.extend([
                    "up".to_string(),
                    role_name(s).to_string(),
                    s.term.to_string(),
                    s.commit_index.to_string(),
                    s.applied_index.to_string(),
                    s.watermark.to_string(),
                    lag_ms(s).map_or_else(|| "-".to_string(), |l| format!("{l:.1}")),
                    s.pending.to_string(),
                    format!("{}/{}c", s.answers, s.answer_clients),
                    clock(s),
                    stuck(s),
                ]),
                Err(e) => row.push(format!("down ({e})")),
            }
            row
        })
        .collect();
    let mut widths: Vec<usize> = HEADER.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        // A down line's last cell spans the rest of the table: it sets no width.
        let sized = if row.len() == HEADER.len() { row.len() } else { row.len() - 1 };
        for (w, cell) in widths.iter_mut().zip(&row[..sized]) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = HEADER.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(&rows) {
        let last = row.len() - 1;
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| if i == last { c.clone() } else { format!("{c:<w$}", w = widths[i]) })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn report_json(r: &ReplicaReport) -> serde_json::Value {
    let mut v = json!({
        "node": r.node.name(),
        "shard": r.node.shard,
        "replica": r.node.replica,
        "address": r.addr.to_string(),
        "up": r.status.is_ok(),
    });
    match &r.status {
        Ok(s) => {
            v["role"] = json!(role_name(s));
            v["watermark_lag_ms"] = json!(lag_ms(s));
            v["clock_beyond_bound"] = json!(s.clock.beyond_bound);
            v["status"] = serde_json::to_value(s).expect("plain data serializes");
        }
        Err(e) => v["error"] = json!(e),
    }
    v
}
