use std::collections::HashSet;

use super::*;

#[test]
fn point_ids_are_unique_in_both_suites() {
    for quick in [false, true] {
        let points = matrix(quick);
        let ids: HashSet<&str> = points.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids.len(), points.len(), "quick = {quick}");
    }
}

#[test]
fn the_default_suite_covers_the_seeds_matrix_for_every_protocol() {
    let points = matrix(false);
    for (workload, study) in [("micro", Study::SeedsMicro), ("tpcc", Study::SeedsTpcc)] {
        for shape in SEED_SHAPES {
            for net in SEED_NETS {
                for &t in seed_threads(study) {
                    for p in PROTOCOLS {
                        let id = format!("{workload}-{shape}-{net}-t{t}-{p}");
                        assert!(points.iter().any(|q| q.id == id), "missing {id}");
                    }
                }
            }
        }
    }
    for pct in REMOTE_ITEM_PCTS {
        assert!(points.iter().any(|p| p.id == format!("cross-tpcc-2x3-geo-t8-remote{pct}-luigi")));
    }
}

#[test]
fn quick_is_a_subset_of_the_default_suite() {
    let all: HashSet<String> = matrix(false).into_iter().map(|p| p.id).collect();
    let quick = matrix(true);
    assert!(!quick.is_empty());
    assert!(quick.len() < all.len());
    for p in &quick {
        assert!(all.contains(&p.id), "{} is quick only", p.id);
    }
}

#[test]
fn the_estimates_fit_the_budgets() {
    let default = estimate_s(&matrix(false));
    let quick = estimate_s(&matrix(true));
    assert!(default < 60.0 * 60.0, "default suite estimated at {default:.0} s");
    assert!(quick < 5.0 * 60.0, "quick suite estimated at {quick:.0} s");
}

#[test]
fn some_cells_are_repeated_and_share_their_cell_id() {
    let points = matrix(false);
    let repeats: Vec<&Point> = points.iter().filter(|p| p.repeat > 1).collect();
    assert!(!repeats.is_empty());
    for r in repeats {
        let first = points.iter().find(|p| p.id == r.cell_id()).expect("the first run of a repeated cell");
        assert_eq!(first.repeat, 1);
        assert_eq!(first.argv("x"), r.argv("x"));
    }
}

#[test]
fn only_filters_by_substring_or_glob() {
    assert!(matches("2x3-geo", "micro-2x3-geo-t8-luigi"));
    assert!(!matches("2x3-geo", "micro-1x3-geo-t8-luigi"));
    assert!(matches("micro-*-t8-luigi", "micro-2x3-geo-t8-luigi"));
    assert!(!matches("micro-*-t8-luigi", "micro-2x3-geo-t8-occ"));
    assert!(matches("micro-1x1-same-region-t?-occ", "micro-1x1-same-region-t4-occ"));
    assert!(matches("*", "anything"));
    assert!(!matches("tpcc-*", "micro-1x1-geo-t1-luigi"));
    let only: Vec<Point> = matrix(false).into_iter().filter(|p| matches("micro-1x1-same-region-t1-*", &p.id)).collect();
    assert_eq!(only.len(), PROTOCOLS.len());
}

#[test]
fn argv_is_a_bench_command_writing_the_json_given() {
    let p = matrix(false).into_iter().find(|p| p.id == "cross-tpcc-2x3-geo-t8-remote5-occ").unwrap();
    let argv = p.argv("out/p.json");
    assert_eq!(&argv[..2], &["bench".to_string(), "tpcc".to_string()]);
    let joined = argv.join(" ");
    for part in ["--shards 2", "--replicas 3", "--net geo", "--threads 8", "--protocol occ", "--remote-item-pct 5"] {
        assert!(joined.contains(part), "{joined}");
    }
    assert!(joined.ends_with("--json out/p.json --no-progress"), "{joined}");
}

#[test]
fn the_ycsb_study_runs_every_variant_under_every_protocol_and_the_zipfian_k2_mixes_under_geo_too() {
    let points = matrix(false);
    for net in YCSB_NETS {
        let under_geo = |l: &str| l.starts_with("k2-") && l.ends_with("-zipfian");
        for (label, args) in YCSB_VARIANTS.iter().filter(|(l, _)| net == "none" || under_geo(l)) {
            for protocol in PROTOCOLS {
                let id = format!("ycsb-2x3-{net}-t8-{label}-{protocol}");
                let p = points.iter().find(|p| p.id == id).unwrap_or_else(|| panic!("missing {id}"));
                let argv = p.argv("x").join(" ");
                assert!(argv.starts_with("bench ycsb "), "{argv}");
                assert!(argv.contains(&args.join(" ")), "{argv}");
            }
        }
    }
    assert!(matrix(true).iter().any(|p| p.study == Study::Ycsb));
}

#[test]
fn extended_adds_every_other_ycsb_variant_under_geo_and_nothing_the_default_has() {
    let default: HashSet<String> = matrix(false).into_iter().map(|p| p.id).collect();
    let extra = extended_points();
    assert_eq!(extra.len(), 8 * PROTOCOLS.len(), "A-F and the two uniform K2 mixes, every protocol");
    for p in &extra {
        assert_eq!((p.study, p.net.as_str(), p.quick), (Study::Ycsb, "geo", false), "{}", p.id);
        assert!(!default.contains(&p.id), "{} is already in the default suite", p.id);
    }
    let geo_variants: HashSet<String> = matrix(false)
        .into_iter()
        .chain(extra)
        .filter(|p| p.study == Study::Ycsb && p.net == "geo")
        .filter_map(|p| p.knob)
        .collect();
    assert_eq!(geo_variants.len(), YCSB_VARIANTS.len(), "with --extended every variant runs under geo");
}
