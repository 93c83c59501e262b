//! `luigi bench suite` and `luigi report` end to end through the real binary: one tiny point
//! (a 1x1 micro point, half a second) into a temporary results directory, then `--resume`,
//! `luigi report DIR` and `luigi report --compare A B` on it.

use std::path::Path;
use std::process::Command;

use luigi_bench::suite::results::{load_dir, CSV_COLUMNS};

const EXE: &str = env!("CARGO_BIN_EXE_luigi");
const POINT: &str = "micro-1x1-same-region-t1-luigi";

fn luigi(args: &[&str], out: &Path) -> std::process::Output {
    Command::new(EXE).args(args).arg("--out").arg(out).output().unwrap()
}

/// The one run directory under `out`.
fn run_dir(out: &Path) -> std::path::PathBuf {
    let dirs: Vec<_> = std::fs::read_dir(out).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

#[test]
fn a_suite_of_one_tiny_point_writes_its_results_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results");
    let args = ["bench", "suite", "--only", POINT, "--point-duration", "0.5", "--name", "e2e", "--no-progress"];
    let run = luigi(&args, &out);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let dir = run_dir(&out);
    assert!(dir.file_name().unwrap().to_string_lossy().ends_with("-e2e"));
    let suite = load_dir(&dir).unwrap();
    assert_eq!(suite.points.len(), 1);
    let record = &suite.points[0];
    assert!(record.ok, "{:?}", record.error);
    assert_eq!(record.point.id, POINT);
    assert_eq!(record.argv[0], EXE);
    assert!(record.argv.join(" ").contains("bench micro --shards 1 --replicas 1 --net same-region --threads 1"));
    assert!(record.result.as_ref().unwrap().committed > 0);
    assert!(record.cpu_s > 0.0 && record.cpu_us_per_commit.unwrap() > 0.0);
    // Thousands of commits in 0.5 s: the client's and the servers' shares are each ticks of /proc.
    let split = record.cpu_split_us_per_commit().expect("the client's CPU is recorded");
    assert!(split.client_us > 0.0 && split.servers_us > 0.0, "{split:?}");
    assert!(suite.info.ended_at_unix_s >= suite.info.started_at_unix_s);
    assert!(suite.info.machine.cores >= 1);
    let csv = std::fs::read_to_string(dir.join("points.csv")).unwrap();
    assert_eq!(csv.lines().next().unwrap(), CSV_COLUMNS.join(","));
    assert!(csv.lines().nth(1).unwrap().starts_with(POINT));
    let report = std::fs::read_to_string(dir.join("REPORT.md")).unwrap();
    assert!(report.contains("### micro, 1 shard(s) x 1 replica(s), luigi"), "{report}");
    assert!(dir.join("plots/throughput-micro-1x1.png").exists());
    // Per-second samples and the percentile table beside the point's record.
    let samples = std::fs::read_to_string(dir.join(format!("points/{POINT}.samples.csv"))).unwrap();
    let committed: u64 = samples
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("Time"))
        .map(|l| l.split(',').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(committed, record.result.as_ref().unwrap().committed, "{samples}");
    let hgrm = std::fs::read_to_string(dir.join(format!("points/{POINT}.hgrm"))).unwrap();
    assert!(hgrm.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)"), "{hgrm}");

    // --resume: the point is done, nothing runs.
    let resume = Command::new(EXE)
        .args(["bench", "suite", "--only", POINT, "--point-duration", "0.5", "--no-progress", "--resume"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(resume.status.success());
    let said = String::from_utf8_lossy(&resume.stderr);
    assert!(said.contains("0 run, 1 skipped"), "{said}");
    assert_eq!(load_dir(&dir).unwrap().points[0], *record);

    // `luigi report` re-renders without running; --compare of the run with itself is 1x.
    std::fs::remove_file(dir.join("REPORT.md")).unwrap();
    let report = Command::new(EXE).arg("report").arg(&dir).output().unwrap();
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    assert!(dir.join("REPORT.md").exists());
    let compare = Command::new(EXE).args(["report", "--compare"]).arg(&dir).arg(&dir).output().unwrap();
    assert!(compare.status.success(), "{}", String::from_utf8_lossy(&compare.stderr));
    assert!(String::from_utf8_lossy(&compare.stdout).contains("throughput 1.000x"));
    assert!(dir.join("COMPARE.md").exists() && dir.join("COMPARE.png").exists());
}

#[test]
fn a_failed_point_makes_the_suite_exit_non_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results");
    // 0.1 s measured with a 0.025 s warm-up under geo (300 ms a transaction): nothing commits.
    let args = ["bench", "suite", "--only", "micro-1x1-geo-t1-luigi", "--point-duration", "0.1", "--no-progress"];
    let run = luigi(&args, &out);
    assert!(!run.status.success());
    let suite = load_dir(&run_dir(&out)).unwrap();
    assert!(!suite.points[0].ok);
    let report = std::fs::read_to_string(run_dir(&out).join("REPORT.md")).unwrap();
    assert!(report.contains("`micro-1x1-geo-t1-luigi`"), "{report}");
}

#[test]
fn dry_run_prints_the_points_and_the_estimate() {
    let tmp = tempfile::tempdir().unwrap();
    let run = luigi(&["bench", "suite", "--quick", "--dry-run"], tmp.path());
    assert!(run.status.success());
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.contains("micro-2x3-geo-t8-luigi"));
    assert!(text.contains("points, estimated"));
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "a dry run writes nothing");
}

/// `luigi bench suite --dry-run | head -1`: the reader closes the pipe after one line; the
/// listing (larger than a pipe's buffer, so the writer is still writing) ends quietly.
#[test]
fn a_dry_run_whose_reader_closes_the_pipe_ends_without_a_panic() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(EXE)
        .args(["bench", "suite", "--extended", "--dry-run", "--out"])
        .arg(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.contains("luigi bench"), "{first}");
    // The reader (and with it the pipe's read end) is gone here.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
