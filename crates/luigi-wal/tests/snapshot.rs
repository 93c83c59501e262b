//! Snapshot files: atomic save, newest-wins load, crash leftovers, damage detection.

use std::fs;
use std::path::Path;

use luigi_wal::snapshot::snapshot_path;
use luigi_wal::{load_latest_snapshot, save_snapshot, SnapshotMeta, WalError};

fn meta(index: u64, term: u64) -> SnapshotMeta {
    SnapshotMeta { index, term, extra: format!("voters@{index}").into_bytes() }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

fn expect_corrupt(dir: &Path, file: &Path, what: &str) {
    match load_latest_snapshot(dir) {
        Err(WalError::Corrupt { path, reason, .. }) => {
            assert_eq!(path, file);
            assert!(reason.contains(what), "{reason}");
        }
        other => panic!("expected Corrupt ({what}), got {other:?}"),
    }
}

#[test]
fn save_and_load_keep_only_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(load_latest_snapshot(dir.path()).unwrap(), None);
    assert_eq!(load_latest_snapshot(dir.path().join("missing")).unwrap(), None);

    let p10 = save_snapshot(dir.path(), &meta(10, 1), b"state at 10").unwrap();
    assert_eq!(p10, dir.path().join("snapshot-00000000000000000010.snap"));
    assert_eq!(load_latest_snapshot(dir.path()).unwrap(), Some((meta(10, 1), b"state at 10".to_vec())));

    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    save_snapshot(dir.path(), &meta(25, 2), &big).unwrap();
    assert_eq!(names(dir.path()), vec!["snapshot-00000000000000000025.snap"]);
    assert_eq!(load_latest_snapshot(dir.path()).unwrap(), Some((meta(25, 2), big)));

    // Same index again replaces it; empty data and extra are fine.
    let m = SnapshotMeta { index: 25, term: 3, extra: Vec::new() };
    save_snapshot(dir.path(), &m, b"").unwrap();
    assert_eq!(load_latest_snapshot(dir.path()).unwrap(), Some((m, Vec::new())));
}

#[test]
fn leftover_temp_file_from_a_crash_is_ignored_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    save_snapshot(dir.path(), &meta(10, 1), b"good").unwrap();
    // A crash mid-save of snapshot 20: half-written temp file.
    let tmp = dir.path().join("snapshot-00000000000000000020.snap.tmp");
    fs::write(&tmp, b"LUIGISNP garbage").unwrap();
    fs::write(dir.path().join("unrelated.txt"), b"x").unwrap();
    assert_eq!(load_latest_snapshot(dir.path()).unwrap(), Some((meta(10, 1), b"good".to_vec())));
    assert!(!tmp.exists());
    assert!(dir.path().join("unrelated.txt").exists());
}

#[test]
fn corrupt_newest_snapshot_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    save_snapshot(dir.path(), &meta(10, 1), b"older").unwrap();
    let older = fs::read(snapshot_path(dir.path(), 10)).unwrap();
    let path = save_snapshot(dir.path(), &meta(20, 1), b"the newest snapshot data").unwrap();
    let good = fs::read(&path).unwrap();
    // Put the older one back, as if deletion had not happened: it must not be used as a fallback.
    fs::write(snapshot_path(dir.path(), 10), &older).unwrap();

    let mut bad = good.clone();
    *bad.last_mut().unwrap() ^= 1;
    fs::write(&path, &bad).unwrap();
    expect_corrupt(dir.path(), &path, "body CRC mismatch");

    fs::write(&path, &good[..good.len() - 4]).unwrap();
    expect_corrupt(dir.path(), &path, "header says");

    let mut bad = good.clone();
    bad.extend_from_slice(b"extra");
    fs::write(&path, &bad).unwrap();
    expect_corrupt(dir.path(), &path, "header says");

    let mut bad = good.clone();
    bad[17] ^= 1; // data length
    fs::write(&path, &bad).unwrap();
    expect_corrupt(dir.path(), &path, "header CRC mismatch");

    let mut bad = good.clone();
    bad[0] = b'X';
    fs::write(&path, &bad).unwrap();
    expect_corrupt(dir.path(), &path, "bad magic");

    fs::write(&path, &good[..20]).unwrap();
    expect_corrupt(dir.path(), &path, "shorter than");

    // A valid file under the wrong name.
    fs::write(&path, &older).unwrap();
    expect_corrupt(dir.path(), &path, "does not match its file name");

    fs::write(&path, &good).unwrap();
    assert_eq!(load_latest_snapshot(dir.path()).unwrap().unwrap().1, b"the newest snapshot data");
}

#[test]
fn snapshots_can_share_the_log_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = luigi_wal::Wal::open(dir.path(), luigi_wal::WalOptions::default()).unwrap();
    wal.append_and_sync(&[(1u64, 1u64, b"a".to_vec()), (2, 1, b"b".to_vec())]).unwrap();
    save_snapshot(dir.path(), &meta(2, 1), b"ab").unwrap();
    drop(wal);
    let (wal, rec) = luigi_wal::Wal::open(dir.path(), luigi_wal::WalOptions::default()).unwrap();
    assert_eq!((rec.last_index, wal.segment_count()), (Some(2), 1));
    assert_eq!(load_latest_snapshot(dir.path()).unwrap().unwrap().0, meta(2, 1));
}
