//! Transcript tests of cross-shard agreement: two leaders wired by hand, every peer batch
//! carried explicitly, so each test controls the interleaving.

use luigi_store::Store;

use super::tests::{executed, replies};
use super::tests_common::{deliver, dispatch, id, items, tick, to_peer, txn};
use super::*;
use crate::log::LocalLog;
use crate::msg::{PeerBatch, PeerItem};
use luigi_txn::msg::TxnError;
use luigi_workloads::procedures::MicroOutput;

type Leader = LeaderWithLog<LocalLog>;

fn leader(shard: ShardId, mutations: Mutations) -> Leader {
    let mut config = LeaderConfig::new(shard, 8);
    config.mutations = mutations;
    LeaderWithLog::new(config, LocalLog::default(), Store::new(), luigi_workloads::procedures::builtins())
}

#[test]
fn equal_proposals_decide_in_one_round_and_answer_at_the_common_timestamp() {
    let (mut a, mut b) = (leader(0, Mutations::default()), leader(1, Mutations::default()));
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let out_a = dispatch(&mut a, 100, &t);
    let out_b = dispatch(&mut b, 100, &t);
    assert_eq!(items(&to_peer(&out_a, 1)), vec![PeerItem::Propose { id: id(1), ts: 1_000, at: None, fast: false }]);
    assert_eq!(items(&to_peer(&out_b, 0)), vec![PeerItem::Propose { id: id(1), ts: 1_000, at: None, fast: false }]);
    deliver(&mut a, 200, to_peer(&out_b, 0));
    deliver(&mut b, 200, to_peer(&out_a, 1));
    assert!(replies(&tick(&mut a, 999)).is_empty(), "held until its timestamp");
    let (ra, rb) = (replies(&tick(&mut a, 1_000)), replies(&tick(&mut b, 1_000)));
    assert_eq!((ra[0].ts, rb[0].ts, ra[0].rounds, rb[0].rounds), (1_000, 1_000, 1, 1));
    assert_eq!((a.stats().cross_decided, a.stats().cross_differed), (1, 0));
}

