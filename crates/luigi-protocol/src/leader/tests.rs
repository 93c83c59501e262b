//! Single-leader transcript tests: admission, the hold queue, execution, the watermark and
//! exactly-once answers on one shard.

use super::*;
use crate::log::LocalLog;
use luigi_txn::msg::{TxnError, TxnReply};
use luigi_txn::types::{KeySet, ShardPiece};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};

fn leader() -> LeaderWithLog<LocalLog> {
    LeaderWithLog::new(
        LeaderConfig::new(0, 8),
        LocalLog::default(),
        Store::new(),
        luigi_workloads::procedures::builtins(),
    )
}

fn txn(seq: u64, ts: Timestamp, ops: &[MicroOp]) -> Arc<Txn> {
    let reads = ops.iter().filter(|o| o.write.is_none()).map(|o| micro_key(o.key)).collect();
    let writes = ops.iter().filter(|o| o.write.is_some()).map(|o| micro_key(o.key)).collect();
    Arc::new(Txn {
        id: TxnId { client: 9, seq },
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(ops).unwrap(),
        pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(reads, writes) }],
        ts,
    })
}

fn dispatch(l: &mut LeaderWithLog<LocalLog>, now: TimeUs, t: &Arc<Txn>) -> Vec<LeaderOutput> {
    let mut out = Vec::new();
    l.on_client(now, 9, ClientMsg::Dispatch { txn: t.clone(), sent_us: now - 1, acked_below: 1, fast: true }, &mut out);
    l.check_invariants().unwrap();
    out
}

pub(super) fn replies(out: &[LeaderOutput]) -> Vec<TxnReply> {
    out.iter()
        .filter_map(|o| match o {
            LeaderOutput::ToClient { msg: ServerMsg::Reply(r), .. } => Some(r.clone()),
            LeaderOutput::ToClient { .. }
            | LeaderOutput::ToClients { .. }
            | LeaderOutput::ToAllClients { .. }
            | LeaderOutput::ToPeer { .. }
            | LeaderOutput::ToPeerDurably { .. }
            | LeaderOutput::ToClientDurably { .. }
            | LeaderOutput::Executed { .. } => None,
        })
        .collect()
}

/// The `Executed` effects in `out`, in order: (shard, transaction, timestamp).
pub(super) fn executed(out: &[LeaderOutput]) -> Vec<(ShardId, TxnId, Timestamp)> {
    out.iter()
        .filter_map(|o| match o {
            LeaderOutput::Executed { shard, id, ts } => Some((*shard, *id, *ts)),
            LeaderOutput::ToClient { .. }
            | LeaderOutput::ToClientDurably { .. }
            | LeaderOutput::ToClients { .. }
            | LeaderOutput::ToAllClients { .. }
            | LeaderOutput::ToPeer { .. }
            | LeaderOutput::ToPeerDurably { .. } => None,
        })
        .collect()
}

fn tick(l: &mut LeaderWithLog<LocalLog>, now: TimeUs) -> Vec<TxnReply> {
    let mut out = Vec::new();
    l.tick(now, &mut out);
    l.check_invariants().unwrap();
    replies(&out)
}

const W: Option<u64> = Some(1);
const R: Option<u64> = None;

#[test]
fn holds_until_the_timestamp_then_answers_exactly_once() {
    let mut l = leader();
    let t = txn(1, 1_000, &[MicroOp { key: 1, write: W }]);
    assert!(replies(&dispatch(&mut l, 100, &t)).is_empty());
    assert!(tick(&mut l, 999).is_empty(), "held until the clock reaches ts");
    assert!(l.watermark() < 1_000);
    let r = tick(&mut l, 1_000);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].id.seq, r[0].ts), (1, 1_000));
    assert!(r[0].watermark >= 1_000, "answered only once the watermark passed");
    assert_eq!(r[0].arrival_delta_us, 1);
    assert!(tick(&mut l, 2_000).is_empty(), "never answered twice");
    // A retry gets the stored answer, not a second execution.
    let again = replies(&dispatch(&mut l, 2_100, &t));
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].ts, &again[0].outcome), (1_000, &r[0].outcome));
    assert_eq!(l.stats().executed, 1);
    assert_eq!(l.stats().duplicates, 1);
}

