//! Transcript tests of the adaptive headroom (DESIGN.md rule 1): late answers raise the next
//! stamps, on-time ones lower them slowly, and single-shard transactions without the fast
//! path are stamped not to be held.

use super::tests::{piece, quiet, reply, stamped};
use super::*;
use luigi_txn::msg::ServerMsg;

/// Rule 1's adaptive headroom: a burst of answers that reached the leader after their
/// timestamps raises the next stamps over that shard (by what they needed, once, not once
/// per answer), and on-time answers bring it back down only slowly, to the floor.
#[test]
fn a_burst_of_late_answers_raises_the_next_stamps_and_on_time_ones_lower_them_slowly() {
    let cfg =
        CoordinatorConfig { headroom_us: 1_000, adaptive_headroom: true, retry_timeout_us: 2_000_000, ..quiet(1) };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    c.on_message(0, ServerMsg::Pong { shard: 0, arrival_delta_us: 10_000, sent_us: 0, watermark: 0 }, &mut out);
    c.on_message(0, ServerMsg::Pong { shard: 1, arrival_delta_us: 10_000, sent_us: 0, watermark: 0 }, &mut out);
    let cross = vec![piece(0), piece(1)];
    out.clear();
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(c.submit(100, "p", vec![], cross.clone(), &mut out).unwrap());
    }
    assert_eq!(stamped(&out), 100 + 10_000 + 1_000, "the floor at first");
    assert_eq!(c.stats().headroom_us_sum, 20 * 1_000);
    // Every one reaches shard 1 20 ms late (the delta counts from the send at 100): each
    // needed 21 ms of headroom; shard 0 had them early.
    for (i, id) in ids.iter().enumerate() {
        c.on_message(30_000 + i as u64, reply(*id, 0, 11_100, 11_100, 9_000), &mut out);
        c.on_message(30_000 + i as u64, reply(*id, 1, 31_100, 31_100, 31_000), &mut out);
    }
    assert_eq!(c.stats().late_arrivals, 20);
    let raised = 21_000 + 21_000 / 4 + headroom::RAISE_MARGIN_US;
    assert_eq!(c.headroom_us([1].into_iter()), raised, "raised once, not compounded per answer");
    assert_eq!(c.headroom_us([0].into_iter()), 1_000, "shard 0's answers were early");
    out.clear();
    let later = c.submit(40_000, "p", vec![], cross.clone(), &mut out).unwrap();
    let owd = c.owd_estimate_us(40_000, 1) as u64;
    assert_eq!(stamped(&out), 40_000 + owd + raised, "the largest participant's headroom");
    // On-time answers for a while: nothing within the quiet spell, then slow steps down.
    c.on_message(900_000, reply(later, 1, 0, 0, 0), &mut out);
    assert_eq!(c.headroom_us([1].into_iter()), raised);
    let mut now = 1_100_000;
    for _ in 0..3 {
        out.clear();
        let id = c.submit(now, "p", vec![], cross.clone(), &mut out).unwrap();
        let ts = stamped(&out);
        c.on_message(now + 5_000, reply(id, 0, ts, ts, 0), &mut out);
        c.on_message(now + 5_000, reply(id, 1, ts, ts, 0), &mut out);
        now += headroom::DECAY_STEP_US;
    }
    let after = c.headroom_us([1].into_iter());
    assert!(after < raised && after > raised - 3 * raised.div_ceil(headroom::DECAY_DIV) - 3, "{after} of {raised}");
    c.check_invariants().unwrap();
}

/// Item 3 of issue 30: a single-shard transaction that cannot commit on the fast path gains
/// nothing from arriving before its timestamp (rule 4 has nothing to agree on), so it is
/// stamped at the smallest recent delay, without headroom, and its answers do not move the
/// adaptive headroom; one that asks for the fast path on a group of 3 keeps the headroom
/// (its followers accept only what arrives before its timestamp).
#[test]
fn single_shard_transactions_without_a_fast_path_are_stamped_not_to_be_held() {
    let cfg = CoordinatorConfig {
        headroom_us: 5_000,
        adaptive_headroom: true,
        group_sizes: vec![1, 3],
        fan_out: fast::FanOut::Always,
        ..quiet(1)
    };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    for delta in [4_000, 9_000, 6_000, 7_000] {
        c.on_message(0, ServerMsg::Pong { shard: 0, arrival_delta_us: delta, sent_us: 0, watermark: 0 }, &mut out);
        c.on_message(0, ServerMsg::Pong { shard: 1, arrival_delta_us: delta, sent_us: 0, watermark: 0 }, &mut out);
    }
    out.clear();
    let lone = c.submit(100, "p", vec![], vec![piece(0)], &mut out).unwrap();
    assert_eq!(stamped(&out), 100 + 4_000, "the smallest sample, no headroom: shard 0 has no followers");
    out.clear();
    c.submit(100, "p", vec![], vec![piece(1)], &mut out).unwrap();
    assert_eq!(stamped(&out), 100 + 7_000 + 5_000, "the fast path on 3 replicas: the 90th percentile and headroom");
    // Arriving late is what it was stamped for: no late arrival, no raise.
    c.on_message(20_000, reply(lone, 0, 19_000, 19_000, 18_000), &mut out);
    assert_eq!((c.stats().late_arrivals, c.headroom_us([0].into_iter())), (0, 5_000));
    // Not asking for the fast path on 3 replicas: held for nothing either.
    let mut never = Coordinator::new(CoordinatorConfig { fan_out: fast::FanOut::Never, ..c.config.clone() });
    never.on_message(0, ServerMsg::Pong { shard: 1, arrival_delta_us: 3_000, sent_us: 0, watermark: 0 }, &mut out);
    out.clear();
    never.submit(100, "p", vec![], vec![piece(1)], &mut out).unwrap();
    assert_eq!(stamped(&out), 100 + 3_000);
    // Off: the configured headroom on everything (the behaviour before).
    let mut off = Coordinator::new(CoordinatorConfig { adaptive_headroom: false, ..c.config.clone() });
    off.on_message(0, ServerMsg::Pong { shard: 0, arrival_delta_us: 3_000, sent_us: 0, watermark: 0 }, &mut out);
    out.clear();
    off.submit(100, "p", vec![], vec![piece(0)], &mut out).unwrap();
    assert_eq!(stamped(&out), 100 + 3_000 + 5_000);
}
