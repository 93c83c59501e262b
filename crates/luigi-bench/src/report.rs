//! Benchmark result records and their persistence / presentation.
//!
//! A run produces one [`BenchResult`] per configuration. Results are stored as
//! a pretty-printed JSON array ([`write_json`] / [`read_json`]) and shown as an
//! aligned plain-text table ([`render_table`]) or a GitHub markdown table
//! ([`render_markdown`]), with the single-shard / cross-shard latency split beside them
//! ([`render_latency_split`], [`render_latency_split_markdown`]). A non-transactional
//! protocol (`direct`) is marked so in every one of them ([`protocol_label`], and
//! `transactional: false` in the JSON).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{anyhow, Context};
use serde::{Deserialize, Serialize};

use crate::hgrm::PercentileExport;
use crate::samples::SecondSample;
use crate::stats::LatencySummary;

/// The outcome of one benchmark configuration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct BenchResult {
    /// Commit protocol under test: `"luigi"`, `"occ"`, `"2pl"` or `"direct"`
    /// (`luigi_txn::types::Protocol`'s names).
    pub protocol: String,
    /// False for a protocol that gives no atomicity or isolation (`direct`): its figures are
    /// a lower bound, not a transaction protocol's.
    #[serde(default = "yes")]
    pub transactional: bool,
    /// Workload name (e.g. `"ycsb-a"`, `"tpcc"`).
    pub workload: String,
    /// Number of shards.
    pub shards: u32,
    /// Replicas per shard.
    pub replicas: u32,
    /// Client threads.
    pub threads: u32,
    /// Outstanding transactions per client thread.
    pub in_flight: u32,
    /// Network model / profile (e.g. `"lan"`, `"wan-50ms"`).
    pub net: String,
    /// Durability mode (e.g. `"memory"`, `"fsync"`).
    pub durability: String,
    /// Measured duration in seconds (excluding warm-up).
    pub duration_s: f64,
    /// Warm-up duration in seconds.
    pub warmup_s: f64,
    /// Committed transactions during the measured interval.
    pub committed: u64,
    /// Transactions their procedure rolled back on purpose during the measured interval
    /// (e.g. TPC-C's 1 % of NewOrders with an unused item): expected, not failures.
    #[serde(default)]
    pub rolled_back: u64,
    /// Transactions that finally aborted during the measured interval.
    pub aborted: u64,
    /// Resends of the same transaction after a retry timeout, measured interval.
    #[serde(default)]
    pub timeout_resends: u64,
    /// Resends of the same transaction after a "not the leader" or "busy" answer or a lost
    /// link (the client core's resend rule), measured interval.
    #[serde(default)]
    pub resends: u64,
    /// Submissions again as a new transaction after a protocol abort, measured interval.
    #[serde(default)]
    pub resubmissions: u64,
    /// Protocol aborts during the measured interval (a baseline's lock conflict or failed
    /// validation), each resubmitted as a new transaction but the last of one out of retries.
    #[serde(default)]
    pub protocol_aborts: u64,
    /// Transactions refused by a participant during the measured interval (executed nowhere).
    #[serde(alias = "errors")]
    pub rejected: u64,
    /// Transactions answered with an unknown outcome during the measured interval (they may
    /// have executed; the client kept asking).
    #[serde(default)]
    pub unknown: u64,
    /// Transactions refused during the warm-up (not measured, not in `rejected`).
    #[serde(default)]
    pub warmup_rejected: u64,
    /// Transactions answered unknown during the warm-up (not in `unknown`).
    #[serde(default)]
    pub warmup_unknown: u64,
    /// Committed transactions per second.
    pub throughput_tps: f64,
    /// Fraction (0.0 ..= 1.0, not percent) of finished transactions that aborted;
    /// see [`abort_rate`].
    pub abort_rate: f64,
    /// Latency of committed transactions, in microseconds.
    pub latency_us: LatencySummary,
    /// Committed (business) transactions that spanned several shards.
    #[serde(default)]
    pub cross_shard_committed: u64,
    /// Latency of the committed ones that ran on one shard, in microseconds.
    #[serde(default)]
    pub single_shard_latency_us: LatencySummary,
    /// Latency of the committed ones that spanned several shards, in microseconds.
    #[serde(default)]
    pub cross_shard_latency_us: LatencySummary,
    /// Workload knobs (keys, ops, read_ratio, cross_shard_pct, ...) and extra measured figures.
    pub params: BTreeMap<String, serde_json::Value>,
    /// Wall-clock start of the run, seconds since the Unix epoch.
    pub started_at_unix_s: u64,
    /// Share of committed cross-shard transactions whose proposals differed (second round).
    #[serde(default)]
    pub second_round_rate: f64,
    /// Share of committed transactions that committed on Luigi's fast path (0 when it is off
    /// and for the baselines).
    #[serde(default)]
    pub fast_path_rate: f64,
    /// Share of committed transactions that asked for the fast path (sent to every replica;
    /// DESIGN.md rule 20: fewer than all when the client's policy samples under load).
    #[serde(default)]
    pub fast_path_asked_rate: f64,
    /// The same figures per kind of business transaction (e.g. TPC-C's five), when the
    /// workload has several.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_kind: BTreeMap<String, KindResult>,
    /// The measured interval per second (BenchBase's `samples.csv` rows; [`crate::samples`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<SecondSample>,
    /// The committed transactions' latency percentile table (an `.hgrm`; [`crate::hgrm`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_percentiles: Option<PercentileExport>,
    /// The benchmark process's own CPU time (user + system, /proc) when its figures were
    /// taken, seconds: the client's share, apart from a local cluster's servers (0 in runs
    /// recorded before it existed).
    #[serde(default)]
    pub client_cpu_s: f64,
    /// Where the servers' time went in the measured interval: their metrics scraped at its
    /// start and end, the differences ([`crate::server_metrics`]; absent with `--metrics off`
    /// and in runs recorded before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<crate::server_metrics::ServerDeltas>,
    /// The client's and the local servers' CPU time over the measured interval, from /proc
    /// at both its ends (absent in runs recorded before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<crate::cpu::CpuInterval>,
}

