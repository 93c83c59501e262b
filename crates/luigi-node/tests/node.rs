//! Each input of a [`ReplicaNode`] and the exact effects it answers with: the first election,
//! the persistence contract (promises leave only after `persisted`), promotion and the
//! leader announcement, routing of agreement batches by `LeaderIs`, snapshot offers, the fast
//! path's follower. (The client's routing rules are tested with `ClientRoutes`, in
//! `luigi-txn/tests/client_routes.rs`.)
//!
//! Size: over 600 lines: one short test per input of the node, sharing the group helpers at
//! the top.

use luigi_node::{Effect, NodeConfig, ReplicaNode, ShardRoutes, Tuning};
use luigi_protocol::msg::{PeerBatch, PeerItem, ReplicationMsg};
use luigi_raft::{decode_message, HardState, RecoveredState};
use luigi_replica::Transition;
use luigi_txn::msg::{ClientMsg, ServerMsg, TxnError, TxnReply};
use luigi_txn::peer::{PeerBody, PeerMsg, PeerVocabulary};
use luigi_txn::types::NodeId;
use luigi_txn::types::{Txn, TxnId};

const TICK_US: u64 = 10_000;

fn config(node: NodeId, replicas: Vec<u32>) -> NodeConfig {
    let mut tuning = Tuning::for_delay(1_000, 100);
    tuning.raft_tick_us = TICK_US;
    NodeConfig::new(node, replicas, 42, tuning, luigi_workloads::procedures::builtins())
}

fn node(shard: u32, replica: u32, replicas: Vec<u32>) -> ReplicaNode {
    ReplicaNode::new(config(NodeId { shard, replica }, replicas), RecoveredState::default()).unwrap()
}

/// A transaction of `client` numbered `seq` (its contents matter to no test here).
fn kv_txn(client: u64, seq: u64) -> std::sync::Arc<Txn> {
    let id = TxnId { client, seq };
    std::sync::Arc::new(Txn { id, procedure: "kv".into(), args: Vec::new(), pieces: Vec::new(), ts: 5 })
}

/// The Raft message types of `fx`'s replication effects, by destination.
fn raft_types(fx: &[Effect]) -> Vec<(NodeId, String)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Replicate { to, msg: ReplicationMsg::Raft { bytes, .. } } => {
                Some((*to, format!("{:?}", decode_message(bytes).unwrap().msg_type)))
            }
            _ => None,
        })
        .collect()
}

fn persists(fx: &[Effect]) -> Vec<(u64, bool)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Persist(p) => Some((p.number, p.sync)),
            _ => None,
        })
        .collect()
}

/// Runs a group of one until it serves; returns its effects.
fn serve_alone(n: &mut ReplicaNode, mut now: u64) -> (Vec<Effect>, u64) {
    let mut all = Vec::new();
    for _ in 0..20 {
        let mut fx = Vec::new();
        n.turn(now, &mut fx).unwrap();
        let synced: Vec<u64> = persists(&fx).into_iter().filter(|(_, s)| *s).map(|(n, _)| n).collect();
        all.extend(fx);
        if let Some(last) = synced.last() {
            let mut fx = Vec::new();
            n.persisted(*last, &mut fx);
            all.extend(fx);
        }
        if n.replica().is_serving() {
            return (all, now);
        }
        now += 1_000;
    }
    panic!("a group of one did not elect itself");
}

#[test]
fn a_group_of_one_elects_itself_in_its_first_turns_and_waits_for_its_disk() {
    let mut n = node(0, 0, vec![1]);
    let mut fx = Vec::new();
    n.turn(0, &mut fx).unwrap();
    // It campaigned at once (no election timeout): its vote for itself must be written and
    // synced before it counts, so the first effect is a synced write of the hard state.
    let p = persists(&fx);
    assert!(!p.is_empty() && p[0].1, "a synced write first: {p:?}");
    assert!(!n.replica().is_serving(), "nothing is durable yet");
    n.persisted(p.iter().filter(|(_, s)| *s).map(|(n, _)| *n).max().unwrap(), &mut fx);
    let (all, _) = serve_alone(&mut n, 1_000);
    assert!(all.iter().any(|e| matches!(e, Effect::Transition(Transition::Promoted))));
    assert!(n.log().is_leader());
}

