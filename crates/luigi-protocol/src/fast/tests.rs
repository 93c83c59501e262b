//! Tests of `fast`.

use super::*;

fn id(seq: u64) -> TxnId {
    TxnId { client: 1, seq }
}

fn writes(keys: &[&str]) -> KeySet {
    KeySet::new(vec![], keys.iter().map(|k| k.as_bytes().to_vec()).collect())
}

fn reads(keys: &[&str]) -> KeySet {
    KeySet::new(keys.iter().map(|k| k.as_bytes().to_vec()).collect(), vec![])
}

#[test]
fn the_order_hash_covers_the_distinct_conflicting_entries_before_a_transaction() {
    let mut o = RecentOrder::default();
    o.record(id(1), 10, hashed_keys(&writes(&["a", "b"])));
    o.record(id(2), 20, hashed_keys(&reads(&["a"])));
    o.record(id(3), 30, hashed_keys(&writes(&["c"])));
    o.record(id(4), 50, hashed_keys(&writes(&["a"])));
    let t = hashed_keys(&writes(&["a", "b"]));
    // 1 conflicts on two keys and counts once; 2's read conflicts with a write; 3 touches
    // another key; 4 comes after.
    assert_eq!(o.order_hash(id(9), 40, &t, false), Some(entry_hash(id(1), 10) ^ entry_hash(id(2), 20)));
    // A reader does not conflict with 2's read.
    assert_eq!(o.order_hash(id(9), 40, &hashed_keys(&reads(&["a"])), false), Some(entry_hash(id(1), 10)));
    assert!(o.conflict_above(id(9), 40, &t), "4 writes a after 40");
    assert!(!o.conflict_above(id(9), 60, &t));
    // A moved entry hashes at its new timestamp; pruning forgets what a marker covers.
    o.record(id(2), 45, hashed_keys(&reads(&["a"])));
    assert_eq!(o.order_hash(id(9), 40, &t, false), Some(entry_hash(id(1), 10)));
    o.prune_to(30);
    assert_eq!(o.order_hash(id(9), 60, &t, false), Some(entry_hash(id(2), 45) ^ entry_hash(id(4), 50)));
    assert_eq!(o.len(), 2);
}

#[test]
fn a_hash_differs_when_a_predecessor_differs_in_id_or_timestamp() {
    let keys = hashed_keys(&writes(&["k"]));
    let hash_with = |entries: &[(u64, Timestamp)]| {
        let mut o = RecentOrder::default();
        for (seq, ts) in entries {
            o.record(id(*seq), *ts, keys.clone());
        }
        o.order_hash(id(99), 100, &keys, false).expect("few predecessors")
    };
    let base = hash_with(&[(1, 10), (2, 20)]);
    assert_eq!(base, hash_with(&[(2, 20), (1, 10)]), "order of learning does not matter");
    assert_ne!(base, hash_with(&[(1, 10), (2, 21)]));
    assert_ne!(base, hash_with(&[(1, 10), (3, 20)]));
    assert_ne!(base, hash_with(&[(1, 10)]));
    assert_eq!(hash_with(&[]), 0);
}

#[test]
fn the_order_hash_covers_predecessors_of_predecessors_and_gives_up_past_the_bound() {
    // q writes x; w reads x and writes k; t writes k. t conflicts only with w, but w's
    // result depends on q (rule H).
    let mut o = RecentOrder::default();
    o.record(id(1), 10, hashed_keys(&writes(&["x"])));
    o.record(id(2), 20, hashed_keys(&KeySet::new(vec![b"x".to_vec()], vec![b"k".to_vec()])));
    o.record(id(3), 25, hashed_keys(&writes(&["y"])));
    let t = hashed_keys(&writes(&["k"]));
    assert_eq!(o.order_hash(id(9), 30, &t, false), Some(entry_hash(id(1), 10) ^ entry_hash(id(2), 20)));
    assert_eq!(o.order_hash(id(9), 30, &t, true), Some(entry_hash(id(2), 20)), "the mutation: direct only");
    // Only what comes before each step counts: a writer of x above w is not w's.
    o.record(id(4), 22, hashed_keys(&writes(&["x"])));
    assert_eq!(o.order_hash(id(9), 30, &t, false), Some(entry_hash(id(1), 10) ^ entry_hash(id(2), 20)));
    let mut long = RecentOrder::default();
    for seq in 0..=PREDECESSORS_MAX as u64 {
        long.record(id(seq + 100), seq + 1, t.clone());
    }
    assert_eq!(long.order_hash(id(9), 1_000_000, &t, false), None, "too many to hash: not fast");
    long.prune_to(1);
    assert!(long.order_hash(id(9), 1_000_000, &t, false).is_some());
}

