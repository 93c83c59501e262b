//! Transcript tests of the retention rule for cross-shard outcomes (DESIGN.md rules 7 and
//! 9, `leader::outcomes`): a participant keeps what another participant's recovery may ask
//! for until that participant's committed log has applied past it, through acknowledgement
//! and expiry, and not after; refusals likewise; the bound is a `Busy` answer.

use super::answers::DEFAULT_ANSWER_EXPIRY_US as ANSWER_EXPIRY_US;
const EXPIRY_SCAN_US: u64 = ANSWER_EXPIRY_US / 8;
use super::follower::Follower;
use super::outcomes::Outcome;
use super::tests::replies;
use super::tests_common::{deliver, dispatch, id, items, tick, to_peer, txn};
use super::tests_recovery::{leader, leader_with, take_over, value, Leader};
use super::watermark::IDLE_MARKER_US;
use super::*;
use crate::msg::{PeerBatch, PeerItem};
use luigi_store::Store;
use luigi_txn::msg::TxnError;

/// Client 9 acknowledges everything below `acked_below` at `leader` (with a single-shard
/// dispatch of its own).
fn acknowledge(l: &mut Leader, now: TimeUs, seq: u64, acked_below: u64) {
    let shard = l.config.shard;
    let next = txn(seq, now, &[(shard, 40 + seq, Some(1))]);
    let mut out = Vec::new();
    l.on_client(now, 9, ClientMsg::Dispatch { txn: next, sent_us: now, acked_below, fast: false }, &mut out);
    l.tick(now, &mut out);
}

/// The items of `out` for `shard` other than committed-marker reports.
fn answers_to(out: &[LeaderOutput], shard: ShardId) -> Vec<PeerItem> {
    items(&to_peer(out, shard)).into_iter().filter(|i| !matches!(i, PeerItem::Applied { .. })).collect()
}

/// `from`'s committed-marker reports in `out` for `shard`.
fn reports(out: &[LeaderOutput], shard: ShardId) -> Vec<PeerBatch> {
    to_peer(out, shard)
        .into_iter()
        .map(|b| PeerBatch {
            items: b.items.into_iter().filter(|i| matches!(i, PeerItem::Applied { .. })).collect(),
            ..b
        })
        .filter(|b| !b.items.is_empty())
        .collect()
}

fn follower_of(shard: ShardId, tape: &std::rc::Rc<std::cell::RefCell<Vec<LogEntry>>>) -> Follower {
    let mut f = Follower::new(shard, Store::new(), luigi_workloads::procedures::builtins());
    for e in tape.borrow().iter() {
        f.apply(e);
    }
    f
}