#[test]
fn a_restarted_member_of_a_group_never_starts_an_election_itself() {
    let recovered = RecoveredState { hard_state: HardState { term: 3, vote: 2, commit: 0 }, ..Default::default() };
    let mut n = ReplicaNode::new(config(NodeId { shard: 0, replica: 0 }, vec![3]), recovered).unwrap();
    n.replica_link(1, true);
    n.replica_link(2, true);
    let mut fx = Vec::new();
    n.turn(0, &mut fx).unwrap();
    assert!(raft_types(&fx).is_empty(), "no campaign at restart: {:?}", raft_types(&fx));
}

#[test]
fn replica_zero_of_a_fresh_group_campaigns_once_it_reaches_everyone() {
    let mut n = node(0, 0, vec![3]);
    n.replica_link(1, true);
    let mut fx = Vec::new();
    n.turn(0, &mut fx).unwrap();
    assert!(raft_types(&fx).is_empty(), "one replica still unreachable: no campaign");
    n.replica_link(2, true);
    n.turn(1, &mut fx).unwrap();
    // Pre-vote requests go out before anything is written (they promise nothing).
    let types = raft_types(&fx);
    assert_eq!(types.len(), 2, "{types:?}");
    assert!(types.iter().all(|(_, t)| t == "MsgRequestPreVote"), "{types:?}");
    let to: Vec<u32> = types.iter().map(|(to, _)| to.replica).collect();
    assert_eq!(to, vec![1, 2]);
    // Replica 1 never starts the first election.
    let mut other = node(0, 1, vec![3]);
    other.replica_link(0, true);
    other.replica_link(2, true);
    let mut fx = Vec::new();
    other.turn(0, &mut fx).unwrap();
    assert!(raft_types(&fx).is_empty());
}

#[test]
fn promises_leave_only_after_the_write_is_durable() {
    // Replica 1 of a fresh group answers replica 0's pre-vote and vote; the vote is a promise
    // about its hard state, so it leaves only after `persisted`.
    let mut a = node(0, 0, vec![3]);
    let mut b = node(0, 1, vec![3]);
    for r in [1, 2] {
        a.replica_link(r, true);
    }
    let a_id = NodeId { shard: 0, replica: 0 };
    let mut now = 0;
    let mut to_b = Vec::new();
    let mut fx = Vec::new();
    a.turn(now, &mut fx).unwrap();
    to_b.extend(fx.drain(..).filter(|e| matches!(e, Effect::Replicate { to, .. } if to.replica == 1)));
    // Deliver a's messages to b until b must vote.
    for _ in 0..4 {
        let mut b_fx = Vec::new();
        for e in to_b.drain(..) {
            if let Effect::Replicate { msg, .. } = e {
                b.on_replication(a_id, msg, &mut b_fx).unwrap();
            }
        }
        b.turn(now, &mut b_fx).unwrap();
        let waits: Vec<u64> = persists(&b_fx).into_iter().filter(|(_, s)| *s).map(|(n, _)| n).collect();
        let types = raft_types(&b_fx);
        if let Some(number) = waits.last() {
            assert!(!types.iter().any(|(_, t)| t == "MsgRequestVoteResponse"), "vote before its write: {types:?}");
            let mut after = Vec::new();
            b.persisted(*number, &mut after);
            let types = raft_types(&after);
            assert!(types.iter().any(|(_, t)| t == "MsgRequestVoteResponse"), "vote after the write: {types:?}");
            return;
        }
        // b answered the pre-vote (no write needed); a counts it and campaigns for real.
        let mut a_fx = Vec::new();
        for e in b_fx {
            if let Effect::Replicate { msg, .. } = e {
                a.on_replication(NodeId { shard: 0, replica: 1 }, msg, &mut a_fx).unwrap();
            }
        }
        now += 1;
        a.turn(now, &mut a_fx).unwrap();
        let synced: Vec<u64> = persists(&a_fx).into_iter().filter(|(_, s)| *s).map(|(n, _)| n).collect();
        to_b.extend(a_fx.into_iter().filter(|e| matches!(e, Effect::Replicate { to, .. } if to.replica == 1)));
        if let Some(n) = synced.last() {
            let mut more = Vec::new();
            a.persisted(*n, &mut more);
            to_b.extend(more.into_iter().filter(|e| matches!(e, Effect::Replicate { to, .. } if to.replica == 1)));
        }
    }
    panic!("replica 1 was never asked for its vote");
}

