use super::*;
use crate::suite::fixtures;

#[test]
fn the_report_has_every_section_and_the_seeds_layout() {
    let dir = fixtures::suite(&[]);
    let md = render(&dir);
    for heading in [
        "# Luigi benchmark suite report",
        "## Failed points\n\nNone.",
        "## Precision: repeated cells",
        "### micro, 2 shard(s) x 3 replica(s), luigi",
        "### tpcc, 1 shard(s) x 1 replica(s), direct",
        "### micro: luigi / occ",
        "### tpcc: luigi / direct",
        "## Cross-shard study",
        "## Seed 004",
        "## Scale study",
        "## Commit latency in one-way delays",
        "## YCSB: workloads A-F and seed 003's K2 mixes",
        "### `none`",
        "### `geo`",
        "### The K2 layout (`none`)",
    ] {
        assert!(md.contains(heading), "missing {heading:?}");
    }
    assert!(md.contains("| threads | same-region | same-continent | cross-continent | geo |"));
    // micro 1x1 luigi at 8 threads, same region: 8,000 tx/s at 7 ms (the fixture's figures).
    assert!(md.contains("| 8 | 8,000 / 7.0 | 8,000 / 91.0 | 8,000 / 241.0 | 8,000 / 451.0 |"), "{md}");
    // luigi / occ: twice the throughput at half the latency.
    assert!(md.contains("| 1x1 | 1 | 2.00x, 0."), "{md}");
    assert!(md.contains("git commit: `0123abcd`"));
    assert!(md.contains("| workload | luigi | occ | 2pl | direct |"), "{md}");
    assert!(md.contains("| k2-50-50-zipfian | occ | "), "{md}");
}

#[test]
fn a_failed_point_shows_as_failed_and_is_listed() {
    let dir = fixtures::suite(&["micro-1x1-same-region-t8-luigi", "seed004-micro-2x1-none-t1-memory-2pl"]);
    let md = render(&dir);
    assert!(md.contains("| 8 | FAILED | 8,000 / 91.0 |"), "{md}");
    assert!(md.contains("| `micro-1x1-same-region-t8-luigi` | 1 | exit 1: luigi: error: no transaction committed |"));
    assert!(md.contains("| 1 | 2pl | FAILED |"), "{md}");
    // The ratio of a failed cell is failed, not made up.
    assert!(md.contains("| 1x1 | 8 | FAILED |"), "{md}");
    assert!(md.contains("2 failed"));
}

/// The counts table lists only the points with a resend, a resubmission or a failed answer
/// (warm-up ones included), never a failed point's figures.
#[test]
fn resends_resubmissions_and_warm_up_answers_are_listed_per_point() {
    let mut dir = fixtures::suite(&["micro-1x1-geo-t8-2pl"]);
    assert!(render(&dir).contains("## Resends, resubmissions and failed answers\n\nPer point"));
    assert!(render(&dir).contains("`points/<id>.hgrm`.\n\nNone."));
    for r in &mut dir.points {
        let b = r.result.as_mut();
        match (r.point.id.as_str(), b) {
            ("micro-1x1-geo-t8-occ", Some(b)) => {
                (b.protocol_aborts, b.resubmissions, b.timeout_resends, b.resends) = (50, 40, 3, 2);
                b.warmup_unknown = 7;
            }
            ("micro-1x1-geo-t8-2pl", Some(b)) => b.resends = 9,
            ("micro-1x1-geo-t8-2pl", None) => {
                r.result = Some(fixtures::result(&r.point, 1.0, 1.0));
                r.result.as_mut().unwrap().resends = 9;
            }
            _ => {}
        }
    }
    let md = render(&dir);
    assert!(md.contains("| `micro-1x1-geo-t8-occ` | 50 | 40 | 3 | 2 | 0 | 0 | 0 | 7 |"), "{md}");
    assert!(!md.contains("| `micro-1x1-geo-t8-2pl` | 0"), "a failed point's partial figures are not shown");
}

#[test]
fn precision_reports_the_spread_of_repeated_cells() {
    let dir = fixtures::suite(&[]);
    let md = render(&dir);
    // The fixture's repeats are 1 % apart: 2 runs, spread 1 % of the mean.
    assert!(md.contains("| `micro-2x3-geo-t8-luigi` | 2/2 | 4,020 | 1.0 % |"), "{md}");
    assert!(md.contains("Median throughput spread over the repeated cells: 1.0 %."));
}

#[test]
fn latency_is_in_one_way_delays_with_p99_only_for_enough_commits() {
    let dir = fixtures::suite(&[]);
    let md = render(&dir);
    // 1x1 luigi: avg 451 ms = 3.01 D, p50 the same, p90 1.5x; the fixture commits 1000 tx/s
    // for 6 s, so p99 is printed.
    assert!(md.contains("| 1x1 | 3.01 / 3.01 / 4.51 / 6.01 (n=6000)"), "{md}");
}

#[test]
fn the_cross_shard_rows_follow_the_remote_share() {
    let md = render(&fixtures::suite(&[]));
    let at = |pct: &str| md.find(&format!("| {pct} % |")).unwrap_or_else(|| panic!("no {pct} % row"));
    assert!(at("5") < at("10") && at("10") < at("15") && at("15") < at("20"));
}
