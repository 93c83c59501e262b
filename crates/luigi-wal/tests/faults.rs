//! The log under injected faults, on a `SimFs`: a full disk on write, a failed `fdatasync`, a
//! full disk on the first write of a new segment. A "crash" here is `SimFs::crash`, a power loss
//! that keeps only what was synced (and maybe some of what was not).

use std::ops::Range;
use std::sync::Arc;

use luigi_wal::fs::SimFs;
use luigi_wal::{Wal, WalError, WalOptions};

const DIR: &str = "/wal";

fn opts() -> WalOptions {
    WalOptions { segment_bytes: 4096, ..WalOptions::default() }
}

fn batch(range: Range<u64>, term: u64) -> Vec<(u64, u64, Vec<u8>)> {
    range.map(|i| (i, term, format!("entry-{i}").into_bytes())).collect()
}

fn check_entries(wal: &Wal, range: Range<u64>) {
    let got = wal.read(range.clone()).unwrap();
    assert_eq!(got.len() as u64, range.end - range.start);
    for (e, i) in got.iter().zip(range) {
        assert_eq!(e.index, i);
        assert_eq!(e.data, format!("entry-{i}").into_bytes());
    }
}

fn open(fs: &SimFs, options: WalOptions) -> (Wal, luigi_wal::Recovered) {
    Wal::open_in(Arc::new(fs.clone()), DIR, options).unwrap()
}

#[test]
fn disk_full_on_write_keeps_synced_data_and_allows_retry() {
    let fs = SimFs::new(1);
    let (mut wal, _) = open(&fs, opts());
    wal.append_and_sync(&batch(1..11, 1)).unwrap();
    let synced_bytes = fs.used_bytes();

    wal.append(&batch(11..21, 1)).unwrap();
    fs.set_capacity(Some(synced_bytes + 37)); // a partial record reaches the file
    let err = wal.sync().unwrap_err();
    assert!(err.is_disk_full(), "{err}");
    assert!(err.to_string().contains("disk full") && err.to_string().contains("00000000000000000001.wal"), "{err}");
    // The partial write was undone, the buffer kept, the log still usable.
    assert_eq!(fs.used_bytes(), synced_bytes);
    assert_eq!(wal.last_synced_index(), Some(10));
    assert_eq!(wal.last_index(), Some(20));
    check_entries(&wal, 1..21);

    // A crash now loses only the unsynced batch.
    drop(wal);
    fs.crash();
    let (mut wal, rec) = open(&fs, opts());
    assert_eq!(rec.torn_tail, None);
    assert_eq!(rec.last_index, Some(10));
    check_entries(&wal, 1..11);

    // Retry after the disk has room again.
    wal.append(&batch(11..21, 1)).unwrap();
    fs.set_capacity(Some(fs.used_bytes()));
    assert!(wal.sync().unwrap_err().is_disk_full());
    fs.set_capacity(None);
    wal.sync().unwrap();
    drop(wal);
    fs.crash();
    let (wal, _) = open(&fs, opts());
    check_entries(&wal, 1..21);
}

#[test]
fn a_failed_fdatasync_is_an_error_and_poisons_without_claiming_durability() {
    for seed in 0..20 {
        let fs = SimFs::new(seed);
        let (mut wal, _) = open(&fs, opts());
        wal.append_and_sync(&batch(1..6, 1)).unwrap();
        wal.append(&batch(6..9, 1)).unwrap();
        fs.fail_syncs(1);
        let err = wal.sync().unwrap_err();
        assert!(matches!(&err, WalError::Io { op: "fdatasync", .. }), "{err}");
        assert!(err.to_string().contains("00000000000000000001.wal"), "{err}");
        // Nothing after the failure counts as durable, and nothing more is accepted.
        assert_eq!(wal.last_synced_index(), Some(5));
        assert!(matches!(wal.append(&batch(9..10, 1)), Err(WalError::Poisoned { .. })));
        assert!(matches!(wal.sync(), Err(WalError::Poisoned { .. })));
        assert!(matches!(wal.truncate_suffix(2), Err(WalError::Poisoned { .. })));
        drop(wal);
        fs.crash();
        // Whatever the disk kept of the failed batch, the synced prefix is there and valid.
        let (wal, rec) = open(&fs, opts());
        let last = rec.last_index.unwrap();
        assert!((5..=8).contains(&last), "seed {seed}: {rec:?}");
        check_entries(&wal, 1..last + 1);
    }
}

#[test]
fn a_failed_directory_sync_when_rolling_a_segment_poisons() {
    let fs = SimFs::new(3);
    let (mut wal, _) = open(&fs, WalOptions { segment_bytes: 200, ..opts() });
    wal.append_and_sync(&batch(1..6, 1)).unwrap(); // > 200 bytes: the next batch rolls
    wal.append(&batch(6..8, 1)).unwrap();
    fs.fail_dir_syncs(1);
    let err = wal.sync().unwrap_err();
    assert!(matches!(&err, WalError::Io { op: "fsync directory", .. }), "{err}");
    assert!(matches!(wal.sync(), Err(WalError::Poisoned { .. })));
    drop(wal);
    fs.crash();
    let (wal, rec) = open(&fs, opts());
    assert_eq!(rec.last_index, Some(5));
    check_entries(&wal, 1..6);
}

#[test]
fn disk_full_on_first_write_of_new_segment() {
    let fs = SimFs::new(2);
    let (mut wal, _) = open(&fs, WalOptions { segment_bytes: 200, ..opts() });
    wal.append_and_sync(&batch(1..6, 1)).unwrap(); // one segment, > 200 bytes
    wal.append(&batch(6..8, 1)).unwrap();
    fs.set_capacity(Some(fs.used_bytes() + 10));
    assert!(wal.sync().unwrap_err().is_disk_full());
    assert_eq!(wal.segment_count(), 2); // the new, empty segment 6
    fs.set_capacity(None);
    // Raft truncates the unsynced entries and appends others: the empty segment is reused.
    wal.truncate_suffix(6).unwrap();
    wal.append_and_sync(&batch(6..7, 2)).unwrap();
    drop(wal);
    fs.crash();
    let (wal, rec) = open(&fs, opts());
    assert_eq!((rec.segments, rec.last_index, rec.torn_tail), (2, Some(6), None));
    assert_eq!(wal.term(6), Some(2));
}

#[test]
fn a_full_disk_at_open_is_an_error_not_a_panic() {
    let fs = SimFs::new(4);
    fs.set_capacity(Some(0));
    let (mut wal, _) = open(&fs, opts());
    wal.append(&batch(1..3, 1)).unwrap();
    let err = wal.sync().unwrap_err();
    assert!(err.is_disk_full(), "{err}");
    assert_eq!(wal.last_synced_index(), None);
}