#[test]
fn late_arrival_is_moved_up_to_the_clock() {
    let mut l = leader();
    let t = txn(1, 50, &[MicroOp { key: 1, write: W }]);
    // Its proposal is the clock, which has already come: executed and answered at once.
    let r = replies(&dispatch(&mut l, 500, &t));
    assert_eq!(r[0].ts, 500);
    assert_eq!(l.stats().bumped, 1);
}

#[test]
fn reads_see_writes_in_timestamp_order_not_arrival_order() {
    let mut l = leader();
    // The read arrives first but has the later timestamp; the write arrives second.
    let read = txn(1, 2_000, &[MicroOp { key: 7, write: R }]);
    let write = txn(2, 1_500, &[MicroOp { key: 7, write: Some(42) }]);
    dispatch(&mut l, 100, &read);
    dispatch(&mut l, 200, &write);
    let r = tick(&mut l, 5_000);
    assert_eq!(r.iter().map(|r| r.id.seq).collect::<Vec<_>>(), vec![2, 1]);
    let out: luigi_workloads::procedures::MicroOutput = postcard::from_bytes(r[1].outcome.as_ref().unwrap()).unwrap();
    assert_eq!(out, vec![(7, Some(42))]);
}

/// Every execution is reported once, when it happens and in execution order (timestamp
/// order, not arrival order), before its answer; refusals and answered retries report none.
#[test]
fn each_execution_is_reported_once_as_an_effect() {
    let mut l = leader();
    let read = txn(1, 2_000, &[MicroOp { key: 7, write: R }]);
    let write = txn(2, 1_500, &[MicroOp { key: 7, write: Some(42) }]);
    let mut out = dispatch(&mut l, 100, &read);
    out.extend(dispatch(&mut l, 200, &write));
    let mut unknown = (*txn(3, 300, &[MicroOp { key: 8, write: W }])).clone();
    unknown.procedure = "nope".into();
    out.extend(dispatch(&mut l, 300, &Arc::new(unknown)));
    assert_eq!(replies(&out).len(), 1, "the unknown procedure is refused");
    assert!(executed(&out).is_empty(), "nothing has run yet, and the refusal never will");
    out.clear();
    l.tick(1_600, &mut out);
    let id = |seq| TxnId { client: 9, seq };
    assert_eq!(executed(&out), vec![(0, id(2), 1_500)]);
    let at = |want: &dyn Fn(&LeaderOutput) -> bool| out.iter().position(want).expect("present");
    let effect = at(&|o| matches!(o, LeaderOutput::Executed { .. }));
    let reply = at(&|o| matches!(o, LeaderOutput::ToClient { msg: ServerMsg::Reply(_), .. }));
    assert!(effect < reply, "the execution is reported before its answer");
    out.clear();
    l.tick(5_000, &mut out);
    assert_eq!(executed(&out), vec![(0, id(1), 2_000)]);
    out.clear();
    l.tick(6_000, &mut out);
    out.extend(dispatch(&mut l, 6_100, &write));
    assert_eq!(replies(&out).len(), 1, "the retry is answered from the table");
    assert!(executed(&out).is_empty(), "and not executed again");
}

#[test]
fn a_write_after_a_released_read_is_bumped_above_it() {
    let mut l = leader();
    dispatch(&mut l, 100, &txn(1, 1_000, &[MicroOp { key: 3, write: R }]));
    tick(&mut l, 1_000); // read released at 1000
                         // A write stamped below the released read must be ordered after it.
    let late_write = txn(2, 900, &[MicroOp { key: 3, write: W }]);
    dispatch(&mut l, 950, &late_write);
    let r = tick(&mut l, 5_000);
    assert!(r[0].ts > 1_000, "write ordered at {} after a read released at 1000", r[0].ts);
}

