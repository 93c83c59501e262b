//! Tests of `follower`.

use super::*;
use luigi_txn::types::{KeySet, ShardPiece};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};

fn write(seq: u64, key: u64, value: u64) -> Arc<Txn> {
    let ops = vec![MicroOp { key, write: Some(value) }];
    Arc::new(Txn {
        id: TxnId { client: 1, seq },
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(&ops).unwrap(),
        pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(vec![], vec![micro_key(key)]) }],
        ts: 0,
    })
}

fn entries(records: Vec<LogRecord>) -> Vec<LogEntry> {
    records.into_iter().enumerate().map(|(i, record)| LogEntry { index: i as u64 + 1, record }).collect()
}

fn value(f: &Follower, key: u64) -> Option<u64> {
    f.store().get(&micro_key(key)).map(|v| u64::from_le_bytes(v.as_slice().try_into().unwrap()))
}

#[test]
fn a_new_leader_keeps_its_admissions_above_earlier_promises_but_not_above_the_one_it_made_on_winning() {
    let a = write(1, 7, 100);
    let log = entries(vec![
        LogRecord::Prepare { txn: a, ts: 50, arrival_delta_us: 0, acked_below: 0 },
        LogRecord::Floor { ts: 900 },
        LogRecord::Floor { ts: 2_000 }, // the new leader's, proposed on winning
    ]);
    let follower = || {
        let mut f = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
        log.iter().for_each(|e| f.apply(e));
        f
    };
    let own = log[2].index;
    let h = follower().into_handover(Some(own));
    assert_eq!((h.recovered_floor, h.floor), (900, 2_000), "its own promise bounds its watermark only");
    assert_eq!(follower().into_handover(None).recovered_floor, 2_000);
    assert_eq!(follower().into_handover(Some(log[1].index)).recovered_floor, 2_000, "not the last promise");
}

/// Issue 26: followers forget idle clients at the markers, as their leader does at its
/// watermark (a snapshot no longer carries every command-line client ever served), and a
/// refusal stays while its own timestamp says.
#[test]
fn followers_forget_idle_clients_at_the_markers() {
    use super::super::answers::DEFAULT_ANSWER_EXPIRY_US as ANSWER_EXPIRY_US;
    const EXPIRY_SCAN_US: u64 = ANSWER_EXPIRY_US / 8;
    let a = write(1, 7, 100);
    let refused = TxnId { client: 5, seq: 1 };
    let far = 900 + ANSWER_EXPIRY_US + 2 * EXPIRY_SCAN_US;
    let log = entries(vec![
        LogRecord::Prepare { txn: a, ts: 50, arrival_delta_us: 0, acked_below: 0 },
        LogRecord::Refuse { id: refused, reason: "ahead".into(), arrival_delta_us: 0, ts: far, others: vec![] },
        LogRecord::Applied { ts: 60 },
        LogRecord::Applied { ts: far },
    ]);
    let mut f = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
    for e in &log[..3] {
        f.apply(e);
    }
    assert_eq!(f.answers().clients(), 2);
    f.apply(&log[3]);
    assert_eq!(f.answers().clients(), 1, "the client of ts 50 went, the refusal stamped {far} stayed");
    assert!(f.answers().is_answered(refused));
}

