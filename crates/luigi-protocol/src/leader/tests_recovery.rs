//! Transcript tests of leader failover (DESIGN.md, failure handling): a leader's committed
//! log is replayed into a [`Follower`], handed to a new leader, and the new leader must finish
//! what the old one started without losing or doubling anything.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use luigi_store::Store;

use super::follower::Follower;
use super::tests::replies;
use super::tests_common::{deliver, dispatch, id, items, tick, to_peer, txn};
use super::*;
use crate::log::{LocalLog, LogError, LogIndex};
use crate::msg::PeerItem;
use luigi_txn::msg::TxnError;
use luigi_workloads::procedures::micro_key;

/// A log that commits at once and keeps a copy of every committed entry (the replicas' log).
/// While `held` is set nothing commits; while `full` is set it takes nothing (backlog).
#[derive(Default)]
pub(super) struct TapLog {
    inner: LocalLog,
    tape: Rc<RefCell<Vec<LogEntry>>>,
    held: Rc<Cell<bool>>,
    full: Rc<Cell<bool>>,
}

impl ReplicatedLog<LogRecord> for TapLog {
    fn propose(&mut self, record: LogRecord) -> Result<LogIndex, LogError> {
        if self.full.get() {
            return Err(LogError::Backlogged(1));
        }
        self.inner.propose(record)
    }
    fn take_committed(&mut self, out: &mut Vec<LogEntry>) {
        if self.held.get() {
            return;
        }
        let start = out.len();
        self.inner.take_committed(out);
        self.tape.borrow_mut().extend_from_slice(&out[start..]);
    }
}

pub(super) type Leader = LeaderWithLog<TapLog>;

pub(super) fn leader(shard: ShardId) -> (Leader, Rc<RefCell<Vec<LogEntry>>>) {
    leader_with(LeaderConfig::new(shard, 8))
}

pub(super) fn leader_with(config: LeaderConfig) -> (Leader, Rc<RefCell<Vec<LogEntry>>>) {
    let log = TapLog::default();
    let tape = log.tape.clone();
    (LeaderWithLog::new(config, log, Store::new(), luigi_workloads::procedures::builtins()), tape)
}

/// The old leader is gone: a replica replays its committed log and takes over at `now`.
pub(super) fn take_over(
    shard: ShardId,
    tape: &Rc<RefCell<Vec<LogEntry>>>,
    now: TimeUs,
) -> (Leader, Rc<RefCell<Vec<LogEntry>>>) {
    let mut f = Follower::new(shard, Store::new(), luigi_workloads::procedures::builtins());
    for e in tape.borrow().iter() {
        f.apply(e);
    }
    let log = TapLog::default();
    let new_tape = log.tape.clone();
    // The new leader's log continues the old one's indexes.
    new_tape.borrow_mut().extend(tape.borrow().iter().cloned());
    f.check_invariants().unwrap();
    let new = LeaderWithLog::recover(LeaderConfig::new(shard, 8), log, f.into_handover(None), now);
    new.check_invariants().unwrap();
    (new, new_tape)
}

pub(super) fn value(l: &Leader, key: u64) -> Option<u64> {
    l.store().get(&micro_key(key)).map(|v| u64::from_le_bytes(v.as_slice().try_into().unwrap()))
}