#[test]
fn watermark_never_passes_a_pending_transaction() {
    let mut l = leader();
    dispatch(&mut l, 100, &txn(1, 10_000, &[MicroOp { key: 1, write: W }]));
    dispatch(&mut l, 100, &txn(2, 3_000, &[MicroOp { key: 2, write: W }]));
    assert!(tick(&mut l, 2_000).is_empty());
    assert!(l.watermark() < 2_001);
    let r = tick(&mut l, 4_000);
    assert_eq!(r.len(), 1);
    assert!(l.watermark() >= 3_000 && l.watermark() < 10_000);
    // A new transaction stamped below the watermark is bumped above it.
    dispatch(&mut l, 4_000, &txn(3, 100, &[MicroOp { key: 2, write: W }]));
    let r = tick(&mut l, 20_000);
    assert_eq!(r.len(), 2);
    assert!(r.iter().find(|r| r.id.seq == 3).unwrap().ts > 3_000);
}

#[test]
fn unknown_procedure_and_foreign_shard_are_rejected_at_once() {
    let mut l = leader();
    let mut t = (*txn(1, 100, &[MicroOp { key: 1, write: W }])).clone();
    t.procedure = "nope".into();
    let r = replies(&dispatch(&mut l, 10, &Arc::new(t.clone())));
    assert!(matches!(&r[0].outcome, Err(TxnError::Rejected(why)) if why.contains("unknown procedure 'nope'")));
    t.procedure = Micro::NAME.into();
    t.pieces[0].shard = 4;
    t.id.seq = 2;
    let r = replies(&dispatch(&mut l, 10, &Arc::new(t)));
    assert!(matches!(&r[0].outcome, Err(TxnError::Rejected(why)) if why.contains("not a participant")));
    assert_eq!(l.pending_len(), 0);
}

#[test]
fn bad_arguments_are_an_ordered_error_answer() {
    let mut l = leader();
    let mut t = (*txn(1, 100, &[MicroOp { key: 1, write: W }])).clone();
    t.args = vec![0xff; 3];
    dispatch(&mut l, 10, &Arc::new(t));
    let r = tick(&mut l, 200);
    assert!(matches!(r[0].outcome, Err(TxnError::Proc(luigi_txn::procedure::ProcError::BadArgs(_)))));
    assert!(l.store().is_empty());
}

#[test]
fn acknowledged_answers_are_forgotten() {
    let mut l = leader();
    let t1 = txn(1, 100, &[MicroOp { key: 1, write: W }]);
    dispatch(&mut l, 10, &t1);
    tick(&mut l, 200);
    let mut out = Vec::new();
    let t2 = txn(2, 300, &[MicroOp { key: 2, write: W }]);
    l.on_client(250, 9, ClientMsg::Dispatch { txn: t2, sent_us: 249, acked_below: 2, fast: true }, &mut out);
    let r = replies(&dispatch(&mut l, 260, &t1));
    assert_eq!(r[0].outcome, Err(TxnError::Forgotten));
}

#[test]
fn ping_is_answered_with_the_arrival_delta() {
    let mut l = leader();
    let mut out = Vec::new();
    l.on_client(1_000, 9, ClientMsg::Ping { sent_us: 400 }, &mut out);
    assert!(matches!(
        out.as_slice(),
        [LeaderOutput::ToClient { client: 9, msg: ServerMsg::Pong { shard: 0, arrival_delta_us: 600, .. } }]
    ));
}

