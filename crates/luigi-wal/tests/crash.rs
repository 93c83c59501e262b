//! The log and the snapshot files under `SimFs` power losses: what was synced survives with its
//! bytes; what was written but not synced may be lost, never reordered, and a torn tail is cut
//! at open; a snapshot whose rename was not followed by a directory sync may vanish, and the
//! previous one is then loaded. Ends with a seeded loop of appends, syncs, failed syncs,
//! truncations, compactions and crashes checked against a model.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use luigi_wal::fs::SimFs;
use luigi_wal::{load_latest_snapshot_in, save_snapshot_in, SnapshotMeta, Wal, WalOptions};

const DIR: &str = "/wal";

/// SplitMix64 for the test schedules.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn data(i: u64, term: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i as usize * 31 + term as usize * 7 + k) as u8).collect()
}

fn open(fs: &SimFs, options: &WalOptions) -> (Wal, luigi_wal::Recovered) {
    Wal::open_in(Arc::new(fs.clone()), DIR, options.clone()).expect("open after crash")
}

#[test]
fn synced_records_survive_and_an_unsynced_batch_is_a_prefix_with_its_torn_tail_cut() {
    let options = WalOptions { segment_bytes: 1 << 20, ..WalOptions::default() };
    let (mut lost, mut kept, mut torn) = (0, 0, 0);
    for seed in 0..100 {
        let fs = SimFs::new(seed);
        let (mut wal, _) = open(&fs, &options);
        let batch = |r: std::ops::RangeInclusive<u64>| -> Vec<(u64, u64, Vec<u8>)> {
            r.map(|i| (i, 1, data(i, 1, 50))).collect()
        };
        wal.append_and_sync(&batch(1..=20)).unwrap();
        // The batch reaches the file, its fdatasync fails: written, not durable.
        wal.append(&batch(21..=30)).unwrap();
        fs.fail_syncs(1);
        assert!(wal.sync().is_err());
        assert_eq!(wal.last_synced_index(), Some(20));
        drop(wal);
        fs.crash();
        let (wal, rec) = open(&fs, &options);
        let last = rec.last_index.unwrap();
        assert!((20..=30).contains(&last), "seed {seed}: {rec:?}");
        for e in wal.read(1..last + 1).unwrap() {
            assert_eq!(e.data, data(e.index, 1, 50), "seed {seed}: entry {}", e.index);
        }
        lost += u32::from(last == 20);
        kept += u32::from(last > 20);
        torn += u32::from(rec.torn_tail.is_some());
    }
    assert!(lost > 0 && kept > 0 && torn > 0, "lost {lost}, kept {kept}, torn {torn}");
}

#[test]
fn a_snapshot_renamed_without_a_directory_sync_may_vanish_and_the_previous_one_is_used() {
    let meta = |index| SnapshotMeta { index, term: 1, extra: vec![] };
    let dir = Path::new("/snaps");
    let (mut old, mut new) = (0, 0);
    for seed in 0..100 {
        let fs = SimFs::new(seed);
        save_snapshot_in(&fs, dir, &meta(10), b"state at 10").unwrap();
        fs.fail_dir_syncs(1); // the sync after the rename
        let err = save_snapshot_in(&fs, dir, &meta(20), b"state at 20").unwrap_err();
        assert!(err.to_string().contains("fsync directory"), "{err}");
        fs.crash();
        match load_latest_snapshot_in(&fs, dir).unwrap() {
            Some((m, d)) if m.index == 10 => {
                assert_eq!(d, b"state at 10");
                old += 1;
            }
            Some((m, d)) if m.index == 20 => {
                assert_eq!(d, b"state at 20");
                new += 1;
            }
            other => panic!("seed {seed}: {other:?}"),
        }
        // Leftover temp files were removed durably.
        fs.crash();
        assert!(load_latest_snapshot_in(&fs, dir).unwrap().is_some());
    }
    assert!(old > 0 && new > 0, "old {old}, new {new}");
}

/// What a seeded run saw.
#[derive(Default)]
struct Seen {
    crashes: u64,
    /// Torn tails cut at open.
    torn: u64,
    /// Unsynced entries that survived a crash.
    survived: u64,
}

/// What the log must hold: what was written or buffered (index to term and data), the last
/// index known durable, the current term.
struct Model {
    written: BTreeMap<u64, (u64, Vec<u8>)>,
    synced_last: u64,
    term: u64,
}

