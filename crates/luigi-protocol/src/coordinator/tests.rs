//! Transcript tests of the coordinator: stamping, the commit rules, retries, unknown and
//! rejected outcomes, and acknowledgement.
//!
//! Size: over 600 lines: the coordinator's transcript tests, one scenario each, kept
//! together because they share the transcript helpers at the top.

use super::*;
use luigi_txn::client_core::{ClientCore, Completion, TxnOutcome};
use luigi_txn::msg::{ServerMsg, TxnError, TxnReply};
use luigi_txn::types::{KeySet, ShardPiece};

/// A config without keepalive pings (tested on their own), so transcripts show only
/// dispatches, and with the fixed headroom (the adaptive one has its own transcripts), so
/// they show the stamps of rule 1 as configured.
pub(super) fn quiet(client: ClientId) -> CoordinatorConfig {
    CoordinatorConfig { keepalive_us: TimeUs::MAX / 2, adaptive_headroom: false, ..CoordinatorConfig::new(client) }
}

#[test]
fn the_watched_shards_are_pinged_while_anything_is_in_flight() {
    let cfg = CoordinatorConfig {
        keepalive_us: 100,
        commit_rule: CommitRule::AllShards { shards: 3 },
        ..CoordinatorConfig::new(1)
    };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    c.tick(0, &mut out);
    assert!(out.is_empty(), "nothing in flight: no pings");
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    out.clear();
    c.tick(99, &mut out);
    assert!(out.is_empty(), "the dispatch itself keeps the client known for a period");
    c.tick(100, &mut out);
    let pings = |out: &[ClientOutput]| {
        out.iter()
            .filter_map(|o| match o {
                ClientOutput::Send { shard, msg: ClientMsg::Ping { .. } } => Some(*shard),
                ClientOutput::Send { .. }
                | ClientOutput::SendTo { .. }
                | ClientOutput::Done(_)
                | ClientOutput::Resolved(_) => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(pings(&out), vec![0, 1, 2], "every shard the commit rule waits on");
    out.clear();
    c.tick(150, &mut out);
    assert!(pings(&out).is_empty(), "not before the period");
    assert_eq!(c.next_deadline(), Some(200));
    c.on_message(60, reply(id, 0, 5, 5, 1), &mut out);
    for s in 1..3 {
        c.on_message(60, ServerMsg::Watermark { shard: s, watermark: 5 }, &mut out);
    }
    out.clear();
    c.tick(300, &mut out);
    assert!(pings(&out).is_empty(), "nothing in flight any more");
    c.check_invariants().unwrap();
}

pub(super) fn piece(shard: ShardId) -> ShardPiece {
    ShardPiece { shard, keys: KeySet::new(vec![], vec![vec![shard as u8]]) }
}

pub(super) fn reply(id: TxnId, shard: ShardId, ts: Timestamp, watermark: Timestamp, delta: i64) -> ServerMsg {
    ServerMsg::Reply(TxnReply {
        id,
        shard,
        ts,
        outcome: Ok(vec![shard as u8]),
        watermark,
        arrival_delta_us: delta,
        rounds: 0,
        position: None,
        order: None,
        early: false,
    })
}

fn sends(out: &[ClientOutput]) -> Vec<ShardId> {
    out.iter()
        .filter_map(|o| match o {
            ClientOutput::Send { shard, .. } => Some(*shard),
            ClientOutput::SendTo { .. } | ClientOutput::Done(_) | ClientOutput::Resolved(_) => None,
        })
        .collect()
}

#[test]
fn stamps_with_max_owd_plus_headroom_and_dispatches_to_all() {
    let mut c = Coordinator::new(CoordinatorConfig { headroom_us: 100, ..quiet(7) });
    let mut out = Vec::new();
    c.on_message(0, ServerMsg::Pong { shard: 0, arrival_delta_us: 1_000, sent_us: 0, watermark: 0 }, &mut out);
    c.on_message(0, ServerMsg::Pong { shard: 1, arrival_delta_us: 5_000, sent_us: 0, watermark: 0 }, &mut out);
    let id = c.submit(10_000, "p", vec![], vec![piece(1), piece(0)], &mut out).unwrap();
    assert_eq!(id, TxnId { client: 7, seq: 1 });
    assert_eq!(sends(&out), vec![0, 1]);
    let ClientOutput::Send { msg: ClientMsg::Dispatch { txn, sent_us, acked_below, fast: false }, .. } = &out[0] else {
        panic!("expected a dispatch")
    };
    assert_eq!(txn.ts, 10_000 + 5_000 + 100);
    assert_eq!((*sent_us, *acked_below), (10_000, 1));
    c.check_invariants().unwrap();
}

#[test]
fn answers_only_when_every_participant_watermark_passed() {
    let mut c = Coordinator::new(quiet(1));
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out).unwrap();
    out.clear();
    c.on_message(10, reply(id, 0, 500, 600, 5), &mut out);
    assert!(out.is_empty(), "shard 1 has not answered");
    c.on_message(10, reply(id, 1, 500, 400, 5), &mut out);
    assert!(out.is_empty(), "shard 1's watermark is below the timestamp");
    c.on_message(10, ServerMsg::Watermark { shard: 1, watermark: 499 }, &mut out);
    assert!(out.is_empty(), "still below");
    c.on_message(10, ServerMsg::Watermark { shard: 1, watermark: 500 }, &mut out);
    let [ClientOutput::Done(done)] = out.as_slice() else { panic!("expected completion, got {out:?}") };
    assert!(done.outcome.is_committed());
    assert_eq!(c.in_flight(), 0);
    c.check_invariants().unwrap();
}

#[test]
fn all_shards_rule_waits_for_non_participants() {
    let cfg = CoordinatorConfig { commit_rule: CommitRule::AllShards { shards: 3 }, ..quiet(1) };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    out.clear();
    c.on_message(5, reply(id, 0, 100, 100, 1), &mut out);
    c.on_message(5, ServerMsg::Watermark { shard: 1, watermark: 150 }, &mut out);
    assert!(out.is_empty(), "shard 2's watermark is unknown");
    c.on_message(5, ServerMsg::Watermark { shard: 2, watermark: 99 }, &mut out);
    assert!(out.is_empty(), "shard 2's watermark is below the timestamp");
    c.on_message(5, ServerMsg::Watermark { shard: 2, watermark: 100 }, &mut out);
    assert!(matches!(out.as_slice(), [ClientOutput::Done(d)] if d.outcome.is_committed()));
    c.check_invariants().unwrap();
}

fn done(out: &[ClientOutput]) -> Option<&Completion> {
    out.iter().find_map(|o| match o {
        ClientOutput::Done(d) => Some(d),
        ClientOutput::Send { .. } | ClientOutput::SendTo { .. } | ClientOutput::Resolved(_) => None,
    })
}

fn resolved(out: &[ClientOutput]) -> Option<&Completion> {
    out.iter().find_map(|o| match o {
        ClientOutput::Resolved(d) => Some(d),
        ClientOutput::Send { .. } | ClientOutput::SendTo { .. } | ClientOutput::Done(_) => None,
    })
}

fn rejected(id: TxnId, shard: ShardId) -> ServerMsg {
    ServerMsg::Reply(TxnReply {
        id,
        shard,
        ts: 0,
        outcome: Err(TxnError::Rejected("no".into())),
        watermark: 0,
        arrival_delta_us: 0,
        rounds: 0,
        position: None,
        order: None,
        early: false,
    })
}

fn acked_below_of(out: &[ClientOutput]) -> Vec<u64> {
    out.iter()
        .filter_map(|o| match o {
            ClientOutput::Send { msg: ClientMsg::Dispatch { acked_below, .. }, .. } => Some(*acked_below),
            ClientOutput::Send { .. }
            | ClientOutput::SendTo { .. }
            | ClientOutput::Done(_)
            | ClientOutput::Resolved(_) => None,
        })
        .collect()
}

/// The bug behind a cluster-wide stall: a client gave up on a cross-shard transaction and
/// acknowledged it, so a participant that never saw it took it for answered. An unknown
/// outcome is reported, never acknowledged, and still asked for until it is learned.
#[test]
fn an_unknown_outcome_is_never_acknowledged_and_is_resolved_later() {
    let cfg = CoordinatorConfig { retry_timeout_us: 100, max_attempts: 2, ..quiet(1) };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out).unwrap();
    c.on_message(10, reply(id, 0, 50, 60, 5), &mut out);
    out.clear();
    c.tick(100, &mut out);
    c.tick(200, &mut out);
    let d = done(&out).expect("reported");
    assert!(matches!(d.outcome, TxnOutcome::Unknown(_)), "{:?}", d.outcome);
    assert_eq!((c.in_flight(), c.unresolved()), (0, 1));
    assert_eq!(sends(&out), vec![1, 1], "shard 1 is still asked, also after the report");
    out.clear();
    let later = c.submit(250, "p", vec![], vec![piece(0)], &mut out).unwrap();
    assert_eq!(acked_below_of(&out), vec![id.seq], "the unknown one is not acknowledged");
    c.on_message(260, reply(later, 0, 300, 300, 1), &mut out);
    out.clear();
    c.tick(300, &mut out);
    assert_eq!(sends(&out), vec![1], "asked again every retry timeout, without limit");
    c.on_message(310, reply(id, 1, 50, 60, 5), &mut out);
    let r = resolved(&out).expect("resolved");
    assert!(r.outcome.is_committed());
    assert_eq!((c.unresolved(), c.stats().unknown, c.stats().resolved), (0, 1, 1));
    out.clear();
    c.submit(400, "p", vec![], vec![piece(0)], &mut out).unwrap();
    assert_eq!(acked_below_of(&out), vec![later.seq + 1], "acknowledged once every participant answered");
    c.check_invariants().unwrap();
}

/// A refusal is definite at once, but the transaction is acknowledged only once every
/// participant answered: one that never saw it must not find it acknowledged.
#[test]
fn a_rejection_is_reported_at_once_and_acknowledged_once_every_participant_answered() {
    let cfg = CoordinatorConfig { retry_timeout_us: 100, ..quiet(1) };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out).unwrap();
    out.clear();
    c.on_message(10, rejected(id, 0), &mut out);
    assert!(matches!(done(&out).map(|d| &d.outcome), Some(TxnOutcome::Rejected(_))));
    assert_eq!(c.unresolved(), 1);
    out.clear();
    c.tick(100, &mut out);
    assert_eq!(sends(&out), vec![1], "the silent participant is still asked");
    out.clear();
    c.on_message(110, rejected(id, 1), &mut out);
    assert!(out.is_empty(), "reported once");
    assert_eq!(c.unresolved(), 0);
    c.submit(120, "p", vec![], vec![piece(0)], &mut out).unwrap();
    assert_eq!(acked_below_of(&out), vec![id.seq + 1]);
    c.check_invariants().unwrap();
}

