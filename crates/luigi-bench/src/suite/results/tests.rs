use super::*;
use crate::suite::fixtures;
use crate::suite::matrix::matrix;

#[test]
fn points_csv_has_one_row_per_point_and_the_documented_columns() {
    let points = matrix(false);
    let records = vec![fixtures::record(&points[0], Some((1234.5, 9.25))), fixtures::record(&points[1], None)];
    let csv = points_csv(&records);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], CSV_COLUMNS.join(","));
    let ok: Vec<&str> = lines[1].split(',').collect();
    let failed: Vec<&str> = lines[2].split(',').collect();
    assert_eq!(ok.len(), CSV_COLUMNS.len());
    assert_eq!(failed.len(), CSV_COLUMNS.len());
    let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
    assert_eq!(ok[col("id")], points[0].id);
    assert_eq!(ok[col("tps")], "1234.5");
    assert_eq!(ok[col("avg_ms")], "9.250");
    assert_eq!(ok[col("ok")], "true");
    // A failed point has no figures, never an older one.
    assert_eq!(failed[col("ok")], "false");
    assert_eq!(failed[col("tps")], "");
    assert_eq!(failed[col("avg_ms")], "");
}

/// A succeeded point's samples and percentile tables land beside its record, and read back:
/// the samples sum to the point's commits, the `.hgrm` parses and ends at its count.
#[test]
fn a_points_samples_and_percentiles_are_written_beside_it() {
    let tmp = tempfile::tempdir().unwrap();
    let point = &matrix(false)[0];
    let mut result = fixtures::result(point, 100.0, 5.0);
    let mut log = crate::samples::SampleLog::new(std::time::Duration::from_secs(2));
    let mut rec = crate::stats::LatencyRecorder::new();
    for i in 0..result.committed {
        let at = std::time::Duration::from_millis(i * 2000 / result.committed);
        log.record(at, crate::client::TxnStatus::Committed, std::time::Duration::from_millis(5));
        rec.record_us(5000);
    }
    result.samples = log.samples();
    result.latency_percentiles = Some(rec.percentiles());
    let files = write_point_files(tmp.path(), &point.id, &result).unwrap();
    assert_eq!(files.len(), 2);
    let csv = std::fs::read_to_string(tmp.path().join("points").join(format!("{}.samples.csv", point.id))).unwrap();
    let requests: u64 = csv
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("Time"))
        .map(|l| l.split(',').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(requests, result.committed);
    let hgrm = std::fs::read_to_string(tmp.path().join("points").join(format!("{}.hgrm", point.id))).unwrap();
    let rows = crate::hgrm::parse_hgrm(&hgrm).unwrap();
    assert_eq!(rows.last().map(|r| r.total_count), Some(result.committed));
    assert!(rows.iter().all(|r| (r.value - 5.0).abs() < 0.01), "5 ms in ms: {hgrm}");
    // Loading the directory ignores them (only records are points).
    write_pretty(&point_path(tmp.path(), &point.id), &fixtures::record(point, Some((1.0, 1.0)))).unwrap();
    assert_eq!(load_dir(tmp.path()).unwrap().points.len(), 1);
}

#[test]
fn csv_fields_with_commas_are_quoted() {
    assert_eq!(csv_field("remote 5 %"), "remote 5 %");
    assert_eq!(csv_field("a,b"), "\"a,b\"");
    assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
}

#[test]
fn a_directory_reads_back_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    let points = matrix(false);
    let a = fixtures::record(&points[3], Some((10.0, 2.0)));
    let b = fixtures::record(&points[2], None);
    write_pretty(&point_path(tmp.path(), &a.point.id), &a).unwrap();
    write_pretty(&point_path(tmp.path(), &b.point.id), &b).unwrap();
    let info = SuiteInfo { git_commit: "abc".into(), ..SuiteInfo::default() };
    write_pretty(&tmp.path().join("suite.json"), &info).unwrap();
    let dir = load_dir(tmp.path()).unwrap();
    assert_eq!(dir.info, info);
    assert_eq!(dir.points.len(), 2);
    assert_eq!(dir.points[0].point.id.cmp(&dir.points[1].point.id), std::cmp::Ordering::Less);
    assert!(dir.points.contains(&a) && dir.points.contains(&b));
    assert_eq!(read_point(tmp.path(), &a.point.id), Some(a));
    assert_eq!(read_point(tmp.path(), "no-such-point"), None);
}