#[test]
fn a_new_leader_keeps_answers_finishes_prepared_transactions_and_admits_above_its_floor() {
    let (mut old, tape) = leader(0);
    let done = txn(1, 1_000, &[(0, 1, Some(10))]);
    let held = txn(2, 50_000, &[(0, 1, Some(20))]);
    dispatch(&mut old, 100, &done);
    let first = replies(&tick(&mut old, 2_000));
    assert_eq!(first.len(), 1);
    tick(&mut old, 10_000); // an Applied marker covers `done`
    dispatch(&mut old, 10_100, &held); // prepared, its time has not come
                                       // The old leader dies here. Its replica takes over.
    let (mut new, _) = take_over(0, &tape, 20_000);
    assert_eq!(value(&new, 1), Some(10), "the store is rebuilt from the log");
    // A retry of the answered transaction gets the stored answer; it does not run again.
    let again = replies(&dispatch(&mut new, 20_100, &done));
    assert_eq!((again[0].ts, &again[0].outcome), (first[0].ts, &first[0].outcome));
    // The prepared transaction runs at its logged timestamp, once; its retry is answered.
    assert!(replies(&dispatch(&mut new, 20_200, &held)).is_empty(), "pending: answered when done");
    let r = replies(&tick(&mut new, 60_000));
    assert_eq!((r.len(), r[0].id, r[0].ts), (1, id(2), 50_000));
    assert_eq!(value(&new, 1), Some(20));
    assert_eq!(new.stats().executed, 1);
    // Nothing is admitted at or below anything the old leader logged (its floor promises
    // included), even a transaction stamped in the past.
    let late = txn(3, 3_000, &[(0, 5, Some(1))]);
    dispatch(&mut new, 60_100, &late);
    let floors: Vec<Timestamp> = tape
        .borrow()
        .iter()
        .filter_map(|e| match e.record {
            LogRecord::Floor { ts } => Some(ts),
            LogRecord::Prepare { .. }
            | LogRecord::Decide { .. }
            | LogRecord::Abort { .. }
            | LogRecord::Refuse { .. }
            | LogRecord::Applied { .. }
            | LogRecord::PeerApplied { .. } => None,
        })
        .collect();
    let floor = floors.into_iter().max().expect("the old leader logged a floor promise");
    let r = replies(&tick(&mut new, floor + 10));
    assert!(r[0].ts > floor, "admitted at {} at or below the recovered floor {floor}", r[0].ts);
}

/// Leader kill point: after `PREPARE` commits but before the proposal is announced.
#[test]
fn a_new_leader_announces_an_unannounced_proposal_through_recover() {
    let (mut a, tape_a) = leader(0);
    let (mut b, _) = leader(1);
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let _lost = dispatch(&mut a, 100, &t); // A's Propose never leaves: A dies
    let out_b = dispatch(&mut b, 100, &t);
    let (mut a2, _) = take_over(0, &tape_a, 500);
    let out = tick(&mut a2, 500);
    deliver(&mut a2, 600, to_peer(&out_b, 0)); // B's proposal reaches the new leader
    assert_eq!(items(&to_peer(&out, 1)), vec![PeerItem::Recover { txn: t.clone(), ts: 1_000 }]);
    let out_b = deliver(&mut b, 700, to_peer(&out, 1));
    assert_eq!(items(&to_peer(&out_b, 0)), vec![PeerItem::Propose { id: id(1), ts: 1_000, at: None, fast: false }]);
    deliver(&mut a2, 800, to_peer(&out_b, 0));
    let (ra, rb) = (replies(&tick(&mut a2, 1_000)), replies(&tick(&mut b, 1_000)));
    assert_eq!((ra[0].ts, rb[0].ts), (1_000, 1_000));
    assert_eq!((value(&a2, 1), value(&b, 2)), (Some(5), Some(6)));
}

/// Leader kill point: after executing (and answering) but before an `Applied` marker logged
/// it. The other participant executed it too and answers `Recover` with the final timestamp.
#[test]
fn a_peer_that_executed_answers_with_the_final_timestamp() {
    let (mut a, tape_a) = leader(0);
    let (mut b, _) = leader(1);
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let out_a = dispatch(&mut a, 100, &t);
    let out_b = dispatch(&mut b, 1_400, &t); // proposes 1400: a second round
    let conf_a = to_peer(&deliver(&mut a, 1_450, to_peer(&out_b, 0)), 1);
    let conf_b = to_peer(&deliver(&mut b, 1_450, to_peer(&out_a, 1)), 0);
    deliver(&mut b, 1_460, conf_a);
    let out = deliver(&mut a, 1_460, conf_b);
    assert_eq!(replies(&out)[0].ts, 1_400, "executed and answered on A");
    assert_eq!(b.stats().executed, 1);
    // A dies before any Applied marker covering 1400 was logged: its log has PREPARE and
    // DECIDE only, so the new leader must finish it again, at the same timestamp.
    let marker = tape_a.borrow().iter().any(|e| matches!(e.record, LogRecord::Applied { ts } if ts >= 1_400));
    assert!(!marker);
    let (mut a2, _) = take_over(0, &tape_a, 2_000);
    let recover = to_peer(&tick(&mut a2, 2_000), 1);
    let answer = to_peer(&deliver(&mut b, 2_100, recover), 0);
    assert_eq!(items(&answer), vec![PeerItem::Executed { id: id(1), ts: 1_400 }]);
    deliver(&mut a2, 2_200, answer);
    tick(&mut a2, 3_000);
    assert_eq!((a2.stats().executed, value(&a2, 1)), (1, Some(5)));
    let retry = replies(&dispatch(&mut a2, 3_100, &t));
    assert_eq!((retry[0].ts, retry[0].rounds), (1_400, 2), "the same answer as before the failover");
}