#[test]
fn busy_answers_are_resent_soon_like_not_leader() {
    let cfg = CoordinatorConfig { retry_timeout_us: 1_000_000, not_leader_retry_us: 50, ..quiet(1) };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    let busy = TxnReply {
        id,
        shard: 0,
        ts: 0,
        outcome: Err(TxnError::Busy("log full".into())),
        watermark: 0,
        arrival_delta_us: 0,
        rounds: 0,
        position: None,
        order: None,
        early: false,
    };
    out.clear();
    c.on_message(10, ServerMsg::Reply(busy), &mut out);
    assert!(out.is_empty());
    c.tick(60, &mut out);
    assert_eq!(sends(&out), vec![0]);
    assert_eq!(c.stats().retries, 0);
    c.check_invariants().unwrap();
}

#[test]
fn a_transaction_waiting_only_for_a_watermark_is_never_reported_unknown() {
    let cfg = CoordinatorConfig { retry_timeout_us: 100, max_attempts: 2, ..quiet(1) };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    c.on_message(10, reply(id, 0, 500, 400, 5), &mut out);
    out.clear();
    for t in 1..10 {
        c.tick(t * 100, &mut out);
    }
    assert!(out.is_empty(), "every participant answered: nothing to resend, nothing unknown");
    c.on_message(1_000, ServerMsg::Watermark { shard: 0, watermark: 500 }, &mut out);
    assert!(done(&out).is_some_and(|d| d.outcome.is_committed()));
    c.check_invariants().unwrap();
}

