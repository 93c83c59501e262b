//! Tests of `report`.

use super::*;
use crate::stats::LatencyRecorder;

fn sample(protocol: &str, committed: u64, tps: f64) -> BenchResult {
    let mut rec = LatencyRecorder::new();
    for v in 1..=1000 {
        rec.record_us(v * 10);
    }
    let mut params = BTreeMap::new();
    params.insert("keys".to_string(), serde_json::json!(1_000_000));
    params.insert("ops".to_string(), serde_json::json!(4));
    params.insert("read_ratio".to_string(), serde_json::json!(0.5));
    params.insert("cross_shard_pct".to_string(), serde_json::json!(10));
    BenchResult {
        protocol: protocol.to_string(),
        transactional: protocol != "direct",
        workload: "ycsb-a".to_string(),
        shards: 3,
        replicas: 3,
        threads: 8,
        in_flight: 16,
        net: "lan".to_string(),
        durability: "memory".to_string(),
        duration_s: 30.0,
        warmup_s: 5.0,
        committed,
        rolled_back: 12,
        aborted: 1234,
        timeout_resends: 40,
        resends: 30,
        resubmissions: 1200,
        protocol_aborts: 1300,
        rejected: 2,
        unknown: 1,
        warmup_rejected: 0,
        warmup_unknown: 0,
        throughput_tps: tps,
        abort_rate: abort_rate(committed, 1234),
        latency_us: rec.summary(),
        cross_shard_committed: committed / 4,
        single_shard_latency_us: rec.summary(),
        cross_shard_latency_us: LatencySummary { avg: 20_000.0, p50: 19_000, p99: 40_000, ..rec.summary() },
        params,
        started_at_unix_s: 1_700_000_000,
        second_round_rate: 0.25,
        fast_path_rate: 0.5,
        fast_path_asked_rate: 1.0,
        by_kind: BTreeMap::new(),
        samples: Vec::new(),
        latency_percentiles: None,
        client_cpu_s: 0.0,
        server_metrics: None,
        cpu: None,
    }
}

#[test]
fn side_by_side_puts_each_protocol_in_its_column_and_each_cell_in_its_row() {
    let mut other_net = sample("luigi", 10, 500.0);
    other_net.net = "geo".into();
    let results = vec![
        sample("luigi", 100_000, 12_345.0),
        sample("occ", 90_000, 2_000.4),
        sample("direct", 200_000, 30_000.0),
        other_net,
    ];
    let table = render_side_by_side(&results);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[0].ends_with("| luigi | occ | direct (non-transactional) |"), "{}", lines[0]);
    assert!(lines[2].contains("| ycsb-a | 3x3 | lan | 8 | 16 |"), "{}", lines[2]);
    assert!(
        lines[2].contains("| 12,345 / 5.01 (1.2 % aborted) [0.01 resubmits/commit] {25.0 % cross} | 2,000 / 5.01"),
        "{}",
        lines[2]
    );
    assert!(lines[3].contains("| geo |") && lines[3].ends_with(" - | - |"), "{}", lines[3]);
}

fn scratch_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "luigi-bench-report-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
    ));
    let _ = fs::remove_dir_all(&d);
    d
}

#[test]
fn thousands() {
    assert_eq!(format_thousands(0), "0");
    assert_eq!(format_thousands(7), "7");
    assert_eq!(format_thousands(999), "999");
    assert_eq!(format_thousands(1000), "1,000");
    assert_eq!(format_thousands(52_314), "52,314");
    assert_eq!(format_thousands(999_999), "999,999");
    assert_eq!(format_thousands(1_234_567), "1,234,567");
    assert_eq!(format_thousands(u64::MAX), "18,446,744,073,709,551,615");
}

#[test]
fn abort_rate_convention() {
    assert_eq!(abort_rate(0, 0), 0.0);
    assert_eq!(abort_rate(3, 1), 0.25);
    assert_eq!(abort_rate(0, 5), 1.0);
}

