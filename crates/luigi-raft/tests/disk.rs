//! (e) Replicas persisting through `DiskStorage` in temporary directories: restart from disk,
//! unsynced entries, conflicting suffixes, snapshots; plus recovery edge cases.

mod common;

use common::{Cluster, TestRecord, TICK};
use luigi_raft::disk::{DiskError, DiskStorage, HARD_STATE_FILE};
use luigi_raft::{HardState, RaftConfig, RaftError, RaftLog, RecoveredState};
use luigi_txn::log::ReplicatedLog;
use luigi_wal::{Durability, WalOptions};

/// The entries a replica's disk holds, as `(index, term)`.
fn disk_log(dir: &std::path::Path) -> (RecoveredState, Vec<(u64, u64)>) {
    let (_disk, rec) = DiskStorage::open(dir, WalOptions::default()).expect("open");
    let terms = rec.entries.iter().map(|e| (e.index, e.term)).collect();
    (rec, terms)
}

#[test]
fn e_restart_from_disk_rejoins_and_log_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::with_disk(3, 17, tmp.path(), Durability::Fsync);
    let first = c.propose_n(15);
    c.wait_all_applied(15, 200 * TICK);
    let leader = c.live_leader().unwrap();
    let follower = if leader == 1 { 2 } else { 1 };
    let persisted = c.log(follower).persisted_index();
    let term = c.log(follower).term();

    // Drop the follower (its process dies); the others go on.
    c.crash(follower);
    let second = c.propose_n(15);
    c.run_until(100 * TICK, |c| c.reference.len() >= 30).expect("the other two commit");

    // What is on disk is what it acknowledged.
    let dir = tmp.path().join(format!("r{follower}"));
    let (rec, terms) = disk_log(&dir);
    assert_eq!(terms.last().map(|t| t.0), Some(persisted));
    assert_eq!(rec.hard_state.term, term);

    // Reopen from disk: the log is back before hearing from anyone, and matches the leader's.
    c.restart(follower);
    assert_eq!(c.log(follower).last_index(), persisted);
    assert_eq!(c.log(follower).term(), term);
    c.check_log_matching();
    c.wait_all_applied(30, 200 * TICK);
    assert_eq!(c.node(follower).applied, [first, second].concat());

    // Now the leader dies and comes back from its disk.
    let leader = c.live_leader().unwrap();
    c.crash(leader);
    let third = c.propose_n(5);
    c.restart(leader);
    c.wait_all_applied(35, 200 * TICK);
    assert_eq!(&c.reference[30..], &third[..]);
    c.check_log_matching();
    c.check_committed_stable();
}

#[test]
fn e_entries_never_synced_are_not_there_after_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::with_disk(3, 23, tmp.path(), Durability::Fsync);
    c.propose_n(5);
    c.wait_all_applied(5, 200 * TICK);
    let leader = c.live_leader().unwrap();
    let victim = if leader == 3 { 2 } else { 3 };
    let synced_last = c.log(victim).persisted_index();
    // The victim crashes after its next batch of entries reached the WAL's buffer, before the
    // sync: it never acknowledged them.
    c.crash_before_sync = Some(victim);
    for _ in 0..3 {
        c.propose(leader).unwrap();
    }
    c.run_until(50 * TICK, |c| !c.is_up(victim)).expect("victim crashed");
    assert!(!c.unsynced.is_empty());
    let dir = tmp.path().join(format!("r{victim}"));
    let (_, terms) = disk_log(&dir);
    let last = terms.last().map_or(0, |t| t.0);
    assert_eq!(last, synced_last, "only synced entries survive");
    assert!(c.unsynced.iter().all(|&i| i > last), "unsynced {:?} vs last durable {last}", c.unsynced);
    // The other two committed them regardless; the victim catches up after restarting.
    c.restart(victim);
    c.wait_all_applied(8, 200 * TICK);
    c.check_log_matching();
}