/// Watermarks go to the clients heard from within `active_client_us`, not to every
/// client ever connected (200 idle clients once cost 60 % of a core).
#[test]
fn watermarks_go_only_to_recently_heard_clients() {
    let mut l = leader();
    let broadcasts = |out: &[LeaderOutput]| {
        out.iter()
            .filter_map(|o| match o {
                LeaderOutput::ToClients { clients, msg: ServerMsg::Watermark { .. } } => {
                    let mut clients = clients.clone();
                    clients.sort_unstable();
                    Some(clients)
                }
                LeaderOutput::ToClients { .. }
                | LeaderOutput::ToAllClients { .. }
                | LeaderOutput::ToClient { .. }
                | LeaderOutput::ToPeer { .. }
                | LeaderOutput::ToPeerDurably { .. }
                | LeaderOutput::ToClientDurably { .. }
                | LeaderOutput::Executed { .. } => None,
            })
            .collect::<Vec<_>>()
    };
    let mut out = Vec::new();
    l.tick(100_000, &mut out);
    assert!(
        out.iter().any(|o| matches!(o, LeaderOutput::ToAllClients { msg: ServerMsg::Watermark { .. } })),
        "now and then every connected client is told (a client may be pinging a replica that no longer leads)"
    );
    out.clear();
    l.tick(101_100, &mut out);
    assert!(broadcasts(&out).is_empty(), "nobody heard from: nobody to tell until the next broadcast to all");
    l.on_client(101_000, 3, ClientMsg::Ping { sent_us: 101_000 }, &mut out);
    l.on_client(1_500_000, 4, ClientMsg::Ping { sent_us: 1_500_000 }, &mut out);
    // Every client is told at 1_500_000, 2_500_000 and 4_000_000 (at most every 100 ms),
    // the recent ones at the ticks in between.
    l.tick(1_500_000, &mut out);
    out.clear();
    l.tick(1_501_600, &mut out);
    assert_eq!(broadcasts(&out), vec![vec![3, 4]]);
    l.tick(2_500_000, &mut out);
    out.clear();
    l.tick(2_501_100, &mut out);
    assert_eq!(broadcasts(&out), vec![vec![4]], "client 3 has been silent for over 2 s");
    l.tick(4_000_000, &mut out);
    out.clear();
    l.tick(4_001_100, &mut out);
    assert!(broadcasts(&out).is_empty());
}

#[test]
fn idle_watermark_follows_the_clock() {
    let mut l = leader();
    tick(&mut l, 5_000);
    assert_eq!(l.watermark(), 5_000);
    tick(&mut l, 9_000);
    assert_eq!(l.watermark(), 9_000);
}

/// The invariant checks see a broken state: each corruption below is reported (and each test
/// fails if its check is removed).
mod broken_invariants {
    use super::super::invariants::Corruption;
    use super::*;

    /// One pending single-shard write at 10_000 and, behind a cross-shard transaction at
    /// 3_000 that never gets shard 1's proposal, one write executed at 3_500 whose answer
    /// waits for admission to close past it (at 3_499 now; the watermark is 2_999).
    fn busy_leader() -> LeaderWithLog<LocalLog> {
        let mut l = leader();
        let mut cross = (*txn(1, 3_000, &[MicroOp { key: 1, write: W }])).clone();
        cross.pieces.push(ShardPiece { shard: 1, keys: KeySet::new(vec![], vec![micro_key(2)]) });
        dispatch(&mut l, 100, &Arc::new(cross));
        dispatch(&mut l, 100, &txn(2, 3_500, &[MicroOp { key: 3, write: W }]));
        dispatch(&mut l, 100, &txn(3, 10_000, &[MicroOp { key: 4, write: W }]));
        assert!(tick(&mut l, 3_500).is_empty());
        assert_eq!((l.stats().executed, l.pending_len(), l.watermark()), (1, 2, 2_999));
        l
    }

    fn reported(c: Corruption, expected: &str) {
        let mut l = busy_leader();
        l.check_invariants().unwrap();
        l.corrupt(c);
        let err = l.check_invariants().expect_err("the corruption goes unnoticed");
        assert!(err.contains(expected), "{c:?}: expected '{expected}' in: {err}");
    }

    #[test]
    fn a_watermark_past_a_pending_transaction() {
        reported(Corruption::Watermark(10_000), "watermark 10000 passed pending");
    }

    #[test]
    fn admission_closed_past_the_committed_floor_or_below_the_watermark() {
        reported(Corruption::AdmissionClosed(u64::MAX), "admission closed at 18446744073709551615, outside");
        reported(Corruption::AdmissionClosed(0), "admission closed at 0, outside the watermark 2999");
    }

    #[test]
    fn a_pending_count_that_does_not_match() {
        reported(Corruption::ClientCount(9), "pending count per client");
    }

    #[test]
    fn a_pending_transaction_missing_from_the_hold_queue() {
        reported(Corruption::DropFromQueue, "2 pending");
    }

    #[test]
    fn an_executed_transaction_without_its_answer() {
        reported(Corruption::LoseAnswer, "has answer None");
    }
}