#[test]
fn json_round_trip() {
    let dir = scratch_dir("rt");
    let path = dir.join("nested/deeper/results.json");
    let results = vec![sample("luigi", 1_569_420, 52_314.0), sample("2pc", 900, 30.5)];
    write_json(&path, &results).unwrap();
    let back = read_json(&path).unwrap();
    assert_eq!(back, results);

    // Pretty-printed array, no temp files left behind.
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("[\n"));
    let entries: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(entries, vec![std::ffi::OsString::from("results.json")]);

    // Overwrite replaces the whole file.
    write_json(&path, &results[..1]).unwrap();
    assert_eq!(read_json(&path).unwrap(), results[..1].to_vec());

    // Empty array.
    write_json(&path, &[]).unwrap();
    assert!(read_json(&path).unwrap().is_empty());

    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn errors_name_the_path() {
    let dir = scratch_dir("err");
    let missing = dir.join("missing.json");
    let err = format!("{:#}", read_json(&missing).unwrap_err());
    assert!(err.contains("missing.json"), "{err}");

    fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    fs::write(&bad, "[{").unwrap();
    let err = format!("{:#}", read_json(&bad).unwrap_err());
    assert!(err.contains("bad.json"), "{err}");

    // Parent "directory" is a regular file: cannot create it.
    let blocked = bad.join("out.json");
    let err = format!("{:#}", write_json(&blocked, &[]).unwrap_err());
    assert!(err.contains("out.json"), "{err}");

    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn table_lines_up() {
    let results =
        vec![sample("luigi", 1_569_420, 52_314.4), sample("2pc", 900, 30.5), sample("tapir-long-name", 0, 0.0)];
    let table = render_table(&results);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), results.len() + 1, "{table}");
    let width = lines[0].chars().count();
    for l in &lines {
        assert_eq!(l.chars().count(), width, "misaligned:\n{table}");
    }
    assert!(lines[0].starts_with("protocol"));
    assert!(lines[0].ends_with("2nd-round %  fast %  asked %"));
    for h in HEADERS {
        assert!(lines[0].contains(h), "missing header {h}");
    }
    // Right-aligned numeric columns end at the same offset as their header.
    let tps_end = lines[0].find("tps").unwrap() + 3;
    assert_eq!(&lines[1][tps_end - 6..tps_end], "52,314");
    assert_eq!(&lines[2][tps_end - 2..tps_end], "31");
    assert!(lines[1].contains("1,569,420"));
    // 1..=1000 * 10 µs: p50 = 5000 µs = 5.00 ms, p99 = 9.90 ms.
    assert!(lines[1].contains("5.00"));
    assert!(lines[1].contains("9.90"));
    let abort_end = lines[0].find("abort %").unwrap() + "abort %".len();
    assert_eq!(lines[1][..abort_end].trim_end().rsplit(' ').next(), Some("0.1"), "{}", lines[1]);
    assert_eq!(lines[3][..abort_end].trim_end().rsplit(' ').next(), Some("100.0"), "{}", lines[3]);
    assert!(lines[1].trim_end().ends_with("25.0    50.0    100.0"), "{}", lines[1]);
}

#[test]
fn empty_table_is_header_only() {
    let t = render_table(&[]);
    assert_eq!(t.lines().count(), 1);
    let m = render_markdown(&[]);
    assert_eq!(m.lines().count(), 2);
}

#[test]
fn markdown_shape() {
    let mut r = sample("luigi", 1_569_420, 52_314.0);
    r.net = "a|b".to_string();
    let md = render_markdown(&[r]);
    let lines: Vec<&str> = md.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].starts_with("| protocol | workload |"));
    assert!(lines[0].ends_with("| abort % | rejected | unknown | 2nd-round % | fast % | asked % |"));
    assert!(lines[1].starts_with("| --- | --- | ---: |"));
    assert!(lines[2].contains("| 52,314 |"));
    assert!(lines[2].contains("a\\|b"));
    // Same number of (unescaped) cell separators on every line.
    let seps = |l: &str| l.replace("\\|", "").matches('|').count();
    assert!(lines.iter().all(|l| seps(l) == NCOLS + 1));
}

