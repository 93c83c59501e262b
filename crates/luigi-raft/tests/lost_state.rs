//! Raft state lost on disk: a missing hard state, a log that lost acknowledged entries (found at
//! open or from the leader's heartbeat, never a raft-rs panic), and rebuilding a replica from
//! its peers (`disk::prepare_rejoin`): it catches up by log or by snapshot, and does not vote
//! before it has.

mod common;

use std::path::{Path, PathBuf};

use common::{Cluster, TICK};
use luigi_raft::disk::{prepare_rejoin, DiskError, DiskStorage, DAMAGED_FILE, HARD_STATE_FILE, REJOIN_FILE};
use luigi_raft::eraftpb::{Message, MessageType};
use luigi_raft::{encode_message, HardState, PersistEntry, RaftConfig, RaftError, RaftLog, RecoveredState};
use luigi_wal::{Durability, WalOptions};

fn dir_of(root: &Path, id: u64) -> PathBuf {
    root.join(format!("r{id}"))
}

/// The WAL segment files of `dir`, sorted.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    v.sort();
    v
}

/// A 3-replica cluster on disk with `n` records committed everywhere; returns it and a follower.
fn cluster_with(root: &Path, seed: u64, n: usize) -> (Cluster, u64) {
    let mut c = Cluster::with_disk(3, seed, root, Durability::Fsync);
    c.propose_n(n);
    c.wait_all_applied(n, 300 * TICK);
    let leader = c.live_leader().unwrap();
    (c, if leader == 3 { 2 } else { 3 })
}

#[test]
fn a_missing_hard_state_beside_a_log_is_refused() {
    // A fresh directory gets its (zero) hard state before any entry.
    let tmp = tempfile::tempdir().unwrap();
    let (_disk, rec) = DiskStorage::open(tmp.path().join("fresh"), WalOptions::default()).unwrap();
    assert_eq!(rec, RecoveredState::default());
    assert!(tmp.path().join("fresh").join(HARD_STATE_FILE).exists());

    let (mut c, f) = cluster_with(tmp.path(), 3, 5);
    let last = c.log(f).last_index();
    c.crash(f);
    let path = dir_of(tmp.path(), f).join(HARD_STATE_FILE);
    std::fs::remove_file(&path).unwrap();
    let err = DiskStorage::open(dir_of(tmp.path(), f), WalOptions::default()).unwrap_err();
    match &err {
        DiskError::MissingHardState { path: p, last_index } => {
            assert_eq!((p, *last_index), (&path, last));
        }
        other => panic!("expected a missing hard state, got {other:?}"),
    }
    assert!(err.needs_rebuild());
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()) && msg.contains("vote"), "{msg}");
    // Nothing was written in its place: the next open refuses the same way.
    assert!(!path.exists());
}

#[test]
fn a_commit_index_past_the_log_is_refused_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut c, f) = cluster_with(tmp.path(), 7, 20);
    let dir = dir_of(tmp.path(), f);
    c.crash(f);
    // Store the commit index (as a clean shutdown does), then lose the log's tail.
    let (mut disk, rec) = DiskStorage::open(&dir, WalOptions::default()).unwrap();
    let commit = rec.entries.last().unwrap().index;
    let rd = luigi_raft::Ready { hard_state: Some(HardState { commit, ..rec.hard_state }), ..Default::default() };
    disk.write(&rd).unwrap();
    disk.sync_hard_state().unwrap();
    drop(disk);
    let seg = segments(&dir).pop().unwrap();
    let len = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&seg).unwrap().set_len(len / 2).unwrap();
    match DiskStorage::open(&dir, WalOptions::default()) {
        Err(e @ DiskError::LostEntries { .. }) => {
            let DiskError::LostEntries { commit: c2, last_index, .. } = &e else { unreachable!() };
            assert_eq!(*c2, commit);
            assert!(*last_index < commit);
            assert!(e.needs_rebuild());
            assert!(e.to_string().contains("lost acknowledged log entries"), "{e}");
        }
        other => panic!("expected lost entries, got {other:?}"),
    }
}

/// A heartbeat from the leader `from` in `term` with commit index `commit`, to replica 1.
fn heartbeat(from: u64, term: u64, commit: u64) -> Vec<u8> {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgHeartbeat);
    (m.from, m.to, m.term, m.commit) = (from, 1, term, commit);
    encode_message(&m)
}