#[test]
fn retries_resend_only_to_silent_participants_then_report_unknown() {
    let cfg = CoordinatorConfig { retry_timeout_us: 100, max_attempts: 3, ..quiet(1) };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out).unwrap();
    c.on_message(10, reply(id, 0, 50, 60, 5), &mut out);
    out.clear();
    c.tick(99, &mut out);
    assert!(out.is_empty());
    c.tick(100, &mut out);
    assert_eq!(sends(&out), vec![1], "only the silent shard is asked again");
    out.clear();
    c.tick(200, &mut out);
    c.tick(300, &mut out);
    let d = done(&out).expect("reported");
    assert!(matches!(d.outcome, TxnOutcome::Unknown(_)));
    assert_eq!(d.attempts, 3);
    assert_eq!(c.stats().retries, 2);
    c.check_invariants().unwrap();
}

#[test]
fn not_leader_answers_are_resent_soon_without_using_attempts() {
    let cfg = CoordinatorConfig { retry_timeout_us: 1_000_000, not_leader_retry_us: 50, ..quiet(1) };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    let not_leader = ServerMsg::Reply(TxnReply {
        id,
        shard: 0,
        ts: 0,
        outcome: Err(TxnError::NotLeader { hint: None }),
        watermark: 0,
        arrival_delta_us: 0,
        rounds: 0,
        position: None,
        order: None,
        early: false,
    });
    for round in 0..3u64 {
        out.clear();
        c.on_message(10 + round * 100, not_leader.clone(), &mut out);
        assert!(out.is_empty(), "no completion for a not-leader answer");
        c.tick(10 + round * 100 + 50, &mut out);
        assert_eq!(sends(&out), vec![0], "resent after 50 µs, not after the retry timeout");
    }
    assert_eq!(c.stats().retries, 0, "not-leader resends are not attempts");
    c.on_message(400, reply(id, 0, 5, 5, 1), &mut out);
    assert_eq!(done(&out).expect("answered").attempts, 1);
    c.check_invariants().unwrap();
}

