//! Snapshot reads at a Luigi replica (DESIGN.md rule 23): served once the safe time (the
//! last committed `Applied` marker) reaches the snapshot, with the values as of it; held,
//! bounded and refused clearly otherwise.

use luigi_replica::snapshot_reads::SnapshotReadConfig;
use luigi_txn::procedure::ProcError;
use luigi_txn::read_only::{ReadRefusal, SnapshotRead, SnapshotReadReply};
use luigi_workloads::procedures::MicroOutput;

use super::tests::{dispatch, lone_over, lone_replica, settle, Lone};
use super::*;
use luigi_txn::msg::ServerMsg;
use luigi_txn::types::KeySet;
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};

fn read(seq: u64, ts: Timestamp, ops: &[MicroOp], keys: KeySet) -> ClientMsg {
    ClientMsg::SnapshotRead(SnapshotRead {
        id: TxnId { client: 4, seq },
        shard: 0,
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(ops).unwrap(),
        keys,
        ts,
        sent_us: 0,
    })
}

/// A snapshot read of micro key 1.
fn read_key_1(seq: u64, ts: Timestamp) -> ClientMsg {
    read(seq, ts, &[MicroOp { key: 1, write: None }], KeySet::new(vec![micro_key(1)], vec![]))
}

fn read_replies(out: &[LeaderOutput]) -> Vec<SnapshotReadReply> {
    out.iter()
        .filter_map(|o| match o {
            LeaderOutput::ToClient { msg: ServerMsg::SnapshotRead(r), .. } => Some(r.clone()),
            _ => None,
        })
        .collect()
}

fn value_read(reply: &SnapshotReadReply) -> Option<u64> {
    let Ok(Ok(bytes)) = &reply.outcome else { panic!("not served: {reply:?}") };
    let read: MicroOutput = postcard::from_bytes(bytes).unwrap();
    read[0].1
}

/// A serving lone leader that wrote 1..=5 to key 1, keeping versions for the store's default
/// window; the timestamps of the writes.
fn leader_with_five_writes() -> (Lone, Vec<Timestamp>) {
    leader_with_five_writes_keeping(luigi_store::versions::DEFAULT_RETENTION_US)
}

/// As [`leader_with_five_writes`], keeping versions for `retention_us`.
fn leader_with_five_writes_keeping(retention_us: u64) -> (Lone, Vec<Timestamp>) {
    let config = LeaderConfig { snapshot_retention_us: retention_us, ..LeaderConfig::new(0, 1) };
    let mut n = lone_over(config, None);
    n.log.campaign().unwrap();
    settle(&mut n, 100);
    let mut out = Vec::new();
    for seq in 1..=5 {
        n.r.on_client(&mut n.log, 1_000 * seq, 4, dispatch(seq), &mut out);
        out.extend(settle(&mut n, 1_000 * seq + 500));
    }
    out.extend(settle(&mut n, 100_000));
    let mut ts: Vec<(u64, Timestamp)> = out
        .iter()
        .filter_map(|o| match o {
            LeaderOutput::ToClient { msg: ServerMsg::Reply(r), .. } => Some((r.id.seq, r.ts)),
            _ => None,
        })
        .collect();
    ts.sort_unstable();
    assert_eq!(ts.len(), 5, "{out:?}");
    (n, ts.into_iter().map(|(_, t)| t).collect())
}

#[test]
fn a_snapshot_read_at_the_leader_sees_exactly_the_writes_at_or_below_its_timestamp() {
    let (mut n, ts) = leader_with_five_writes();
    let safe = n.r.leader().unwrap().snapshot_view().safe_ts;
    assert!(safe >= ts[4], "the committed marker covers every write ({safe} < {})", ts[4]);
    let mut out = Vec::new();
    for (i, at) in ts.iter().enumerate() {
        n.r.on_client(&mut n.log, 100_000, 4, read_key_1(10 + i as u64, *at), &mut out);
        n.r.on_client(&mut n.log, 100_000, 4, read_key_1(20 + i as u64, at - 1), &mut out);
    }
    let replies = read_replies(&out);
    assert_eq!(replies.len(), 10, "served at once, no log record: {out:?}");
    for r in &replies {
        let i = r.id.seq % 10;
        let expected = if r.id.seq < 20 { Some(i + 1) } else { (i > 0).then_some(i) };
        assert_eq!(value_read(r), expected, "{r:?}");
        assert_eq!((r.shard, r.replica), (0, 0));
    }
}

/// A leader's default keeps no versions (no client sends snapshot reads yet, and keeping
/// them costs every write): a read at the newest write is served, an older one refused as too
/// old, never answered with a later value.
#[test]
fn with_the_default_window_no_versions_are_kept_and_an_older_snapshot_is_refused() {
    assert_eq!(LeaderConfig::new(0, 1).snapshot_retention_us, 0);
    let (mut n, ts) = leader_with_five_writes_keeping(0);
    let mut out = Vec::new();
    n.r.on_client(&mut n.log, 100_000, 4, read_key_1(40, ts[4]), &mut out);
    n.r.on_client(&mut n.log, 100_000, 4, read_key_1(41, ts[3]), &mut out);
    let replies = read_replies(&out);
    assert_eq!(replies.len(), 2, "{out:?}");
    for r in &replies {
        match r.id.seq {
            40 => assert_eq!(value_read(r), Some(5)),
            _ => assert!(matches!(r.outcome, Ok(Err(ProcError::SnapshotTooOld { .. }))), "{r:?}"),
        }
    }
    assert_eq!(n.r.leader().unwrap().snapshot_view().store.history_stats().versions, 0, "nothing kept");
}

