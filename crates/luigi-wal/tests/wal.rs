//! Behaviour of the segmented log across restarts, damage and maintenance operations.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use luigi_wal::{Durability, Wal, WalError, WalOptions, RECORD_OVERHEAD_BYTES};

/// Every test entry carries 16 bytes of data, so every record is 40 bytes.
const RECORD: u64 = (RECORD_OVERHEAD_BYTES + 16) as u64;

fn data(i: u64) -> Vec<u8> {
    format!("{i:016}").into_bytes()
}

fn entries(range: Range<u64>, term: u64) -> Vec<(u64, u64, Vec<u8>)> {
    range.map(|i| (i, term, data(i))).collect()
}

/// 1000-byte segments: 25 records of 40 bytes, or fewer when batches do not divide evenly.
fn small() -> WalOptions {
    WalOptions { segment_bytes: 1000, ..WalOptions::default() }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    v.sort();
    v
}

/// The log holds exactly `range`, all with `term`.
fn assert_holds(wal: &Wal, range: Range<u64>, term: u64) {
    assert_eq!(wal.first_index(), Some(range.start));
    assert_eq!(wal.last_index(), Some(range.end - 1));
    assert_range(wal, range, term);
}

/// Entries of `range` are there, with `term`.
fn assert_range(wal: &Wal, range: Range<u64>, term: u64) {
    let got = wal.read(range.clone()).unwrap();
    assert_eq!(got.len() as u64, range.end - range.start);
    for (e, i) in got.iter().zip(range) {
        assert_eq!((e.index, e.term, &e.data), (i, term, &data(i)));
        assert_eq!(wal.term(i), Some(term));
    }
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x40;
    fs::write(path, bytes).unwrap();
}

/// Writes entries 1..=n (term 1) in synced batches of 10 (400 bytes), so with [`small`] options
/// every segment holds 20 entries: segments start at 1, 21, 41, ...
fn filled(dir: &Path, n: u64, options: WalOptions) -> Wal {
    let (mut wal, rec) = Wal::open(dir, options).unwrap();
    assert_eq!(rec.last_index, None);
    for start in (1..=n).step_by(10) {
        wal.append_and_sync(&entries(start..(start + 10).min(n + 1), 1)).unwrap();
    }
    wal
}

#[test]
fn round_trip_across_segments_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let wal = filled(dir.path(), 100, small());
    // Batches of 400 bytes into 1000-byte segments: two batches (20 entries) per segment.
    assert_eq!(wal.segment_count(), 5);
    assert_holds(&wal, 1..101, 1);
    assert_eq!(wal.last_synced_index(), Some(100));
    drop(wal);

    let names: Vec<_> =
        segments(dir.path()).iter().map(|p| p.file_name().unwrap().to_str().unwrap().to_owned()).collect();
    assert_eq!(names[0], "00000000000000000001.wal");
    assert_eq!(names[1], "00000000000000000021.wal");
    assert_eq!(names.len(), 5);

    let (mut wal, rec) = Wal::open(dir.path(), small()).unwrap();
    assert_eq!((rec.segments, rec.entries, rec.first_index, rec.last_index), (5, 100, Some(1), Some(100)));
    assert_eq!(rec.torn_tail, None);
    assert_holds(&wal, 1..101, 1);
    // Reads spanning segment boundaries, and bounded reads.
    assert_eq!(wal.read(18..24).unwrap().iter().map(|e| e.index).collect::<Vec<_>>(), (18..24).collect::<Vec<_>>());
    assert_eq!(wal.read_bounded(18..60, 16 * 5).unwrap().len(), 5);
    assert_eq!(wal.read_bounded(18..60, 0).unwrap().len(), 1, "always at least one entry");
    assert!(wal.read(5..5).unwrap().is_empty());
    assert!(matches!(wal.read(0..3), Err(WalError::OutOfRange { .. })));
    assert!(matches!(wal.read(99..102), Err(WalError::OutOfRange { .. })));

    // Appends continue after reopen, with a new term.
    wal.append_and_sync(&entries(101..111, 2)).unwrap();
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), small()).unwrap();
    assert_range(&wal, 101..111, 2);
    assert_eq!(wal.last_index(), Some(110));
    assert_eq!(wal.read(1..111).unwrap().len(), 110);
}