#[test]
fn a_lost_leader_connection_resends_soon_to_the_shards_still_silent() {
    let cfg = CoordinatorConfig { retry_timeout_us: 1_000_000, not_leader_retry_us: 50, ..quiet(1) };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out).unwrap();
    c.submit(0, "p", vec![], vec![piece(1)], &mut out).unwrap();
    c.on_message(10, reply(id, 0, 50, 60, 5), &mut out);
    out.clear();
    c.shard_unreachable(20, 0);
    c.tick(70, &mut out);
    assert!(out.is_empty(), "shard 0 already answered; nothing waits for it");
    c.shard_unreachable(100, 1);
    c.tick(149, &mut out);
    assert!(out.is_empty());
    c.tick(150, &mut out);
    assert_eq!(sends(&out), vec![1, 1], "both transactions waiting for shard 1 are resent");
    assert_eq!(c.stats().retries, 0, "not counted as attempts");
    c.check_invariants().unwrap();
}

#[test]
fn acked_below_tracks_the_oldest_unfinished() {
    let mut c = Coordinator::new(quiet(1));
    let mut out = Vec::new();
    let a = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    let b = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    c.on_message(1, reply(b, 0, 5, 5, 1), &mut out);
    assert_eq!(c.flights.acked_below(), a.seq);
    c.on_message(1, reply(a, 0, 5, 5, 1), &mut out);
    assert_eq!(c.flights.acked_below(), 3);
    c.check_invariants().unwrap();
}

#[test]
fn owd_learned_from_replies() {
    let mut c = Coordinator::new(CoordinatorConfig { headroom_us: 0, ..quiet(1) });
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    c.on_message(1, reply(id, 0, 5, 5, 2_500), &mut out);
    assert_eq!(c.owd_estimate_us(1, 0), 2_500);
    assert_eq!(c.stamp(1_000, [0].into_iter()), 3_500);
    c.check_invariants().unwrap();
}

/// Rule 1 and issue 26: pongs answered only after a partition healed (they waited seconds
/// in a buffer) leave the estimate alone, so timestamps are not stretched by seconds.
#[test]
fn pongs_that_waited_past_the_resend_timeout_are_not_samples() {
    let mut c = Coordinator::new(CoordinatorConfig { headroom_us: 0, retry_timeout_us: 1_000_000, ..quiet(1) });
    let mut out = Vec::new();
    let pong = |sent_us, arrival_delta_us| ServerMsg::Pong { shard: 0, arrival_delta_us, sent_us, watermark: 0 };
    c.on_message(10_000, pong(6_000, 2_000), &mut out);
    assert_eq!(c.owd_estimate_us(10_000, 0), 2_000);
    for late in 0..64 {
        let sent = 20_000 + late * 250_000;
        c.on_message(sent + 5_000_000, pong(sent, 4_000_000), &mut out);
    }
    let now = 20_000 + 64 * 250_000 + 5_000_000;
    c.on_message(now, pong(now - 3_000, 1_500), &mut out);
    assert_eq!(c.owd_estimate_us(now, 0), 1_500, "only the fresh sample counts");
    assert_eq!(c.stats().owd_samples_dropped, 64);
    assert!(c.stamp(now, [0].into_iter()) < now + 10_000);
}

/// Checked after every step of a transcript with a retry, an unknown outcome, a refusal and
/// a watermark wait; and a broken state is reported.
#[test]
fn invariants_hold_after_every_step_and_a_lost_watermark_wait_is_reported() {
    let cfg = CoordinatorConfig { retry_timeout_us: 100, max_attempts: 2, ..quiet(1) };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    let mut step = |c: &mut Coordinator, f: &mut dyn FnMut(&mut Coordinator, &mut Vec<ClientOutput>)| {
        f(c, &mut out);
        c.check_invariants().unwrap();
    };
    let mut ids = Vec::new();
    step(&mut c, &mut |c, out| ids.push(c.submit(0, "p", vec![], vec![piece(0), piece(1)], out).unwrap()));
    step(&mut c, &mut |c, out| ids.push(c.submit(0, "p", vec![], vec![piece(0)], out).unwrap()));
    step(&mut c, &mut |c, out| ids.push(c.submit(0, "p", vec![], vec![piece(1)], out).unwrap()));
    let (cross, single, refused) = (ids[0], ids[1], ids[2]);
    step(&mut c, &mut |c, out| c.on_message(10, reply(cross, 0, 50, 40, 5), out));
    step(&mut c, &mut |c, out| c.on_message(10, reply(single, 0, 60, 40, 5), out));
    step(&mut c, &mut |c, out| c.on_message(10, rejected(refused, 1), out));
    for t in [100, 200, 300] {
        step(&mut c, &mut |c, out| c.tick(t, out));
    }
    assert_eq!(c.stats().unknown, 1, "the cross-shard one is reported unknown");
    step(&mut c, &mut |c, out| c.on_message(310, reply(cross, 1, 50, 40, 5), out));
    assert_eq!(c.unresolved(), 1, "answered everywhere, waiting for shard 1's watermark");
    c.corrupt_drop_awaiting(single);
    let err = c.check_invariants().unwrap_err();
    assert!(err.contains("waiting for a watermark: false"), "{err}");
}

