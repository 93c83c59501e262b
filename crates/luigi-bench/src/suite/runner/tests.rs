use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::suite::fixtures;
use crate::suite::matrix::matrix;

/// A stand-in for the `luigi` binary: writes `result` to the --json path it is given, or
/// fails (exit 1, an error on stderr) for the occ points.
fn fake_luigi(dir: &Path, result: &BenchResult) -> PathBuf {
    let fixture = dir.join("result.json");
    crate::report::write_json(&fixture, std::slice::from_ref(result)).unwrap();
    let exe = dir.join("fake-luigi");
    let script = format!(
        "#!/bin/sh\njson=\"\"\nwhile [ $# -gt 0 ]; do if [ \"$1\" = --json ]; then json=\"$2\"; fi; shift; done\n\
         case \"$json\" in *-occ.bench.json) echo 'luigi: error: boom' >&2; exit 1;; esac\n\
         cp {} \"$json\"\n",
        fixture.display()
    );
    fs::write(&exe, script).unwrap();
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

fn four_points() -> Vec<Point> {
    matrix(false).into_iter().filter(|p| p.id.starts_with("micro-1x1-same-region-t1-")).collect()
}

#[test]
fn every_point_is_recorded_and_a_failing_one_is_marked_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let points = four_points();
    let exe = fake_luigi(tmp.path(), &fixtures::result(&points[0], 500.0, 4.0));
    let opts = RunOptions { exe: exe.clone(), dir: tmp.path().join("run"), progress: false };
    let outcome = run_points(&opts, &points).unwrap();
    assert_eq!(outcome.ran.len(), 4);
    assert_eq!(outcome.failed, vec!["micro-1x1-same-region-t1-occ".to_string()]);
    let ok = read_point(&opts.dir, "micro-1x1-same-region-t1-luigi").unwrap();
    assert!(ok.ok);
    assert_eq!(ok.exit_code, Some(0));
    assert_eq!(ok.argv[0], exe.to_string_lossy());
    assert_eq!(&ok.argv[1..3], &["bench".to_string(), "micro".to_string()]);
    assert_eq!(ok.result.as_ref().map(|r| r.throughput_tps), Some(500.0));
    assert!(ok.cpu_us_per_commit.is_some());
    let failed = read_point(&opts.dir, "micro-1x1-same-region-t1-occ").unwrap();
    assert!(!failed.ok);
    assert_eq!(failed.exit_code, Some(1));
    assert!(failed.error.as_deref().unwrap().contains("boom"), "{:?}", failed.error);
    // The bench's own file is folded into the record and removed.
    assert!(!opts.dir.join("points/micro-1x1-same-region-t1-luigi.bench.json").exists());
}

#[test]
fn resume_skips_succeeded_points_and_reruns_failed_and_missing_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let points = four_points();
    let dir = tmp.path().join("run");
    let done = fixtures::record(&points[0], Some((100.0, 5.0)));
    let failed = fixtures::record(&points[1], None);
    crate::suite::results::write_pretty(&point_path(&dir, &points[0].id), &done).unwrap();
    crate::suite::results::write_pretty(&point_path(&dir, &points[1].id), &failed).unwrap();
    let (todo, skipped) = pending(&dir, &points);
    assert_eq!(skipped, vec![points[0].id.clone()]);
    let todo: Vec<&str> = todo.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(todo, vec![points[1].id.as_str(), points[2].id.as_str(), points[3].id.as_str()]);

    let exe = fake_luigi(tmp.path(), &fixtures::result(&points[0], 700.0, 3.0));
    let outcome = run_points(&RunOptions { exe, dir: dir.clone(), progress: false }, &points).unwrap();
    assert_eq!(outcome.skipped, vec![points[0].id.clone()]);
    assert_eq!(outcome.ran.len(), 3);
    // The skipped point keeps its record; nothing is replaced by an older figure.
    assert_eq!(read_point(&dir, &points[0].id), Some(done));
    // A point run with other durations than its record's is not "done".
    let mut longer = points[0].clone();
    longer.duration_s *= 2.0;
    assert_eq!(pending(&dir, std::slice::from_ref(&longer)).0.len(), 1);
}

#[test]
fn a_point_that_writes_no_result_is_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let points = four_points();
    let opts = RunOptions { exe: PathBuf::from("/bin/true"), dir: tmp.path().to_path_buf(), progress: false };
    let outcome = run_points(&opts, &points[..1]).unwrap();
    assert_eq!(outcome.failed.len(), 1);
    let r = read_point(tmp.path(), &points[0].id).unwrap();
    assert!(!r.ok);
    assert_eq!(r.error.as_deref(), Some("no result written"));
    let missing = RunOptions { exe: tmp.path().join("no-such-binary"), ..opts };
    assert_eq!(run_points(&missing, &points[..1]).unwrap().failed.len(), 1);
}

#[test]
fn time_left_scales_the_estimate_by_the_pace_so_far() {
    assert_eq!(time_left(100.0, 0.0, 0.0), 100.0);
    assert_eq!(time_left(100.0, 50.0, 100.0), 100.0);
    assert_eq!(format_duration(42.0), "42s");
    assert_eq!(format_duration(185.0), "3m05s");
    assert_eq!(format_duration(3720.0), "1h02m");
}

#[test]
fn children_cpu_time_is_readable() {
    assert!(children_cpu_s() >= 0.0);
}