/// A coordinator that reached only some participants: A prepared, B never got the dispatch.
/// A is its recovery coordinator once it stalls; B prepares it from the `Recover` item.
#[test]
fn a_stalled_transaction_is_completed_by_its_recovery_coordinator() {
    let (mut a, _) = leader(0);
    let (mut b, _) = leader(1);
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let out_a = dispatch(&mut a, 100, &t);
    let early = deliver(&mut b, 200, to_peer(&out_a, 1)); // A's proposal: buffered at B
    assert!(to_peer(&early, 0).is_empty());
    let stall = LeaderConfig::new(0, 8).recover_after_us;
    assert!(to_peer(&tick(&mut a, 100 + stall - 1), 1).is_empty(), "not stalled yet");
    let recover = to_peer(&tick(&mut a, 100 + stall), 1);
    assert!(matches!(items(&recover).as_slice(), [PeerItem::Recover { .. }]));
    let out_b = deliver(&mut b, 100 + stall + 10, recover);
    assert_eq!(b.stats().admitted, 1, "B prepared it from the Recover item");
    let at = 100 + stall + 20;
    // B's proposal is its clock (the dispatch came late), so the proposals differ and the
    // second round runs: B sent its Propose and, once its DECIDE committed, its Confirm.
    assert!(matches!(items(&to_peer(&out_b, 0)).as_slice(), [PeerItem::Propose { .. }, PeerItem::Confirm { .. }]));
    let out_a = deliver(&mut a, at, to_peer(&out_b, 0));
    let ra = replies(&out_a);
    let rb = replies(&deliver(&mut b, at + 5, to_peer(&out_a, 1)));
    assert_eq!((ra.len(), rb.len()), (1, 1));
    assert_eq!((ra[0].ts, ra[0].rounds), (rb[0].ts, 2));
    assert_eq!((value(&a, 1), value(&b, 2)), (Some(5), Some(6)));
    // The late dispatch (or a client retry) at B is a duplicate now.
    let dup = replies(&dispatch(&mut b, at + 10, &t));
    assert_eq!(dup[0].ts, rb[0].ts);
}

#[test]
fn a_peer_that_refused_answers_recover_with_refuse() {
    let (mut a, tape_a) = leader(0);
    let mut cfg = LeaderConfig::new(1, 8);
    cfg.max_pending = 0; // shard 1 refuses everything
    let mut b = LeaderWithLog::new(cfg, TapLog::default(), Store::new(), luigi_workloads::procedures::builtins());
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    dispatch(&mut a, 100, &t);
    let _refuse_lost = dispatch(&mut b, 100, &t); // B's Refuse dies with A
    let (mut a2, _) = take_over(0, &tape_a, 500);
    let answer = to_peer(&deliver(&mut b, 600, to_peer(&tick(&mut a2, 500), 1)), 0);
    assert!(matches!(items(&answer).as_slice(), [PeerItem::Refuse { .. }]));
    deliver(&mut a2, 700, answer);
    let r = replies(&dispatch(&mut a2, 800, &t));
    assert!(matches!(&r[0].outcome, Err(TxnError::Rejected(_))), "aborted, and the retry is told so");
    assert_eq!((a2.stats().aborted, a2.stats().executed, a2.pending_len()), (1, 0, 0));
    assert!(a2.store().is_empty());
}