fn speculative(id: TxnId, shard: ShardId, ts: Timestamp, term: u64, index: u64, value: u8) -> ServerMsg {
    ServerMsg::Reply(TxnReply {
        id,
        shard,
        ts,
        outcome: Ok(vec![value]),
        watermark: ts,
        arrival_delta_us: 1,
        rounds: 0,
        position: Some(luigi_txn::progress::LogPos { term, index }),
        order: None,
        early: false,
    })
}

fn progress(shard: ShardId, replica: u32, term: u64, index: u64, committed: bool) -> ServerMsg {
    let pos = luigi_txn::progress::LogPos { term, index };
    ServerMsg::Progress(luigi_txn::progress::ProgressReport { shard, replica, term, pos, committed })
}

#[test]
fn a_speculative_answer_completes_only_once_its_position_is_proven_committed() {
    let mut c = Coordinator::new(CoordinatorConfig { group_sizes: vec![3], ..quiet(1) });
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    out.clear();
    c.on_message(10, speculative(id, 0, 100, 4, 20, 7), &mut out);
    assert!(out.is_empty(), "answered and watermark passed, position 20 of term 4 not proven");
    c.on_message(11, progress(0, 1, 3, 50, false), &mut out);
    assert!(out.is_empty(), "a follower of an older term proves nothing");
    c.on_message(12, progress(0, 2, 4, 19, false), &mut out);
    assert!(out.is_empty(), "a follower of the term, below the position");
    c.on_message(13, progress(0, 2, 4, 20, false), &mut out);
    let [ClientOutput::Done(done)] = out.as_slice() else { panic!("expected completion, got {out:?}") };
    assert!(matches!(&done.outcome, TxnOutcome::Ordered { results, .. } if results == &vec![(0, Ok(vec![7]))]));
    c.check_invariants().unwrap();
}

#[test]
fn an_unproven_answer_is_replaced_by_a_later_one_and_a_proven_one_is_kept() {
    let mut c = Coordinator::new(CoordinatorConfig { group_sizes: vec![3, 3], ..quiet(1) });
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    out.clear();
    // A leader answered speculatively and lost its log; the retry's answer (a new leader's,
    // executed at another timestamp) is the one that counts.
    c.on_message(10, speculative(id, 0, 100, 4, 20, 1), &mut out);
    c.on_message(20, speculative(id, 0, 300, 5, 30, 2), &mut out);
    c.on_message(21, progress(0, 0, 5, 30, true), &mut out);
    let [ClientOutput::Done(done)] = out.as_slice() else { panic!("expected completion, got {out:?}") };
    assert!(matches!(&done.outcome, TxnOutcome::Ordered { ts: 300, results } if results == &vec![(0, Ok(vec![2]))]));

    let id = c.submit(30, "p", vec![], vec![piece(1)], &mut out).unwrap();
    out.clear();
    c.on_message(40, progress(1, 1, 6, 9, false), &mut out);
    c.on_message(41, speculative(id, 1, 500, 6, 9, 3), &mut out);
    let [ClientOutput::Done(done)] = out.as_slice() else { panic!("proven at once, got {out:?}") };
    assert!(matches!(&done.outcome, TxnOutcome::Ordered { ts: 500, .. }));
    c.check_invariants().unwrap();
}

#[test]
fn the_mutation_that_trusts_unproven_answers_completes_at_once() {
    let mutations = CoordMutations { trust_unproven_answers: true, ..CoordMutations::default() };
    let mut c = Coordinator::new(CoordinatorConfig { group_sizes: vec![3], mutations, ..quiet(1) });
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    out.clear();
    c.on_message(10, speculative(id, 0, 100, 4, 20, 7), &mut out);
    assert!(matches!(out.as_slice(), [ClientOutput::Done(_)]), "{out:?}");
}

/// A coordinator of client 1 under the all-shards rule over 2 shards of 3 replicas.
fn two_shards_of_three() -> Coordinator {
    Coordinator::new(CoordinatorConfig {
        commit_rule: CommitRule::AllShards { shards: 2 },
        group_sizes: vec![3, 3],
        ..quiet(1)
    })
}