#[test]
fn group_commit_one_batch_many_entries_and_buffered_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    wal.append(&entries(1..4, 1)).unwrap();
    wal.append(&entries(4..6, 1)).unwrap();
    assert_eq!(wal.buffered_bytes() as u64, 5 * RECORD);
    assert_eq!((wal.last_index(), wal.last_synced_index()), (Some(5), None));
    assert_holds(&wal, 1..6, 1); // buffered entries are readable
    wal.sync().unwrap();
    assert_eq!((wal.buffered_bytes(), wal.last_synced_index()), (0, Some(5)));
    assert_eq!(fs::metadata(&segments(dir.path())[0]).unwrap().len(), 5 * RECORD);
    // Mixed read: written + buffered.
    wal.append(&entries(6..8, 1)).unwrap();
    assert_holds(&wal, 1..8, 1);
    // Dropping without sync loses the buffer, like a crash.
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    assert_holds(&wal, 1..6, 1);
}

#[test]
fn buffered_bytes_are_bounded_by_forced_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let options = WalOptions { buffered_bytes_max: 3 * RECORD as usize, ..WalOptions::default() };
    let (mut wal, _) = Wal::open(dir.path(), options.clone()).unwrap();
    wal.append(&entries(1..3, 1)).unwrap();
    assert_eq!(wal.last_synced_index(), None);
    wal.append(&entries(3..11, 1)).unwrap();
    assert!(wal.buffered_bytes() <= 3 * RECORD as usize);
    assert_eq!(wal.last_synced_index(), Some(9), "forced syncs of 3 entries each");
    // A single entry larger than the bound is written at once.
    wal.append(&[(11, 1, vec![7u8; 500])]).unwrap();
    assert_eq!((wal.buffered_bytes(), wal.last_synced_index()), (0, Some(11)));
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), options).unwrap();
    assert_eq!(wal.last_index(), Some(11));
    assert_eq!(wal.read(11..12).unwrap()[0].data, vec![7u8; 500]);
}

#[test]
fn appends_must_be_consecutive() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    // An empty log accepts any start (e.g. right after a snapshot).
    wal.append_and_sync(&entries(50..53, 1)).unwrap();
    let err = wal.append(&entries(54..55, 1)).unwrap_err();
    assert!(matches!(err, WalError::NotConsecutive { expected: 53, found: 54 }), "{err}");
    // A gap inside one call rejects the whole call.
    let bad = vec![(53, 1, data(53)), (55, 1, data(55))];
    assert!(matches!(wal.append(&bad), Err(WalError::NotConsecutive { expected: 54, found: 55 })));
    assert_eq!(wal.last_index(), Some(52));
    assert_eq!(wal.buffered_bytes(), 0);
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    assert_holds(&wal, 50..53, 1);
}

/// A crash mid-write: the last segment ends inside a record.
#[test]
fn torn_tail_partial_record_is_cut_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path(), 50, small()));
    let last = segments(dir.path()).pop().unwrap();
    let len = fs::metadata(&last).unwrap().len();
    assert_eq!(len, 10 * RECORD); // entries 41..=50
    OpenOptions::new().write(true).open(&last).unwrap().set_len(len - 13).unwrap();

    let (mut wal, rec) = Wal::open(dir.path(), small()).unwrap();
    let torn = rec.torn_tail.expect("cut reported");
    assert_eq!((torn.path.as_path(), torn.offset, torn.bytes_cut), (last.as_path(), 9 * RECORD, RECORD - 13));
    assert!(torn.reason.contains("runs past the end"), "{}", torn.reason);
    assert_eq!(rec.last_index, Some(49));
    assert_eq!(fs::metadata(&last).unwrap().len(), 9 * RECORD);
    assert_holds(&wal, 1..50, 1);

    wal.append_and_sync(&entries(50..60, 2)).unwrap();
    drop(wal);
    let (wal, rec) = Wal::open(dir.path(), small()).unwrap();
    assert_eq!((rec.torn_tail, rec.last_index), (None, Some(59)));
    assert_eq!(wal.term(49), Some(1));
    assert_eq!(wal.term(50), Some(2));
    assert_eq!(wal.read(1..60).unwrap().len(), 59);
}