#[test]
fn utc_dates_are_civil_dates() {
    assert_eq!(utc_date(0), "1970-01-01");
    assert_eq!(utc_date(951_782_400), "2000-02-29");
    assert_eq!(utc_date(1_795_737_600), "2026-11-27");
    assert_eq!(utc_date(4_107_542_399), "2100-02-28");
}

#[test]
fn the_machine_is_read_from_proc() {
    let m = Machine::this();
    assert!(m.cores >= 1);
    assert!(!m.cpu_model.is_empty());
}

#[test]
fn the_wall_time_is_the_time_spent_running_not_the_span_to_a_later_resume() {
    let old = SuiteInfo { started_at_unix_s: 1_000, ended_at_unix_s: 3_392, ..SuiteInfo::default() };
    assert_eq!(old.wall_s(), 2_392, "a run recorded before running_s: end - start");
    // The same run resumed an hour later, the resume running nothing for 0 s.
    let resumed = SuiteInfo { ended_at_unix_s: 7_000, running_s: 2_392, ..old };
    assert_eq!(resumed.wall_s(), 2_392);
}

#[test]
fn cpu_per_commit_splits_into_the_client_and_the_servers() {
    let points = matrix(false);
    let mut r = fixtures::record(&points[0], Some((100.0, 5.0)));
    assert_eq!(r.cpu_split_us_per_commit(), None, "a run that did not record its client's CPU");
    let committed = r.result.as_ref().unwrap().committed as f64;
    r.cpu_s = 3.0;
    r.result.as_mut().unwrap().client_cpu_s = 1.0;
    let split = r.cpu_split_us_per_commit().unwrap();
    assert_eq!((split.client_us, split.servers_us), (1e6 / committed, 2e6 / committed));
    let csv = points_csv(&[r]);
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let at = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(at("client_cpu_us_per_commit"), format!("{:.1}", 1e6 / committed));
    assert_eq!(at("servers_cpu_us_per_commit"), format!("{:.1}", 2e6 / committed));
}

#[test]
fn the_servers_figures_per_commit_are_columns_and_a_failed_scrape_is_counted_not_fatal() {
    use crate::server_metrics::ServerDeltas;
    let points = matrix(false);
    let mut r = fixtures::record(&points[0], Some((100.0, 5.0)));
    let csv = points_csv(std::slice::from_ref(&r));
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let row = |csv: &str| csv.lines().nth(1).unwrap().split(',').map(str::to_string).collect::<Vec<_>>();
    assert_eq!(row(&csv)[col("hold_us_per_commit")], "", "no metrics recorded: empty");
    let deltas = ServerDeltas {
        servers: 2,
        failed: vec!["s0r2 end: connect: refused".into()],
        committed: 200.0,
        hold_s: Some(0.5),
        fsync_s: 0.1,
        agreement_rounds: [("decided".to_string(), 100.0), ("second_round".to_string(), 20.0)].into(),
        accepts_written: 400.0,
        ..ServerDeltas::default()
    };
    r.result.as_mut().unwrap().server_metrics = Some(deltas);
    let cells = row(&points_csv(&[r]));
    assert_eq!(cells[col("hold_us_per_commit")], "2500.0");
    assert_eq!(cells[col("fsync_us_per_commit")], "500.0");
    assert_eq!(cells[col("agreement_rounds_per_commit")], "0.600");
    assert_eq!(cells[col("accepts_per_commit")], "2.000");
    assert_eq!(cells[col("metrics_scrapes_failed")], "1");
}