#[test]
fn a_shard_failing_over_is_passed_over_once_a_majority_moved_past_its_promising_term() {
    let mut c = two_shards_of_three();
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    out.clear();
    c.on_message(5, ServerMsg::Watermark { shard: 1, watermark: 50 }, &mut out);
    c.on_message(5, ServerMsg::Promise { shard: 1, term: 4, floor: 900 }, &mut out);
    c.on_message(5, reply(id, 0, 100, 100, 1), &mut out);
    assert!(out.is_empty(), "shard 1's watermark is below the timestamp and its leader of term 4 may still admit");
    c.on_message(6, progress(1, 1, 5, 0, false), &mut out);
    assert!(out.is_empty(), "one replica of three voted in term 5");
    c.on_message(7, progress(1, 2, 5, 0, false), &mut out);
    assert!(matches!(out.as_slice(), [ClientOutput::Done(d)] if d.outcome.is_committed()), "{out:?}");
    c.check_invariants().unwrap();
}

#[test]
fn a_promise_below_the_timestamp_or_of_a_participant_passes_nothing_over() {
    let mut c = two_shards_of_three();
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    let both = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out).unwrap();
    out.clear();
    c.on_message(5, ServerMsg::Watermark { shard: 1, watermark: 50 }, &mut out);
    c.on_message(5, ServerMsg::Promise { shard: 1, term: 4, floor: 99 }, &mut out);
    for r in 1..3 {
        c.on_message(6, progress(1, r, 5, 0, false), &mut out);
    }
    c.on_message(7, reply(id, 0, 100, 100, 1), &mut out);
    c.on_message(7, reply(both, 0, 100, 100, 1), &mut out);
    c.on_message(7, reply(both, 1, 100, 50, 1), &mut out);
    assert!(out.is_empty(), "the promise stops below 100: {out:?}");
    c.on_message(8, ServerMsg::Promise { shard: 1, term: 4, floor: 500 }, &mut out);
    let [ClientOutput::Done(d)] = out.as_slice() else { panic!("only the single-shard one, got {out:?}") };
    assert_eq!(d.id, id, "a participant's own watermark must pass: its answer may rest on it");
}

/// The timestamp the coordinator stamped on the dispatches in `out`.
pub(super) fn stamped(out: &[ClientOutput]) -> Timestamp {
    out.iter()
        .find_map(|o| match o {
            ClientOutput::Send { msg: ClientMsg::Dispatch { txn, .. }, .. } => Some(txn.ts),
            ClientOutput::Send { .. }
            | ClientOutput::SendTo { .. }
            | ClientOutput::Done(_)
            | ClientOutput::Resolved(_) => None,
        })
        .expect("a dispatch")
}

/// A fast-eligible answer resting on position `index` of term 4.
fn fast_answer(id: TxnId, ts: Timestamp, index: u64, order: u64) -> ServerMsg {
    let ServerMsg::Reply(mut r) = speculative(id, 0, ts, 4, index, 7) else { unreachable!("a reply") };
    r.order = Some(order);
    ServerMsg::Reply(r)
}

fn accept(id: TxnId, replica: u32, ts: Timestamp, order: u64) -> ServerMsg {
    ServerMsg::FastAccept { shard: 0, replica, term: 4, id, ts, order }
}

#[test]
fn a_fast_answer_completes_once_every_follower_accepted_it_at_the_stamped_timestamp_and_order() {
    let mut c = Coordinator::new(CoordinatorConfig { group_sizes: vec![3], ..quiet(1) });
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    let ts = stamped(&out);
    out.clear();
    c.on_message(10, fast_answer(id, ts, 20, 5), &mut out);
    c.on_message(11, accept(id, 1, ts, 5), &mut out);
    assert!(out.is_empty(), "one follower of two: {out:?}");
    c.on_message(12, accept(id, 2, ts, 5), &mut out);
    let [ClientOutput::Done(done)] = out.as_slice() else { panic!("expected completion, got {out:?}") };
    assert!(matches!(&done.outcome, TxnOutcome::Ordered { ts: t, .. } if *t == ts));
    assert_eq!(c.stats().fast, 1);

    // A follower that saw another order before it: no fast commit; the proof completes it.
    let id = c.submit(20, "p", vec![], vec![piece(0)], &mut out).unwrap();
    let ts = stamped(&out);
    out.clear();
    c.on_message(30, fast_answer(id, ts, 20, 5), &mut out);
    c.on_message(31, accept(id, 1, ts, 5), &mut out);
    c.on_message(32, accept(id, 2, ts, 6), &mut out);
    c.on_message(33, accept(id, 2, ts, 5), &mut out);
    assert!(out.is_empty(), "a replica's first accept stands: {out:?}");
    c.on_message(34, progress(0, 1, 4, 20, false), &mut out);
    assert!(matches!(out.as_slice(), [ClientOutput::Done(_)]), "{out:?}");
    assert_eq!(c.stats().fast, 1, "not a fast commit");

    // Accepts at another timestamp than the stamped one count for nothing.
    let id = c.submit(40, "p", vec![], vec![piece(0)], &mut out).unwrap();
    let ts = stamped(&out);
    out.clear();
    c.on_message(50, fast_answer(id, ts, 40, 0), &mut out);
    c.on_message(51, accept(id, 1, ts + 1, 0), &mut out);
    c.on_message(52, accept(id, 2, ts + 1, 0), &mut out);
    assert!(out.is_empty(), "{out:?}");
    c.check_invariants().unwrap();
}