/// A lone leader commits at once, so it serves a read as soon as its watermark passes the
/// snapshot (rule 23 (e)), before the marker; not before the watermark.
#[test]
fn a_read_above_the_safe_time_waits_for_the_watermark_and_is_served_then_not_before() {
    let (mut n, _) = leader_with_five_writes();
    // Ahead of the leader's clock (100 ms), so of its watermark too.
    let at = 150_000;
    assert!(n.r.leader().unwrap().snapshot_view().safe_ts < at);
    let mut out = Vec::new();
    n.r.on_client(&mut n.log, 100_000, 4, read_key_1(30, at), &mut out);
    out.extend(settle(&mut n, 100_001));
    assert!(read_replies(&out).is_empty(), "not before the safe time: {out:?}");
    assert_eq!(n.r.snapshot_read_stats().1, 1, "held");
    // A write above the read's snapshot, then the clock and the markers pass it.
    n.r.on_client(&mut n.log, at - 10_000, 4, dispatch(6), &mut out);
    let mut now = at - 10_000;
    while read_replies(&out).is_empty() && now < at + 1_000_000 {
        now += 1_000;
        out.extend(settle(&mut n, now));
    }
    let replies = read_replies(&out);
    assert_eq!(replies.len(), 1, "served once the watermark passed it");
    let view = n.r.leader().unwrap().snapshot_view();
    assert!(view.ahead.is_some_and(|a| a.executed_ts >= at));
    let wrote_6_at = out.iter().find_map(|o| match o {
        LeaderOutput::ToClient { msg: ServerMsg::Reply(r), .. } if r.id.seq == 6 => Some(r.ts),
        _ => None,
    });
    let expected = if wrote_6_at.is_some_and(|t| t <= at) { 6 } else { 5 };
    assert_eq!(value_read(&replies[0]), Some(expected));
}

#[test]
fn a_replica_refuses_clearly_what_it_cannot_serve_and_bounds_what_waits() {
    let mut n = lone_replica(); // not campaigned: a follower, nothing applied
    n.r.set_snapshot_reads(SnapshotReadConfig { waiting_max: 1, wait_us_max: 1_000, ..Default::default() });
    let mut out = Vec::new();
    n.r.on_client(&mut n.log, 10, 4, read_key_1(1, 0), &mut out); // timestamp 0: malformed
    n.r.on_client(&mut n.log, 10, 4, read_key_1(2, 500), &mut out); // held
    n.r.on_client(&mut n.log, 10, 4, read_key_1(3, 500), &mut out); // the table is full
    n.r.on_client(&mut n.log, 10, 4, read_key_1(4, 5_000), &mut out); // past the wait bound
    let writes = KeySet::new(vec![], vec![micro_key(1)]);
    n.r.on_client(&mut n.log, 10, 4, read(5, 5, &[MicroOp { key: 1, write: None }], writes), &mut out);
    let other = SnapshotRead { shard: 3, ..read_snapshot(6) };
    n.r.on_client(&mut n.log, 10, 4, ClientMsg::SnapshotRead(other), &mut out);
    out.extend(settle(&mut n, 1_010));
    let refusals: Vec<(u64, ReadRefusal)> =
        read_replies(&out).into_iter().map(|r| (r.id.seq, r.outcome.expect_err("refused"))).collect();
    assert!(matches!(refusals[0], (1, ReadRefusal::Malformed(_))), "{refusals:?}");
    assert_eq!(refusals[1], (3, ReadRefusal::Busy));
    assert_eq!(refusals[2], (4, ReadRefusal::TooFarAhead { ahead_us: 4_990 }));
    assert!(matches!(refusals[3], (5, ReadRefusal::Malformed(_))));
    assert!(matches!(refusals[4], (6, ReadRefusal::Malformed(_))));
    assert_eq!(refusals[5], (2, ReadRefusal::TimedOut { safe_ts: 0 }), "held past the bound");
    assert_eq!(n.r.snapshot_read_stats().1, 0);
    assert_eq!(n.r.next_deadline(), None, "nothing left to time out");
}

fn read_snapshot(seq: u64) -> SnapshotRead {
    let ClientMsg::SnapshotRead(r) = read_key_1(seq, 1) else { unreachable!() };
    r
}

#[test]
fn a_procedure_that_writes_is_refused_and_writes_nothing() {
    let (mut n, ts) = leader_with_five_writes();
    let keys = KeySet::new(vec![micro_key(1)], vec![]);
    let mut out = Vec::new();
    n.r.on_client(&mut n.log, 100_000, 4, read(40, ts[4], &[MicroOp { key: 1, write: Some(99) }], keys), &mut out);
    let replies = read_replies(&out);
    let Ok(Err(e)) = &replies[0].outcome else { panic!("{replies:?}") };
    assert!(matches!(e, ProcError::KeyNotDeclared { .. } | ProcError::WriteInReadOnly(_)), "{e:?}");
    assert_eq!(n.r.store().get(&micro_key(1)), Some(&5u64.to_le_bytes().to_vec()));
}