/// A participant's leader changed: its new leader may have missed this shard's proposal
/// (sent to the old one), so every shared pending transaction is announced again.
#[test]
fn a_new_peer_leader_is_sent_every_shared_proposal_again() {
    let (mut a, _) = leader(0);
    let shared = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let mine = txn(2, 1_000, &[(0, 3, Some(7))]);
    let lost = dispatch(&mut a, 100, &shared); // its Propose went to the old leader of shard 1
    assert_eq!(items(&to_peer(&lost, 1)), vec![PeerItem::Propose { id: id(1), ts: 1_000, at: None, fast: false }]);
    dispatch(&mut a, 100, &mine);
    a.peer_leader_changed(1);
    a.peer_leader_changed(0); // itself: nothing to do
    let again = to_peer(&tick(&mut a, 200), 1);
    assert_eq!(
        items(&again),
        vec![PeerItem::Propose { id: id(1), ts: 1_000, at: None, fast: false }],
        "single-shard ones are not sent"
    );
}

fn client_replies(out: &[LeaderOutput]) -> Vec<(TxnId, Result<Vec<u8>, TxnError>)> {
    replies(out).into_iter().map(|r| (r.id, r.outcome)).collect()
}

/// A refusal is told to nobody (client or peers) before its `Refuse` record commits, and a
/// leader elected later refuses a retry of it instead of admitting what a client was told
/// would never run.
#[test]
fn a_refusal_is_durable_before_anyone_hears_it_and_a_new_leader_keeps_it() {
    let (mut b, tape) = leader(1);
    let held = b.log().held.clone();
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    // Shard 0 refused it first; its Refuse reaches B before the dispatch does.
    let refuse =
        PeerBatch { from: 0, watermark: 0, items: vec![PeerItem::Refuse { id: id(1), reason: "full".into() }] };
    deliver(&mut b, 50, vec![refuse]);
    held.set(true);
    let out = dispatch(&mut b, 100, &t);
    assert!(replies(&out).is_empty() && to_peer(&out, 0).is_empty(), "told before durable: {out:?}");
    assert!(replies(&dispatch(&mut b, 150, &t)).is_empty(), "a retry waits for the same record");
    held.set(false);
    let out = tick(&mut b, 200);
    assert!(matches!(client_replies(&out).as_slice(), [(i, Err(TxnError::Rejected(_)))] if *i == id(1)));
    assert_eq!(items(&to_peer(&out, 0)), vec![PeerItem::Refuse { id: id(1), reason: "full".into() }]);
    assert!(tape.borrow().iter().any(|e| matches!(e.record, LogRecord::Refuse { id: i, .. } if i == id(1))));
    // B's leader dies; its replica takes over and a late retry arrives.
    let (mut b2, _) = take_over(1, &tape, 300);
    let out = dispatch(&mut b2, 400, &t);
    assert!(matches!(client_replies(&out).as_slice(), [(_, Err(TxnError::Rejected(why)))] if why == "full"));
    assert_eq!((b2.stats().admitted, b2.pending_len()), (0, 0), "never admitted");
}

/// A leader whose log takes nothing stores nothing and says so: the client asks again soon
/// (`Busy`), and the retry is admitted once the log has room.
#[test]
fn a_full_log_answers_busy_and_stores_nothing() {
    let (mut a, _) = leader(0);
    let full = a.log().full.clone();
    let t = txn(1, 1_000, &[(0, 1, Some(5))]);
    full.set(true);
    let out = dispatch(&mut a, 100, &t);
    assert!(matches!(client_replies(&out).as_slice(), [(_, Err(TxnError::Busy(_)))]), "{out:?}");
    assert_eq!((a.pending_len(), a.stats().rejected), (0, 0));
    full.set(false);
    dispatch(&mut a, 200, &t);
    let r = replies(&tick(&mut a, 2_000));
    assert_eq!((r.len(), r[0].ts), (1, 1_000));
}