fn asks_fast(out: &[ClientOutput]) -> bool {
    out.iter()
        .find_map(|o| match o {
            ClientOutput::Send { msg: ClientMsg::Dispatch { fast, .. }, .. } => Some(*fast),
            ClientOutput::Send { .. }
            | ClientOutput::SendTo { .. }
            | ClientOutput::Done(_)
            | ClientOutput::Resolved(_) => None,
        })
        .expect("a dispatch")
}

#[test]
fn rule_20_an_adaptive_coordinator_samples_once_few_fanned_out_transactions_commit_fast_and_returns() {
    let config = CoordinatorConfig { group_sizes: vec![3], fan_out: fast::FanOut::Adaptive, ..quiet(1) };
    let mut c = Coordinator::new(config);
    let mut out = Vec::new();
    // Completes a transaction: fast when it asked and both followers accept (a leader marks
    // only the answers of those that asked), otherwise on its proof.
    let run = |c: &mut Coordinator, fast: bool, out: &mut Vec<ClientOutput>| {
        out.clear();
        let now = c.stats().submitted * 100;
        let id = c.submit(now, "p", vec![], vec![piece(0)], out).unwrap();
        let (ts, asked) = (stamped(out), asks_fast(out));
        out.clear();
        c.on_message(now + 10, fast_answer(id, ts, id.seq, 5), out);
        if fast && asked {
            c.on_message(now + 11, accept(id, 1, ts, 5), out);
            c.on_message(now + 12, accept(id, 2, ts, 5), out);
        } else {
            c.on_message(now + 11, progress(0, 1, 4, id.seq, false), out);
        }
        let [ClientOutput::Done(done)] = out.as_slice() else { panic!("expected completion, got {out:?}") };
        assert_eq!((done.fast, done.asked_fast), (fast && asked, asked));
        asked
    };
    for _ in 0..fast::FAN_OUT_WINDOW {
        assert!(run(&mut c, false, &mut out), "every transaction asks at first");
    }
    assert!(c.fan_out().sampling(), "none of a window committed fast");
    let asked = (0..fast::FAN_OUT_SAMPLE_EVERY * 2).filter(|_| run(&mut c, true, &mut out)).count();
    assert_eq!(asked, 2, "one in FAN_OUT_SAMPLE_EVERY asks");
    // Samples that all commit fast bring the fan out of everything back: 30 more make the
    // window of FAN_OUT_SAMPLES.
    let mut more = 0;
    while c.fan_out().sampling() {
        more += u64::from(run(&mut c, true, &mut out));
    }
    assert_eq!(more, u64::from(fast::FAN_OUT_SAMPLES) - 2);
    assert!(run(&mut c, true, &mut out));
    assert_eq!(c.stats().fanned_out, u64::from(fast::FAN_OUT_WINDOW + fast::FAN_OUT_SAMPLES) + 1);
    assert_eq!(c.fan_out().switches, 2);
    c.check_invariants().unwrap();
}

/// Shard `shard`'s fast-eligible answer in term 4 at position `index`, `early` (rule 21)
/// with a watermark below `ts`, or regular with it at `ts`.
fn answer_on(id: TxnId, shard: ShardId, ts: Timestamp, index: u64, order: u64, early: bool) -> ServerMsg {
    let ServerMsg::Reply(mut r) = speculative(id, shard, ts, 4, index, shard as u8) else { unreachable!("a reply") };
    (r.order, r.early, r.rounds) = (Some(order), early, 1);
    if early {
        r.watermark = ts - 1;
    }
    ServerMsg::Reply(r)
}

/// Both followers of `shard` accept `id` at `ts` with `order`, in term 4.
fn accepts_on(c: &mut Coordinator, id: TxnId, shard: ShardId, ts: Timestamp, order: u64, out: &mut Vec<ClientOutput>) {
    for replica in 1..3 {
        c.on_message(20, ServerMsg::FastAccept { shard, replica, term: 4, id, ts, order }, out);
    }
}