#[test]
fn executes_at_markers_in_final_timestamp_order() {
    let (a, b, c) = (write(1, 7, 100), write(2, 7, 200), write(3, 8, 300));
    let log = entries(vec![
        LogRecord::Prepare { txn: a.clone(), ts: 50, arrival_delta_us: 0, acked_below: 0 },
        LogRecord::Prepare { txn: b.clone(), ts: 60, arrival_delta_us: 0, acked_below: 0 },
        LogRecord::Prepare { txn: c.clone(), ts: 70, arrival_delta_us: 0, acked_below: 0 },
        LogRecord::Decide { id: a.id, ts: 65 }, // agreement moved `a` after `b`
        LogRecord::Abort { id: c.id },
        LogRecord::Applied { ts: 64 },
    ]);
    let mut f = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
    for e in &log[..5] {
        f.apply(e);
        f.check_invariants().unwrap();
    }
    assert!(f.store().is_empty(), "nothing executes before a marker");
    f.apply(&log[5]);
    f.check_invariants().unwrap();
    assert_eq!((value(&f, 7), f.queued_len()), (Some(200), 1), "b (60) ran; a (65) waits");
    f.apply(&LogEntry { index: 7, record: LogRecord::Applied { ts: 65 } });
    assert_eq!(value(&f, 7), Some(100), "a ran after b, as on the leader");
    assert_eq!(value(&f, 8), None, "the aborted transaction left no trace");
    assert_eq!((f.stats().executed, f.stats().aborted), (2, 1));
    assert_eq!(f.recovered_floor(), 70);
    assert_eq!(f.take_executed(), vec![(b.id, 60), (a.id, 65)], "the journal, in execution order");
    assert!(f.take_executed().is_empty(), "taken once");
}

#[test]
fn a_snapshot_restores_the_same_state_and_continues_the_log() {
    let (a, b) = (write(1, 7, 100), write(2, 8, 200));
    let log = entries(vec![
        LogRecord::Prepare { txn: a.clone(), ts: 50, arrival_delta_us: 3, acked_below: 0 },
        LogRecord::Applied { ts: 55 },
        LogRecord::Prepare { txn: b.clone(), ts: 60, arrival_delta_us: 0, acked_below: 0 },
        LogRecord::Floor { ts: 900 },
        LogRecord::Applied { ts: 70 },
    ]);
    let mut whole = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
    for e in &log {
        whole.apply(e);
    }
    let mut first = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
    for e in &log[..3] {
        first.apply(e);
    }
    let bytes = first.snapshot();
    let mut restored = Follower::from_snapshot(0, luigi_workloads::procedures::builtins(), &bytes).unwrap();
    assert_eq!(restored.snapshot(), bytes, "a restored follower snapshots to the same bytes");
    assert_eq!((restored.queued_len(), restored.stats().applied_index), (1, 3));
    restored.check_invariants().unwrap();
    for e in &log[3..] {
        restored.apply(e);
        restored.check_invariants().unwrap();
    }
    assert_eq!(restored.snapshot(), whole.snapshot(), "snapshot + the rest of the log = the whole log");
    assert_eq!(restored.answers().get(a.id).map(|x| x.arrival_delta_us), Some(3));
    assert!(matches!(
        Follower::from_snapshot(1, luigi_workloads::procedures::builtins(), &bytes),
        Err(SnapshotError::WrongShard { found: 0, expected: 1 })
    ));
    assert!(matches!(
        Follower::from_snapshot(0, luigi_workloads::procedures::builtins(), &bytes[..bytes.len() / 2]),
        Err(SnapshotError::Decode(_))
    ));
}

/// Rule 11: a follower's own snapshot job serializes a fork taken on the event loop, while
/// the follower goes on applying; the fork's image is the state at the fork, byte for byte,
/// and the follower's store stops sharing memory with it once it is gone.
#[test]
fn a_fork_serializes_the_state_it_was_taken_at_while_the_follower_goes_on() {
    let (a, b) = (write(1, 7, 100), write(2, 7, 200));
    let log = entries(vec![
        LogRecord::Prepare { txn: a.clone(), ts: 50, arrival_delta_us: 3, acked_below: 0 },
        LogRecord::Applied { ts: 55 },
        LogRecord::Prepare { txn: b.clone(), ts: 60, arrival_delta_us: 0, acked_below: 0 },
        LogRecord::Applied { ts: 70 },
    ]);
    let mut f = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
    for e in &log[..3] {
        f.apply(e);
    }
    let at_fork = f.snapshot();
    let fork = f.fork();
    assert_eq!(f.store().shared_chunks(), 1, "key 7's chunk is shared with the fork");
    for e in &log[3..] {
        f.apply(e);
    }
    assert_eq!(f.store().shared_chunks(), 0, "b's write copied the chunk it touched");
    let image = std::thread::spawn(move || fork.image()).join().unwrap();
    assert_eq!(image, at_fork, "the state at the fork, byte for byte");
    let restored = Follower::from_snapshot(0, luigi_workloads::procedures::builtins(), &image).unwrap();
    assert_eq!((restored.queued_len(), restored.stats().applied_index), (1, 3));
    assert_ne!(restored.store(), f.store(), "the follower moved on: b wrote key 7");
}