#[test]
fn a_new_leader_announces_itself_on_every_link_and_on_links_that_come_up_later() {
    let mut n = node(0, 0, vec![1, 1, 1]);
    let mut fx = Vec::new();
    n.shard_link(NodeId { shard: 1, replica: 0 }, true, &mut fx);
    assert!(fx.is_empty(), "not serving: nothing to announce");
    let (all, now) = serve_alone(&mut n, 0);
    let announced: Vec<NodeId> = all
        .iter()
        .filter_map(|e| match e {
            Effect::Replicate { to, msg: ReplicationMsg::LeaderIs { shard: 0, replica: 0, term } } if *term > 0 => {
                Some(*to)
            }
            _ => None,
        })
        .collect();
    assert_eq!(announced, vec![NodeId { shard: 1, replica: 0 }]);
    let mut fx = Vec::new();
    n.shard_link(NodeId { shard: 2, replica: 0 }, true, &mut fx);
    assert!(matches!(
        fx.as_slice(),
        [Effect::Replicate { to: NodeId { shard: 2, replica: 0 }, msg: ReplicationMsg::LeaderIs { .. } }]
    ));
    let _ = now;
}

#[test]
fn a_follower_holds_a_dispatch_until_it_hears_of_a_leader_then_names_it() {
    let mut n = node(0, 1, vec![3]);
    let txn = kv_txn(7, 1);
    let mut fx = Vec::new();
    n.on_client(100, 7, ClientMsg::Dispatch { txn: txn.clone(), sent_us: 90, acked_below: 0, fast: true }, &mut fx);
    n.turn(200, &mut fx).unwrap();
    assert!(!fx.iter().any(|e| matches!(e, Effect::ToClient { .. })), "no leader known yet: held");
    // Replica 0 (Raft id 1) leads term 1: its heartbeat names it.
    let mut hb = luigi_raft::eraftpb::Message::default();
    hb.set_msg_type(luigi_raft::eraftpb::MessageType::MsgHeartbeat);
    (hb.from, hb.to, hb.term) = (1, 2, 1);
    let bytes = luigi_raft::encode_message(&hb);
    n.on_replication(NodeId { shard: 0, replica: 0 }, ReplicationMsg::Raft { shard: 0, from: 1, bytes }, &mut fx)
        .unwrap();
    fx.clear();
    n.turn(5_000, &mut fx).unwrap();
    let replies: Vec<&TxnReply> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::ToClient { client: 7, msg: ServerMsg::Reply(r) } => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(replies.len(), 1, "{} effects", fx.len());
    assert_eq!(replies[0].outcome, Err(TxnError::NotLeader { hint: Some(0) }));
    assert_eq!(replies[0].arrival_delta_us, 10, "the wait is not counted as delay");
    // Now that it knows the leader, it answers at once.
    fx.clear();
    n.on_client(6_000, 7, ClientMsg::Dispatch { txn, sent_us: 5_990, acked_below: 0, fast: true }, &mut fx);
    assert!(
        matches!(fx.as_slice(), [Effect::ToClient { client: 7, msg: ServerMsg::Reply(r) }]
            if r.outcome == Err(TxnError::NotLeader { hint: Some(0) })),
        "{} effects",
        fx.len()
    );
}

#[test]
fn leader_announcements_from_older_terms_and_wrong_senders_change_nothing() {
    let mut n = node(0, 0, vec![3, 3]);
    let mut fx = Vec::new();
    let s1r2 = NodeId { shard: 1, replica: 2 };
    n.on_replication(s1r2, ReplicationMsg::LeaderIs { shard: 1, replica: 2, term: 5 }, &mut fx).unwrap();
    assert_eq!(n.routes().leader_of(1), 2);
    let s1r1 = NodeId { shard: 1, replica: 1 };
    n.on_replication(s1r1, ReplicationMsg::LeaderIs { shard: 1, replica: 1, term: 4 }, &mut fx).unwrap();
    assert_eq!(n.routes().leader_of(1), 2, "a stale term");
    let err = n.on_replication(s1r1, ReplicationMsg::LeaderIs { shard: 1, replica: 0, term: 9 }, &mut fx);
    assert!(err.is_err(), "announcing another replica");
    assert_eq!(n.routes().leader_of(1), 2);
    // Raft traffic of another shard is refused.
    let err = n.on_replication(s1r1, ReplicationMsg::Raft { shard: 1, from: 2, bytes: vec![] }, &mut fx);
    assert!(err.is_err());
    assert!(fx.is_empty());
}