#[test]
fn a_heartbeat_committing_past_the_log_is_an_error_not_a_panic() {
    let entry = |index| PersistEntry { index, term: 1, data: Vec::new() };
    let rec = RecoveredState {
        hard_state: HardState { term: 1, vote: 2, commit: 2 },
        entries: vec![entry(1), entry(2), entry(3)],
        ..Default::default()
    };
    let mut log = RaftLog::new(RaftConfig::new(1, vec![1, 2, 3], 0), Some(rec)).unwrap();
    // Within the log: fine.
    log.step_bytes(&heartbeat(2, 1, 3)).unwrap();
    while let Some(rd) = log.ready().unwrap() {
        log.advance(rd.number);
    }
    assert_eq!(log.commit_index(), 3);
    // Past it: raft-rs would panic in `commit_to`; we refuse, and keep refusing.
    let err = log.step_bytes(&heartbeat(2, 1, 9)).unwrap_err();
    assert!(matches!(err, RaftError::LostEntries { leader: 2, term: 1, commit: 9, last_index: 3 }), "{err:?}");
    assert!(err.to_string().contains("lost acknowledged log entries"), "{err}");
    assert!(matches!(log.ready(), Err(RaftError::LostEntries { .. })));
    assert!(matches!(log.step_bytes(&heartbeat(2, 1, 1)), Err(RaftError::LostEntries { .. })));
    log.tick(); // no panic, nothing happens
                // A stale heartbeat (older term) is raft-rs's to ignore, not a loss.
    let rec = RecoveredState {
        hard_state: HardState { term: 3, vote: 2, commit: 1 },
        entries: vec![entry(1)],
        ..Default::default()
    };
    let mut log = RaftLog::new(RaftConfig::new(1, vec![1, 2, 3], 0), Some(rec)).unwrap();
    log.step_bytes(&heartbeat(2, 2, 9)).unwrap();
}

#[test]
fn a_follower_whose_log_lost_its_tail_stops_with_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut c, f) = cluster_with(tmp.path(), 11, 30);
    let acked = c.log(f).persisted_index();
    c.crash(f);
    let dir = dir_of(tmp.path(), f);
    let seg = segments(&dir).pop().unwrap();
    let len = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&seg).unwrap().set_len(len / 3).unwrap();
    c.restart(f);
    let last = c.log(f).last_index();
    assert!(last < acked, "the tail is gone: {last} < {acked}");
    // The first heartbeat tells it; it stops (the harness records the error as a server would).
    c.run_until(20 * TICK, |c| !c.is_up(f)).expect("the follower stopped");
    let (who, msg) = &c.lost_entries[0];
    assert_eq!(*who, f);
    assert!(msg.contains("lost acknowledged log entries") && msg.contains(&format!("ends at index {last}")), "{msg}");
    // The others go on.
    c.propose_n(5);
    c.wait_all_applied(35, 300 * TICK);
}

#[test]
fn a_wiped_directory_without_rejoin_stops_with_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut c, f) = cluster_with(tmp.path(), 13, 10);
    c.crash(f);
    std::fs::remove_dir_all(dir_of(tmp.path(), f)).unwrap();
    c.restart(f);
    c.run_until(20 * TICK, |c| !c.is_up(f)).expect("the wiped follower stopped");
    assert!(c.lost_entries[0].1.contains("ends at index 0"), "{:?}", c.lost_entries);
}

/// Rebuilds follower `f` with `prepare_rejoin` and restarts it; returns where its old state went.
fn rejoin(c: &mut Cluster, root: &Path, f: u64) -> PathBuf {
    let dir = dir_of(root, f);
    let moved = prepare_rejoin(&dir).unwrap().expect("there was a directory");
    assert!(moved.file_name().unwrap().to_string_lossy().starts_with(&format!("r{f}.discarded-")), "{moved:?}");
    assert!(moved.join(HARD_STATE_FILE).exists(), "the old state is kept aside");
    assert!(dir.join(REJOIN_FILE).exists());
    c.restart(f);
    assert!(c.log(f).is_rejoining());
    assert_eq!(c.log(f).last_index(), 0);
    moved
}

/// After a rebuild: caught up, out of the rejoin on disk too, its vote in the leader's term
/// given to itself.
fn check_rejoined(c: &Cluster, root: &Path, f: u64) {
    let log = c.log(f);
    assert!(!log.is_rejoining());
    let dir = dir_of(root, f);
    assert!(!dir.join(REJOIN_FILE).exists(), "the marker is gone");
    let hs = c.node(f).disk.hard_state();
    assert_eq!(hs.vote, f, "its vote in term {} is used up", hs.term);
    assert_eq!(hs.term, log.term());
    c.check_log_matching();
    c.check_committed_stable();
}