#[test]
fn every_report_names_the_protocol_and_marks_direct_non_transactional() {
    let results = vec![sample("occ", 1000, 100.0), sample("direct", 2000, 200.0)];
    for text in [
        render_table(&results),
        render_markdown(&results),
        render_latency_split(&results),
        render_latency_split_markdown(&results),
    ] {
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("| ---")).collect();
        assert!(lines[0].trim_start_matches("| ").starts_with("protocol"), "{text}");
        assert!(lines[1].trim_start_matches("| ").starts_with("occ "), "{text}");
        assert!(!lines[1].contains("non-transactional"), "{text}");
        assert!(lines[2].trim_start_matches("| ").starts_with("direct (non-transactional)"), "{text}");
    }
    let mut with_kinds = sample("direct", 1, 1.0);
    with_kinds.by_kind.insert(
        "k".into(),
        KindResult {
            committed: 1,
            rolled_back: 0,
            aborted: 0,
            rejected: 0,
            unknown: 0,
            timeout_resends: 0,
            resends: 0,
            resubmissions: 0,
            protocol_aborts: 0,
            cross_shard: 0,
            throughput_tps: 1.0,
            latency_us: LatencySummary::default(),
            latency_percentiles: None,
        },
    );
    assert!(render_kinds(&with_kinds).starts_with("direct (non-transactional) ycsb-a"));
    // JSON: the name, and the flag.
    let json = serde_json::to_value(&results).unwrap();
    assert_eq!((json[0]["protocol"].as_str(), json[0]["transactional"].as_bool()), (Some("occ"), Some(true)));
    assert_eq!((json[1]["protocol"].as_str(), json[1]["transactional"].as_bool()), (Some("direct"), Some(false)));
    assert_eq!(json[1]["protocol_aborts"].as_u64(), Some(1300));
    assert_eq!(json[1]["cross_shard_latency_us"]["p99"].as_u64(), Some(40_000));
}

#[test]
fn results_written_before_the_protocol_fields_still_read() {
    let mut old = serde_json::to_value(vec![sample("luigi", 10, 1.0)]).unwrap();
    for field in [
        "transactional",
        "protocol_aborts",
        "cross_shard_committed",
        "single_shard_latency_us",
        "cross_shard_latency_us",
    ] {
        old[0].as_object_mut().unwrap().remove(field);
    }
    let back: Vec<BenchResult> = serde_json::from_value(old).unwrap();
    assert!(back[0].transactional, "Luigi, the only protocol then");
    assert_eq!((back[0].protocol_aborts, back[0].cross_shard_committed), (0, 0));
}

#[test]
fn the_latency_split_lines_up_with_both_halves() {
    let results = vec![sample("2pl", 4_000, 400.0), sample("luigi", 8, 0.8)];
    let table = render_latency_split(&results);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].ends_with("protocol aborts  aborted  resubmits  timeout resends  resends"), "{table}");
    let width = lines[0].chars().count();
    assert!(lines.iter().all(|l| l.chars().count() == width), "misaligned:\n{table}");
    for h in SPLIT_HEADERS {
        assert!(lines[0].contains(h), "missing header {h}");
    }
    // 4,000 committed, a quarter cross-shard: 3,000 single, 1,000 cross.
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        cells,
        vec![
            "2pl", "ycsb-a", "3", "8", "lan", "3,000", "5.01", "5.00", "9.90", "1,000", "20.00", "19.00", "40.00",
            "1,300", "1,234", "1,200", "40", "30"
        ]
    );
    let md = render_latency_split_markdown(&results);
    let seps = |l: &str| l.matches('|').count();
    assert!(md.lines().all(|l| seps(l) == SPLIT_NCOLS + 1), "{md}");
}

#[test]
fn cpu_lines_show_the_interval_per_committed_transaction_and_a_dash_for_unseen_servers() {
    use crate::cpu::CpuInterval;
    let mut seen = sample("luigi", 100_000, 10_000.0);
    seen.cpu = Some(CpuInterval { client_s: 1.0, servers_s: Some(4.0) });
    let mut unseen = sample("occ", 1_000, 100.0);
    unseen.cpu = Some(CpuInterval { client_s: 0.5, servers_s: None });
    let old = sample("2pl", 1_000, 100.0);
    let text = render_cpu(&[seen, unseen, old]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "a run without CPU figures has no line: {text}");
    assert!(lines[0].contains(": 50 us per committed transaction (client 1.00 s, servers 4.00 s"), "{text}");
    assert!(lines[1].contains(": - us per committed transaction (client 0.50 s, servers - s"), "{text}");
}