#[test]
fn batches_wait_for_a_reachable_leader_and_go_out_in_order() {
    let mut routes = ShardRoutes::new(2);
    // The routes never read a message: its bytes number it here.
    let batch = |w: u64| PeerMsg { from: 0, body: PeerBody::Protocol(w.to_le_bytes().to_vec()) };
    let number = |m: &PeerMsg| match &m.body {
        PeerBody::Protocol(b) => u64::from_le_bytes(b.as_slice().try_into().expect("eight bytes")),
        PeerBody::Progress(_) => unreachable!("{m:?}"),
    };
    routes.push(1, batch(1));
    routes.push(1, batch(2));
    let mut out = Vec::new();
    routes.drain(&mut out);
    assert!(out.is_empty(), "replica 0 of shard 1 is not reachable");
    assert!(routes.leader_is(1, 2, 3));
    routes.set_reachable(NodeId { shard: 1, replica: 2 }, true);
    routes.drain(&mut out);
    let sent: Vec<(u32, u64)> = out.iter().map(|(to, b)| (to.replica, number(b))).collect();
    assert_eq!(sent, vec![(2, 1), (2, 2)]);
    // A refused batch goes back first.
    routes.refused(1, batch(2));
    routes.push(1, batch(3));
    out.clear();
    routes.drain(&mut out);
    assert_eq!(out.iter().map(|(_, b)| number(b)).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(routes.queued(), 0);
}

/// A leader that starts serving in a new term is a new leadership, also when it is the replica
/// already believed to lead (its peers send it their agreement items again).
#[test]
fn a_new_serving_term_of_the_believed_leader_is_a_new_leadership() {
    let mut routes = ShardRoutes::new(2);
    assert_eq!(routes.leader_of(1), 0, "replica 0 is believed to lead at first");
    assert!(routes.leader_is(1, 0, 1), "replica 0 serving in term 1: a new leadership");
    assert!(!routes.leader_is(1, 0, 1), "the same announcement again");
    assert!(routes.leader_is(1, 0, 4), "replica 0 serving again in a later term");
    assert!(!routes.leader_is(1, 2, 3), "an older term's announcement");
    assert_eq!(routes.leader_of(1), 0);
    assert!(routes.leader_is(1, 2, 5), "another replica in a later term");
    assert_eq!(routes.leader_of(1), 2);
}

/// A follower of a 3-replica shard running the fast path, told by a heartbeat that replica 0
/// leads term 1.
fn fast_follower() -> ReplicaNode {
    fast_follower_rewriting_every(4_096)
}

/// As [`fast_follower`], rewriting its live accepts every `records` records.
fn fast_follower_rewriting_every(records: u64) -> ReplicaNode {
    let mut config = config(NodeId { shard: 0, replica: 1 }, vec![3]);
    config.tuning.accepts_rewrite_records = records;
    config.leader.fast_path = true;
    let mut n = ReplicaNode::new(config, RecoveredState::default()).unwrap();
    heartbeat(&mut n, 0, 1, 1_000);
    n
}

/// A heartbeat of term `term` from `leader` (replica index) to replica 1 of shard 0.
fn heartbeat(n: &mut ReplicaNode, leader: u32, term: u64, now: u64) {
    let mut hb = luigi_raft::eraftpb::Message::default();
    hb.set_msg_type(luigi_raft::eraftpb::MessageType::MsgHeartbeat);
    (hb.from, hb.to, hb.term) = (u64::from(leader) + 1, 2, term);
    let bytes = luigi_raft::encode_message(&hb);
    let mut fx = Vec::new();
    let from = NodeId { shard: 0, replica: leader };
    n.on_replication(from, ReplicationMsg::Raft { shard: 0, from: from.raft_id(), bytes }, &mut fx).unwrap();
    n.turn(now, &mut fx).unwrap();
}

#[test]
fn a_fast_path_follower_answers_an_early_dispatch_with_an_accept_once_its_record_is_durable() {
    let mut n = fast_follower();
    let txn = std::sync::Arc::new(Txn {
        id: TxnId { client: 7, seq: 1 },
        procedure: "kv".into(),
        args: Vec::new(),
        pieces: vec![luigi_txn::types::ShardPiece {
            shard: 0,
            keys: luigi_txn::types::KeySet::new(vec![], vec![b"k".to_vec()]),
        }],
        ts: 50_000,
    });
    let mut fx = Vec::new();
    n.on_client(
        2_000,
        7,
        ClientMsg::Dispatch { txn: txn.clone(), sent_us: 1_900, acked_below: 0, fast: true },
        &mut fx,
    );
    let writes: Vec<(u64, usize)> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Persist(p) if !p.accepts.is_empty() => Some((p.number, p.accepts.len())),
            _ => None,
        })
        .collect();
    let [(number, 1)] = writes.as_slice() else { panic!("one accept record to write, got {writes:?}") };
    assert!(!fx.iter().any(|e| matches!(e, Effect::ToClient { .. })), "nothing leaves before the record is durable");
    fx.clear();
    n.persisted(*number, &mut fx);
    let accepts: Vec<&ServerMsg> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::ToClient { client: 7, msg } => Some(msg),
            _ => None,
        })
        .collect();
    assert!(
        matches!(accepts.as_slice(), [ServerMsg::FastAccept { shard: 0, replica: 1, ts: 50_000, order: 0, .. }]),
        "{accepts:?}"
    );
    // Late (after its timestamp on this clock): no accept, and no NotLeader either.
    let late = std::sync::Arc::new(Txn { id: TxnId { client: 7, seq: 2 }, ts: 2_500, ..(*txn).clone() });
    fx.clear();
    n.on_client(3_000, 7, ClientMsg::Dispatch { txn: late, sent_us: 2_900, acked_below: 0, fast: true }, &mut fx);
    assert!(!fx.iter().any(|e| matches!(e, Effect::ToClient { .. } | Effect::Persist(_))), "nothing to say");
    // Rule 20: one that did not ask for the fast path is any dispatch: the leader is named.
    let quiet = std::sync::Arc::new(Txn { id: TxnId { client: 7, seq: 3 }, ..(*txn).clone() });
    fx.clear();
    n.on_client(3_000, 7, ClientMsg::Dispatch { txn: quiet, sent_us: 2_900, acked_below: 0, fast: false }, &mut fx);
    assert!(!fx.iter().any(|e| matches!(e, Effect::Persist(_))), "no accept");
    let named = fx.iter().any(|e| {
        matches!(e, Effect::ToClient { client: 7, msg: ServerMsg::Reply(r) }
            if r.outcome == Err(luigi_txn::msg::TxnError::NotLeader { hint: Some(0) }))
    });
    assert!(named, "NotLeader naming replica 0");
    // What `luigi_fast_accepts_total` reports: one accepted, one late; the quiet one was
    // never offered to the accept rule.
    let counts = n.replica().fast_path().expect("a fast path").accept_counts();
    assert_eq!(counts, luigi_replica::FastAcceptCounts { accepted: 1, late: 1, ..Default::default() });
}