/// A crash left only part of a record header.
#[test]
fn torn_tail_partial_header_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path(), 10, small()));
    let last = segments(dir.path()).pop().unwrap();
    OpenOptions::new().append(true).open(&last).unwrap().write_all(&[40, 0, 0]).unwrap();
    let (wal, rec) = Wal::open(dir.path(), small()).unwrap();
    let torn = rec.torn_tail.unwrap();
    assert_eq!((torn.offset, torn.bytes_cut), (10 * RECORD, 3));
    assert!(torn.reason.contains("partial record header"));
    assert_holds(&wal, 1..11, 1);
}

#[test]
fn torn_tail_garbage_after_last_record_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path(), 30, small()));
    let last = segments(dir.path()).pop().unwrap();
    let len = fs::metadata(&last).unwrap().len();
    // Deterministic pseudo-random garbage, plus a run of zeros (unwritten pages look like that).
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut garbage: Vec<u8> = (0..300)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    garbage.extend_from_slice(&[0; 4096]);
    OpenOptions::new().append(true).open(&last).unwrap().write_all(&garbage).unwrap();

    let (mut wal, rec) = Wal::open(dir.path(), small()).unwrap();
    let torn = rec.torn_tail.unwrap();
    assert_eq!((torn.offset, torn.bytes_cut), (len, garbage.len() as u64));
    assert_eq!(fs::metadata(&last).unwrap().len(), len);
    assert_holds(&wal, 1..31, 1);
    wal.append_and_sync(&entries(31..33, 1)).unwrap();
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), small()).unwrap();
    assert_holds(&wal, 1..33, 1);
}

#[test]
fn torn_tail_bad_crc_in_last_record_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path(), 30, small()));
    let last = segments(dir.path()).pop().unwrap();
    let len = fs::metadata(&last).unwrap().len();
    flip_byte(&last, len - 3); // inside the data of entry 30

    let (mut wal, rec) = Wal::open(dir.path(), small()).unwrap();
    let torn = rec.torn_tail.unwrap();
    assert_eq!((torn.offset, torn.bytes_cut), (len - RECORD, RECORD));
    assert!(torn.reason.contains("CRC mismatch"), "{}", torn.reason);
    assert_holds(&wal, 1..30, 1);
    wal.append_and_sync(&entries(30..31, 3)).unwrap();
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), small()).unwrap();
    assert_eq!(wal.read(30..31).unwrap()[0].term, 3);
}

/// When the whole content of the last segment is torn, the empty file is removed.
#[test]
fn torn_tail_that_empties_the_last_segment_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path(), 40, small())); // segments 1 and 21
    let last = segments(dir.path()).pop().unwrap();
    OpenOptions::new().write(true).open(&last).unwrap().set_len(RECORD - 1).unwrap();
    let (mut wal, rec) = Wal::open(dir.path(), small()).unwrap();
    assert_eq!(rec.removed_empty_segments, vec![last.clone()]);
    assert_eq!((rec.segments, rec.last_index), (1, Some(20)));
    assert!(!last.exists());
    wal.append_and_sync(&entries(21..25, 1)).unwrap();
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), small()).unwrap();
    assert_holds(&wal, 1..25, 1);
}

/// A crash right after a new segment file was created, before anything was written to it.
#[test]
fn empty_last_segment_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path(), 10, small()));
    let empty = dir.path().join("00000000000000000011.wal");
    fs::write(&empty, b"").unwrap();
    let (wal, rec) = Wal::open(dir.path(), small()).unwrap();
    assert_eq!(rec.removed_empty_segments, vec![empty]);
    assert_eq!(rec.torn_tail, None);
    assert_holds(&wal, 1..11, 1);
}

#[test]
fn corruption_mid_segment_followed_by_valid_records_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path(), 30, small())); // last segment holds 21..=30
    let last = segments(dir.path()).pop().unwrap();
    let len = fs::metadata(&last).unwrap().len();
    flip_byte(&last, 2 * RECORD + 30); // data of entry 23

    let err = Wal::open(dir.path(), small()).unwrap_err();
    match &err {
        WalError::Corrupt { path, offset, reason } => {
            assert_eq!((path, *offset), (&last, 2 * RECORD));
            assert!(reason.contains("CRC mismatch") && reason.contains("not a torn tail"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    assert!(err.to_string().contains("00000000000000000021.wal"));
    // Nothing was cut.
    assert_eq!(fs::metadata(&last).unwrap().len(), len);
}

#[test]
fn corrupt_length_field_mid_segment_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path(), 10, small()));
    let seg = segments(dir.path()).pop().unwrap();
    flip_byte(&seg, 3 * RECORD); // low byte of entry 4's length: 40 ^ 0x40 = 104
    let err = Wal::open(dir.path(), small()).unwrap_err();
    assert!(matches!(err, WalError::Corrupt { offset, .. } if offset == 3 * RECORD), "{err}");
}