#[test]
fn e_conflicting_suffix_is_truncated_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::with_disk(3, 31, tmp.path(), Durability::None);
    c.propose_n(5);
    c.wait_all_applied(5, 200 * TICK);
    let old = c.live_leader().unwrap();
    let old_commit = c.log(old).commit_index();
    // The isolated leader appends (and persists) entries nobody else will ever have.
    c.isolated.insert(old);
    for _ in 0..4 {
        c.propose(old).unwrap();
    }
    let old_last = c.log(old).last_index();
    let dir = tmp.path().join(format!("r{old}"));
    assert_eq!(disk_log(&dir).1.last().unwrap().0, old_last, "doomed entries are on disk");
    let doomed_term = c.log(old).term();
    // The majority moves on with more entries than the doomed suffix.
    c.run_until(40 * TICK, |c| c.live_leader().is_some_and(|l| l != old)).unwrap();
    c.propose_n(8);
    c.run_until(100 * TICK, |c| c.reference.len() >= 13).unwrap();
    c.isolated.clear();
    c.wait_all_applied(13, 200 * TICK);
    // The doomed entries were overwritten on disk too: after a restart, the old leader's log
    // holds no entry of its doomed term past the old commit, and matches the others.
    c.crash(old);
    let (_, terms) = disk_log(&dir);
    assert!(terms.iter().filter(|(i, _)| *i > old_commit).all(|(_, t)| *t != doomed_term), "{terms:?}");
    assert!(terms.len() as u64 > old_last, "the new leader's entries replaced the doomed ones");
    c.restart(old);
    c.check_log_matching();
    let other = if old == 1 { 2 } else { 1 };
    for &(i, t) in &terms {
        assert_eq!(c.log(other).term_at(i), Some(t), "index {i}");
    }
    c.wait_all_applied(13, 200 * TICK);
}

#[test]
fn snapshots_catch_up_a_lagging_replica_and_survive_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::with_disk(3, 41, tmp.path(), Durability::None);
    c.propose_n(5);
    c.wait_all_applied(5, 200 * TICK);
    let leader = c.live_leader().unwrap();
    let lagging = if leader == 1 { 2 } else { 1 };
    c.crash(lagging);
    c.propose_n(20);
    c.run_until(100 * TICK, |c| c.reference.len() >= 25).unwrap();
    // Everyone up compacts: the entries the lagging replica misses are gone from every log.
    for id in c.up_ids() {
        let snap = c.compact(id).expect("something to compact");
        assert!(snap.index > 20);
    }
    let leader = c.live_leader().unwrap();
    assert!(c.log(leader).first_index() > 20);
    c.propose_n(5);
    c.restart(lagging);
    c.wait_all_applied(30, 200 * TICK);
    assert_eq!(c.snapshots_installed, 1, "the lagging replica was brought up by a snapshot");
    assert!(c.log(lagging).snapshot_index() > 20);
    c.check_log_matching();
    // Restart everyone from disk (snapshot + log after it) and keep going.
    for id in 1..=3 {
        c.crash(id);
        c.restart(id);
        assert!(c.log(id).snapshot_index() > 20, "replica {id} recovered its snapshot");
    }
    c.propose_n(5);
    c.wait_all_applied(35, 200 * TICK);
    c.check_log_matching();
    c.check_committed_stable();
}

#[test]
fn recovery_rejects_inconsistent_state_with_clear_errors() {
    let cfg = || RaftConfig::new(1, vec![1, 2, 3], 0);
    let entry = |index, term| luigi_raft::PersistEntry { index, term, data: Vec::new() };
    let err = |rec: RecoveredState| match RaftLog::new(cfg(), Some(rec)) {
        Err(RaftError::Recovered(msg)) => msg,
        other => panic!("expected a recovery error, got {other:?}"),
    };
    let gap = RecoveredState { entries: vec![entry(1, 1), entry(3, 1)], ..Default::default() };
    assert!(err(gap).contains("entry 3 where 2"));
    let commit = RecoveredState {
        entries: vec![entry(1, 1)],
        hard_state: HardState { term: 1, vote: 1, commit: 5 },
        ..Default::default()
    };
    assert!(err(commit).contains("commit 5 is past the last log index 1"));
    let terms = RecoveredState { entries: vec![entry(1, 2), entry(2, 1)], ..Default::default() };
    assert!(err(terms).contains("below the previous term"));
    // Entries of a term newer than the stored one: the term is raised and the vote dropped.
    let rec = RecoveredState {
        entries: vec![entry(1, 1), entry(2, 3)],
        hard_state: HardState { term: 2, vote: 2, commit: 1 },
        ..Default::default()
    };
    let mut log = RaftLog::new(cfg(), Some(rec)).unwrap();
    assert_eq!(log.term(), 3);
    assert_eq!(log.commit_index(), 1);
    // Committed no-ops are not records; nothing to take.
    while let Some(rd) = log.ready().unwrap() {
        log.advance(rd.number);
    }
    let mut out: Vec<luigi_txn::log::LogEntry<TestRecord>> = Vec::new();
    log.take_committed(&mut out);
    assert!(out.is_empty());
    assert!(matches!(RaftLog::new(RaftConfig::new(4, vec![1, 2, 3], 0), None), Err(RaftError::Config(_))));
    // Garbage from the network is refused with a clear error.
    assert!(matches!(log.step_bytes(b"GET / HTTP/1.1"), Err(RaftError::Decode(_))));
}