#[test]
fn a_follower_accepts_only_early_and_unovertaken_and_never_moves_a_timestamp() {
    let mut f = Acceptor::default();
    assert_eq!(offered(&mut f, 100, 1, 100, &writes(&["a"])), Err(NotAccepted::Late));
    let first = offered(&mut f, 50, 1, 100, &writes(&["a"])).unwrap();
    assert_eq!((first.ts, first.order), (100, 0));
    assert_eq!(offered(&mut f, 60, 1, 300, &writes(&["a"])), Err(NotAccepted::Again(first)), "no second timestamp");
    // Below a conflicting accept: refused. Above it: accepted, with it in its hash.
    assert_eq!(offered(&mut f, 60, 2, 90, &writes(&["a"])), Err(NotAccepted::Overtaken));
    let second = offered(&mut f, 60, 3, 120, &reads(&["a"])).unwrap();
    assert_eq!(second.order, entry_hash(id(1), 100));
    // Another key: no conflict either way.
    assert_eq!(offered(&mut f, 60, 4, 90, &writes(&["b"])).unwrap().order, 0);
    // A conflicting PREPARE from the log counts like an accept.
    f.on_prepared(id(5), 200, &writes(&["c"]));
    assert_eq!(offered(&mut f, 70, 6, 150, &reads(&["c"])), Err(NotAccepted::Overtaken));
    assert_eq!(f.undecided(), vec![(90, id(4)), (100, id(1)), (120, id(3))]);
}

#[test]
fn the_log_decides_accepts_by_their_prepare_an_applied_marker_or_a_conflicting_prepare_above() {
    let mut f = Acceptor::default();
    for (seq, ts, key) in [(1, 100, "a"), (2, 110, "b"), (3, 120, "c"), (4, 130, "d")] {
        offered(&mut f, 0, seq, ts, &writes(&[key])).unwrap();
    }
    // R1: its own PREPARE (here moved to 105).
    f.on_prepared(id(1), 105, &writes(&["a"]));
    // R2: a conflicting PREPARE above an accept overtakes it (the moved-`X` case).
    f.on_prepared(id(9), 115, &writes(&["b"]));
    assert_eq!(f.undecided(), vec![(120, id(3)), (130, id(4))]);
    // An Applied marker at or above an accept decides it too.
    f.on_applied(120);
    assert_eq!(f.undecided(), vec![(130, id(4))]);
    assert_eq!(f.order().len(), 1, "the marker pruned the order table up to 120");
}

#[test]
fn a_prepare_overtakes_only_the_accepts_below_it_that_conflict_on_some_key() {
    let mut f = Acceptor::default();
    offered(&mut f, 0, 1, 100, &reads(&["r"])).unwrap();
    offered(&mut f, 0, 2, 101, &KeySet::new(vec![], vec![b"x".to_vec(), b"y".to_vec()])).unwrap();
    offered(&mut f, 0, 3, 300, &writes(&["y"])).unwrap();
    // A reader above a reader does not conflict; a writer of y above 2 overtakes it through
    // its second key, and leaves 3 (above it) undecided.
    f.on_prepared(id(8), 200, &reads(&["r"]));
    f.on_prepared(id(9), 200, &writes(&["y"]));
    assert_eq!(f.undecided(), vec![(100, id(1)), (300, id(3))]);
    f.on_prepared(id(10), 150, &writes(&["r"]));
    assert_eq!(f.undecided(), vec![(300, id(3))]);
}

