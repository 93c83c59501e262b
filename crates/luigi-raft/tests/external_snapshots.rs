//! Snapshots that travel outside Raft's messages (`RaftConfig::external_snapshots`, what
//! `luigi-node` uses to send them in chunks): the leader's `MsgSnapshot` leaves without its
//! data, which comes apart for the shell; the follower refuses such a message on the plain
//! path and takes it whole through `step_snapshot`; the leader sends that follower nothing but
//! heartbeats until the transfer's outcome is reported, and tries again after a failure.

mod common;

use common::TestRecord;
use luigi_raft::eraftpb::MessageType;
use luigi_raft::{decode_message, OutMessage, RaftConfig, RaftError, RaftLog};
use luigi_txn::log::ReplicatedLog;

fn log(id: u64) -> RaftLog {
    let mut c = RaftConfig::new(id, vec![1, 2, 3], 9);
    c.external_snapshots = true;
    RaftLog::new(c, None).unwrap()
}

/// Drains every replica's readies ("persisting" at once); returns the messages, by sender.
fn drain(logs: &mut [RaftLog]) -> Vec<(u64, OutMessage)> {
    let mut out = Vec::new();
    for l in logs.iter_mut() {
        while let Some(rd) = l.ready().unwrap() {
            let from = l.id();
            out.extend(rd.messages.into_iter().chain(rd.persisted_messages).map(|m| (from, m)));
            l.advance(rd.number);
            let mut taken: Vec<luigi_txn::log::LogEntry<TestRecord>> = Vec::new();
            l.take_committed(&mut taken);
        }
    }
    out
}

/// Delivers messages among the replicas not `cut` until none is left; returns the
/// snapshot messages (not delivered: the caller does).
fn settle(logs: &mut [RaftLog], cut: u64) -> Vec<(u64, OutMessage)> {
    let mut snapshots = Vec::new();
    for _ in 0..100 {
        let msgs = drain(logs);
        if msgs.is_empty() {
            return snapshots;
        }
        for (from, m) in msgs {
            if m.to == cut || from == cut {
                continue;
            }
            if m.msg_type == MessageType::MsgSnapshot {
                snapshots.push((from, m));
                continue;
            }
            let _ = logs[(m.to - 1) as usize].step_bytes(&m.bytes);
        }
    }
    panic!("never settles");
}

fn tick_all(logs: &mut [RaftLog]) {
    for l in logs.iter_mut() {
        l.tick();
    }
}

#[test]
fn a_snapshot_travels_apart_from_its_message_and_is_reported_by_the_shell() {
    let mut logs: Vec<RaftLog> = (1..=3).map(log).collect();
    logs[0].campaign().unwrap();
    settle(&mut logs, 0);
    assert!(logs[0].is_leader());
    // Replica 3 is cut off while the others commit, and the leader compacts.
    for ts in 1..=10 {
        logs[0].propose(TestRecord::Floor { ts }).unwrap();
        settle(&mut logs, 3);
    }
    let at = logs[0].handed_out();
    logs[0].compact(at, b"state at the compaction".to_vec()).unwrap();
    // Back: the leader finds it behind its compaction and sends a snapshot.
    let mut snapshots = Vec::new();
    for _ in 0..40 {
        tick_all(&mut logs);
        snapshots.extend(settle(&mut logs, 0));
        if !snapshots.is_empty() {
            break;
        }
    }
    let [(1, m)] = snapshots.as_slice() else { panic!("one snapshot from the leader: {snapshots:?}") };
    assert_eq!(m.to, 3);
    let snap = m.snapshot.clone().expect("the data travels apart");
    assert_eq!((snap.index, snap.data.as_ref()), (at, &b"state at the compaction"[..]));
    let envelope = decode_message(&m.bytes).unwrap();
    assert!(envelope.get_snapshot().data.is_empty(), "the message carries no data");
    assert_eq!(envelope.get_snapshot().get_metadata().index, at);
    // The plain path refuses a snapshot; an envelope alone is no snapshot either.
    assert!(matches!(logs[2].step_bytes(&m.bytes), Err(RaftError::Forbidden(MessageType::MsgSnapshot))));
    // While the transfer runs, the leader sends replica 3 no appends (heartbeats only).
    let mut later = Vec::new();
    for _ in 0..30 {
        tick_all(&mut logs);
        later.extend(settle(&mut logs, 0));
    }
    assert!(later.is_empty(), "no second snapshot while the first is out: {later:?}");
    // The transfer fails: the leader tries again after a heartbeat.
    logs[0].report_snapshot(3, false);
    for _ in 0..30 {
        tick_all(&mut logs);
        later.extend(settle(&mut logs, 0));
        if !later.is_empty() {
            break;
        }
    }
    let [(1, again)] = later.as_slice() else { panic!("a new snapshot after the failure: {later:?}") };
    // This one arrives whole: replica 3 takes it, and catches up with the log after it.
    logs[2].step_snapshot(&again.bytes, again.snapshot.clone().unwrap().data).unwrap();
    let rd = logs[2].ready().unwrap().expect("the snapshot to persist");
    assert_eq!(rd.snapshot.as_ref().map(|s| (s.index, s.data.clone())), Some((at, snap.data.clone())));
    for m in rd.messages.iter().chain(&rd.persisted_messages) {
        logs[0].step_bytes(&m.bytes).unwrap();
    }
    logs[2].advance(rd.number);
    logs[0].report_snapshot(3, true);
    logs[0].propose(TestRecord::Floor { ts: 11 }).unwrap();
    settle(&mut logs, 0);
    assert_eq!(logs[2].last_index(), logs[0].last_index());
    assert_eq!(logs[2].commit_index(), logs[0].commit_index());
    // A message that is not a snapshot envelope is refused by the snapshot path.
    let heartbeat = drain_one_heartbeat(&mut logs);
    assert!(matches!(logs[2].step_snapshot(&heartbeat, bytes::Bytes::new()), Err(RaftError::Invalid(_))));
}

fn drain_one_heartbeat(logs: &mut [RaftLog]) -> Vec<u8> {
    for _ in 0..10 {
        tick_all(logs);
        for (_, m) in drain(logs) {
            if m.msg_type == MessageType::MsgHeartbeat && m.to == 3 {
                return m.bytes;
            }
        }
    }
    panic!("no heartbeat");
}
