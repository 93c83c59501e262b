//! Property test of a fast-path follower against arbitrary client dispatches (issue 26):
//! transactions of any shape, timestamps and send times over the whole `u64` range, at any
//! time of its clock. It never panics, and whatever it accepts (writes to its accept log) is
//! what its leader would admit: well-formed, a participant, a known procedure, within the
//! clock horizon (DESIGN.md rule 22). `PROPTEST_CASES=n` runs more cases (default 256).

use std::sync::Arc;

use luigi_node::{Effect, NodeConfig, NodeId, ReplicaNode, Tuning};
use luigi_protocol::leader::admissible::Admission;
use luigi_protocol::msg::ReplicationMsg;
use luigi_raft::RecoveredState;
use luigi_txn::msg::ClientMsg;
use luigi_txn::types::{KeySet, ShardPiece, Txn, TxnId};
use proptest::prelude::*;

/// Replica 1 of shard 0 (of 2 shards of 3 replicas) that heard replica 0 lead term 1.
fn follower() -> ReplicaNode {
    let mut tuning = Tuning::for_delay(1_000, 100);
    tuning.raft_tick_us = 10_000;
    let mut config = NodeConfig::new(
        NodeId { shard: 0, replica: 1 },
        vec![3, 3],
        42,
        tuning,
        luigi_workloads::procedures::builtins(),
    );
    config.leader.fast_path = true;
    let mut n = ReplicaNode::new(config, RecoveredState::default()).unwrap();
    let mut hb = luigi_raft::eraftpb::Message::default();
    hb.set_msg_type(luigi_raft::eraftpb::MessageType::MsgHeartbeat);
    (hb.from, hb.to, hb.term) = (1, 2, 1);
    let bytes = luigi_raft::encode_message(&hb);
    let from = NodeId { shard: 0, replica: 0 };
    let mut fx = Vec::new();
    n.on_replication(from, ReplicationMsg::Raft { shard: 0, from: from.raft_id(), bytes }, &mut fx).unwrap();
    n.turn(1_000, &mut fx).unwrap();
    n
}

fn arb_keys() -> impl Strategy<Value = KeySet> {
    let key = prop_oneof![Just(b"k".to_vec()), Just(b"j".to_vec()), proptest::collection::vec(any::<u8>(), 0..6)];
    (proptest::collection::vec(key.clone(), 0..3), proptest::collection::vec(key, 0..3))
        .prop_map(|(reads, writes)| KeySet { reads, writes })
}

fn arb_time() -> impl Strategy<Value = u64> {
    prop_oneof![any::<u64>(), 0u64..10_000_000, Just(u64::MAX)]
}

fn arb_txn() -> impl Strategy<Value = Txn> {
    let procedure = prop_oneof![Just("kv".to_string()), Just("micro".to_string()), "[a-z]{0,8}"];
    let pieces = proptest::collection::vec((0u32..3, arb_keys()), 0..3)
        .prop_map(|p| p.into_iter().map(|(shard, keys)| ShardPiece { shard, keys }).collect());
    (1u64..20, procedure, pieces, arb_time()).prop_map(|(seq, procedure, pieces, ts)| Txn {
        id: TxnId { client: 7, seq },
        procedure,
        args: Vec::new(),
        pieces,
        ts,
    })
}

proptest! {
    #[test]
    fn a_follower_accepts_only_what_its_leader_would_admit(
        dispatches in proptest::collection::vec((arb_txn(), arb_time(), arb_time()), 1..16)
    ) {
        let mut n = follower();
        let registry = luigi_workloads::procedures::builtins();
        for (txn, now, sent_us) in dispatches {
            let txn = Arc::new(txn);
            let mut fx = Vec::new();
            n.on_client(now, 7, ClientMsg::Dispatch { txn: txn.clone(), sent_us, acked_below: 0, fast: true }, &mut fx);
            let accepted = fx.iter().any(|e| matches!(e, Effect::Persist(p) if !p.accepts.is_empty()));
            if accepted {
                let admission = Admission::new(&n.config().leader, &registry);
                prop_assert_eq!(admission.check(&txn, now), Ok(()), "accepted {:?} at {}", txn, now);
            }
            let _ = n.turn(now, &mut fx);
        }
    }
}