#[test]
fn rule_21_an_early_answer_counts_only_when_every_participant_commits_fast() {
    let mut out = Vec::new();
    // Every participant's super-quorum: done, on shard 0's early answer and without its
    // watermark (the early answer left with its clock and floor promise past ts).
    let mut c = two_shards_of_three();
    let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out).unwrap();
    let ts = stamped(&out);
    out.clear();
    c.on_message(10, answer_on(id, 0, ts, 20, 5, true), &mut out);
    c.on_message(10, answer_on(id, 1, ts, 30, 7, false), &mut out);
    accepts_on(&mut c, id, 0, ts, 5, &mut out);
    assert!(out.is_empty(), "shard 1's super-quorum is missing: {out:?}");
    accepts_on(&mut c, id, 1, ts, 7, &mut out);
    let fast = done(&out).expect("a fast commit");
    assert!(fast.fast && matches!(&fast.outcome, TxnOutcome::Ordered { ts: t, .. } if *t == ts), "{fast:?}");
    assert_eq!((c.stats().fast, c.stats().early), (1, 1));

    // Shard 1 proven the regular way, not fast: shard 0's early answer does not count, even
    // with its own super-quorum and its position proven. Its regular answer does.
    let run = |mutations: CoordMutations| {
        let mut c = two_shards_of_three();
        c.config.mutations = mutations;
        let mut out = Vec::new();
        let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out).unwrap();
        let ts = stamped(&out);
        out.clear();
        c.on_message(10, answer_on(id, 0, ts, 20, 5, true), &mut out);
        accepts_on(&mut c, id, 0, ts, 5, &mut out);
        c.on_message(10, speculative(id, 1, ts, 4, 30, 1), &mut out);
        for (shard, index) in [(0, 20), (1, 30)] {
            for replica in 1..3 {
                c.on_message(30, progress(shard, replica, 4, index, false), &mut out);
            }
        }
        c.on_message(31, ServerMsg::Watermark { shard: 0, watermark: ts }, &mut out);
        let early_done = done(&out).is_some();
        out.clear();
        c.on_message(40, answer_on(id, 0, ts, 20, 5, false), &mut out);
        (early_done, early_done || done(&out).is_some_and(|d| !d.fast))
    };
    assert_eq!(run(CoordMutations::default()), (false, true));
    let alone = CoordMutations { early_answers_count_alone: true, ..CoordMutations::default() };
    assert_eq!(run(alone), (true, true), "the mutation counts it like a regular answer");
}

#[test]
fn rule_21_an_early_answer_never_replaces_a_regular_one() {
    let mut c = two_shards_of_three();
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out).unwrap();
    let ts = stamped(&out);
    out.clear();
    // Shard 0's regular answer, then a late early one (links reorder); shard 1 slow.
    c.on_message(10, answer_on(id, 0, ts, 20, 5, false), &mut out);
    c.on_message(11, answer_on(id, 0, ts, 20, 5, true), &mut out);
    c.on_message(12, speculative(id, 1, ts, 4, 30, 1), &mut out);
    for (shard, index) in [(0, 20), (1, 30)] {
        for replica in 1..3 {
            c.on_message(30, progress(shard, replica, 4, index, false), &mut out);
        }
    }
    let regular = done(&out).expect("the regular answers, proven");
    assert!(!regular.fast);
    assert_eq!(c.stats().early, 0);
}

/// Issue 26: a participant that answers `Expired` no longer knows the transaction: the
/// caller is told the outcome is unknown, and once every participant has answered it is
/// acknowledged (none holds it pending).
#[test]
fn an_expired_answer_makes_the_outcome_unknown_and_is_acknowledged_once_all_answered() {
    let mut c = Coordinator::new(quiet(1));
    let mut out = Vec::new();
    let id = c.submit(0, "p", vec![], vec![piece(0), piece(1)], &mut out).unwrap();
    out.clear();
    let ServerMsg::Reply(mut expired) = reply(id, 0, 0, 0, 0) else { unreachable!() };
    expired.outcome = Err(TxnError::Expired("gone".into()));
    c.on_message(10, ServerMsg::Reply(expired), &mut out);
    let done: Vec<&TxnOutcome> = out
        .iter()
        .filter_map(|o| match o {
            ClientOutput::Done(d) => Some(&d.outcome),
            _ => None,
        })
        .collect();
    assert!(matches!(done.as_slice(), [TxnOutcome::Unknown(why)] if why == "gone"), "{out:?}");
    assert_eq!(c.flights.acked_below(), id.seq, "not acknowledged while shard 1 may hold it");
    c.on_message(20, reply(id, 1, 5, 5, 0), &mut out);
    assert_eq!(c.flights.acked_below(), id.seq + 1);
    c.check_invariants().unwrap();
}