/// A participant asked to recover a transaction it answered and whose client acknowledged
/// that answer says so (it never stays silent); one that never saw it prepares it.
#[test]
fn recover_is_always_answered() {
    let (mut a, _) = leader(0);
    let (mut b, _) = leader(1);
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let refuse = PeerBatch { from: 1, watermark: 0, items: vec![PeerItem::Refuse { id: id(1), reason: "no".into() }] };
    deliver(&mut a, 50, vec![refuse]);
    dispatch(&mut a, 100, &t); // refused here and answered
    let mut out = Vec::new();
    let next = txn(2, 2_000, &[(0, 3, Some(1))]);
    a.on_client(200, 9, ClientMsg::Dispatch { txn: next, sent_us: 200, acked_below: 2, fast: true }, &mut out);
    let recover = PeerBatch { from: 1, watermark: 0, items: vec![PeerItem::Recover { txn: t.clone(), ts: 1_000 }] };
    let out = deliver(&mut a, 300, vec![recover.clone()]);
    let refused = PeerItem::Refuse { id: id(1), reason: "no".into() };
    assert_eq!(items(&to_peer(&out, 1)), vec![refused], "acknowledged, and the refusal kept for shard 1");
    // Shard 1 never saw the transaction: it prepares it from the Recover item and proposes.
    let out = deliver(&mut b, 300, vec![PeerBatch { from: 0, ..recover }]);
    assert_eq!(b.stats().admitted, 1);
    assert!(matches!(items(&to_peer(&out, 0)).as_slice(), [PeerItem::Propose { id: i, .. }] if *i == id(1)));
}

/// A dispatch naming a shard that does not exist once wedged a shard for good (admitted,
/// logged, waiting forever for a proposal nobody would send, and surviving failover). It is
/// malformed: answered at once, nothing logged, and the shard keeps committing.
#[test]
fn a_transaction_naming_a_missing_shard_is_refused_and_nothing_is_logged() {
    let (mut l, tape) = leader(0);
    let mut poison = (*txn(1, 100, &[(0, 1, Some(1))])).clone();
    poison.pieces.push(luigi_txn::types::ShardPiece {
        shard: 9,
        keys: luigi_txn::types::KeySet::new(vec![], vec![micro_key(2)]),
    });
    let out = dispatch(&mut l, 10, &Arc::new(poison));
    assert!(
        matches!(client_replies(&out).as_slice(), [(_, Err(TxnError::Rejected(why)))] if why.contains("shard 9 does not exist"))
    );
    assert_eq!((l.pending_len(), l.stats().malformed, l.stats().admitted), (0, 1, 0));
    let logged_txn = |e: &LogEntry| matches!(e.record, LogRecord::Prepare { .. } | LogRecord::Refuse { .. });
    assert!(!tape.borrow().iter().any(logged_txn), "nothing about it is logged");
    dispatch(&mut l, 200, &txn(2, 300, &[(0, 1, Some(2))]));
    let r = replies(&tick(&mut l, 1_000));
    assert_eq!((r.len(), r[0].ts), (1, 300), "the shard still commits");
}

/// One client cannot fill a shard's queue: past its cap it is told `Busy` (nothing stored),
/// and it is admitted again once some of its transactions ran.
#[test]
fn a_client_over_its_pending_cap_is_told_busy() {
    let config = LeaderConfig { max_pending_per_client: 2, ..LeaderConfig::new(0, 8) };
    let mut l = LeaderWithLog::new(config, TapLog::default(), Store::new(), luigi_workloads::procedures::builtins());
    dispatch(&mut l, 100, &txn(1, 5_000, &[(0, 1, Some(1))]));
    dispatch(&mut l, 100, &txn(2, 5_000, &[(0, 2, Some(1))]));
    let out = dispatch(&mut l, 100, &txn(3, 5_000, &[(0, 3, Some(1))]));
    assert!(
        matches!(client_replies(&out).as_slice(), [(_, Err(TxnError::Busy(why)))] if why.contains("2 transactions pending"))
    );
    assert_eq!((l.pending_len(), l.stats().admitted, l.stats().rejected), (2, 2, 0));
    assert_eq!(replies(&tick(&mut l, 6_000)).len(), 2);
    dispatch(&mut l, 6_100, &txn(3, 7_000, &[(0, 3, Some(1))]));
    assert_eq!(l.stats().admitted, 3, "admitted once the others ran");
}