#[test]
fn two_keys_of_one_transaction_with_one_hash_keep_the_stronger_access() {
    let mut o = RecentOrder::default();
    o.record(id(1), 10, vec![(7, Access::Read), (7, Access::Write)]);
    assert!(o.conflict_above(id(2), 5, &[(7, Access::Read)]), "a collision only adds conflicts");
    o.remove(id(1));
    assert!(o.is_empty() && !o.conflict_above(id(2), 5, &[(7, Access::Write)]));
}

#[test]
fn accepts_are_bounded() {
    let mut f = Acceptor::default();
    for seq in 0..ACCEPTS_MAX as u64 {
        offered(&mut f, 0, seq, 10 + seq, &writes(&[&format!("k{seq}")])).unwrap();
    }
    assert_eq!(offered(&mut f, 0, u64::MAX, 5, &writes(&["new"])), Err(NotAccepted::Full));
}

/// Issue 26: the bound counted entries only, and one accept may carry 4 MiB.
#[test]
fn accepts_are_bounded_in_bytes_and_decided_ones_free_theirs() {
    let mut f = Acceptor::default();
    let big =
        |seq: u64, ts| Arc::new(Txn { args: vec![0; 4 << 20], ..(*txn(seq, ts, &format!("k{seq}"), true)).clone() });
    let fits = ACCEPT_BYTES_MAX / accept_bytes(&big(0, 1));
    for seq in 0..fits as u64 {
        let t = big(seq, 10 + seq);
        f.offer(0, &t, t.piece(0).unwrap()).unwrap();
    }
    assert!(fits < 100 && f.bytes() <= ACCEPT_BYTES_MAX, "{fits} accepts, {} bytes", f.bytes());
    let one_more = big(1_000, 5_000);
    assert_eq!(f.offer(0, &one_more, one_more.piece(0).unwrap()), Err(NotAccepted::Full));
    f.on_dropped(id(0));
    f.on_applied(12);
    assert_eq!(f.undecided().len(), fits - 3);
    let left: usize = (3..fits as u64).map(|seq| accept_bytes(&big(seq, 10 + seq))).sum();
    assert_eq!(f.bytes(), left);
    assert!(f.offer(0, &one_more, one_more.piece(0).unwrap()).is_ok(), "room again");
}

fn txn(seq: u64, ts: Timestamp, key: &str, write: bool) -> Arc<Txn> {
    txn_on(seq, ts, if write { writes(&[key]) } else { reads(&[key]) })
}

/// Transaction `seq` at `ts` with its piece `keys` on shard 0.
fn txn_on(seq: u64, ts: Timestamp, keys: KeySet) -> Arc<Txn> {
    let pieces = vec![luigi_txn::types::ShardPiece { shard: 0, keys }];
    Arc::new(Txn { id: id(seq), procedure: "kv".into(), args: vec![], pieces, ts })
}

/// `f` is offered transaction `seq` at `ts` on `keys`, arriving at `now`.
fn offered(f: &mut Acceptor, now: Timestamp, seq: u64, ts: Timestamp, keys: &KeySet) -> Result<Accepted, NotAccepted> {
    f.offer(now, &txn_on(seq, ts, keys.clone()), keys)
}

fn prepare(t: &Arc<Txn>, ts: Timestamp) -> LogRecord {
    LogRecord::Prepare { txn: t.clone(), ts, arrival_delta_us: 0, acked_below: 0 }
}

fn seqs(out: &[AcceptedTxn]) -> Vec<(u64, Timestamp)> {
    out.iter().map(|(t, ts)| (t.id.seq, *ts)).collect()
}