#[test]
fn a_rebuilt_replica_catches_up_by_log_from_an_idle_leader() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut c, f) = cluster_with(tmp.path(), 17, 25);
    let leader = c.live_leader().unwrap();
    let term = c.log(leader).term();
    c.crash(f);
    rejoin(&mut c, tmp.path(), f);
    // No proposals: the heartbeats alone bring it back (the leader believes it holds 25+).
    c.wait_all_applied(25, 300 * TICK);
    c.run_until(50 * TICK, |c| !c.log(f).is_rejoining()).expect("rejoin completes");
    assert_eq!(c.node(f).applied, c.reference);
    assert_eq!(c.snapshots_installed, 0, "by log entries");
    assert_eq!((c.live_leader(), c.log(leader).term()), (Some(leader), term), "no election");
    check_rejoined(&c, tmp.path(), f);
    // It is a full member again: it survives a restart, and it can lead.
    c.crash(f);
    c.restart(f);
    assert!(!c.log(f).is_rejoining());
    c.propose_n(5);
    c.wait_all_applied(30, 300 * TICK);
    c.crash(leader);
    c.run_until(200 * TICK, |c| c.live_leader().is_some()).expect("a new leader");
    c.propose_n(5);
    c.restart(leader);
    c.wait_all_applied(35, 300 * TICK);
    c.check_log_matching();
}

#[test]
fn a_rebuilt_replica_catches_up_by_snapshot_under_load() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut c, f) = cluster_with(tmp.path(), 19, 20);
    // Everyone compacts: what the rebuilt replica needs is only in the snapshot.
    for id in c.up_ids() {
        c.compact(id).expect("something to compact");
    }
    c.crash(f);
    c.propose_n(5);
    rejoin(&mut c, tmp.path(), f);
    // Keep proposing while it catches up.
    for _ in 0..10 {
        c.propose_n(2);
        c.run(3);
    }
    c.wait_all_applied(45, 300 * TICK);
    c.run_until(50 * TICK, |c| !c.log(f).is_rejoining()).expect("rejoin completes");
    assert_eq!(c.snapshots_installed, 1, "by snapshot");
    assert!(c.log(f).snapshot_index() >= 20);
    assert_eq!(c.node(f).applied, c.reference);
    check_rejoined(&c, tmp.path(), f);
    c.propose_n(3);
    c.wait_all_applied(48, 300 * TICK);
}

#[test]
fn a_rebuilt_replica_does_not_vote_before_it_caught_up() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut c, f) = cluster_with(tmp.path(), 23, 10);
    let leader = c.live_leader().unwrap();
    c.crash(f);
    c.crash(leader);
    rejoin(&mut c, tmp.path(), f);
    // The remaining replica cannot be elected without the rebuilt one's vote, which it
    // withholds: no leader, however long.
    c.run(300 * TICK);
    assert_eq!(c.live_leader(), None, "elected with the vote of a replica that lost its state");
    assert!(c.log(f).is_rejoining());
    assert_eq!(c.log(f).term(), 0, "it did not even learn the candidates' terms");
    // With the old leader back there is a majority without it; it then catches up.
    c.restart(leader);
    c.wait_all_applied(10, 300 * TICK);
    c.run_until(100 * TICK, |c| !c.log(f).is_rejoining()).expect("rejoin completes");
    check_rejoined(&c, tmp.path(), f);
    c.propose_n(5);
    c.wait_all_applied(15, 300 * TICK);
}

#[test]
fn a_damaged_marker_refuses_the_directory_until_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r1");
    let (mut disk, _) = DiskStorage::open(&dir, WalOptions::default()).unwrap();
    disk.mark_damaged("the leader counts entries up to 9 as held here\nbut the log ends at 3").unwrap();
    drop(disk);
    match DiskStorage::open(&dir, WalOptions::default()) {
        Err(e @ DiskError::Damaged { .. }) => {
            assert!(e.needs_rebuild());
            let msg = e.to_string();
            assert!(msg.contains(DAMAGED_FILE) && msg.contains("up to 9") && !msg.contains('\n'), "{msg}");
        }
        other => panic!("expected damaged, got {other:?}"),
    }
    let moved = prepare_rejoin(&dir).unwrap().unwrap();
    assert!(moved.join(DAMAGED_FILE).exists());
    let (disk, rec) = DiskStorage::open(&dir, WalOptions::default()).unwrap();
    assert!(rec.rejoining && disk.is_rejoining());
    assert!(rec.entries.is_empty() && rec.snapshot.is_none());
    // A directory that does not exist yet is simply created for the rebuild.
    assert_eq!(prepare_rejoin(&tmp.path().join("new")).unwrap(), None);
}