#[test]
fn a_transaction_pending_agreement_is_not_released_without_every_proposal() {
    let mut a = leader(0, Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    dispatch(&mut a, 100, &t);
    assert!(replies(&tick(&mut a, 50_000)).is_empty(), "no proposal from shard 1: never released");
    assert!(a.watermark() < 1_000, "and the watermark stays below it");
}

#[test]
fn a_blocked_cross_shard_transaction_blocks_only_conflicting_ones() {
    let mut a = leader(0, Mutations::default());
    let cross = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let other = txn(2, 1_100, &[(0, 3, Some(7))]); // disjoint key on shard 0
    let behind = txn(3, 1_200, &[(0, 1, None)]); // reads the cross-shard transaction's key
    dispatch(&mut a, 100, &cross);
    dispatch(&mut a, 100, &other);
    dispatch(&mut a, 100, &behind);
    let r = replies(&tick(&mut a, 5_000));
    assert_eq!(a.stats().executed, 1, "the disjoint transaction executed; the conflicting one waits");
    // Rule 7: the disjoint one is answered at once, though the pending transaction below it
    // holds the watermark; the client is told where admission closed instead.
    assert!(a.watermark() < 1_000, "the pending transaction holds the watermark");
    assert_eq!(r.iter().map(|r| r.id).collect::<Vec<_>>(), vec![id(2)]);
    assert_eq!(r[0].watermark, 4_999, "admission closed just below the clock");
    // Nothing is admitted at or below what the client was told, however it was stamped.
    dispatch(&mut a, 5_000, &txn(4, 1_050, &[(0, 9, Some(1))]));
    let r = replies(&tick(&mut a, 6_000));
    assert_eq!(r.iter().map(|r| (r.id, r.ts > 4_999)).collect::<Vec<_>>(), vec![(id(4), true)]);
}

/// The rule behind "timestamp inversion": when proposals differ, a participant may release
/// the transaction only after every participant has durably adopted the final timestamp.
/// Shard 0 proposes 1000, shard 1 proposes 1500 (its clock is late). Shard 0 learns both and
/// knows the final timestamp 1500; shard 1 has not yet heard shard 0's proposal and still
/// holds only its own. Shard 0 must not release before shard 1's `Confirm`.
#[test]
fn differing_proposals_release_only_after_every_confirm() {
    let (mut a, mut b) = (leader(0, Mutations::default()), leader(1, Mutations::default()));
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let out_a = dispatch(&mut a, 100, &t);
    let out_b = dispatch(&mut b, 1_500, &t); // late at shard 1: proposal moves to its clock
    assert_eq!(items(&to_peer(&out_b, 0)), vec![PeerItem::Propose { id: id(1), ts: 1_500, at: None, fast: false }]);
    // Shard 0 learns 1500 > 1000: logs DECIDE and confirms, but must wait for shard 1.
    let out = deliver(&mut a, 1_600, to_peer(&out_b, 0));
    assert_eq!(items(&to_peer(&out, 1)), vec![PeerItem::Confirm { id: id(1), ts: 1_500 }]);
    let confirm_a = to_peer(&out, 1);
    assert!(replies(&tick(&mut a, 10_000)).is_empty(), "released before shard 1 confirmed");
    assert_eq!(a.stats().executed, 0);
    // Shard 1 gets shard 0's proposal, logs DECIDE, confirms; then gets shard 0's confirm.
    let out = deliver(&mut b, 1_700, to_peer(&out_a, 1));
    let confirm_b = to_peer(&out, 0);
    assert_eq!(items(&confirm_b), vec![PeerItem::Confirm { id: id(1), ts: 1_500 }]);
    let (out_b, out_a) = (deliver(&mut b, 1_800, confirm_a), deliver(&mut a, 1_800, confirm_b));
    let (ra, rb) = (replies(&out_a), replies(&out_b));
    assert_eq!((ra[0].ts, rb[0].ts), (1_500, 1_500));
    assert_eq!(executed(&out_a), vec![(0, id(1), 1_500)], "each participant reports its own piece");
    assert_eq!(executed(&out_b), vec![(1, id(1), 1_500)]);
    assert_eq!((ra[0].rounds, rb[0].rounds), (2, 2));
    assert_eq!(a.stats().cross_differed, 1);
}

#[test]
fn with_the_second_round_skipped_a_shard_releases_before_the_other_adopted_the_timestamp() {
    let skip = Mutations { skip_second_round: true, ..Mutations::default() };
    let mut a = leader(0, skip);
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    dispatch(&mut a, 100, &t);
    let late_b = PeerBatch {
        from: 1,
        watermark: 0,
        items: vec![PeerItem::Propose { id: id(1), ts: 1_500, at: None, fast: false }],
    };
    deliver(&mut a, 1_600, vec![late_b]);
    tick(&mut a, 10_000);
    assert_eq!(a.stats().executed, 1, "the mutation releases on the first round");
}

/// After agreement raised a transaction from 1000 to 1500 on shard 0, a transaction stamped
/// 1200 on the same key is ordered before it: it reads the value from before the agreed one.
#[test]
fn agreement_moves_the_transaction_and_smaller_conflicting_ones_go_first() {
    let mut a = leader(0, Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    dispatch(&mut a, 100, &t);
    let reader = txn(2, 1_200, &[(0, 1, None)]);
    dispatch(&mut a, 150, &reader);
    let b_prop = PeerBatch {
        from: 1,
        watermark: 0,
        items: vec![PeerItem::Propose { id: id(1), ts: 1_500, at: None, fast: false }],
    };
    let b_conf = PeerBatch { from: 1, watermark: 0, items: vec![PeerItem::Confirm { id: id(1), ts: 1_500 }] };
    deliver(&mut a, 200, vec![b_prop]);
    let r = replies(&tick(&mut a, 1_300));
    assert_eq!(r.len(), 1, "the reader at 1200 no longer waits for the transaction moved to 1500");
    let out: MicroOutput = postcard::from_bytes(r[0].outcome.as_ref().unwrap()).unwrap();
    assert_eq!(out, vec![(1, None)], "it ran before the agreed write");
    let r = replies(&deliver(&mut a, 1_600, vec![b_conf]));
    assert_eq!((r[0].id, r[0].ts), (id(1), 1_500));
}

#[test]
fn a_refusal_aborts_the_transaction_on_the_other_participants() {
    let mut a = leader(0, Mutations::default());
    let mut cfg = LeaderConfig::new(1, 8);
    cfg.max_pending = 0; // shard 1 refuses everything
    let mut b = LeaderWithLog::new(cfg, LocalLog::default(), Store::new(), luigi_workloads::procedures::builtins());
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    dispatch(&mut a, 100, &t);
    let out_b = dispatch(&mut b, 100, &t);
    assert!(matches!(&replies(&out_b)[0].outcome, Err(TxnError::Rejected(_))));
    assert!(matches!(items(&to_peer(&out_b, 0)).as_slice(), [PeerItem::Refuse { .. }]));
    let r = replies(&deliver(&mut a, 200, to_peer(&out_b, 0)));
    assert!(matches!(&r[0].outcome, Err(TxnError::Rejected(why)) if why.contains("pending")));
    assert_eq!((a.stats().aborted, a.stats().executed, a.pending_len()), (1, 0, 0));
    assert!(a.store().is_empty(), "an aborted transaction leaves no trace");
    // A late retry of the aborted transaction gets the same refusal, not an admission.
    let again = replies(&dispatch(&mut a, 300, &t));
    assert!(matches!(&again[0].outcome, Err(TxnError::Rejected(_))));
    assert_eq!(a.pending_len(), 0);
}

#[test]
fn agreement_messages_that_arrive_before_the_dispatch_are_kept() {
    let (mut a, mut b) = (leader(0, Mutations::default()), leader(1, Mutations::default()));
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let out_b = dispatch(&mut b, 100, &t);
    deliver(&mut a, 150, to_peer(&out_b, 0)); // shard 1's proposal before the dispatch
    let out_a = dispatch(&mut a, 200, &t);
    deliver(&mut b, 250, to_peer(&out_a, 1));
    let (ra, rb) = (replies(&tick(&mut a, 1_000)), replies(&tick(&mut b, 1_000)));
    assert_eq!((ra.len(), rb.len()), (1, 1));
}