#[test]
fn corruption_in_a_non_last_segment_is_an_error_even_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path(), 60, small()));
    let first = segments(dir.path()).remove(0);
    let len = fs::metadata(&first).unwrap().len();
    flip_byte(&first, len - 1); // last record of the first segment

    let err = Wal::open(dir.path(), small()).unwrap_err();
    match &err {
        WalError::Corrupt { path, offset, reason } => {
            assert_eq!((path, *offset), (&first, len - RECORD));
            assert!(reason.contains("not the last"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    // A torn-looking tail of a non-last segment is not cut either.
    let dir2 = tempfile::tempdir().unwrap();
    drop(filled(dir2.path(), 60, small()));
    let first = segments(dir2.path()).remove(0);
    OpenOptions::new().write(true).open(&first).unwrap().set_len(len - 5).unwrap();
    assert!(matches!(Wal::open(dir2.path(), small()), Err(WalError::Corrupt { .. })));
}

#[test]
fn missing_segment_is_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    drop(filled(dir.path(), 60, small())); // segments 1, 21, 41
    let middle = segments(dir.path()).remove(1);
    fs::remove_file(&middle).unwrap();
    let err = Wal::open(dir.path(), small()).unwrap_err();
    assert!(
        matches!(&err, WalError::Gap { expected: 21, found: 41, path, .. } if path.ends_with("00000000000000000041.wal")),
        "{err}"
    );
}

#[test]
fn record_with_wrong_index_is_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), small()).unwrap();
    wal.append_and_sync(&entries(1..4, 1)).unwrap();
    drop(wal);
    // Build a valid record for index 5 in a scratch log and splice it after entry 3.
    let scratch = tempfile::tempdir().unwrap();
    let (mut other, _) = Wal::open(scratch.path(), small()).unwrap();
    other.append_and_sync(&entries(5..6, 1)).unwrap();
    drop(other);
    let record = fs::read(segments(scratch.path()).remove(0)).unwrap();
    let seg = segments(dir.path()).remove(0);
    OpenOptions::new().append(true).open(&seg).unwrap().write_all(&record).unwrap();

    let err = Wal::open(dir.path(), small()).unwrap_err();
    assert!(matches!(err, WalError::Gap { expected: 4, found: 5, offset, .. } if offset == 3 * RECORD), "{err}");
}

#[test]
fn bad_segment_file_name_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("12.wal"), b"").unwrap();
    fs::write(dir.path().join("notes.txt"), b"ignored").unwrap();
    assert!(matches!(Wal::open(dir.path(), small()), Err(WalError::Corrupt { path, .. }) if path.ends_with("12.wal")));
}