#[test]
fn a_transaction_queued_at_a_stale_position_is_reported() {
    let a = write(1, 7, 100);
    let mut f = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
    for e in entries(vec![
        LogRecord::Prepare { txn: a.clone(), ts: 50, arrival_delta_us: 0, acked_below: 0 },
        LogRecord::Decide { id: a.id, ts: 65 },
    ]) {
        f.apply(&e);
    }
    f.check_invariants().unwrap();
    // The DECIDE's move forgotten in the execution order: a marker at 60 would run it.
    f.order.remove(&(65, a.id));
    f.order.insert((50, a.id));
    let err = f.check_invariants().unwrap_err();
    assert!(err.contains("queued at 50 but prepared at 65"), "{err}");
}

#[test]
#[should_panic(expected = "at or below the applied marker")]
fn a_prepare_below_an_applied_marker_is_an_invariant_violation() {
    let mut f = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
    for e in entries(vec![
        LogRecord::Applied { ts: 100 },
        LogRecord::Prepare { txn: write(1, 1, 1), ts: 90, arrival_delta_us: 0, acked_below: 0 },
    ]) {
        f.apply(&e);
    }
}

/// Rule 23: a follower's safe time is its last applied marker; its store answers reads at
/// any snapshot from the values as of it, also for writes queued above the marker (executed
/// only at the next one), and one rebuilt from a snapshot refuses reads below its marker.
#[test]
fn a_followers_snapshot_view_is_its_applied_marker_with_the_values_as_of_each_timestamp() {
    let log = entries(vec![
        LogRecord::Prepare { txn: write(1, 7, 100), ts: 50, arrival_delta_us: 0, acked_below: 0 },
        LogRecord::Prepare { txn: write(2, 7, 200), ts: 80, arrival_delta_us: 0, acked_below: 0 },
        LogRecord::Applied { ts: 60 },
        LogRecord::Prepare { txn: write(3, 7, 300), ts: 90, arrival_delta_us: 0, acked_below: 0 },
        LogRecord::Applied { ts: 85 },
    ]);
    let mut f = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
    let at = |f: &Follower, ts| {
        let view = f.snapshot_view();
        view.store.get_at(&micro_key(7), ts).unwrap().map(|v| u64::from_le_bytes(v.as_slice().try_into().unwrap()))
    };
    f.apply(&log[0]);
    f.apply(&log[1]);
    assert_eq!(f.snapshot_view().safe_ts, 0, "prepared is not applied");
    f.apply(&log[2]);
    assert_eq!(f.snapshot_view().safe_ts, 60);
    assert_eq!((at(&f, 49), at(&f, 50), at(&f, 60)), (None, Some(100), Some(100)));
    f.apply(&log[3]);
    f.apply(&log[4]);
    assert_eq!(f.snapshot_view().safe_ts, 85);
    assert_eq!((at(&f, 60), at(&f, 79), at(&f, 80), at(&f, 85)), (Some(100), Some(100), Some(200), Some(200)));
    assert_eq!(value(&f, 7), Some(200), "the write at 90 waits for a marker above it");
    let restored = Follower::from_snapshot(0, luigi_workloads::procedures::builtins(), &f.snapshot()).unwrap();
    assert_eq!(restored.snapshot_view().safe_ts, 85);
    assert!(restored.snapshot_view().store.get_at(&micro_key(7), 84).is_err(), "no versions below its marker");
    assert_eq!(at(&restored, 85), Some(200));
}
