//! `DiskStorage` on a `SimFs` under power losses (`SimFs::crash`, then a reopen): the hard state
//! written at a term/vote change survives only once synced, a crash between `write` and `sync`
//! loses the unsynced entries (a failed fsync may leave a prefix of them, never garbled), the
//! replica directory itself is created durably, snapshots and markers survive. Ends with a
//! seeded loop checked against a model.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use luigi_raft::disk::{prepare_rejoin_in, DiskError, DiskStorage};
use luigi_raft::{HardState, PersistEntry, RaftConfig, RaftLog, Ready, RecoveredState, SnapshotData};
use luigi_wal::fs::SimFs;
use luigi_wal::WalOptions;

const DIR: &str = "/data/r1";

fn open(fs: &SimFs) -> (DiskStorage, RecoveredState) {
    DiskStorage::open_with(Arc::new(fs.clone()), DIR, WalOptions::default()).expect("open")
}

/// A normal raft entry (as `luigi_raft::codec` stores it) whose payload names its index and term.
fn data(index: u64, term: u64) -> Vec<u8> {
    use protobuf::Message as _;
    let e = luigi_raft::eraftpb::Entry {
        data: format!("entry {index} of term {term}").into_bytes().into(),
        ..Default::default()
    };
    e.write_to_bytes().expect("encodes")
}

/// A ready with entries `range` of `term` and the hard state `(term, vote)`.
fn ready(range: std::ops::RangeInclusive<u64>, term: u64, vote: u64) -> Ready {
    Ready {
        number: 1,
        entries: range.map(|index| PersistEntry { index, term, data: data(index, term) }).collect(),
        hard_state: Some(HardState { term, vote, commit: 0 }),
        must_sync: true,
        ..Default::default()
    }
}

fn indexes(rec: &RecoveredState) -> Vec<u64> {
    rec.entries.iter().map(|e| e.index).collect()
}

#[test]
fn a_fresh_replica_directory_and_its_synced_entries_survive_a_power_loss() {
    for seed in 0..50 {
        let fs = SimFs::new(seed);
        let (mut disk, rec) = open(&fs);
        assert_eq!(rec, RecoveredState::default());
        disk.persist(&ready(1..=3, 1, 1)).unwrap();
        drop(disk);
        fs.crash();
        let (_, rec) = open(&fs);
        assert_eq!(indexes(&rec), [1, 2, 3], "seed {seed}");
        assert_eq!(rec.hard_state, HardState { term: 1, vote: 1, commit: 0 }, "seed {seed}");
    }
}

#[test]
fn the_hard_state_of_a_term_or_vote_change_survives_only_after_sync() {
    for seed in 0..50 {
        let fs = SimFs::new(seed);
        let (mut disk, _) = open(&fs);
        disk.persist(&ready(1..=3, 1, 1)).unwrap();
        // Written, not synced: a new term and vote.
        disk.write(&Ready { hard_state: Some(HardState { term: 2, vote: 2, commit: 0 }), ..Default::default() })
            .unwrap();
        drop(disk);
        fs.crash();
        let (mut disk, rec) = open(&fs);
        assert_eq!((rec.hard_state.term, rec.hard_state.vote), (1, 1), "seed {seed}");
        // Written and synced.
        disk.write(&Ready { hard_state: Some(HardState { term: 2, vote: 2, commit: 0 }), ..Default::default() })
            .unwrap();
        disk.sync().unwrap();
        drop(disk);
        fs.crash();
        let (mut disk, rec) = open(&fs);
        assert_eq!((rec.hard_state.term, rec.hard_state.vote), (2, 2), "seed {seed}");
        // A sync that fails while the hard state is replaced: the old or the new one, never
        // a damaged file, and the error says so.
        disk.write(&Ready { hard_state: Some(HardState { term: 3, vote: 3, commit: 0 }), ..Default::default() })
            .unwrap();
        fs.fail_syncs(1);
        let err = disk.sync().unwrap_err();
        assert!(err.to_string().contains("raft-hardstate"), "{err}");
        drop(disk);
        fs.crash();
        let (_, rec) = open(&fs);
        let hs = (rec.hard_state.term, rec.hard_state.vote);
        assert!(hs == (2, 2) || hs == (3, 3), "seed {seed}: {hs:?}");
        assert_eq!(indexes(&rec), [1, 2, 3]);
    }
}

