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
    assert_eq!(names.len(), 2 * 4 + 2 + 2, "{names:?}");
    for (path, name) in written.iter().zip(&names) {
        let expected =
            if name.starts_with("throughput") || name.starts_with("latency") { GRID_SIZE } else { SINGLE_SIZE };
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