/// Rule 22 (issue 26): a client whose clock runs an hour ahead is refused, durably and with
/// the reason, and nothing of its timestamp reaches the log: a leader elected afterwards
/// admits the next transactions at their own timestamps (before, the follower's
/// `max_ts_seen` took the hour and every later transaction waited for it).
#[test]
fn a_timestamp_past_the_clock_horizon_is_refused_and_leaves_no_floor_behind() {
    let (mut a, tape) = leader(0);
    let hour = 3_600_000_000;
    let skewed = txn(1, 100 + hour, &[(0, 1, Some(5))]);
    let out = dispatch(&mut a, 100, &skewed);
    let told = client_replies(&out);
    let [(i, Err(TxnError::Rejected(why)))] = told.as_slice() else { panic!("{out:?}") };
    assert_eq!(*i, id(1));
    assert!(why.starts_with("timestamp 3,600.0 s ahead of this server's clock; bound "), "{why}");
    assert!(why.ends_with("is the client's clock right?"), "{why}");
    assert_eq!((a.stats().ahead_of_clock, a.stats().admitted, a.pending_len()), (1, 0, 0));
    assert!(tape.borrow().iter().all(|e| !matches!(e.record, LogRecord::Prepare { .. })));
    assert!(tape.borrow().iter().any(|e| matches!(e.record, LogRecord::Refuse { id: r, .. } if r == id(1))));
    // The leader dies; the next leader admits a correct client's transaction at its stamp.
    let (mut b, _) = take_over(0, &tape, 2_000_000);
    let on_time = txn(2, 2_100_000, &[(0, 1, Some(6))]);
    dispatch(&mut b, 2_000_050, &on_time);
    let r = replies(&tick(&mut b, 2_200_000));
    assert_eq!((r.len(), r[0].ts), (1, 2_100_000), "not bumped by the refused timestamp");
    // A retry of the refused one gets the same refusal from the log, never an admission.
    let out = dispatch(&mut b, 2_300_000, &skewed);
    assert!(matches!(client_replies(&out).as_slice(), [(_, Err(TxnError::Rejected(w)))] if w == why));
}

