//! Helpers shared by the two-leader transcript tests (`tests_cross`, `tests_recovery`):
//! client 9's micro transactions over shards 0 and 1, and calls that return what a leader
//! emitted. Generic over the log, so a test can use any `ReplicatedLog`. Each call checks the
//! leader's invariants afterwards.

use std::sync::Arc;

use super::*;
use crate::msg::{PeerBatch, PeerItem};
use luigi_txn::types::{KeySet, ShardPiece};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};

/// Client 9's micro transaction over shards 0 and 1: `ops` are (shard, key, write).
pub(super) fn txn(seq: u64, ts: Timestamp, ops: &[(ShardId, u64, Option<u64>)]) -> Arc<Txn> {
    let mut pieces: Vec<ShardPiece> = Vec::new();
    for shard in [0, 1] {
        let mine: Vec<_> = ops.iter().filter(|o| o.0 == shard).collect();
        if mine.is_empty() {
            continue;
        }
        let reads = mine.iter().filter(|o| o.2.is_none()).map(|o| micro_key(o.1)).collect();
        let writes = mine.iter().filter(|o| o.2.is_some()).map(|o| micro_key(o.1)).collect();
        pieces.push(ShardPiece { shard, keys: KeySet::new(reads, writes) });
    }
    let micro: Vec<MicroOp> = ops.iter().map(|o| MicroOp { key: o.1, write: o.2 }).collect();
    Arc::new(Txn {
        id: TxnId { client: 9, seq },
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(&micro).unwrap(),
        pieces,
        ts,
    })
}

/// Client 9 dispatches `t` at `now`; the leader ticks.
pub(super) fn dispatch<L: ReplicatedLog<LogRecord>>(
    l: &mut LeaderWithLog<L>,
    now: TimeUs,
    t: &Arc<Txn>,
) -> Vec<LeaderOutput> {
    let mut out = Vec::new();
    l.on_client(now, 9, ClientMsg::Dispatch { txn: t.clone(), sent_us: now, acked_below: 1, fast: true }, &mut out);
    l.tick(now, &mut out);
    l.check_invariants().unwrap();
    out
}

pub(super) fn tick<L: ReplicatedLog<LogRecord>>(l: &mut LeaderWithLog<L>, now: TimeUs) -> Vec<LeaderOutput> {
    let mut out = Vec::new();
    l.tick(now, &mut out);
    l.check_invariants().unwrap();
    out
}

/// Hands the leader `batches` from a peer, then ticks it.
pub(super) fn deliver<L: ReplicatedLog<LogRecord>>(
    l: &mut LeaderWithLog<L>,
    now: TimeUs,
    batches: Vec<PeerBatch>,
) -> Vec<LeaderOutput> {
    let mut out = Vec::new();
    for b in batches {
        l.on_peer(now, b, &mut out);
    }
    l.tick(now, &mut out);
    l.check_invariants().unwrap();
    out
}

/// The peer batches in `out` addressed to `shard`.
pub(super) fn to_peer(out: &[LeaderOutput], shard: ShardId) -> Vec<PeerBatch> {
    out.iter()
        .filter_map(|o| match o {
            LeaderOutput::ToPeer { shard: s, batch } | LeaderOutput::ToPeerDurably { shard: s, batch, .. }
                if *s == shard =>
            {
                Some(batch.clone())
            }
            LeaderOutput::ToPeer { .. }
            | LeaderOutput::ToPeerDurably { .. }
            | LeaderOutput::ToClient { .. }
            | LeaderOutput::ToClients { .. }
            | LeaderOutput::ToAllClients { .. }
            | LeaderOutput::ToClientDurably { .. }
            | LeaderOutput::Executed { .. } => None,
        })
        .collect()
}

pub(super) fn items(batches: &[PeerBatch]) -> Vec<PeerItem> {
    batches.iter().flat_map(|b| b.items.clone()).collect()
}

pub(super) fn id(seq: u64) -> TxnId {
    TxnId { client: 9, seq }
}