#[test]
fn a_crash_between_write_and_sync_loses_the_unsynced_entries() {
    let mut some_kept = false;
    for seed in 0..50 {
        let fs = SimFs::new(seed);
        let (mut disk, _) = open(&fs);
        disk.persist(&ready(1..=3, 1, 1)).unwrap();
        disk.write(&ready(4..=6, 1, 1)).unwrap();
        drop(disk);
        fs.crash();
        let (mut disk, rec) = open(&fs);
        assert_eq!(indexes(&rec), [1, 2, 3], "seed {seed}");
        // The write reaches the file, its fdatasync fails: a prefix may survive, intact.
        disk.write(&ready(4..=6, 1, 1)).unwrap();
        fs.fail_syncs(1);
        assert!(disk.sync().is_err());
        drop(disk);
        fs.crash();
        let (_, rec) = open(&fs);
        let got = indexes(&rec);
        assert!(got.len() >= 3 && got.len() <= 6 && got[..3] == [1, 2, 3], "seed {seed}: {got:?}");
        for e in &rec.entries {
            assert_eq!(e.data, data(e.index, 1), "seed {seed}");
        }
        some_kept |= got.len() > 3;
        RaftLog::new(RaftConfig::new(1, vec![1, 2, 3], 0), Some(rec)).expect("a consistent state");
    }
    assert!(some_kept, "no seed kept part of the unsynced batch");
}

#[test]
fn snapshots_and_markers_survive_power_losses() {
    let snap =
        |index| SnapshotData { index, term: 1, voters: vec![1, 2, 3], data: format!("s{index}").into_bytes().into() };
    let (mut old, mut new) = (0, 0);
    for seed in 0..50 {
        let fs = SimFs::new(seed);
        let (mut disk, _) = open(&fs);
        disk.persist(&ready(1..=10, 1, 1)).unwrap();
        disk.save_snapshot(&snap(4)).unwrap();
        fs.fail_dir_syncs(1); // the directory sync after the snapshot's rename
        assert!(disk.save_snapshot(&snap(8)).is_err());
        drop(disk);
        fs.crash();
        let (mut disk, rec) = open(&fs);
        match rec.snapshot.as_ref().map(|s| s.index) {
            Some(4) => old += 1,
            Some(8) => new += 1,
            other => panic!("seed {seed}: snapshot {other:?}"),
        }
        let s = rec.snapshot.as_ref().unwrap().index;
        assert_eq!(indexes(&rec), (s + 1..=10).collect::<Vec<_>>(), "seed {seed}");
        RaftLog::new(RaftConfig::new(1, vec![1, 2, 3], 0), Some(rec)).expect("a consistent state");
        disk.mark_damaged("lost entries up to 12").unwrap();
        drop(disk);
        fs.crash();
        let err = DiskStorage::open_with(Arc::new(fs.clone()), DIR, WalOptions::default()).unwrap_err();
        assert!(matches!(err, DiskError::Damaged { .. }), "seed {seed}: {err}");
        let moved = prepare_rejoin_in(&fs, Path::new(DIR)).unwrap().expect("moved aside");
        fs.crash();
        let (disk, rec) = open(&fs);
        assert!(rec.rejoining && disk.is_rejoining() && rec.entries.is_empty(), "seed {seed}");
        assert!(luigi_wal::fs::Fs::exists(&fs, &moved.join("raft-damaged")), "seed {seed}: old state kept aside");
    }
    assert!(old > 0 && new > 0, "old {old}, new {new}");
}

/// A hard state's term and vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TermVote {
    term: u64,
    vote: u64,
}

/// What the disk must hold: the entries written (synced or not) by index with their terms,
/// the last synced index, the synced and the latest term and vote, the snapshot's index.
struct Model {
    written: BTreeMap<u64, u64>,
    synced_last: u64,
    synced_hs: TermVote,
    hs: TermVote,
    snap_index: u64,
}

/// One seeded run against a model: readies (new terms and votes, conflicting suffixes),
/// unsynced writes, failed syncs, local snapshots, power losses.
fn run(seed: u64) -> u64 {
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let fs = SimFs::new(seed);
    let (mut disk, _) = open(&fs);
    let mut m = Model {
        written: BTreeMap::new(),
        synced_last: 0,
        synced_hs: TermVote { term: 0, vote: 0 },
        hs: TermVote { term: 1, vote: 1 },
        snap_index: 0,
    };
    let mut crashes = 0;
    for _ in 0..40 {
        match next(10) {
            0..=4 => m.write(&mut disk, &mut next),
            5 if m.synced_last > m.snap_index => m.snapshot(&mut disk, &mut next),
            _ => {
                // Maybe a failed sync first (the process then stops), then a power loss.
                if next(2) == 0 {
                    fs.fail_syncs(1);
                    let _ = disk.sync();
                }
                drop(disk);
                fs.crash();
                crashes += 1;
                disk = m.recover(&fs, seed);
            }
        }
    }
    crashes
}