/// Rule 22 (issue 26): a follower checks a fast-path dispatch exactly as its leader does. A
/// malformed one (a shard the cluster lacks, a piece twice, unsorted or overlapping keys, an
/// unknown procedure) or one stamped past the clock horizon is not accepted, so no new
/// leader can recover from the followers' accepts what the leader refused.
#[test]
fn a_fast_path_follower_accepts_nothing_its_leader_would_refuse() {
    let mut n = fast_follower();
    let piece = |shard, reads: &[&[u8]], writes: &[&[u8]]| luigi_txn::types::ShardPiece {
        shard,
        keys: luigi_txn::types::KeySet {
            reads: reads.iter().map(|k| k.to_vec()).collect(),
            writes: writes.iter().map(|k| k.to_vec()).collect(),
        },
    };
    let good = Txn { pieces: vec![piece(0, &[], &[b"k"])], ts: 50_000, ..(*kv_txn(7, 1)).clone() };
    let horizon = n.config().leader.max_ahead_us;
    let refused = [
        Txn { pieces: vec![piece(0, &[], &[b"k"]), piece(5, &[], &[b"k"])], ..good.clone() },
        Txn { pieces: vec![piece(0, &[], &[b"k"]), piece(0, &[], &[b"j"])], ..good.clone() },
        Txn { pieces: vec![piece(0, &[], &[b"k", b"a"])], ..good.clone() },
        Txn { pieces: vec![piece(0, &[b"k"], &[b"k"])], ..good.clone() },
        Txn { procedure: "no.such".into(), ..good.clone() },
        Txn { ts: 2_000 + horizon + 1, ..good.clone() },
        Txn { ts: u64::MAX, ..good.clone() },
    ];
    for (seq, txn) in refused.into_iter().enumerate() {
        let txn = std::sync::Arc::new(Txn { id: TxnId { client: 7, seq: seq as u64 + 1 }, ..txn });
        let mut fx = Vec::new();
        n.on_client(
            2_000,
            7,
            ClientMsg::Dispatch { txn: txn.clone(), sent_us: 1_900, acked_below: 0, fast: true },
            &mut fx,
        );
        assert!(!fx.iter().any(|e| matches!(e, Effect::Persist(p) if !p.accepts.is_empty())), "accepted {txn:?}");
    }
    let mut fx = Vec::new();
    let txn = std::sync::Arc::new(Txn { id: TxnId { client: 7, seq: 99 }, ts: 2_000 + horizon, ..good });
    n.on_client(2_000, 7, ClientMsg::Dispatch { txn, sent_us: 1_900, acked_below: 0, fast: true }, &mut fx);
    assert!(fx.iter().any(|e| matches!(e, Effect::Persist(p) if !p.accepts.is_empty())), "at the horizon: accepted");
}