/// One kind of business transaction's figures in a run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct KindResult {
    /// Committed in the measured interval.
    pub committed: u64,
    /// Rolled back on purpose by their procedure.
    pub rolled_back: u64,
    /// Aborted (failed).
    pub aborted: u64,
    /// Refused by a participant.
    pub rejected: u64,
    /// Unknown outcome.
    pub unknown: u64,
    /// Resends after a retry timeout.
    #[serde(default)]
    pub timeout_resends: u64,
    /// Resends after "not the leader", "busy" or a lost link.
    #[serde(default)]
    pub resends: u64,
    /// Submissions again as new transactions after protocol aborts.
    #[serde(default)]
    pub resubmissions: u64,
    /// Protocol aborts (each resubmitted as a new transaction but the last of one out of
    /// retries).
    #[serde(default)]
    pub protocol_aborts: u64,
    /// Committed ones that spanned several shards.
    pub cross_shard: u64,
    /// Committed per second.
    pub throughput_tps: f64,
    /// Latency of the committed ones, in microseconds.
    pub latency_us: LatencySummary,
    /// Their latency percentile table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_percentiles: Option<PercentileExport>,
}

fn yes() -> bool {
    true
}

/// The protocol as reports show it: its name, marked when it is not transactional (e.g.
/// `direct (non-transactional)`).
pub fn protocol_label(r: &BenchResult) -> String {
    if r.transactional {
        r.protocol.clone()
    } else {
        format!("{} (non-transactional)", r.protocol)
    }
}

/// Computes the abort rate as a fraction `aborted / (committed + aborted)`,
/// returning `0.0` when nothing finished (so the value is always finite and
/// survives a JSON round trip).
pub fn abort_rate(committed: u64, aborted: u64) -> f64 {
    let total = committed as f64 + aborted as f64;
    if total > 0.0 {
        aborted as f64 / total
    } else {
        0.0
    }
}

