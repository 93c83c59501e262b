use super::*;
use crate::suite::fixtures;

#[test]
fn compare_gives_b_over_a_per_point_and_the_geometric_mean() {
    let a = fixtures::suite(&["micro-1x1-geo-t1-occ"]);
    let mut b = fixtures::suite(&[]);
    for r in &mut b.points {
        if let Some(res) = &mut r.result {
            res.throughput_tps *= 2.0;
            res.latency_us.avg /= 2.0;
        }
    }
    b.points.retain(|r| r.point.id != "micro-1x1-geo-t1-luigi");
    let (both, only_a, only_b) = changes(&a, &b);
    assert_eq!(only_a, vec!["micro-1x1-geo-t1-luigi".to_string()]);
    assert!(only_b.is_empty());
    let c = both.iter().find(|c| c.id == "micro-2x3-geo-t8-occ").unwrap();
    assert!((c.tps_ratio().unwrap() - 2.0).abs() < 1e-9);
    assert!((c.latency_ratio().unwrap() - 0.5).abs() < 1e-9);
    let failed = both.iter().find(|c| c.id == "micro-1x1-geo-t1-occ").unwrap();
    assert_eq!(failed.tps_ratio(), None);
    let md = render(&a, &b, "a", "b");
    assert!(md.contains("throughput 2.000x, average latency 0.500x"), "{md}");
    assert!(md.contains("| `micro-1x1-geo-t1-occ` | FAILED |"), "{md}");
    assert!(md.contains("Only in A: `micro-1x1-geo-t1-luigi`"));
}

#[test]
fn geomean_of_nothing_is_none() {
    assert_eq!(geomean(&[]), None);
    assert!((geomean(&[2.0, 8.0]).unwrap() - 4.0).abs() < 1e-9);
}

#[test]
fn the_change_plot_is_a_png() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("compare.png");
    let a = fixtures::suite(&[]);
    assert!(plot(&a, &a, &path).unwrap());
    let data = std::fs::read(&path).unwrap();
    assert_eq!(&data[..8], b"\x89PNG\r\n\x1a\n");
    let empty = SuiteDir::default();
    assert!(!plot(&empty, &a, &tmp.path().join("none.png")).unwrap());
    assert!(!tmp.path().join("none.png").exists());
}