#[test]
fn a_fast_path_followers_accept_of_a_cross_shard_transaction_goes_to_the_other_leader_once_durable() {
    // DESIGN.md rule 17: the other participant's leader may use a marked proposal on it.
    let mut config = config(NodeId { shard: 0, replica: 1 }, vec![3, 3]);
    config.leader.fast_path = true;
    let mut n = ReplicaNode::new(config, RecoveredState::default()).unwrap();
    heartbeat(&mut n, 0, 1, 1_000);
    let mut fx = Vec::new();
    n.shard_link(NodeId { shard: 1, replica: 0 }, true, &mut fx);
    let piece = |shard, key: &[u8]| luigi_txn::types::ShardPiece {
        shard,
        keys: luigi_txn::types::KeySet::new(vec![], vec![key.to_vec()]),
    };
    let id = TxnId { client: 7, seq: 1 };
    let txn = std::sync::Arc::new(Txn {
        id,
        pieces: vec![piece(0, b"k"), piece(1, b"j")],
        ts: 50_000,
        ..(*kv_txn(7, 1)).clone()
    });
    fx.clear();
    n.on_client(2_000, 7, ClientMsg::Dispatch { txn, sent_us: 1_900, acked_below: 0, fast: true }, &mut fx);
    let accepts_to_peers = |fx: &[Effect]| -> Vec<(NodeId, PeerItem)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::ToPeer { to, batch } => {
                    let batch = PeerBatch::decode(batch.clone()).expect("Luigi's batch");
                    Some(batch.items.into_iter().map(|i| (*to, i)).collect::<Vec<_>>())
                }
                _ => None,
            })
            .flatten()
            .filter(|(_, item)| matches!(item, PeerItem::FastAccept { .. }))
            .collect()
    };
    assert!(accepts_to_peers(&fx).is_empty(), "nothing leaves before the record is durable");
    let number = fx
        .iter()
        .find_map(|e| match e {
            Effect::Persist(p) if !p.accepts.is_empty() => Some(p.number),
            _ => None,
        })
        .expect("the accept record is written");
    fx.clear();
    n.persisted(number, &mut fx);
    assert_eq!(
        accepts_to_peers(&fx),
        vec![(NodeId { shard: 1, replica: 0 }, PeerItem::FastAccept { replica: 1, term: 1, id, ts: 50_000 })]
    );
    assert!(fx.iter().any(|e| matches!(e, Effect::ToClient { client: 7, msg: ServerMsg::FastAccept { .. } })));
}

#[test]
fn accepts_found_at_restart_are_undecided_again_and_a_damaged_one_is_refused_by_name() {
    let mut config = config(NodeId { shard: 0, replica: 1 }, vec![3]);
    config.leader.fast_path = true;
    let mut n = ReplicaNode::new(config, RecoveredState::default()).unwrap();
    let keys = luigi_txn::types::KeySet::new(vec![], vec![b"k".to_vec()]);
    let txn = std::sync::Arc::new(Txn {
        pieces: vec![luigi_txn::types::ShardPiece { shard: 0, keys }],
        ..(*kv_txn(7, 1)).clone()
    });
    let record = luigi_protocol::fast::AcceptRecord { txn, ts: 90_000 }.encode();
    n.restore_accepts(&[(4, record)]).unwrap();
    // A follower's live accepts are its undecided ones.
    let undecided = |n: &ReplicaNode| {
        let live = n.replica().fast_path().expect("Luigi's fast path").accepts_live();
        let records = live.iter().map(|r| luigi_protocol::fast::AcceptRecord::decode(r).expect("decodes"));
        records.map(|r| (r.ts, r.txn.id)).collect::<Vec<_>>()
    };
    assert_eq!(undecided(&n), vec![(90_000, TxnId { client: 7, seq: 1 })]);
    let err = n.restore_accepts(&[(5, b"garbage".to_vec())]).unwrap_err().to_string();
    assert!(err.contains("accept log is damaged") && err.contains("accept record 5"), "{err}");
}