#[test]
fn recovery_prepares_what_every_set_read_holds_unless_the_log_decided_or_overtook_it() {
    let (a, b, c, d) = (txn(1, 100, "a", true), txn(2, 200, "b", true), txn(3, 300, "c", true), txn(4, 400, "d", true));
    let both = vec![(a.clone(), 100), (b.clone(), 200), (c.clone(), 300), (d.clone(), 400)];
    let one_only = vec![(a.clone(), 100), (b.clone(), 200), (c.clone(), 310), (d.clone(), 400)];
    // R3: in every set at the same timestamp; c differs in timestamp: not fast-committed.
    assert_eq!(seqs(&to_recover(0, &[both.clone(), one_only], &[], |_| false)), vec![(1, 100), (2, 200), (4, 400)]);
    // R1: a's PREPARE is in the log (even moved): the log wins.
    let log = [prepare(&a, 150)];
    assert_eq!(
        seqs(&to_recover(0, &[both.clone(), both.clone()], &log, |_| false)),
        vec![(2, 200), (3, 300), (4, 400)]
    );
    // R2: an Applied marker at 200 covers a and b.
    let log = [LogRecord::Applied { ts: 200 }];
    assert_eq!(seqs(&to_recover(0, &[both.clone(), both.clone()], &log, |_| false)), vec![(3, 300), (4, 400)]);
    assert!(to_recover(0, &[], &log, |_| false).is_empty(), "nothing read, nothing recovered");
    // R1 from the state rebuilt from the log (an answered or refused transaction).
    assert_eq!(
        seqs(&to_recover(0, std::slice::from_ref(&both), &[], |id| id.seq == 2)),
        vec![(1, 100), (3, 300), (4, 400)]
    );
    let refused = [LogRecord::Refuse { id: a.id, reason: "no".into(), arrival_delta_us: 0, ts: 1, others: vec![] }];
    assert_eq!(
        seqs(&to_recover(0, std::slice::from_ref(&both), &refused, |_| false)),
        vec![(2, 200), (3, 300), (4, 400)]
    );
}

#[test]
fn the_counterexample_a_moved_transaction_overtaken_by_an_answered_one_is_not_recovered() {
    // Both followers accepted X at 100; the leader released a conflicting Y at 200 first
    // (answered, its PREPARE committed) and moved X, whose moved PREPARE was lost.
    let x = txn(1, 100, "k", true);
    let y = txn(2, 200, "k", false);
    let sets = vec![vec![(x.clone(), 100)], vec![(x.clone(), 100)]];
    assert!(to_recover(0, &sets, &[prepare(&y, 200)], |_| false).is_empty(), "R2: Y overtook X");
    // A conflicting PREPARE below X, or on another key, does not overtake it.
    let below = txn(3, 50, "k", true);
    let elsewhere = txn(4, 500, "z", true);
    assert_eq!(
        seqs(&to_recover(0, &sets, &[prepare(&below, 50), prepare(&elsewhere, 500)], |_| false)),
        vec![(1, 100)]
    );
    // A DECIDE that raised a conflicting transaction above X overtakes it too.
    let raised = txn(5, 90, "k", true);
    let log = [prepare(&raised, 90), LogRecord::Decide { id: raised.id, ts: 150 }];
    assert!(to_recover(0, &sets, &log, |_| false).is_empty());
}

#[test]
fn committed_records_decide_accepts_and_records_round_trip() {
    let mut f = Acceptor::default();
    let (a, b, c) = (txn(1, 100, "a", true), txn(2, 200, "b", true), txn(3, 300, "c", true));
    for t in [&a, &b, &c] {
        f.offer(0, t, t.piece(0).unwrap()).unwrap();
    }
    // b's DECIDE follows its PREPARE (keys from the order table); c is refused.
    let x = txn(9, 150, "b", true);
    f.on_committed(0, &prepare(&x, 150));
    f.on_committed(0, &LogRecord::Decide { id: x.id, ts: 250 });
    assert_eq!(f.undecided(), vec![(100, a.id), (300, c.id)], "x raised above b overtakes it");
    f.on_committed(0, &LogRecord::Refuse { id: c.id, reason: "no".into(), arrival_delta_us: 0, ts: 1, others: vec![] });
    f.on_committed(0, &LogRecord::Floor { ts: 1_000 });
    assert_eq!(f.undecided(), vec![(100, a.id)]);
    let record = AcceptRecord { txn: a.clone(), ts: 100 };
    assert_eq!(AcceptRecord::decode(&record.encode()).unwrap(), record);
    assert!(AcceptRecord::decode(b"garbage").is_err());
}