/// Issue 26: A executed `t` at 1,400 and died before a marker covered it; B's client
/// acknowledged `t` and B's client table expired. B still keeps the outcome (followers too),
/// answers A's new leader, and forgets it once A's committed marker is past 1,400; a
/// delayed `Recover` from before that is ignored.
#[test]
fn an_execution_a_peer_lost_is_kept_past_acknowledgement_and_expiry_until_it_applied_past_it() {
    let (mut a, tape_a) = leader(0);
    let (mut b, tape_b) = leader(1);
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let out_a = dispatch(&mut a, 100, &t);
    let out_b = dispatch(&mut b, 1_400, &t); // proposes 1400: a second round
    let conf_a = to_peer(&deliver(&mut a, 1_450, to_peer(&out_b, 0)), 1);
    let conf_b = to_peer(&deliver(&mut b, 1_450, to_peer(&out_a, 1)), 0);
    deliver(&mut b, 1_460, conf_a);
    assert_eq!(replies(&deliver(&mut a, 1_460, conf_b))[0].ts, 1_400);
    assert!(!tape_a.borrow().iter().any(|e| matches!(e.record, LogRecord::Applied { ts } if ts >= 1_400)));
    // B's client acknowledges it, and later B forgets the client altogether.
    acknowledge(&mut b, 3_000, 2, 3);
    assert_eq!(b.answers().known(id(1)), answers::Known::Acknowledged);
    let later = 3_000 + ANSWER_EXPIRY_US + 2 * EXPIRY_SCAN_US;
    tick(&mut b, later);
    assert_eq!(b.answers().clients(), 0, "client 9 expired on B");
    assert_eq!(b.answers().outcomes().get(id(1)), Some(&Outcome::Executed(1_400)));
    assert_eq!(follower_of(1, &tape_b).answers().outcomes().get(id(1)), Some(&Outcome::Executed(1_400)));
    // A's new leader asks; B answers from what it kept.
    let (mut a2, tape_a2) = take_over(0, &tape_a, later);
    let recover = to_peer(&tick(&mut a2, later), 1);
    let answer = deliver(&mut b, later + 100, recover.clone());
    assert_eq!(answers_to(&answer, 0), vec![PeerItem::Executed { id: id(1), ts: 1_400 }]);
    deliver(&mut a2, later + 200, to_peer(&answer, 0));
    assert_eq!((a2.stats().executed, value(&a2, 1)), (1, Some(5)));
    // A's marker passes 1,400 and commits (a pump later); A tells B at its next report, B
    // logs it, and forgets at that record's commit.
    let report_us = applied_exchange::APPLIED_REPORT_US;
    let at = later + 2 * report_us;
    let out = [tick(&mut a2, at), tick(&mut a2, at + 1), tick(&mut a2, at + report_us + 2)].concat();
    assert!(tape_a2.borrow().iter().any(|e| matches!(e.record, LogRecord::Applied { ts } if ts >= 1_400)));
    assert!(matches!(items(&reports(&out, 1)).last(), Some(PeerItem::Applied { ts }) if *ts >= 1_400), "{out:?}");
    let now = at + 2 * report_us;
    deliver(&mut b, now, reports(&out, 1));
    tick(&mut b, now + 1);
    assert!(b.answers().outcomes().is_empty(), "A applied past it: nothing kept");
    assert!(tape_b.borrow().iter().any(|e| matches!(e.record, LogRecord::PeerApplied { shard: 0, ts } if ts >= 1_400)));
    assert!(follower_of(1, &tape_b).answers().outcomes().is_empty(), "B's followers forget at the same record");
    // The first Recover again, delayed: nothing is kept, and nothing is inferred.
    let late = deliver(&mut b, now + 10, recover);
    assert_eq!(answers_to(&late, 0), vec![PeerItem::Acknowledged { id: id(1) }]);
}

/// A refusal is kept for the other participants past its client's expiry, until their
/// committed markers pass its timestamp plus the expiry: an idle shard logs markers too.
#[test]
fn a_refusal_is_kept_for_a_recovering_peer_past_expiry_and_goes_once_its_marker_passes() {
    let (mut a, tape_a) = leader(0);
    let mut cfg = LeaderConfig::new(1, 8);
    cfg.max_pending = 0; // shard 1 refuses everything
    let (mut b, tape_b) = leader_with(cfg);
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    dispatch(&mut a, 100, &t);
    let _refuse_lost = dispatch(&mut b, 100, &t); // B's Refuse dies with A
    acknowledge(&mut b, 3_000, 2, 3);
    let later = 3_000 + ANSWER_EXPIRY_US + 2 * EXPIRY_SCAN_US;
    tick(&mut b, later);
    assert_eq!(b.answers().clients(), 0, "client 9 expired on B");
    let (mut a2, _) = take_over(0, &tape_a, later);
    let answer = deliver(&mut b, later + 100, to_peer(&tick(&mut a2, later), 1));
    assert!(matches!(answers_to(&answer, 0).as_slice(), [PeerItem::Refuse { .. }]), "{answer:?}");
    deliver(&mut a2, later + 200, to_peer(&answer, 0));
    assert_eq!((a2.stats().aborted, a2.pending_len()), (1, 0));
    // A executes nothing more, yet its marker moves with its watermark every
    // IDLE_MARKER_US, past 1,000 + the expiry: B forgets the refusal.
    let mut now = later + 1_000;
    for _ in 0..4 {
        now += IDLE_MARKER_US;
        let out = tick(&mut a2, now);
        let out = [out, tick(&mut a2, now + 1)].concat();
        deliver(&mut b, now + 2, reports(&out, 1));
        tick(&mut b, now + applied_exchange::APPLIED_REPORT_US + 3);
        tick(&mut b, now + applied_exchange::APPLIED_REPORT_US + 4);
    }
    assert!(b.answers().outcomes().is_empty(), "A's marker is past it");
    assert!(follower_of(1, &tape_b).answers().outcomes().is_empty());
}