#[test]
fn a_question_for_accepts_is_answered_only_once_the_replicas_term_has_reached_it() {
    let mut n = fast_follower();
    let keys = luigi_txn::types::KeySet::new(vec![], vec![b"k".to_vec()]);
    let txn = std::sync::Arc::new(Txn {
        pieces: vec![luigi_txn::types::ShardPiece { shard: 0, keys }],
        ts: 50_000,
        ..(*kv_txn(7, 1)).clone()
    });
    let mut fx = Vec::new();
    n.on_client(
        2_000,
        7,
        ClientMsg::Dispatch { txn: txn.clone(), sent_us: 1_900, acked_below: 0, fast: true },
        &mut fx,
    );
    // Replica 2, elected in term 2, asks; this replica has not heard of term 2 yet. Had it
    // answered, it could still accept in term 1 and count towards a fast commit the answer
    // did not show (DESIGN.md, the fast path: "the leader's vote").
    let asker = NodeId { shard: 0, replica: 2 };
    let question = ReplicationMsg::AcceptsQuery { shard: 0, from: asker.raft_id(), term: 2 };
    let answers = |fx: &[Effect]| -> Vec<(u64, usize)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Replicate { to, msg: ReplicationMsg::Accepts { term, records, .. } } if *to == asker => {
                    Some((*term, records.len()))
                }
                _ => None,
            })
            .collect()
    };
    fx.clear();
    n.on_replication(asker, question.clone(), &mut fx).unwrap();
    assert_eq!(answers(&fx), vec![], "term 1 < 2: no answer yet");
    n.turn(2_500, &mut fx).unwrap();
    assert_eq!(answers(&fx), vec![], "still in term 1");
    // The question waits for term 2 (found measuring failover under geo: a candidate's
    // question often overtook its vote request, and waited 200 ms to be asked again).
    let mut hb = luigi_raft::eraftpb::Message::default();
    hb.set_msg_type(luigi_raft::eraftpb::MessageType::MsgHeartbeat);
    (hb.from, hb.to, hb.term) = (asker.raft_id(), 2, 2);
    let bytes = luigi_raft::encode_message(&hb);
    fx.clear();
    n.on_replication(asker, ReplicationMsg::Raft { shard: 0, from: asker.raft_id(), bytes }, &mut fx).unwrap();
    n.turn(3_000, &mut fx).unwrap();
    assert_eq!(answers(&fx), vec![(2, 1)], "in term 2: the accept of term 1 in the answer, unasked again");
    fx.clear();
    n.turn(3_100, &mut fx).unwrap();
    assert_eq!(answers(&fx), vec![], "answered once");
    n.on_replication(asker, question, &mut fx).unwrap();
    assert_eq!(answers(&fx), vec![(2, 1)], "asked again: answered at once");
}

#[test]
fn every_few_accepts_the_live_ones_are_written_again_so_the_accept_log_can_drop_the_rest() {
    let mut n = fast_follower_rewriting_every(3);
    let txn = |seq: u64| {
        let keys = luigi_txn::types::KeySet::new(vec![], vec![format!("k{seq}").into_bytes()]);
        std::sync::Arc::new(Txn {
            pieces: vec![luigi_txn::types::ShardPiece { shard: 0, keys }],
            ts: 50_000 + seq,
            ..(*kv_txn(7, seq)).clone()
        })
    };
    let mut writes = Vec::new();
    for seq in 1..=4 {
        let mut fx = Vec::new();
        n.on_client(
            2_000,
            7,
            ClientMsg::Dispatch { txn: txn(seq), sent_us: 1_900, acked_below: 0, fast: true },
            &mut fx,
        );
        writes.extend(fx.into_iter().filter_map(|e| match e {
            Effect::Persist(p) if !p.accepts.is_empty() || p.accepts_rewrite => {
                Some((p.accepts.len(), p.accepts_rewrite))
            }
            _ => None,
        }));
    }
    // Accepts 1 and 2 go as they are; the third write is a rewrite of the three undecided
    // ones (the log has decided none); the fourth counts from there.
    assert_eq!(writes, vec![(1, false), (1, false), (3, true), (1, false)]);
}