#[test]
fn damaged_hard_state_file_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::with_disk(3, 5, tmp.path(), Durability::None);
    c.propose_n(2);
    c.wait_all_applied(2, 200 * TICK);
    c.crash(1);
    let path = tmp.path().join("r1").join(HARD_STATE_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[9] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    match DiskStorage::open(tmp.path().join("r1"), WalOptions::default()) {
        Err(DiskError::Corrupt { path: p, reason }) => {
            assert_eq!(p, path);
            assert!(reason.contains("CRC"), "{reason}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

/// A ready with entries `range` of `term` (empty no-op payloads).
fn ready_with(range: std::ops::RangeInclusive<u64>, term: u64, number: u64) -> luigi_raft::Ready {
    luigi_raft::Ready {
        number,
        entries: range.map(|index| luigi_raft::PersistEntry { index, term, data: Vec::new() }).collect(),
        hard_state: Some(HardState { term, vote: 1, commit: 0 }),
        must_sync: true,
        ..Default::default()
    }
}

#[test]
fn snapshot_recovery_keeps_only_a_log_that_continues_the_snapshot() {
    let snap = |index, term| luigi_raft::SnapshotData {
        index,
        term,
        voters: vec![1, 2, 3],
        data: bytes::Bytes::from_static(b"s"),
    };

    // Local compaction: the log after the snapshot is ours and is kept.
    let tmp = tempfile::tempdir().unwrap();
    let (mut disk, _) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    disk.persist(&ready_with(1..=10, 1, 1)).unwrap();
    disk.save_snapshot(&snap(5, 1)).unwrap();
    drop(disk);
    let (_, rec) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    assert_eq!(rec.snapshot.as_ref().map(|s| s.index), Some(5));
    assert_eq!(rec.entries.iter().map(|e| e.index).collect::<Vec<_>>(), (6..=10).collect::<Vec<_>>());
    let log = RaftLog::new(RaftConfig::new(1, vec![1, 2, 3], 0), Some(rec)).unwrap();
    assert_eq!((log.first_index(), log.last_index(), log.term()), (6, 10, 1));

    // A leader's snapshot at 5 (term 2) whose install crashed after saving the snapshot but
    // before removing the old log: the old log (term 1 at index 5) does not continue it.
    let tmp = tempfile::tempdir().unwrap();
    let (mut disk, _) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    disk.persist(&ready_with(1..=10, 1, 1)).unwrap();
    drop(disk);
    let (mut wal, _) = luigi_wal::Wal::open(tmp.path(), WalOptions::default()).unwrap();
    wal.truncate_suffix(6).unwrap(); // install step 1
    drop(wal);
    let meta = luigi_wal::SnapshotMeta {
        index: 5,
        term: 2,
        extra: [1u64, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    luigi_wal::save_snapshot(tmp.path(), &meta, b"s").unwrap(); // install step 2, then crash
    let (mut disk, rec) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    assert!(rec.entries.is_empty(), "stale log dropped: {:?}", rec.entries);
    assert_eq!(rec.snapshot, Some(snap(5, 2)));
    let log = RaftLog::new(RaftConfig::new(1, vec![1, 2, 3], 0), Some(rec)).unwrap();
    assert_eq!((log.last_index(), log.term(), log.commit_index()), (5, 2, 5));
    // The log continues right after the snapshot.
    disk.persist(&ready_with(6..=7, 2, 1)).unwrap();
    drop(disk);
    let (_, rec) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    assert_eq!(rec.entries.iter().map(|e| (e.index, e.term)).collect::<Vec<_>>(), vec![(6, 2), (7, 2)]);
}

#[test]
fn hard_state_is_rewritten_on_term_or_vote_change_only() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut disk, rec) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    assert_eq!(rec, RecoveredState::default());
    disk.persist(&ready_with(1..=3, 1, 1)).unwrap();
    // Only the commit index changes: no rewrite (Raft does not need it durable).
    let commit_only = luigi_raft::Ready {
        number: 2,
        hard_state: Some(HardState { term: 1, vote: 1, commit: 3 }),
        ..Default::default()
    };
    disk.persist(&commit_only).unwrap();
    assert_eq!(disk.hard_state().commit, 3);
    drop(disk);
    let (mut disk, rec) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    assert_eq!(rec.hard_state, HardState { term: 1, vote: 1, commit: 0 });
    // An explicit flush stores the commit index too.
    disk.write(&commit_only).unwrap();
    disk.sync_hard_state().unwrap();
    drop(disk);
    let (_, rec) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    assert_eq!(rec.hard_state, HardState { term: 1, vote: 1, commit: 3 });
    // A ready whose entries skip ahead is refused.
    let (mut disk, _) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    assert!(matches!(disk.write(&ready_with(9..=9, 1, 3)), Err(DiskError::Sequence(_))));
}

/// A snapshot file written apart from the storage (on another thread, while the log goes on
/// being written) compacts the log only once it is saved, and an older one saved after a
/// newer snapshot changes nothing; a restart before the compaction keeps the whole log.
#[test]
fn a_snapshot_written_apart_compacts_the_log_once_saved() {
    let snap = |index| luigi_raft::SnapshotData {
        index,
        term: 1,
        voters: vec![1, 2, 3],
        data: bytes::Bytes::from(vec![index as u8; 1000]),
    };
    let tmp = tempfile::tempdir().unwrap();
    let (mut disk, _) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    disk.persist(&ready_with(1..=10, 1, 1)).unwrap();
    let writer = disk.snapshot_writer();
    std::thread::spawn(move || writer.write(&snap(5))).join().unwrap().unwrap();
    disk.persist(&ready_with(11..=12, 1, 1)).unwrap();
    drop(disk);
    // Crashed before the compaction: the snapshot and the whole log.
    let (mut disk, rec) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    assert_eq!(rec.snapshot, Some(snap(5)));
    assert_eq!(rec.entries.iter().map(|e| e.index).collect::<Vec<_>>(), (6..=12).collect::<Vec<_>>());
    disk.snapshot_saved(5).unwrap();
    disk.snapshot_writer().write(&snap(8)).unwrap();
    disk.snapshot_saved(8).unwrap();
    disk.snapshot_saved(5).unwrap(); // late: nothing to do
    drop(disk);
    let (_, rec) = DiskStorage::open(tmp.path(), WalOptions::default()).unwrap();
    assert_eq!(rec.snapshot, Some(snap(8)));
    assert_eq!(rec.entries.iter().map(|e| e.index).collect::<Vec<_>>(), vec![9, 10, 11, 12]);
}

#[test]
fn accepts_are_durable_with_the_group_commit_and_come_back_after_a_crash() {
    use luigi_wal::fs::{Fs, SimFs};
    use std::sync::Arc;
    let sim = SimFs::new(11);
    let fs: Arc<dyn Fs> = Arc::new(sim.clone());
    let options = WalOptions { durability: Durability::Fsync, ..WalOptions::default() };
    let dir = std::path::Path::new("/replica");
    let (mut disk, _) = DiskStorage::open_with(Arc::clone(&fs), dir, options.clone()).unwrap();
    disk.write_accepts(&[b"x".to_vec(), b"y".to_vec()], false).unwrap();
    disk.persist(&ready_with(1..=3, 1, 1)).unwrap(); // the same sync makes both durable
    disk.write_accepts(&[b"lost".to_vec()], false).unwrap();
    drop(disk);
    sim.crash();
    let (mut disk, rec) = DiskStorage::open_with(fs, dir, options).unwrap();
    assert_eq!(rec.entries.len(), 3, "the Raft log is intact beside it");
    assert_eq!(disk.take_found_accepts(), vec![(1, b"x".to_vec()), (2, b"y".to_vec())], "only what was synced");
    assert!(disk.take_found_accepts().is_empty(), "taken once");
}

#[test]
fn a_durable_rewrite_of_the_live_accepts_drops_the_records_before_it_and_a_crash_before_keeps_them() {
    use luigi_wal::fs::{Fs, SimFs};
    use std::sync::Arc;
    let sim = SimFs::new(12);
    let fs: Arc<dyn Fs> = Arc::new(sim.clone());
    let options = WalOptions { segment_bytes: 256, durability: Durability::Fsync, ..WalOptions::default() };
    let dir = std::path::Path::new("/replica");
    let (mut disk, _) = DiskStorage::open_with(Arc::clone(&fs), dir, options.clone()).unwrap();
    for i in 0..30u8 {
        disk.write_accepts(&[vec![i; 40]], false).unwrap();
        disk.sync().unwrap();
    }
    // Only record 25 is undecided: rewritten, and lost in a crash before the sync.
    disk.write_accepts(&[vec![25; 40]], true).unwrap();
    drop(disk);
    sim.crash();
    let (mut disk, _) = DiskStorage::open_with(Arc::clone(&fs), dir, options.clone()).unwrap();
    assert_eq!(disk.take_found_accepts().len(), 30, "not durable: nothing dropped");
    disk.write_accepts(&[vec![25; 40]], true).unwrap();
    disk.sync().unwrap();
    drop(disk);
    let (mut disk, _) = DiskStorage::open_with(fs, dir, options).unwrap();
    let found = disk.take_found_accepts();
    assert!(found.len() < 10, "the segments before the rewrite went: {} records left", found.len());
    assert_eq!(found.last(), Some(&(31, vec![25; 40])), "the rewrite is the newest record");
}
