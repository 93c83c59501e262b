use super::*;
use crate::suite::fixtures;

/// Width and height of a PNG file, from its IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let data = std::fs::read(path).unwrap();
    assert_eq!(&data[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", path.display());
    assert_eq!(&data[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&data[16..20]), be(&data[20..24]))
}

#[test]
fn every_plot_is_a_png_of_the_expected_size() {
    let tmp = tempfile::tempdir().unwrap();
    let written = draw_all(&fixtures::suite(&[]), tmp.path()).unwrap();
    let names: Vec<String> = written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    // Throughput per workload and shape, latency per workload, cross-shard, scale, the
    // latency CDFs and YCSB.
    assert_eq!(names.len(), 2 * 4 + 2 + 2 + 2, "{names:?}");
    for (path, name) in written.iter().zip(&names) {
        let expected = match name.as_str() {
            "ycsb.png" => PAIR_SIZE,
            n if n.starts_with("throughput") || n.starts_with("latency") => GRID_SIZE,
            _ => SINGLE_SIZE,
        };
        assert_eq!(png_size(path), expected, "{name}");
    }
}

#[test]
fn a_directory_without_points_for_a_plot_draws_none() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = fixtures::suite(&[]);
    dir.points.retain(|r| r.point.study == Study::Scale);
    let written = draw_all(&dir, tmp.path()).unwrap();
    assert_eq!(written, vec![tmp.path().join("scale.png")]);
}

/// A failed point is in its plot's data as failed (at its x, with no figure), never as
/// zero nor left out; its line breaks there; the plot is drawn.
#[test]
fn a_failed_point_is_marked_failed_in_every_plot_it_would_be_in() {
    let tmp = tempfile::tempdir().unwrap();
    let failed = ["micro-2x3-geo-t4-occ", "micro-1x3-geo-t1-luigi", "scale-micro-4x3-geo-t8-luigi"];
    let dir = fixtures::suite(&failed);
    assert!(failed.iter().all(|id| dir.points.iter().any(|r| r.point.id == *id && !r.ok)), "ids of the matrix");
    let occ = |panels: &[Panel], title: &str| {
        let panel = panels.iter().find(|p| p.title == title).unwrap_or_else(|| panic!("{title}"));
        panel.series.iter().find(|s| s.label == "occ").unwrap().clone()
    };
    let line = occ(&throughput_panels(&dir, Study::SeedsMicro, "micro", Shape::new(2, 3)), "micro 2x3, geo");
    assert_eq!(line.failed, vec![4.0]);
    assert!(line.points.iter().all(|p| p.0 != 4.0 && p.1 > 0.0), "{line:?}");
    assert_eq!(line.segments().len(), 2, "the line breaks at the failed point");
    let luigi = latency_panels(&dir, Study::SeedsMicro, "micro")
        .into_iter()
        .find(|p| p.title.starts_with("micro 1x3"))
        .unwrap()
        .series
        .into_iter()
        .find(|s| s.label == "luigi")
        .unwrap();
    assert_eq!(luigi.failed, vec![3.0], "geo is the fourth network");
    let scale = scale_panel(&dir);
    assert_eq!(scale.series[0].failed, vec![4.0], "4 shards");
    // Everything failed in a panel: still drawn, with its failures.
    let mut all_failed = dir.clone();
    all_failed.points.retain(|r| r.point.study == Study::Scale);
    for r in &mut all_failed.points {
        r.ok = false;
    }
    assert!(scale_panel(&all_failed).series.iter().all(|s| s.points.is_empty() && !s.failed.is_empty()));
    assert_eq!(draw_all(&all_failed, tmp.path()).unwrap(), vec![tmp.path().join("scale.png")]);
    assert!(draw_all(&dir, tmp.path()).unwrap().len() >= 10);
}

#[test]
fn ycsb_axis_labels_are_short() {
    let labels: Vec<String> = YCSB_VARIANTS.iter().map(|(l, _)| short_ycsb_label(l)).collect();
    assert_eq!(labels, ["a", "b", "c", "d", "e", "f", "95/5u", "95/5z", "50/50u", "50/50z"]);
}