impl Model {
    /// A ready: a new term (and vote) now and then, sometimes a conflicting suffix; most
    /// are synced.
    fn write(&mut self, disk: &mut DiskStorage, next: &mut impl FnMut(u64) -> u64) {
        let last = self.written.keys().next_back().copied().unwrap_or(self.snap_index);
        if next(4) == 0 {
            self.hs = TermVote { term: self.hs.term + 1, vote: 1 + next(3) };
        }
        let first = if next(4) == 0 { self.snap_index + 1 + next(last - self.snap_index + 1) } else { last + 1 };
        let n = 1 + next(3);
        disk.write(&ready(first..=first + n - 1, self.hs.term, self.hs.vote)).unwrap();
        self.written.retain(|&i, _| i < first);
        self.synced_last = self.synced_last.min(first - 1);
        self.written.extend((first..first + n).map(|i| (i, self.hs.term)));
        if next(3) > 0 {
            disk.sync().unwrap();
            self.synced_last = first + n - 1;
            self.synced_hs = self.hs;
        }
    }

    /// Everything synced, then a local snapshot at a synced index.
    fn snapshot(&mut self, disk: &mut DiskStorage, next: &mut impl FnMut(u64) -> u64) {
        disk.sync().unwrap();
        self.synced_hs = self.hs;
        self.synced_last = self.written.keys().next_back().copied().unwrap_or(self.snap_index);
        let index = self.snap_index + 1 + next(self.synced_last - self.snap_index);
        let snap = SnapshotData { index, term: self.written[&index], voters: vec![1, 2, 3], data: vec![7].into() };
        disk.save_snapshot(&snap).unwrap();
        self.snap_index = index;
        self.written.retain(|&i, _| i > index);
    }

    /// After a power loss: the disk reopened holds the snapshot, every synced entry and only
    /// written ones, and the synced (or latest) term and vote; Raft then goes on in a term at
    /// least that of its last entry (and at least 1), persisted before anything else, as
    /// `RaftLog` does.
    fn recover(&mut self, fs: &SimFs, seed: u64) -> DiskStorage {
        let (mut disk, rec) = open(fs);
        let snap_index = self.snap_index;
        assert_eq!(rec.snapshot.as_ref().map_or(0, |s| s.index), snap_index, "seed {seed}");
        let got: Vec<(u64, u64)> = rec.entries.iter().map(|e| (e.index, e.term)).collect();
        for (i, t) in &got {
            assert_eq!(self.written.get(i), Some(t), "seed {seed}: entry {i} of term {t} was not written");
        }
        for e in &rec.entries {
            assert_eq!(e.data, data(e.index, e.term), "seed {seed}: entry {} garbled", e.index);
        }
        let rec_last = got.last().map_or(snap_index, |e| e.0);
        let synced_last = self.synced_last;
        assert!(rec_last >= synced_last, "seed {seed}: synced up to {synced_last}, recovered {rec_last}");
        let rec_hs = TermVote { term: rec.hard_state.term, vote: rec.hard_state.vote };
        RaftLog::new(RaftConfig::new(1, vec![1, 2, 3], 0), Some(rec)).expect("a consistent state");
        assert!(rec_hs == self.synced_hs || rec_hs == self.hs, "seed {seed}: hard state {rec_hs:?}");
        self.written.retain(|&i, _| i <= rec_last);
        self.synced_last = rec_last;
        self.synced_hs = rec_hs;
        let last_term = got.last().map_or(0, |e| e.1);
        self.hs = if rec_hs.term >= last_term.max(1) { rec_hs } else { TermVote { term: last_term.max(1), vote: 1 } };
        if self.hs != rec_hs {
            let hard_state = Some(HardState { term: self.hs.term, vote: self.hs.vote, commit: 0 });
            disk.persist(&Ready { hard_state, ..Default::default() }).unwrap();
            self.synced_hs = self.hs;
        }
        disk
    }
}

#[test]
fn seeded_readies_and_power_losses_keep_every_synced_entry_and_vote() {
    let crashes: u64 = (0..200).map(run).sum();
    assert!(crashes > 500, "{crashes}");
}