#[test]
fn truncate_suffix_within_buffer_segment_and_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = filled(dir.path(), 60, small()); // segments 1, 21, 41

    // Only buffered entries affected.
    wal.append(&entries(61..66, 1)).unwrap();
    wal.truncate_suffix(63).unwrap();
    assert_eq!((wal.last_index(), wal.last_synced_index()), (Some(62), Some(60)));
    wal.sync().unwrap();

    // Inside the last segment.
    wal.truncate_suffix(55).unwrap();
    assert_eq!(wal.last_index(), Some(54));
    wal.append_and_sync(&entries(55..58, 2)).unwrap();
    drop(wal);
    let (mut wal, rec) = Wal::open(dir.path(), small()).unwrap();
    assert_eq!((rec.torn_tail, rec.last_index), (None, Some(57)));
    assert_eq!(wal.term(54), Some(1));
    assert_eq!(wal.term(55), Some(2));

    // Across segments: 21 and 41 go, 1 is cut after entry 14.
    wal.truncate_suffix(15).unwrap();
    assert_eq!(wal.segment_count(), 1);
    assert_eq!(segments(dir.path()).len(), 1);
    assert_eq!(fs::metadata(&segments(dir.path())[0]).unwrap().len(), 14 * RECORD);
    wal.append_and_sync(&entries(15..20, 3)).unwrap();
    drop(wal);
    let (mut wal, _) = Wal::open(dir.path(), small()).unwrap();
    assert_range(&wal, 1..15, 1);
    assert_eq!(wal.read(15..20).unwrap().iter().map(|e| e.term).collect::<Vec<_>>(), vec![3; 5]);

    // Exactly at a segment start, and past the end (no-op).
    wal.append_and_sync(&entries(20..40, 3)).unwrap();
    assert_eq!(wal.segment_count(), 2);
    let second_first = segments(dir.path())[1].clone();
    wal.truncate_suffix(100).unwrap();
    assert_eq!(wal.last_index(), Some(39));
    let start = second_first.file_name().unwrap().to_str().unwrap()[..20].parse::<u64>().unwrap();
    wal.truncate_suffix(start).unwrap();
    assert!(!second_first.exists());
    assert_eq!(wal.last_index(), Some(start - 1));

    // Everything: the log becomes empty and accepts any next index.
    wal.truncate_suffix(1).unwrap();
    assert_eq!((wal.first_index(), wal.last_index(), wal.segment_count()), (None, None, 0));
    wal.append_and_sync(&entries(500..503, 9)).unwrap();
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), small()).unwrap();
    assert_holds(&wal, 500..503, 9);
}

#[test]
fn compact_prefix_deletes_only_fully_covered_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut wal = filled(dir.path(), 100, small()); // segments 1, 21, 41, 61, 81
    assert_eq!(wal.compact_prefix(19).unwrap(), 0);
    assert_eq!(wal.compact_prefix(20).unwrap(), 1);
    assert_eq!(wal.first_index(), Some(21));
    assert_eq!(wal.compact_prefix(55).unwrap(), 1);
    assert_eq!(wal.first_index(), Some(41), "41..=55 stay, their segment is only partly covered");
    assert!(matches!(wal.read(30..45), Err(WalError::OutOfRange { first: Some(41), .. })));
    // The last segment is never deleted, so the position survives.
    assert_eq!(wal.compact_prefix(1000).unwrap(), 2);
    assert_eq!(wal.segment_count(), 1);
    assert_holds(&wal, 81..101, 1);
    drop(wal);
    let (mut wal, rec) = Wal::open(dir.path(), small()).unwrap();
    assert_eq!((rec.segments, rec.first_index, rec.last_index), (1, Some(81), Some(100)));
    wal.append_and_sync(&entries(101..103, 1)).unwrap();
    assert_holds(&wal, 81..103, 1);
}

#[test]
fn durability_none_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let options = WalOptions { durability: Durability::None, ..small() };
    let mut wal = filled(dir.path(), 100, options.clone());
    assert_eq!(wal.options().durability, Durability::None);
    assert_eq!(Durability::None.to_string(), "none");
    wal.truncate_suffix(91).unwrap();
    wal.compact_prefix(20).unwrap();
    drop(wal);
    let (wal, rec) = Wal::open(dir.path(), options).unwrap();
    assert_eq!(rec.torn_tail, None);
    assert_holds(&wal, 21..91, 1);
}

#[test]
fn large_and_empty_entries() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), small()).unwrap();
    let big: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    wal.append_and_sync(&[(1u64, 1u64, &big[..]), (2, 1, &[][..]), (3, 1, &big[..10])]).unwrap();
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), small()).unwrap();
    let got = wal.read(1..4).unwrap();
    assert_eq!((got[0].data.as_slice(), got[1].data.len(), got[2].data.as_slice()), (&big[..], 0, &big[..10]));
}

#[test]
fn corruption_after_open_is_detected_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let wal = filled(dir.path(), 10, small());
    let seg = segments(dir.path()).remove(0);
    flip_byte(&seg, 4 * RECORD + 30);
    assert!(wal.read(1..5).is_ok());
    let err = wal.read(1..6).unwrap_err();
    assert!(matches!(&err, WalError::Corrupt { offset, .. } if *offset == 4 * RECORD), "{err}");
}
