//! Runs the points of a suite, each as a subprocess of this same binary (`luigi bench ...
//! --json <dir>/points/<id>.bench.json --no-progress`), so the exact command is recorded and
//! a crashing point cannot take the suite down. Each point's record (its result, argv, exit
//! status, wall time and the CPU time of its process tree) goes to `points/<id>.json`, a
//! succeeded point's samples and percentiles beside it (`points/<id>.samples.csv`, `.hgrm`),
//! its output to `logs/<id>.log`. A point that fails or commits nothing is recorded failed,
//! never replaced by an older figure; `--resume` skips only points recorded as succeeded.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use crate::report::{read_json, BenchResult};
use crate::suite::matrix::Point;
use crate::suite::results::{now_unix_s, point_path, read_point, write_point_files, write_pretty, PointRecord};

/// Lines of a failed point's output kept in its record.
const ERROR_LINES: usize = 6;

/// How to run the points.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The `luigi` binary (this one).
    pub exe: PathBuf,
    /// The run directory.
    pub dir: PathBuf,
    /// Draw a progress bar.
    pub progress: bool,
}

/// What a run of the suite did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Points run now.
    pub ran: Vec<String>,
    /// Points skipped: recorded as succeeded already (`--resume`).
    pub skipped: Vec<String>,
    /// Points that failed now.
    pub failed: Vec<String>,
}

/// The points of `points` still to run in `dir`: those without a record of success.
pub fn pending<'a>(dir: &Path, points: &'a [Point]) -> (Vec<&'a Point>, Vec<String>) {
    let mut todo = Vec::new();
    let mut done = Vec::new();
    for p in points {
        match read_point(dir, &p.id) {
            Some(r) if r.ok && r.point.argv("") == p.argv("") => done.push(p.id.clone()),
            _ => todo.push(p),
        }
    }
    (todo, done)
}

/// Runs every point of `points` not yet recorded as succeeded in the run directory.
pub fn run_points(opts: &RunOptions, points: &[Point]) -> anyhow::Result<Outcome> {
    let (todo, skipped) = pending(&opts.dir, points);
    let mut outcome = Outcome { skipped, ..Outcome::default() };
    let bar = opts.progress.then(|| progress_bar(todo.len()));
    let total_estimate: f64 = todo.iter().map(|p| p.estimate_s()).sum();
    let (mut estimated_done, started) = (0.0, Instant::now());
    for point in todo {
        if let Some(bar) = &bar {
            let left = time_left(total_estimate, estimated_done, started.elapsed().as_secs_f64());
            bar.set_message(format!("{} (about {} left)", point.id, format_duration(left)));
        }
        let record = run_point(opts, point)?;
        estimated_done += point.estimate_s();
        let line = match &record.result {
            Some(r) if record.ok => {
                format!("{}: {:.0} tx/s, avg {:.2} ms", point.id, r.throughput_tps, r.latency_us.avg / 1000.0)
            }
            _ => format!("{}: FAILED ({})", point.id, record.error.as_deref().unwrap_or("no result")),
        };
        match &bar {
            Some(bar) => {
                bar.println(line);
                bar.inc(1);
            }
            None => eprintln!("{line}"),
        }
        if !record.ok {
            outcome.failed.push(point.id.clone());
        }
        outcome.ran.push(point.id.clone());
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(outcome)
}

/// Seconds left: the estimate of what is left, scaled by how the estimate fared so far.
fn time_left(total_estimate: f64, estimated_done: f64, elapsed: f64) -> f64 {
    let left = (total_estimate - estimated_done).max(0.0);
    if estimated_done > 0.0 {
        left * (elapsed / estimated_done)
    } else {
        left
    }
}

/// `1h02m`, `3m05s`, `42s`.
pub fn format_duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

fn progress_bar(points: usize) -> ProgressBar {
    let bar = ProgressBar::new(points as u64);
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

pub use crate::cpu::children_cpu_s;

/// Runs one point and records it.
fn run_point(opts: &RunOptions, point: &Point) -> anyhow::Result<PointRecord> {
    let bench_json = opts.dir.join("points").join(format!("{}.bench.json", point.id));
    let log_path = opts.dir.join("logs").join(format!("{}.log", point.id));
    fs::create_dir_all(opts.dir.join("points"))?;
    fs::create_dir_all(opts.dir.join("logs"))?;
    // Never an older figure: whatever a previous attempt left goes first.
    let _ = fs::remove_file(&bench_json);
    let _ = fs::remove_file(point_path(&opts.dir, &point.id));
    let args = point.argv(&bench_json.to_string_lossy());
    let mut argv = vec![opts.exe.to_string_lossy().into_owned()];
    argv.extend(args.iter().cloned());
    let log = File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let started_at_unix_s = now_unix_s();
    let cpu_before = children_cpu_s();
    let started = Instant::now();
    let status = Command::new(&opts.exe).args(&args).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).status();
    let wall_s = started.elapsed().as_secs_f64();
    let cpu_s = children_cpu_s() - cpu_before;
    let exit_code = status.as_ref().ok().and_then(|s| s.code());
    let results = read_json(&bench_json).ok();
    let _ = fs::remove_file(&bench_json);
    let result: Option<BenchResult> = results.and_then(|mut r| if r.len() == 1 { r.pop() } else { None });
    let committed = result.as_ref().map_or(0, |r| r.committed);
    let ok = matches!(&status, Ok(s) if s.success()) && committed > 0;
    let error = (!ok).then(|| failure_text(&status, &log_path, result.is_some(), committed));
    let record = PointRecord {
        point: point.clone(),
        argv,
        exit_code,
        ok,
        error,
        wall_s,
        cpu_s,
        cpu_us_per_commit: (committed > 0).then(|| cpu_s * 1e6 / committed as f64),
        started_at_unix_s,
        result,
    };
    if let Some(result) = record.measured() {
        write_point_files(&opts.dir, &point.id, result)?;
    }
    write_pretty(&point_path(&opts.dir, &point.id), &record)?;
    Ok(record)
}

/// Why a point failed: the exit status and the last lines of its output.
fn failure_text(
    status: &std::io::Result<std::process::ExitStatus>,
    log: &Path,
    had_result: bool,
    committed: u64,
) -> String {
    let head = match status {
        Err(e) => format!("could not start: {e}"),
        Ok(s) if !s.success() => s.to_string(),
        Ok(_) if !had_result => "no result written".to_string(),
        Ok(_) => format!("{committed} committed"),
    };
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(ERROR_LINES)..].join(" / ");
    if tail.is_empty() {
        head
    } else {
        format!("{head}: {tail}")
    }
}

#[cfg(test)]
mod tests;
