//! Regressions for protocol bugs found by the simulator in cross-shard agreement, now fixed:
//! each test failed before its fix. (Single-shard regressions are in `regressions.rs`.)

mod common;

use std::sync::Arc;

use luigi_protocol::leader::{LeaderConfig, LeaderOutput, LeaderWithLog};
use luigi_protocol::log::LocalLog;
use luigi_protocol::msg::{PeerBatch, PeerItem};
use luigi_sim::{procedure, run};
use luigi_store::Store;
use luigi_txn::msg::{ClientMsg, ServerMsg, TxnError};
use luigi_txn::types::{KeySet, ShardPiece, Txn, TxnId};
use luigi_workloads::procedures::{micro_key, MicroOp};

fn leader(shard: u32, max_pending: usize) -> LeaderWithLog<LocalLog> {
    // The early buffer shares the bound, so one early item fills it.
    let config = LeaderConfig { max_pending, max_early: max_pending, ..LeaderConfig::new(shard, 8) };
    LeaderWithLog::new(config, LocalLog::default(), Store::new(), procedure::registry())
}

/// A cross-shard transaction over shards 0 and 1 writing key 0 on shard 0 and key 1 on 1.
fn cross_txn(seq: u64, ts: u64) -> Arc<Txn> {
    let id = TxnId { client: 1, seq };
    let ops = [MicroOp { key: 0, write: Some(1) }, MicroOp { key: 1, write: Some(2) }];
    let piece = |shard: u32, key: u64| ShardPiece { shard, keys: KeySet::new(vec![], vec![micro_key(key)]) };
    Arc::new(Txn {
        id,
        procedure: procedure::NAME.into(),
        args: procedure::encode_args(id, &ops),
        pieces: vec![piece(0, 0), piece(1, 1)],
        ts,
    })
}

/// Fixed bug (a dropped item now dooms its transaction, refused when the dispatch arrives):
/// agreement items that arrive before the transaction's own dispatch are dropped when
/// the leader's early buffer holds `max_pending` entries (`ShardLeader::early_entry`, counted
/// in `LeaderStats::early_overflow`), and leaders never resend them. A dropped `Refuse` lets
/// the dispatch be admitted afterwards: the transaction waits forever for proposals that the
/// refusing shard will never send (the others have aborted it), its proposal pins the shard's
/// watermark, and with `CommitRule::AllShards` every client of the cluster stops getting
/// answers. A dropped `Propose` or `Confirm` does the same to a transaction the others did
/// prepare. Issue 4's recovery (a stalled leader asks the other participants) would unstick
/// it; until then, a full buffer should rather refuse the transaction when its dispatch
/// arrives (or the buffer should not be bounded by the pending limit).
///
/// Transcript: shard 1 with `max_pending = 1` holds one early proposal (for a transaction
/// whose dispatch never comes); shard 0 refuses T and tells shard 1, whose full buffer drops
/// the `Refuse`; T's dispatch then reaches shard 1 and is admitted; it never leaves.
#[test]
fn an_early_refusal_is_not_lost_when_the_early_buffer_is_full() {
    let mut b = leader(1, 1);
    let mut out = Vec::new();
    let other = TxnId { client: 9, seq: 1 };
    let t = cross_txn(1, 1_000);
    let from_a = |items| PeerBatch { from: 0, watermark: 0, items };
    b.on_peer(10, from_a(vec![PeerItem::Propose { id: other, ts: 500, at: None, fast: false }]), &mut out);
    b.on_peer(20, from_a(vec![PeerItem::Refuse { id: t.id, reason: "shard 0 is full".into() }]), &mut out);
    assert_eq!(b.stats().early_overflow, 1, "the refusal was dropped");
    let dispatch = ClientMsg::Dispatch { txn: t.clone(), sent_us: 25, acked_below: 1, fast: true };
    b.on_client(30, 1, dispatch, &mut out);
    for now in (1_000..200_000).step_by(1_000) {
        b.tick(now, &mut out);
    }
    let rejected = out.iter().any(|o| {
        matches!(o, LeaderOutput::ToClient { msg: ServerMsg::Reply(r), .. }
            if r.id == t.id && matches!(r.outcome, Err(TxnError::Rejected(_))))
    });
    assert!(
        b.pending_len() == 0 && rejected,
        "T is still pending on shard 1 ({} pending, watermark {} stuck below T's proposal) \
         although shard 0 refused it",
        b.pending_len(),
        b.watermark()
    );
}

/// The same bug found by a seeded run: seed 30 of the cross-shard configuration
/// (`common::cross`: 4 shards, 5 clients, every transaction cross-shard, clocks ±2 ms,
/// per-link delays 0.2-3 ms, leader links reordering) with `max_pending = 1` and a 300 ms
/// retry timeout. c1#5 (shards 1, 2, 3) is refused by shards 1 and 3; their `Refuse` items
/// reach shard 2 at 8.57 and 9.24 ms, before c1#5's dispatch (10.31 ms), and are dropped by
/// shard 2's full early buffer (`early_overflow` 75 by the end). The client is answered
/// `Rejected` at 9.95 ms, but shard 2 then admits c1#5 (PREPARE at 11486), announces its
/// proposal to shards 1 and 3, which ignore it (already answered), and keeps it pending
/// forever: shard 2's watermark stays at 11485 while the others' follow their clocks, and
/// the run fails its drain (shard 2 still busy 10 s after the last answer). With a workload
/// that commits anything, every client then stops being answered (`CommitRule::AllShards`).
#[test]
fn seed_30_with_one_pending_transaction_per_leader_finishes() {
    let mut config = common::cross(30);
    config.leader.max_pending = 1;
    config.leader.max_early = 1;
    config.coordinator.retry_timeout_us = 300_000;
    config.coordinator.max_attempts = 1_000;
    config.max_events = 1_000_000;
    if let Err(v) = run(common::traced(config)) {
        panic!("{v}");
    }
}

/// Fixed bug (the broadcast deadline now exists only when the watermark can move by then):
/// `ShardLeader::next_deadline` included `broadcast_at + watermark_broadcast_us` even
/// when `tick` will not broadcast (it only does when the watermark moved). While the
/// watermark is stalled (a transaction waiting for agreement, for its `PREPARE` to commit, or
/// for a conflicting one), the deadline stays in the past after every tick. The runtime's
/// server loop (`timer.set(leader.next_deadline())` after each tick) then fires its timer at
/// once, again and again: a busy loop on a full core for as long as the stall lasts. The
/// simulator backs such wake-ups off and counts them (`RunReport::busy_wakes`: e.g. 778k over
/// the 160 runs of `many_seeds_cross_shard`).
#[test]
fn a_leader_does_not_ask_to_be_woken_in_the_past_right_after_a_tick() {
    let mut l = leader(0, 16);
    let mut out = Vec::new();
    let t = cross_txn(1, 1_000);
    l.on_client(100, 1, ClientMsg::Dispatch { txn: t, sent_us: 90, acked_below: 1, fast: true }, &mut out);
    l.tick(5_000, &mut out); // publishes watermark 999: T (1000) waits for shard 1's proposal
    assert_eq!(l.watermark(), 999);
    l.tick(7_000, &mut out); // nothing to do: the watermark is stalled at 999
    let deadline = l.next_deadline();
    assert!(
        deadline.is_none_or(|d| d > 7_000),
        "right after tick(7000) with nothing to do, next_deadline() is {deadline:?}: a shell that \
         honours it wakes the leader again at once, forever"
    );
}