/// No cross-shard proposal lies more than the expiry above its coordinator's timestamp
/// (what the refusals' retention rests on): such a dispatch is refused, logged.
#[test]
fn a_cross_shard_dispatch_that_would_be_ordered_past_the_expiry_is_refused() {
    let (mut b, tape_b) = leader(1);
    let held = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    dispatch(&mut b, 100, &held); // waits for shard 0 forever: the watermark stays below 1,000
    let now = 5_000 + ANSWER_EXPIRY_US + 1;
    let late = txn(2, 5_000, &[(0, 3, Some(5)), (1, 4, Some(6))]);
    let out = dispatch(&mut b, now, &late);
    let out = [out, tick(&mut b, now + 1)].concat();
    assert!(matches!(replies(&out).as_slice(), [r] if matches!(&r.outcome, Err(TxnError::Rejected(_)))), "{out:?}");
    assert!(tape_b
        .borrow()
        .iter()
        .any(|e| matches!(&e.record, LogRecord::Refuse { id: i, others, .. } if *i == id(2) && others == &vec![0])));
    assert_eq!(
        b.answers().outcomes().get(id(2)),
        Some(&Outcome::Refused {
            reason: match &replies(&out)[0].outcome {
                Err(TxnError::Rejected(r)) => r.clone(),
                other => panic!("{other:?}"),
            },
            ts: 5_000
        })
    );
}

/// At `outcomes_max` (kept outcomes plus transactions that may add one) a cross-shard
/// dispatch is answered `Busy` and nothing is stored; single-shard ones go on; once the
/// other participant applied past the kept one, cross-shard ones are admitted again.
#[test]
fn at_the_bound_of_kept_outcomes_cross_shard_dispatches_are_told_busy() {
    let (mut a, _) = leader(0);
    let (mut b, _) = leader_with(LeaderConfig { outcomes_max: 1, ..LeaderConfig::new(1, 8) });
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let out_a = dispatch(&mut a, 100, &t);
    let out_b = dispatch(&mut b, 100, &t);
    let second = txn(2, 1_100, &[(0, 3, Some(5)), (1, 4, Some(6))]);
    let busy = |out: &[LeaderOutput]| matches!(replies(out).as_slice(), [r] if matches!(&r.outcome, Err(TxnError::Busy(why)) if why.contains("outcomes")));
    assert!(busy(&dispatch(&mut b, 150, &second)), "one pending, which may add one");
    deliver(&mut a, 200, to_peer(&out_b, 0));
    deliver(&mut b, 200, to_peer(&out_a, 1));
    tick(&mut b, 2_000);
    assert_eq!(b.answers().outcomes().len(), 1, "executed, kept for shard 0");
    assert!(busy(&dispatch(&mut b, 2_100, &second)));
    let single = txn(3, 2_200, &[(1, 5, Some(1))]);
    dispatch(&mut b, 2_200, &single);
    assert_eq!((b.stats().admitted, b.stats().outcomes_full), (2, 2));
    // Shard 0 reports its committed marker past 1,000.
    let report = PeerBatch { from: 0, watermark: 0, items: vec![PeerItem::Applied { ts: 1_000 }] };
    deliver(&mut b, 3_000, vec![report]);
    tick(&mut b, 3_000 + applied_exchange::APPLIED_REPORT_US);
    tick(&mut b, 3_001 + applied_exchange::APPLIED_REPORT_US);
    assert!(b.answers().outcomes().is_empty());
    dispatch(&mut b, 4_000 + applied_exchange::APPLIED_REPORT_US, &second);
    assert_eq!(b.stats().admitted, 3);
}