/// Rule 22 with the largest timestamps: `u64::MAX` everywhere (dispatch, agreement items,
/// recovery) panics nowhere and wedges nothing.
#[test]
fn the_largest_timestamps_are_refused_without_overflow() {
    let (mut a, _) = leader(0);
    let t = txn(1, u64::MAX, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let out = dispatch(&mut a, u64::MAX - 10, &t);
    assert!(replies(&out).is_empty(), "within the horizon of a clock at the end of time: {out:?}");
    let (mut b, _) = leader(1);
    let out = dispatch(&mut b, 1_000, &t);
    assert!(matches!(client_replies(&out).as_slice(), [(_, Err(TxnError::Rejected(_)))]), "{out:?}");
    let told = items(&to_peer(&out, 0));
    assert!(matches!(told.as_slice(), [PeerItem::Refuse { .. }]), "the other participant is told: {told:?}");
    let recover = PeerBatch { from: 0, watermark: u64::MAX, items: vec![PeerItem::Recover { txn: t, ts: u64::MAX }] };
    deliver(&mut b, 2_000, vec![recover]);
    let on_time = txn(2, 3_000, &[(1, 3, Some(7))]);
    dispatch(&mut b, 2_500, &on_time);
    let r = replies(&tick(&mut b, 10_000));
    assert_eq!(r.iter().map(|r| (r.id, r.ts)).collect::<Vec<_>>(), vec![(id(2), 3_000)]);
}

/// Issue 26: a client that never comes back (a command-line invocation) costs nothing once
/// its transactions are the expiry behind the watermark, and a dispatch of one of them that
/// arrives after that is answered `Expired`, never executed again.
#[test]
fn an_idle_clients_answers_expire_and_a_late_retry_is_told_so_not_executed() {
    use super::answers::DEFAULT_ANSWER_EXPIRY_US as ANSWER_EXPIRY_US;
    const EXPIRY_SCAN_US: u64 = ANSWER_EXPIRY_US / 8;
    let (mut a, _) = leader(0);
    let t = txn(1, 1_000, &[(0, 1, Some(5))]);
    dispatch(&mut a, 100, &t);
    assert_eq!(replies(&tick(&mut a, 2_000)).len(), 1);
    assert_eq!(a.answers.clients(), 1);
    let later = 1_000 + ANSWER_EXPIRY_US;
    tick(&mut a, later);
    assert_eq!(a.answers.clients(), 1, "its newest transaction is not the expiry behind yet");
    tick(&mut a, later + 2 * EXPIRY_SCAN_US);
    assert_eq!(a.answers.clients(), 0, "forgotten whole");
    let executed = a.stats().executed;
    let out = dispatch(&mut a, later + 2 * EXPIRY_SCAN_US + 10, &t);
    let told = client_replies(&out);
    let [(i, Err(TxnError::Expired(why)))] = told.as_slice() else { panic!("{out:?}") };
    assert_eq!(*i, id(1));
    assert!(why.contains("outcome no longer known"), "{why}");
    assert_eq!((a.stats().executed, a.stats().expired, a.pending_len()), (executed, 1, 0));
    // A shard that takes no part in it has nothing to ask (a participant's recovery is
    // `tests_outcomes`'s).
    let now = later + 2 * EXPIRY_SCAN_US + 20;
    let recover = PeerBatch { from: 1, watermark: 0, items: vec![PeerItem::Recover { txn: t, ts: 1_000 }] };
    assert!(to_peer(&deliver(&mut a, now, vec![recover]), 1).is_empty());
    assert_eq!(a.stats().rejected, 0, "nothing refused either");
    // A client of today commits as ever.
    let fresh = txn(2, now + 100, &[(0, 1, Some(6))]);
    dispatch(&mut a, now, &fresh);
    assert_eq!(replies(&tick(&mut a, now + 200)).iter().map(|r| r.ts).collect::<Vec<_>>(), vec![now + 100]);
}

/// A client holding `ANSWERS_PER_CLIENT_MAX` unacknowledged answers on a shard is told
/// `Busy` (nothing stored) until it acknowledges; then it is admitted again.
#[test]
fn a_client_at_its_bound_of_unacknowledged_answers_is_told_busy_until_it_acknowledges() {
    use super::answers::{Answer, ANSWERS_PER_CLIENT_MAX};
    let (mut a, _) = leader(0);
    for seq in 1..=ANSWERS_PER_CLIENT_MAX as u64 {
        let answer = Answer { ts: 50, outcome: Ok(vec![]), arrival_delta_us: 0, rounds: 0 };
        a.answers.insert(id(seq), answer, 50);
    }
    let next = txn(ANSWERS_PER_CLIENT_MAX as u64 + 1, 1_000, &[(0, 1, Some(5))]);
    let out = dispatch(&mut a, 100, &next);
    let told = client_replies(&out);
    assert!(matches!(told.as_slice(), [(_, Err(TxnError::Busy(why)))] if why.contains("not acknowledged")), "{out:?}");
    assert_eq!((a.stats().admitted, a.pending_len()), (0, 0));
    // `dispatch` acknowledges below 1 only; a client acknowledging what it has is taken in.
    let mut out = Vec::new();
    let ack =
        ClientMsg::Dispatch { txn: next, sent_us: 200, acked_below: ANSWERS_PER_CLIENT_MAX as u64 + 1, fast: false };
    a.on_client(200, 9, ack, &mut out);
    assert_eq!((a.stats().admitted, a.answers.kept_for(9)), (1, 0));
}
