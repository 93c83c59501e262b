//! Property tests of the shard leader against arbitrary client input (what any client
//! connection may send after its hello): no panic, a malformed or refused transaction
//! changes nothing, the leader's invariants hold after every step, and the shard still
//! commits afterwards.
//! `PROPTEST_CASES=n` runs more cases (default 256).

use std::sync::Arc;

use luigi_proto::leader::{LeaderConfig, LeaderOutput, ShardLeader};
use luigi_proto::log::LocalLog;
use luigi_proto::msg::{ClientMsg, ServerMsg};
use luigi_proto::procedure::Registry;
use luigi_proto::procedures::{micro_key, Micro, MicroOp};
use luigi_proto::types::{KeySet, ShardPiece, Txn, TxnId};
use luigi_store::Store;
use proptest::prelude::*;

fn arb_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (0u64..8).prop_map(micro_key),
        proptest::collection::vec(any::<u8>(), 0..12),
        Just(vec![0u8; 5000]), // over the key size limit
    ]
}

/// Key sets as they may arrive: unsorted, duplicated, overlapping, empty.
fn arb_keys() -> impl Strategy<Value = KeySet> {
    (proptest::collection::vec(arb_key(), 0..4), proptest::collection::vec(arb_key(), 0..4))
        .prop_map(|(reads, writes)| KeySet { reads, writes })
}

/// Timestamps and times over the whole `u64` range, and around `now` (where a correct
/// client's land, and where the clock horizon of rule 22 cuts).
fn arb_time(now: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (0u64..10_000_000).prop_map(move |d| now.saturating_add(d)),
        (0u64..10_000_000).prop_map(move |d| now.saturating_sub(d)),
        Just(u64::MAX),
        Just(0),
    ]
}

fn arb_txn(client: u64, now: u64) -> impl Strategy<Value = Txn> {
    let procedure = prop_oneof![Just(Micro::NAME.to_string()), Just("no.such".to_string()), "[a-z.]{0,200}"];
    let ops = proptest::collection::vec((0u64..8, proptest::option::of(any::<u64>())), 0..4).prop_map(|ops| {
        let ops: Vec<MicroOp> = ops.into_iter().map(|(key, write)| MicroOp { key, write }).collect();
        postcard::to_stdvec(&ops).unwrap()
    });
    let args = prop_oneof![ops, proptest::collection::vec(any::<u8>(), 0..64)];
    let pieces = proptest::collection::vec((0u32..4, arb_keys()), 0..4)
        .prop_map(|p| p.into_iter().map(|(shard, keys)| ShardPiece { shard, keys }).collect());
    (1u64..50, procedure, args, pieces, arb_time(now)).prop_map(move |(seq, procedure, args, pieces, ts)| Txn {
        id: TxnId { client, seq },
        procedure,
        args,
        pieces,
        ts,
    })
}

fn arb_client_msg(client: u64, now: u64) -> impl Strategy<Value = ClientMsg> {
    prop_oneof![
        (arb_txn(client, now), arb_time(now), 0u64..60).prop_map(|(txn, sent_us, acked_below)| {
            ClientMsg::Dispatch { txn: Arc::new(txn), sent_us, acked_below, fast: true }
        }),
        arb_time(now).prop_map(|sent_us| ClientMsg::Ping { sent_us }),
        Just(ClientMsg::Hello { client, proof: None, protocol: luigi_proto::types::Protocol::Luigi }),
        Just(ClientMsg::Status),
    ]
}

fn leader(shards: u32) -> ShardLeader<LocalLog> {
    ShardLeader::new(LeaderConfig::new(0, shards), LocalLog::default(), Store::new(), Registry::with_builtins())
}

/// A valid single-shard write of key 99 at `ts`, dispatched by client 1.
fn probe(seq: u64, ts: u64) -> ClientMsg {
    let ops = vec![MicroOp { key: 99, write: Some(seq) }];
    let txn = Txn {
        id: TxnId { client: 1, seq },
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(&ops).unwrap(),
        pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(vec![], vec![micro_key(99)]) }],
        ts,
    };
    ClientMsg::Dispatch { txn: Arc::new(txn), sent_us: ts, acked_below: seq, fast: true }
}

fn committed(out: &[LeaderOutput], seq: u64) -> bool {
    out.iter().any(|o| {
        matches!(o, LeaderOutput::ToClient { msg: ServerMsg::Reply(r), .. } if r.id == TxnId { client: 1, seq } && r.outcome.is_ok())
    })
}

proptest! {
    /// Any sequence of client messages to a shard of a 1-shard cluster: no panic, nothing
    /// pending that could hold the watermark for good, and a valid transaction afterwards
    /// commits.
    #[test]
    fn arbitrary_client_messages_never_wedge_a_shard(
        (start, msgs) in (0u64..u64::MAX / 2)
            .prop_flat_map(|start| (Just(start), proptest::collection::vec(arb_client_msg(7, start), 1..24)))
    ) {
        let mut l = leader(1);
        let mut out = Vec::new();
        let mut now = start;
        for m in msgs {
            now += 100;
            l.on_client(now, 7, m, &mut out);
            prop_assert_eq!(l.check_invariants(), Ok(()));
            l.tick(now, &mut out);
            prop_assert_eq!(l.check_invariants(), Ok(()));
        }
        // Whatever was admitted is single-shard (anything else is malformed here), lies
        // within the clock horizon (rule 22), and runs.
        now += LeaderConfig::new(0, 1).max_ahead_us + 1_000_000;
        l.tick(now, &mut out);
        prop_assert_eq!(l.pending_len(), 0);
        out.clear();
        l.on_client(now, 1, probe(1, now + 10), &mut out);
        l.tick(now + 1_000, &mut out);
        prop_assert!(committed(&out, 1), "the shard stopped committing");
    }

    /// On a 2-shard cluster (cross-shard transactions wait for a peer that never answers
    /// here): still no panic, and malformed transactions are never admitted.
    #[test]
    fn malformed_transactions_are_never_admitted(txns in proptest::collection::vec(arb_txn(7, 1_000), 1..16)) {
        let mut l = leader(2);
        let mut out = Vec::new();
        for (i, t) in txns.into_iter().enumerate() {
            let malformed = t.check_shape(2).is_err() || t.piece(0).is_none() || t.procedure != Micro::NAME;
            let before = l.stats().admitted;
            l.on_client(1_000 + i as u64, 7, ClientMsg::Dispatch { txn: Arc::new(t), sent_us: 0, acked_below: 0, fast: true }, &mut out);
            prop_assert_eq!(l.check_invariants(), Ok(()));
            if malformed {
                prop_assert_eq!(l.stats().admitted, before);
            }
        }
    }
}