/// One seeded run of random operations against a model.
fn run(seed: u64) -> Seen {
    let mut rng = Rng(seed);
    let fs = SimFs::new(seed);
    let options = WalOptions { segment_bytes: 300, buffered_bytes_max: 400, ..WalOptions::default() };
    let (mut wal, _) = open(&fs, &options);
    let mut m = Model { written: BTreeMap::new(), synced_last: 0, term: 1 };
    let mut seen = Seen::default();
    let mut poisoned = false;
    for _ in 0..60 {
        let next = wal.last_index().map_or(1, |l| l + 1);
        // A poisoned log must be reopened: the process stops, here with a power loss.
        let op = if poisoned { 9 } else { rng.range(0, 9) };
        match op {
            0..=3 => m.append(&mut wal, &mut rng, next),
            4 => {
                // Raft truncates a conflicting suffix (durably) and moves to a new term.
                let first = wal.first_index().unwrap_or(next);
                let from = rng.range(first, next);
                wal.truncate_suffix(from).unwrap();
                m.written.retain(|&i, _| i < from);
                // Cut at the first index: the log is empty, the next append starts anywhere.
                m.synced_last = if from <= first { 0 } else { m.synced_last.min(from - 1) };
                m.term += 1;
            }
            5 => {
                let up_to = rng.range(0, m.synced_last);
                wal.compact_prefix(up_to).unwrap();
                let first = wal.first_index().unwrap_or(next);
                m.written.retain(|&i, _| i >= first);
            }
            6 | 7 => {
                // A failed fdatasync: the batch may be on disk, unsynced; the log is poisoned.
                if wal.buffered_bytes() > 0 {
                    fs.fail_syncs(1);
                    if wal.sync().is_err() {
                        assert!(wal.sync().is_err(), "poisoned");
                        poisoned = true;
                    } else {
                        m.synced_last = wal.last_synced_index().unwrap_or(0);
                    }
                }
            }
            _ => {
                // Power loss, reopen.
                drop(wal);
                fs.crash();
                seen.crashes += 1;
                poisoned = false;
                wal = m.recover(&fs, &options, seed, &mut seen);
            }
        }
    }
    seen
}

impl Model {
    /// A batch of 1 to 4 entries at `next`, synced or not.
    fn append(&mut self, wal: &mut Wal, rng: &mut Rng, next: u64) {
        let term = self.term;
        let n = rng.range(1, 4);
        let batch: Vec<(u64, u64, Vec<u8>)> =
            (next..next + n).map(|i| (i, term, data(i, term, rng.range(0, 40) as usize))).collect();
        wal.append(&batch).unwrap();
        for (i, t, d) in batch {
            self.written.insert(i, (t, d));
        }
        // `append` may have synced part of the buffer itself.
        self.synced_last = self.synced_last.max(wal.last_synced_index().unwrap_or(0));
        if rng.range(0, 2) > 0 {
            wal.sync().unwrap();
            self.synced_last = wal.last_synced_index().unwrap_or(0);
        }
    }

    /// After a power loss: the reopened log holds every synced entry, and only entries
    /// written, with their bytes.
    fn recover(&mut self, fs: &SimFs, options: &WalOptions, seed: u64, seen: &mut Seen) -> Wal {
        let (wal, rec) = open(fs, options);
        seen.torn += u64::from(rec.torn_tail.is_some());
        let synced_last = self.synced_last;
        let last = wal.last_index().unwrap_or(0);
        assert!(last >= synced_last, "seed {seed}: synced up to {synced_last}, recovered up to {last}");
        let first = wal.first_index().unwrap_or(last + 1);
        for e in wal.read(first..last + 1).unwrap() {
            let want =
                self.written.get(&e.index).unwrap_or_else(|| panic!("seed {seed}: index {} never written", e.index));
            assert_eq!((e.term, &e.data), (want.0, &want.1), "seed {seed}: entry {} differs", e.index);
        }
        for i in self.written.keys().filter(|&&i| i >= first && i <= synced_last) {
            assert!(*i <= last, "seed {seed}: synced entry {i} lost");
        }
        seen.survived += last - synced_last;
        self.written.retain(|&i, _| i >= first && i <= last);
        self.synced_last = last;
        wal
    }
}

#[test]
fn seeded_appends_syncs_and_crashes_keep_every_synced_entry() {
    let mut total = Seen::default();
    for seed in 0..400 {
        let seen = run(seed);
        total.crashes += seen.crashes;
        total.torn += seen.torn;
        total.survived += seen.survived;
    }
    let Seen { crashes, torn, survived } = total;
    eprintln!("crashes {crashes}, torn tails {torn}, unsynced entries surviving {survived}");
    assert!(crashes > 1000 && torn > 50 && survived > 50, "crashes {crashes}, torn {torn}, survived {survived}");
}
