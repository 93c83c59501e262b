//! The checker on hand-made histories: it must accept a correct one and name the culprit of
//! each kind of incorrect one.

use luigi_sim::checker::{check, AnswerRecord, CheckOptions, CheckSummary, History, Moment, TxnRecord};
use luigi_sim::{Violation, ViolationKind};
use luigi_store::{Key, Store};
use luigi_txn::client_core::TxnOutcome;
use luigi_txn::types::{KeySet, ShardId, ShardPiece, Timestamp, TxnId};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp, MicroOutput};

fn id(client: u64, seq: u64) -> TxnId {
    TxnId { client, seq }
}

fn w(key: u64, v: u64) -> MicroOp {
    MicroOp { key, write: Some(v) }
}

fn r(key: u64) -> MicroOp {
    MicroOp { key, write: None }
}

/// A single-shard micro transaction dispatched at `times.0`, answered at `times.1`, ordered
/// at `ts`, whose reads returned `reads`.
fn micro(
    id: TxnId,
    shard: ShardId,
    ops: &[MicroOp],
    times: (u64, u64),
    ts: Timestamp,
    reads: MicroOutput,
) -> TxnRecord {
    let rk: Vec<Key> = ops.iter().filter(|o| o.write.is_none()).map(|o| micro_key(o.key)).collect();
    let wk: Vec<Key> = ops.iter().filter(|o| o.write.is_some()).map(|o| micro_key(o.key)).collect();
    TxnRecord {
        id,
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(ops).expect("encode"),
        pieces: vec![ShardPiece { shard, keys: KeySet::new(rk, wk) }],
        dispatched: Moment::at(times.0),
        answers: vec![AnswerRecord {
            at: Moment::at(times.1),
            outcome: TxnOutcome::Ordered {
                ts,
                results: vec![(shard, Ok(postcard::to_stdvec(&reads).expect("encode")))],
            },
            attempts: 1,
            read_only: false,
        }],
    }
}

fn store_with(pairs: &[(u64, u64)]) -> Store {
    let mut s = Store::new();
    for (k, v) in pairs {
        s.put(micro_key(*k), v.to_le_bytes().to_vec());
    }
    s
}

fn run_with(h: &History, stores: &[Store], options: CheckOptions) -> Result<CheckSummary, Violation> {
    let refs: Vec<&Store> = stores.iter().collect();
    check(h, &luigi_workloads::procedures::builtins(), &refs, options)
}

fn run(h: &History, stores: &[Store]) -> Result<CheckSummary, Violation> {
    run_with(h, stores, CheckOptions::default())
}

#[test]
fn a_correct_history_passes() {
    let h = History {
        txns: vec![
            micro(id(1, 1), 0, &[w(5, 7)], (0, 100), 50, vec![]),
            micro(id(2, 1), 0, &[r(5)], (10, 120), 60, vec![(5, Some(7))]),
        ],
    };
    let s = run(&h, &[store_with(&[(5, 7)])]).expect("correct");
    assert_eq!((s.ordered, s.committed, s.max_ts, s.conflict_edges), (2, 2, 60, 1));
}

#[test]
fn conflicting_transactions_executed_out_of_timestamp_order_are_caught() {
    // T1 (ts 50) writes key 5 := 7 and T2 (ts 60) writes key 5 := 9; T3 (ts 70) reads key 5.
    // The leader ran T2 before T1, so T3 read 7 and the store holds 7.
    let h = History {
        txns: vec![
            micro(id(1, 1), 0, &[w(5, 7)], (0, 100), 50, vec![]),
            micro(id(2, 1), 0, &[w(5, 9)], (0, 100), 60, vec![]),
            micro(id(3, 1), 0, &[r(5)], (0, 110), 70, vec![(5, Some(7))]),
        ],
    };
    let v = run(&h, &[store_with(&[(5, 7)])]).expect_err("out of order");
    assert_eq!(v.kind, ViolationKind::ResultMismatch, "{v}");
    assert!(v.message.contains("TxnId { client: 3, seq: 1 }"), "{v}");
    assert!(
        v.message.contains("the leader answered Ok(r5=0x7)")
            && v.message.contains("replay in timestamp order gives Ok(r5=0x9)"),
        "{v}"
    );
    assert!(
        v.message.contains(
            "leader saw 0x7, written by TxnId { client: 1, seq: 1 } op 0 (ordered at ts 50); \
             replay saw 0x9, written by TxnId { client: 2, seq: 1 } op 0 (ordered at ts 60)"
        ),
        "names both writers: {v}"
    );
    assert!(v.message.contains("TxnId { client: 2, seq: 1 }@ts60"), "names the last writer: {v}");
    // Without the reader, the final store gives it away.
    let h = History { txns: h.txns[..2].to_vec() };
    let v = run(&h, &[store_with(&[(5, 7)])]).expect_err("out of order");
    assert_eq!(v.kind, ViolationKind::StateMismatch, "{v}");
    assert!(v.message.contains("micro#5: replay has 0x9, leader has 0x7"), "{v}");
}