/// Reports that are not of another shard of the cluster change nothing.
#[test]
fn marker_reports_from_itself_or_a_stranger_are_ignored() {
    let (mut b, tape) = leader(1);
    let strange = |from| PeerBatch { from, watermark: 0, items: vec![PeerItem::Applied { ts: u64::MAX }] };
    deliver(&mut b, 100, vec![strange(1), strange(8), strange(u32::MAX)]);
    tick(&mut b, 100 + applied_exchange::APPLIED_REPORT_US);
    assert!(!tape.borrow().iter().any(|e| matches!(e.record, LogRecord::PeerApplied { .. })));
}

/// A (shard 0) executed `t1` and `t2` with B and died before any marker covered them; B's
/// client acknowledged both; A's new leader asks B. Returns A's new leader after B's
/// answers, and those answers.
fn lost_executions_answered(fifo: Option<usize>) -> (Leader, Vec<PeerItem>) {
    let (mut a, tape_a) = leader_with(LeaderConfig { applied_marker_us: u64::MAX, ..LeaderConfig::new(0, 8) });
    let mutations = Mutations { outcomes_fifo: fifo, ..Mutations::default() };
    let (mut b, _) = leader_with(LeaderConfig { mutations, ..LeaderConfig::new(1, 8) });
    let t1 = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let t2 = txn(2, 1_000, &[(0, 3, Some(7)), (1, 4, Some(8))]);
    let out_a = [dispatch(&mut a, 100, &t1), dispatch(&mut a, 100, &t2)].concat();
    let out_b = [dispatch(&mut b, 100, &t1), dispatch(&mut b, 100, &t2)].concat();
    deliver(&mut a, 200, to_peer(&out_b, 0));
    deliver(&mut b, 200, to_peer(&out_a, 1));
    let answered = [replies(&tick(&mut a, 2_000)), replies(&tick(&mut b, 2_000))].concat();
    assert_eq!(answered.len(), 4, "both answered on both shards");
    assert!(!tape_a.borrow().iter().any(|e| matches!(e.record, LogRecord::Applied { ts } if ts >= 1_000)));
    acknowledge(&mut b, 3_000, 3, 4);
    let (mut a2, _) = take_over(0, &tape_a, 4_000);
    let answer = deliver(&mut b, 4_100, to_peer(&tick(&mut a2, 4_000), 1));
    deliver(&mut a2, 4_200, to_peer(&answer, 0));
    tick(&mut a2, 10_000);
    (a2, answers_to(&answer, 0))
}

/// Main's design before issue 26 (`Mutations::outcomes_fifo`, here a memory of one): once
/// B's client acknowledged `t1` and one more, B no longer knows `t1`'s final timestamp and
/// answers `Acknowledged`; A's new leader stays stalled on it for good. With the retention
/// rule B answers both.
#[test]
fn main_s_fifo_memory_loses_what_a_recovering_peer_needs() {
    let (a2, told) = lost_executions_answered(None);
    assert_eq!(told, vec![PeerItem::Executed { id: id(1), ts: 1_000 }, PeerItem::Executed { id: id(2), ts: 1_000 }]);
    assert_eq!((a2.stats().executed, a2.pending_len(), a2.stats().recover_acknowledged), (2, 0, 0));
    let (a2, told) = lost_executions_answered(Some(1));
    assert_eq!(told, vec![PeerItem::Acknowledged { id: id(1) }, PeerItem::Executed { id: id(2), ts: 1_000 }]);
    assert_eq!((a2.stats().executed, a2.pending_len(), a2.stats().recover_acknowledged), (1, 1, 1), "stalled");
}
