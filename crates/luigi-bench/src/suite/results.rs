//! The results directory of a suite run, `<out>/<date>-<name>/`: `suite.json` (the command
//! line, the git commit, the machine, start and end), `points/<id>.json` (one
//! [`PointRecord`] per point), beside each succeeded point its per-second samples
//! (`points/<id>.samples.csv`) and latency percentiles (`points/<id>.hgrm`, and
//! `points/<id>.<kind>.hgrm` per kind of transaction), and `points.csv` (one row per point,
//! the columns a user plots). Reading a directory back ([`load_dir`]) is all `luigi report` needs.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::report::BenchResult;
use crate::suite::matrix::{remote_items_knob, Point, Shape, Study};

/// `suite.json`: what ran, where, when.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SuiteInfo {
    /// The suite's command line, as given.
    pub command: Vec<String>,
    /// `git rev-parse HEAD` where the suite ran, or "unknown" outside a checkout.
    pub git_commit: String,
    /// The machine.
    pub machine: Machine,
    /// Start, seconds since the Unix epoch.
    pub started_at_unix_s: u64,
    /// End, seconds since the Unix epoch (0 while running); a `--resume` moves it.
    pub ended_at_unix_s: u64,
    /// Seconds spent running the suite, summed over the invocations that ran into this
    /// directory (a `--resume` adds its own, not the time between); 0 in runs recorded before
    /// it existed, whose wall time is end - start.
    #[serde(default)]
    pub running_s: u64,
    /// The points selected (after `--quick` and `--only`).
    pub points: usize,
    /// The estimate printed before the run, seconds.
    pub estimate_s: f64,
}

impl SuiteInfo {
    /// The run's wall time, seconds: [`SuiteInfo::running_s`], or end - start for runs
    /// recorded before it existed.
    pub fn wall_s(&self) -> u64 {
        match self.running_s {
            0 => self.ended_at_unix_s.saturating_sub(self.started_at_unix_s),
            s => s,
        }
    }
}

/// The machine a suite ran on, from /proc.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Logical cores available to the process.
    pub cores: usize,
    /// Total memory, bytes (`MemTotal` of /proc/meminfo; 0 if unreadable).
    pub memory_bytes: u64,
    /// CPU model (`model name` of /proc/cpuinfo; "unknown" if absent).
    pub cpu_model: String,
}

impl Machine {
    /// This machine.
    pub fn this() -> Self {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_bytes = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024);
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or_else(|| "unknown".to_string(), |(_, v)| v.trim().to_string());
        Machine { cores, memory_bytes, cpu_model }
    }
}

/// `git rev-parse HEAD` in the current directory, or "unknown".
pub fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// One point's record, `points/<id>.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointRecord {
    /// The point, as the matrix described it.
    pub point: Point,
    /// The exact command: the binary, then its arguments.
    pub argv: Vec<String>,
    /// The process's exit code (`None`: killed by a signal or never started).
    pub exit_code: Option<i32>,
    /// Whether the point succeeded: exit 0, one result, something committed.
    pub ok: bool,
    /// Why it failed (the last lines of its standard error), if it did.
    pub error: Option<String>,
    /// Wall time of the process, seconds.
    pub wall_s: f64,
    /// CPU time (user + system) of the process and every process it waited for (the
    /// servers), seconds.
    pub cpu_s: f64,
    /// `cpu_s` per committed transaction of the measured interval, microseconds. The CPU
    /// time covers the whole process (start-up, warm-up, population), so this is an upper
    /// bound on the cost of a transaction.
    pub cpu_us_per_commit: Option<f64>,
    /// Start, seconds since the Unix epoch.
    pub started_at_unix_s: u64,
    /// The bench's result (absent when the point failed before writing one).
    pub result: Option<BenchResult>,
}

impl PointRecord {
    /// The committed transactions per second, if the point succeeded.
    pub fn tps(&self) -> Option<f64> {
        self.measured().map(|r| r.throughput_tps)
    }

    /// The average latency, ms, if the point succeeded.
    pub fn avg_ms(&self) -> Option<f64> {
        self.measured().map(|r| r.latency_us.avg / 1000.0)
    }

    /// The CPU per committed transaction, microseconds, split between the client (the
    /// benchmark process itself) and the servers (the rest of the process tree), if the
    /// point succeeded and recorded its client's CPU (runs before `client_cpu_s` did not).
    /// Like [`PointRecord::cpu_us_per_commit`], an upper bound: set-up counts too.
    pub fn cpu_split_us_per_commit(&self) -> Option<CpuSplit> {
        let b = self.measured()?;
        (b.client_cpu_s > 0.0 && b.committed > 0).then(|| {
            let per = |s: f64| s * 1e6 / b.committed as f64;
            CpuSplit { client_us: per(b.client_cpu_s), servers_us: per((self.cpu_s - b.client_cpu_s).max(0.0)) }
        })
    }