#[test]
fn real_time_inversion_on_one_shard_is_caught() {
    // A was answered at 100 with ts 500; B, dispatched at 200 on the same shard, got ts 400.
    let h = History {
        txns: vec![
            micro(id(1, 1), 0, &[r(1)], (0, 100), 500, vec![(1, None)]),
            micro(id(2, 1), 0, &[r(2)], (200, 300), 400, vec![(2, None)]),
        ],
    };
    let v = run(&h, &[Store::new()]).expect_err("inversion");
    assert_eq!(v.kind, ViolationKind::RealTime, "{v}");
    assert!(v.message.contains("both on shard 0"), "{v}");
    // Same pair on two shards: serializable (they share nothing), so only the optional
    // cross-shard rule objects.
    let h = History { txns: vec![h.txns[0].clone(), micro(id(2, 1), 1, &[r(2)], (200, 300), 400, vec![(2, None)])] };
    let stores = [Store::new(), Store::new()];
    run(&h, &stores).expect("serializable across shards");
    let strict = CheckOptions { realtime_across_shards: true };
    let v = run_with(&h, &stores, strict).expect_err("inversion");
    assert_eq!(v.kind, ViolationKind::RealTime, "{v}");
    assert!(v.message.contains("different shards"), "{v}");
}

#[test]
fn a_cycle_through_real_time_across_shards_is_not_serializable() {
    // Shard 0: X (ts 10) writes k0, then A (ts 20) writes k0. Shard 1: B (ts 5) writes k1,
    // then X writes k1. A was answered before B was dispatched: A -> B (real time), B -> X
    // (shard 1), X -> A (shard 0). No serial order fits, though each shard alone is fine.
    let mut x = micro(id(3, 1), 0, &[w(0, 1), w(1, 2)], (0, 400), 10, vec![]);
    x.pieces = vec![
        ShardPiece { shard: 0, keys: KeySet::new(vec![], vec![micro_key(0)]) },
        ShardPiece { shard: 1, keys: KeySet::new(vec![], vec![micro_key(1)]) },
    ];
    let empty = postcard::to_stdvec(&MicroOutput::new()).expect("encode");
    x.answers[0].outcome = TxnOutcome::Ordered { ts: 10, results: vec![(0, Ok(empty.clone())), (1, Ok(empty))] };
    let a = micro(id(1, 1), 0, &[w(0, 3)], (0, 100), 20, vec![]);
    let b = micro(id(2, 1), 1, &[w(1, 4)], (200, 300), 5, vec![]);
    let h = History { txns: vec![x, a, b] };
    let stores = [store_with(&[(0, 3)]), store_with(&[(1, 2)])];
    let v = run(&h, &stores).expect_err("cycle");
    assert_eq!(v.kind, ViolationKind::NotSerializable, "{v}");
    for who in ["client: 1", "client: 2", "client: 3"] {
        assert!(v.message.contains(who), "{v}");
    }
}

#[test]
fn missing_duplicate_and_failed_answers_are_caught() {
    let t = micro(id(1, 1), 0, &[r(1)], (0, 10), 5, vec![(1, None)]);
    let mut none = t.clone();
    none.answers.clear();
    let mut twice = t.clone();
    twice.answers.push(twice.answers[0].clone());
    let mut failed = t;
    failed.answers[0].outcome = TxnOutcome::Unknown("gave up".into());
    for (rec, kind) in
        [(none, ViolationKind::Unanswered), (twice, ViolationKind::DuplicateAnswer), (failed, ViolationKind::Failed)]
    {
        let v = run(&History { txns: vec![rec] }, &[Store::new()]).expect_err("caught");
        assert_eq!(v.kind, kind, "{v}");
    }
}

#[test]
fn rejected_transactions_must_leave_no_trace() {
    let mut t = micro(id(1, 1), 0, &[w(1, 4)], (0, 10), 5, vec![]);
    t.answers[0].outcome = TxnOutcome::Rejected("full".into());
    let h = History { txns: vec![t] };
    assert_eq!(run(&h, &[Store::new()]).expect("no trace").rejected, 1);
    let v = run(&h, &[store_with(&[(1, 4)])]).expect_err("trace");
    assert_eq!(v.kind, ViolationKind::StateMismatch, "{v}");
}