/// Writes `results` to `path` as a pretty-printed JSON array.
///
/// Parent directories are created as needed. The data is written to a
/// temporary file in the same directory, synced, and then renamed over `path`,
/// so a crash never leaves a partially written file behind.
pub fn write_json(path: &Path, results: &[BenchResult]) -> anyhow::Result<()> {
    let file_name =
        path.file_name().ok_or_else(|| anyhow!("cannot write results to {}: not a file path", path.display()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir).with_context(|| format!("creating directory {} for {}", dir.display(), path.display()))?;

    let mut data =
        serde_json::to_vec_pretty(results).with_context(|| format!("serializing results for {}", path.display()))?;
    data.push(b'\n');

    static SEQ: AtomicU64 = AtomicU64::new(0);
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".{}.{}.tmp", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    let tmp = dir.join(tmp_name);

    let written = (|| -> std::io::Result<()> {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(&data)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(anyhow::Error::new(e).context(format!(
            "writing results to {} (via {})",
            path.display(),
            tmp.display()
        )));
    }
    // Best effort: persist the rename itself.
    if let Ok(d) = File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Reads a JSON array of results previously written by [`write_json`].
pub fn read_json(path: &Path) -> anyhow::Result<Vec<BenchResult>> {
    let data = fs::read(path).with_context(|| format!("reading results from {}", path.display()))?;
    serde_json::from_slice(&data).with_context(|| format!("parsing results JSON in {}", path.display()))
}

/// Formats an integer with `,` as the thousands separator (e.g. `1,234,567`).
pub fn format_thousands(n: u64) -> String {
    let digits = n.to_string();
    let len = digits.len();
    // Length of the leading group: 1..=3 digits.
    let mut i = match len % 3 {
        0 => 3.min(len),
        r => r,
    };
    let mut out = String::with_capacity(len + len / 3);
    out.push_str(&digits[..i]);
    while i < len {
        out.push(',');
        out.push_str(&digits[i..i + 3]);
        i += 3;
    }
    out
}

/// Number of table columns.
const NCOLS: usize = 21;

/// Column headers shared by the text and markdown tables.
const HEADERS: [&str; NCOLS] = [
    "protocol",
    "workload",
    "shards",
    "replicas",
    "threads",
    "in-flight",
    "net",
    "committed",
    "aborted",
    "tps",
    "avg ms",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "p99.9 ms",
    "abort %",
    "rejected",
    "unknown",
    "2nd-round %",
    "fast %",
    "asked %",
];

/// Whether each column is numeric (right-aligned) or text (left-aligned).
const NUMERIC: [bool; NCOLS] = [
    false, false, true, true, true, true, false, true, true, true, true, true, true, true, true, true, true, true,
    true, true, true,
];

fn ms(us: f64) -> String {
    format!("{:.2}", us / 1000.0)
}

fn cells(r: &BenchResult) -> [String; NCOLS] {
    // `as u64` saturates: negative / NaN become 0.
    let tps = r.throughput_tps.round() as u64;
    let l = &r.latency_us;
    // A share only Luigi has, in percent; "-" for the baselines.
    let luigi_pct = |rate: f64| {
        if r.protocol == "luigi" || r.protocol.is_empty() {
            format!("{:.1}", rate * 100.0)
        } else {
            "-".into()
        }
    };
    [
        protocol_label(r),
        r.workload.clone(),
        r.shards.to_string(),
        r.replicas.to_string(),
        r.threads.to_string(),
        r.in_flight.to_string(),
        r.net.clone(),
        format_thousands(r.committed),
        format_thousands(r.aborted),
        format_thousands(tps),
        ms(l.avg),
        ms(l.p50 as f64),
        ms(l.p90 as f64),
        ms(l.p99 as f64),
        ms(l.p999 as f64),
        format!("{:.1}", r.abort_rate * 100.0),
        with_warmup(r.rejected, r.warmup_rejected),
        with_warmup(r.unknown, r.warmup_unknown),
        // Luigi's agreement rounds; the baselines always take their two rounds (see docs/BASELINES.md).
        luigi_pct(r.second_round_rate),
        // Only Luigi has a fast path.
        luigi_pct(r.fast_path_rate),
        luigi_pct(r.fast_path_asked_rate),
    ]
}

/// A measured count, and the warm-up's beside it when there were any (`3 (+1 warm-up)`).
fn with_warmup(measured: u64, warmup: u64) -> String {
    match warmup {
        0 => format_thousands(measured),
        w => format!("{} (+{} warm-up)", format_thousands(measured), format_thousands(w)),
    }
}

/// Renders `results` as an aligned plain-text table: a header line followed by
/// one line per result. Text columns are left-aligned, numbers right-aligned,
/// and every line has the same display width. Latencies are shown in ms with
/// two decimals, counts and tps with thousands separators, the abort rate in
/// percent with one decimal.
pub fn render_table(results: &[BenchResult]) -> String {
    let rows: Vec<[String; NCOLS]> = results.iter().map(cells).collect();
    render_aligned(&HEADERS, &NUMERIC, &rows)
}

/// Lines up `headers` and `rows` (text left, numbers right, two spaces between columns).
fn render_aligned<const N: usize>(headers: &[&str; N], numeric: &[bool; N], rows: &[[String; N]]) -> String {
    let mut widths: [usize; N] = headers.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }

    let mut out = String::new();
    let mut push_line = |line: &mut dyn Iterator<Item = &str>| {
        for (i, cell) in line.enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            // `{:w$}` pads by `char` count, matching the width computation above.
            let w = widths[i];
            if numeric[i] {
                out.push_str(&format!("{cell:>w$}"));
            } else {
                out.push_str(&format!("{cell:<w$}"));
            }
        }
        out.push('\n');
    };
    push_line(&mut headers.iter().copied());
    for row in rows {
        push_line(&mut row.iter().map(String::as_str));
    }
    out
}

/// One line per run: the CPU time of its measured interval, the client's and the local
/// servers', and their sum per committed transaction ("-" where the servers' is unknown: a
/// cluster file's servers, or a run recorded before it was taken).
pub fn render_cpu(results: &[BenchResult]) -> String {
    let mut out = String::new();
    for r in results {
        let Some(cpu) = r.cpu else { continue };
        let servers = cpu.servers_s.map_or("-".to_string(), |s| format!("{s:.2}"));
        let per = cpu.us_per_commit(r.committed).map_or("-".to_string(), |us| format!("{us:.0}"));
        out.push_str(&format!(
            "CPU {} {} {}x{} {} threads {}: {per} us per committed transaction (client {:.2} s, servers {servers} s, \
             {} committed)\n",
            protocol_label(r),
            r.workload,
            r.shards,
            r.replicas,
            r.threads,
            r.net,
            cpu.client_s,
            format_thousands(r.committed)
        ));
    }
    out
}

/// Columns of the latency split.
const SPLIT_NCOLS: usize = 18;

/// Headers of the latency split: single-shard and cross-shard committed transactions and
/// their latency, with the protocol's aborts, the resubmissions after them, the resends
/// after a retry timeout and those after "not the leader" / "busy" / a lost link (the
/// seeds' warning table).
const SPLIT_HEADERS: [&str; SPLIT_NCOLS] = [
    "protocol",
    "workload",
    "shards",
    "threads",
    "net",
    "single",
    "single avg ms",
    "single p50 ms",
    "single p99 ms",
    "cross",
    "cross avg ms",
    "cross p50 ms",
    "cross p99 ms",
    "protocol aborts",
    "aborted",
    "resubmits",
    "timeout resends",
    "resends",
];

const SPLIT_NUMERIC: [bool; SPLIT_NCOLS] =
    [false, false, true, true, false, true, true, true, true, true, true, true, true, true, true, true, true, true];

fn split_cells(r: &BenchResult) -> [String; SPLIT_NCOLS] {
    let (s, x) = (&r.single_shard_latency_us, &r.cross_shard_latency_us);
    [
        protocol_label(r),
        r.workload.clone(),
        r.shards.to_string(),
        r.threads.to_string(),
        r.net.clone(),
        format_thousands(r.committed.saturating_sub(r.cross_shard_committed)),
        ms(s.avg),
        ms(s.p50 as f64),
        ms(s.p99 as f64),
        format_thousands(r.cross_shard_committed),
        ms(x.avg),
        ms(x.p50 as f64),
        ms(x.p99 as f64),
        format_thousands(r.protocol_aborts),
        format_thousands(r.aborted),
        format_thousands(r.resubmissions),
        format_thousands(r.timeout_resends),
        format_thousands(r.resends),
    ]
}

/// The latency of single-shard and cross-shard committed transactions (avg, p50, p99 each)
/// as an aligned table, with the protocol aborts, final aborts, resubmissions and resends of
/// each run.
pub fn render_latency_split(results: &[BenchResult]) -> String {
    let rows: Vec<[String; SPLIT_NCOLS]> = results.iter().map(split_cells).collect();
    render_aligned(&SPLIT_HEADERS, &SPLIT_NUMERIC, &rows)
}

/// [`render_latency_split`] as a GitHub markdown table.
pub fn render_latency_split_markdown(results: &[BenchResult]) -> String {
    let rows: Vec<[String; SPLIT_NCOLS]> = results.iter().map(split_cells).collect();
    render_markdown_rows(&SPLIT_HEADERS, &SPLIT_NUMERIC, &rows)
}

/// One line per kind of business transaction of `r` (empty when it has no per-kind figures):
/// committed, rolled back, aborted, rejected, unknown, protocol aborts, resubmissions, resends
/// (timeout / not-the-leader), throughput,
/// latency avg/p50/p90/p99/p99.9 and the share of committed ones that spanned several shards.
pub fn render_kinds(r: &BenchResult) -> String {
    if r.by_kind.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "{} {} {}x{} {} threads, {}: per transaction\n{:<26} {:>9} {:>8} {:>7} {:>8} {:>7} {:>8} {:>9} {:>11} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7}\n",
        protocol_label(r), r.workload, r.shards, r.replicas, r.threads, r.net,
        "transaction", "committed", "rolled", "aborted", "rejected", "unknown", "p-aborts", "resubmits", "t/o resends", "resends", "tps", "avg ms", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "cross %"
    );
    for (name, k) in &r.by_kind {
        let l = &k.latency_us;
        let cross = if k.committed == 0 { 0.0 } else { 100.0 * k.cross_shard as f64 / k.committed as f64 };
        out.push_str(&format!(
            "{:<26} {:>9} {:>8} {:>7} {:>8} {:>7} {:>8} {:>9} {:>11} {:>9} {:>9.0} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7.1}\n",
            name,
            k.committed,
            k.rolled_back,
            k.aborted,
            k.rejected,
            k.unknown,
            k.protocol_aborts,
            k.resubmissions,
            k.timeout_resends,
            k.resends,
            k.throughput_tps,
            ms(l.avg),
            ms(l.p50 as f64),
            ms(l.p90 as f64),
            ms(l.p99 as f64),
            ms(l.p999 as f64),
            cross
        ));
    }
    out
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// Renders `results` as a GitHub-flavoured markdown table with the same
/// columns and number formatting as [`render_table`] (numeric columns
/// right-aligned).
pub fn render_markdown(results: &[BenchResult]) -> String {
    let rows: Vec<[String; NCOLS]> = results.iter().map(cells).collect();
    render_markdown_rows(&HEADERS, &NUMERIC, &rows)
}

fn render_markdown_rows<const N: usize>(headers: &[&str; N], numeric: &[bool; N], rows: &[[String; N]]) -> String {
    let mut out = String::new();
    let line = |cells: &mut dyn Iterator<Item = String>| {
        let mut s = String::from("|");
        for c in cells {
            s.push(' ');
            s.push_str(&c);
            s.push_str(" |");
        }
        s.push('\n');
        s
    };
    out.push_str(&line(&mut headers.iter().map(|h| h.to_string())));
    out.push_str(&line(&mut numeric.iter().map(|&n| if n { "---:" } else { "---" }.to_string())));
    for row in rows {
        out.push_str(&line(&mut row.iter().map(|c| md_escape(c))));
    }
    out
}

mod side_by_side;
pub use side_by_side::render_side_by_side;

#[cfg(test)]
mod tests;