    /// The bench's figures, only if the point succeeded: a failed point's figures (a
    /// partial result) are never shown or compared.
    pub fn measured(&self) -> Option<&BenchResult> {
        self.result.as_ref().filter(|_| self.ok)
    }
}

/// The path of `id`'s record in `dir`.
pub fn point_path(dir: &Path, id: &str) -> PathBuf {
    dir.join("points").join(format!("{id}.json"))
}

/// Writes a succeeded point's per-second samples and latency percentile tables beside its
/// record (see the module doc); returns the files written.
pub fn write_point_files(dir: &Path, id: &str, result: &BenchResult) -> anyhow::Result<Vec<PathBuf>> {
    let points = dir.join("points");
    fs::create_dir_all(&points).with_context(|| format!("creating {}", points.display()))?;
    let mut files = vec![(points.join(format!("{id}.samples.csv")), crate::samples::to_csv(&result.samples))];
    if let Some(p) = &result.latency_percentiles {
        files.push((points.join(format!("{id}.hgrm")), p.to_hgrm_ms()));
    }
    for (kind, k) in &result.by_kind {
        let safe: String = kind.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        if let Some(p) = &k.latency_percentiles {
            files.push((points.join(format!("{id}.{safe}.hgrm")), p.to_hgrm_ms()));
        }
    }
    for (path, text) in &files {
        fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(files.into_iter().map(|(path, _)| path).collect())
}

/// Writes `value` as pretty JSON to `path` (through a temporary file renamed over it).
pub fn write_pretty<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut data = serde_json::to_vec_pretty(value)?;
    data.push(b'\n');
    let tmp = path.with_extension("json.tmp");
    fs::write(&tmp, &data).with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// Reads `id`'s record in `dir`, if there is a readable one.
pub fn read_point(dir: &Path, id: &str) -> Option<PointRecord> {
    let data = fs::read(point_path(dir, id)).ok()?;
    serde_json::from_slice(&data).ok()
}

/// A results directory, read back.
#[derive(Clone, Debug, Default)]
pub struct SuiteDir {
    /// `suite.json` (default if missing).
    pub info: SuiteInfo,
    /// Every point record, sorted by id.
    pub points: Vec<PointRecord>,
}

impl SuiteDir {
    /// The first run (repeat 1) of the cell matching `pred`, if the directory has it.
    pub fn first(&self, pred: impl Fn(&PointRecord) -> bool) -> Option<&PointRecord> {
        self.points.iter().find(|r| r.point.repeat == 1 && pred(r))
    }

    /// The first run of the cross-shard study's cell: `protocol` at `pct` % remote items.
    pub fn cross_shard_cell(&self, protocol: &str, pct: u32) -> Option<&PointRecord> {
        let knob = remote_items_knob(pct);
        self.first(|r| {
            let p = &r.point;
            p.study == Study::CrossShard && p.protocol == protocol && p.knob.as_deref() == Some(knob.as_str())
        })
    }

    /// The first run of YCSB variant `label` under `protocol` on `net`.
    pub fn ycsb_cell(&self, net: &str, label: &str, protocol: &str) -> Option<&PointRecord> {
        self.first(|r| {
            let p = &r.point;
            p.study == Study::Ycsb && p.net == net && p.protocol == protocol && p.knob.as_deref() == Some(label)
        })
    }

    /// The first run of a seeds-layout cell: `study`, shape, protocol, threads, network.
    pub fn seeds_cell(
        &self,
        study: Study,
        shape: Shape,
        protocol: &str,
        threads: u32,
        net: &str,
    ) -> Option<&PointRecord> {
        self.first(|r| {
            let p = &r.point;
            p.study == study && p.shape() == shape && p.protocol == protocol && p.threads == threads && p.net == net
        })
    }
}

/// Reads `suite.json` and every `points/*.json` of `dir`.
pub fn load_dir(dir: &Path) -> anyhow::Result<SuiteDir> {
    let info = match fs::read(dir.join("suite.json")) {
        Ok(data) => serde_json::from_slice(&data).with_context(|| format!("parsing {}/suite.json", dir.display()))?,
        Err(_) => SuiteInfo::default(),
    };
    let points_dir = dir.join("points");
    let mut points = Vec::new();
    let entries = fs::read_dir(&points_dir).with_context(|| format!("reading {}", points_dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.ends_with(".json") || name.ends_with(".bench.json") {
            continue;
        }
        let data = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let record: PointRecord =
            serde_json::from_slice(&data).with_context(|| format!("parsing {}", path.display()))?;
        points.push(record);
    }
    points.sort_by(|a, b| a.point.id.cmp(&b.point.id));
    Ok(SuiteDir { info, points })
}

/// The columns of `points.csv`.
pub const CSV_COLUMNS: [&str; 39] = [
    "id",
    "study",
    "workload",
    "shards",
    "replicas",
    "net",
    "threads",
    "in_flight",
    "protocol",
    "knob",
    "repeat",
    "ok",
    "committed",
    "aborted",
    "tps",
    "avg_ms",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "p999_ms",
    "abort_rate",
    "cpu_us_per_commit",
    "wall_s",
    "duration_s",
    "rejected",
    "unknown",
    "warmup_rejected",
    "warmup_unknown",
    "protocol_aborts",
    "resubmissions",
    "timeout_resends",
    "resends",
    "client_cpu_us_per_commit",
    "servers_cpu_us_per_commit",
    "hold_us_per_commit",
    "fsync_us_per_commit",
    "agreement_rounds_per_commit",
    "accepts_per_commit",
    "metrics_scrapes_failed",
];

/// CPU per committed transaction of a point, microseconds, by side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuSplit {
    /// The benchmark process (the client's threads).
    pub client_us: f64,
    /// The servers (every other process of the point's tree).
    pub servers_us: f64,
}

/// `points` as CSV, one row per point in [`CSV_COLUMNS`] order; a failed point has its
/// figures empty.
pub fn points_csv(points: &[PointRecord]) -> String {
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    for r in points {
        let p = &r.point;
        let mut row = vec![
            p.id.clone(),
            p.study.name().to_string(),
            p.workload.clone(),
            p.shards.to_string(),
            p.replicas.to_string(),
            p.net.clone(),
            p.threads.to_string(),
            p.in_flight.to_string(),
            p.protocol.clone(),
            p.knob.clone().unwrap_or_default(),
            p.repeat.to_string(),
            r.ok.to_string(),
        ];
        match r.measured() {
            Some(b) => {
                let l = &b.latency_us;
                let ms = |us: f64| format!("{:.3}", us / 1000.0);
                row.extend([
                    b.committed.to_string(),
                    b.aborted.to_string(),
                    format!("{:.1}", b.throughput_tps),
                    ms(l.avg),
                    ms(l.p50 as f64),
                    ms(l.p90 as f64),
                    ms(l.p99 as f64),
                    ms(l.p999 as f64),
                    format!("{:.4}", b.abort_rate),
                    r.cpu_us_per_commit.map(|c| format!("{c:.1}")).unwrap_or_default(),
                ]);
            }
            None => row.extend(std::iter::repeat_n(String::new(), 10)),
        }
        row.push(format!("{:.2}", r.wall_s));
        row.push(format!("{}", p.duration_s));
        match r.measured() {
            Some(b) => row.extend(
                [
                    b.rejected,
                    b.unknown,
                    b.warmup_rejected,
                    b.warmup_unknown,
                    b.protocol_aborts,
                    b.resubmissions,
                    b.timeout_resends,
                    b.resends,
                ]
                .map(|n| n.to_string()),
            ),
            None => row.extend(std::iter::repeat_n(String::new(), 8)),
        }
        match r.cpu_split_us_per_commit() {
            Some(c) => row.extend([format!("{:.1}", c.client_us), format!("{:.1}", c.servers_us)]),
            None => row.extend([String::new(), String::new()]),
        }
        row.extend(server_columns(r));
        out.push_str(&row.iter().map(|c| csv_field(c)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

/// The servers' figures per committed transaction of a succeeded point (their metrics'
/// differences over the measured interval, per commit the servers counted), and the scrapes
/// that failed; empty for a point without them (failed, `--metrics off`, or recorded before
/// they existed).
fn server_columns(r: &PointRecord) -> [String; 5] {
    let Some(m) = r.measured().and_then(|b| b.server_metrics.as_ref()) else { return Default::default() };
    let failed = m.failed.len().to_string();
    match m.per_commit() {
        Some(p) => [
            p.hold_us.map(|h| format!("{h:.1}")).unwrap_or_default(),
            format!("{:.1}", p.fsync_us),
            format!("{:.3}", p.agreement_rounds),
            format!("{:.3}", p.accepts),
            failed,
        ],
        None => [String::new(), String::new(), String::new(), String::new(), failed],
    }
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Today's date (UTC) as `YYYY-MM-DD`, from seconds since the Unix epoch.
pub fn utc_date(unix_s: u64) -> String {
    // Howard Hinnant's civil_from_days.
    let z = (unix_s / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Seconds since the Unix epoch, now.
pub fn now_unix_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