#[test]
fn a_follower_that_lost_its_leaders_link_tells_the_rest_of_its_group_and_refuses_strangers_reports() {
    // Replica 1 of shard 0 follows replica 0 in term 1.
    let mut n = config(NodeId { shard: 0, replica: 1 }, vec![3]);
    n.leader.fast_path = false;
    let mut n = ReplicaNode::new(n, RecoveredState::default()).unwrap();
    heartbeat(&mut n, 0, 1, 1_000);
    let told = |fx: &[Effect]| -> Vec<(NodeId, u64)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Replicate { to, msg: ReplicationMsg::LeaderLost { shard: 0, from: 2, term, .. } } => {
                    Some((*to, *term))
                }
                _ => None,
            })
            .collect()
    };
    // Another replica's link going down says nothing.
    n.replica_link(2, false);
    let mut fx = Vec::new();
    n.turn(1_100, &mut fx).unwrap();
    assert!(told(&fx).is_empty());
    // The leader's: replica 2 is told (not the lost leader), once.
    n.replica_link(0, false);
    let mut fx = Vec::new();
    n.turn(1_200, &mut fx).unwrap();
    assert_eq!(told(&fx), vec![(NodeId { shard: 0, replica: 2 }, 1)]);
    let mut fx = Vec::new();
    n.turn(1_300, &mut fx).unwrap();
    assert!(told(&fx).is_empty());
    // A report naming another sender than its link, or from another shard, is refused.
    let forged = ReplicationMsg::LeaderLost { shard: 0, from: 1, term: 1, last: (1, 1) };
    assert!(n.on_replication(NodeId { shard: 0, replica: 2 }, forged, &mut Vec::new()).is_err());
    let foreign = ReplicationMsg::LeaderLost { shard: 1, from: 3, term: 1, last: (1, 1) };
    assert!(n.on_replication(NodeId { shard: 1, replica: 2 }, foreign, &mut Vec::new()).is_err());
}

#[test]
fn a_serving_leader_shows_its_figures_and_stalled_transactions_as_plain_data_and_a_follower_none() {
    let mut n = node(0, 0, vec![1, 1]);
    assert_eq!(n.replica().leader_figures(), None, "a follower has no leader figures");
    assert!(n.replica().stalled(0).is_empty());
    let (_, mut now) = serve_alone(&mut n, 0);
    let figures = n.replica().leader_figures().expect("serving");
    assert_eq!((figures.pending, figures.agreement.is_some(), figures.watermark.is_some()), (0, true, true));
    // A transaction of shards 0 and 1: shard 1's leader never answers, so it stays pending
    // here and, once older than the recovery delay, stalled.
    let keys = || luigi_txn::types::KeySet::new(vec![], vec![b"k".to_vec()]);
    let pieces = (0..2).map(|shard| luigi_txn::types::ShardPiece { shard, keys: keys() }).collect();
    let txn = std::sync::Arc::new(Txn { pieces, ts: now + 1_000, ..(*kv_txn(7, 1)).clone() });
    let mut fx = Vec::new();
    n.on_client(now, 7, ClientMsg::Dispatch { txn, sent_us: now, acked_below: 0, fast: false }, &mut fx);
    for _ in 0..5 {
        now += 1_000;
        let mut fx = Vec::new();
        n.turn(now, &mut fx).unwrap();
        if let Some(last) = persists(&fx).into_iter().filter(|(_, s)| *s).map(|(n, _)| n).next_back() {
            n.persisted(last, &mut fx);
        }
    }
    assert_eq!(n.replica().leader_figures().expect("serving").pending, 1);
    assert!(n.replica().stalled(now).is_empty(), "not stalled yet");
    let later = now + 10_000_000;
    let stalled = n.replica().stalled(later);
    assert_eq!(
        stalled.iter().map(|t| (t.id, t.shards.clone())).collect::<Vec<_>>(),
        vec![(TxnId { client: 7, seq: 1 }, vec![0, 1])]
    );
    assert!(stalled[0].age_us >= 10_000_000);
}
