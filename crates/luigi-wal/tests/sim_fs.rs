//! The crash model of `SimFs` itself: synced bytes and synced directory entries survive every
//! crash; unsynced ones may be lost, and a kept unsynced tail may be torn; handles do not
//! survive a crash; the capacity gives the error the WAL reports as disk full.

use std::path::Path;

use luigi_wal::fs::{Fs, OpenMode, SimFs};

#[test]
fn synced_bytes_survive_and_unsynced_tails_are_a_possibly_torn_prefix() {
    let (mut lost, mut kept_all, mut torn) = (0, 0, 0);
    for seed in 0..200 {
        let fs = SimFs::new(seed);
        fs.create_dir_all(Path::new("/d")).unwrap();
        fs.sync_dir(Path::new("/")).unwrap();
        let f = fs.open(Path::new("/d/f"), OpenMode::CreateNew).unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        f.write_all_at(b"synced-bytes", 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(b"-unsynced-tail", 12).unwrap();
        assert!(fs.has_unsynced_changes());
        fs.crash();
        assert!(f.len_bytes().is_err(), "a handle from before the crash is stale");
        let bytes = fs.read(Path::new("/d/f")).unwrap();
        assert!(bytes.len() >= 12 && bytes.len() <= 26, "seed {seed}: {bytes:?}");
        assert_eq!(&bytes[..12], b"synced-bytes", "seed {seed}");
        let tail = &bytes[12..];
        let want = &b"-unsynced-tail"[..tail.len()];
        if tail.is_empty() {
            lost += 1;
        } else if tail == want {
            kept_all += usize::from(tail.len() == 14);
        } else {
            // Torn: only the last (at most 8) kept bytes may differ.
            let same = tail.len().saturating_sub(8);
            assert_eq!(&tail[..same], &want[..same], "seed {seed}");
            torn += 1;
        }
        assert!(!fs.has_unsynced_changes());
    }
    assert!(lost > 0 && kept_all > 0 && torn > 0, "lost {lost}, kept {kept_all}, torn {torn}");
}

#[test]
fn directory_changes_are_durable_only_after_a_directory_sync() {
    let (mut vanished, mut survived) = (0, 0);
    for seed in 0..100 {
        let fs = SimFs::new(seed);
        fs.create_dir_all(Path::new("/d")).unwrap();
        fs.sync_dir(Path::new("/")).unwrap();
        let f = fs.open(Path::new("/d/a.tmp"), OpenMode::CreateNew).unwrap();
        f.write_all_at(b"new", 0).unwrap();
        f.sync_all().unwrap();
        let old = fs.open(Path::new("/d/a"), OpenMode::CreateNew).unwrap();
        old.write_all_at(b"old", 0).unwrap();
        old.sync_all().unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        // A rename without a directory sync: atomic, but may be undone.
        fs.rename(Path::new("/d/a.tmp"), Path::new("/d/a")).unwrap();
        fs.crash();
        match fs.read(Path::new("/d/a")).unwrap().as_slice() {
            b"new" => {
                survived += 1;
                assert!(!fs.exists(Path::new("/d/a.tmp")));
            }
            b"old" => {
                vanished += 1;
                assert_eq!(fs.read(Path::new("/d/a.tmp")).unwrap(), b"new");
            }
            other => panic!("seed {seed}: {other:?}"),
        }
        // A directory created without syncing its parent may vanish with everything in it.
        fs.create_dir_all(Path::new("/e")).unwrap();
        let g = fs.open(Path::new("/e/g"), OpenMode::CreateNew).unwrap();
        g.sync_data().unwrap();
        fs.sync_dir(Path::new("/e")).unwrap();
        fs.crash();
        assert_eq!(fs.exists(Path::new("/e")), fs.exists(Path::new("/e/g")));
        // Once synced, it stays.
        fs.create_dir_all(Path::new("/e")).unwrap();
        fs.sync_dir(Path::new("/")).unwrap();
        fs.crash();
        assert!(fs.is_dir(Path::new("/e")));
    }
    assert!(vanished > 0 && survived > 0, "vanished {vanished}, survived {survived}");
}

#[test]
fn knobs_counters_and_errors() {
    let fs = SimFs::new(7);
    fs.create_dir_all(Path::new("/d")).unwrap();
    let f = fs.open(Path::new("/d/f"), OpenMode::CreateNew).unwrap();
    fs.set_capacity(Some(10));
    let err = f.write_all_at(b"0123456789abc", 0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(28), "ENOSPC: {err}");
    assert_eq!(fs.read(Path::new("/d/f")).unwrap(), b"0123456789", "what fits is written");
    assert!(f.set_len(11).is_err());
    fs.set_capacity(None);
    fs.fail_syncs(2);
    assert!(f.sync_data().is_err());
    assert!(fs.sync_dir(Path::new("/d")).is_err());
    f.sync_data().unwrap();
    fs.fail_dir_syncs(1);
    f.sync_data().unwrap();
    assert!(fs.sync_dir(Path::new("/d")).is_err());
    fs.sync_dir(Path::new("/d")).unwrap();
    let stats = fs.stats();
    assert_eq!((stats.file_syncs, stats.dir_syncs, stats.failed_syncs, stats.bytes_written), (2, 1, 3, 10));
    // Bad requests are errors, not panics.
    assert_eq!(fs.open(Path::new("/nope/f"), OpenMode::CreateNew).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    assert_eq!(fs.read(Path::new("/d/missing")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    assert!(fs.open(Path::new("/d/f"), OpenMode::CreateNew).is_err());
    assert!(fs.open(Path::new("/d"), OpenMode::Existing).is_err());
    assert!(fs.remove_file(Path::new("/d")).is_err());
    assert!(fs.read(Path::new("/d/../d/f")).is_err());
    let mut buf = [0; 4];
    assert!(f.read_exact_at(&mut buf, 8).is_err());
    assert!(fs.rename(Path::new("/d"), Path::new("/d/inner")).is_err());
    // Same seed, same calls: same result.
    let run = |seed| {
        let fs = SimFs::new(seed);
        let f = fs.open(Path::new("f"), OpenMode::CreateNew).unwrap();
        fs.sync_dir(Path::new("/")).unwrap();
        f.write_all_at(&[1; 100], 0).unwrap();
        fs.crash();
        fs.read(Path::new("/f")).unwrap()
    };
    assert_eq!(run(3), run(3));
}
