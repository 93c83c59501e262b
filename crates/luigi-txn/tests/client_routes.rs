//! The client's routing rules ([`ClientRoutes`]): where a dispatch goes (the guessed leader,
//! every replica while unsure, every replica for a fast-path dispatch), how hints and
//! watermarks move the guess, and which link changes make the shell resend.

use std::sync::Arc;

use luigi_txn::client_core::ClientRoutes;
use luigi_txn::msg::{ClientMsg, ServerMsg, TxnError, TxnReply};
use luigi_txn::types::{NodeId, Protocol, Txn, TxnId};

/// A transaction of `client` numbered `seq` (its contents matter to no test here).
fn kv_txn(client: u64, seq: u64) -> Arc<Txn> {
    let id = TxnId { client, seq };
    Arc::new(Txn { id, procedure: "kv".into(), args: Vec::new(), pieces: Vec::new(), ts: 5 })
}

#[test]
fn fanning_out_any_replicas_link_coming_or_going_resends_what_waits_on_its_shard() {
    // Found measuring the fast path: a client whose link to the leader was not up yet (its
    // guess had followed a follower's newer watermark) sent its first dispatch to the
    // followers alone, which accepted it silently, and waited the whole retry timeout (2.2 s
    // under geo). Its shell asks again when a link of the shard comes up or goes down.
    let mut fanning = ClientRoutes::for_protocol(vec![3], Protocol::Luigi).fanning_out();
    fanning.on_server_msg(NodeId { shard: 0, replica: 1 }, &ServerMsg::Watermark { shard: 0, watermark: 10 });
    assert_eq!(fanning.guess(0), 1, "the guess follows the newer watermark, to a follower");
    let dispatch = ClientMsg::Dispatch { txn: kv_txn(1, 1), sent_us: 0, acked_below: 0, fast: true };
    assert_eq!(fanning.route(0, &dispatch, |r| r != 0), vec![1, 2], "the leader's link is not up: missed");
    assert!((0..3).all(|r| fanning.link_change_resends(0, r)));
    // Rule 20: a dispatch that does not ask for the fast path goes to the guess alone.
    let quiet = ClientMsg::Dispatch { txn: kv_txn(1, 2), sent_us: 0, acked_below: 0, fast: false };
    assert_eq!(fanning.route(0, &quiet, |_| true), vec![1]);
    // Not fanning out: only the believed leader's link matters (the others answer NotLeader).
    let single = ClientRoutes::for_protocol(vec![3], Protocol::Luigi);
    assert_eq!((single.link_change_resends(0, 0), single.link_change_resends(0, 1)), (true, false));
}

#[test]
fn clients_follow_hints_newer_watermarks_and_move_on_after_a_resend_without_news_to_every_replica() {
    let mut routes = ClientRoutes::for_protocol(vec![3], Protocol::Luigi);
    let dispatch = ClientMsg::Dispatch { txn: kv_txn(1, 1), sent_us: 0, acked_below: 0, fast: true };
    assert_eq!(routes.route(0, &dispatch, |_| true), vec![0]);
    // Resent with no news: the guessed leader may be cut off; the next is only a guess, so
    // the dispatch goes to every replica, the guess first.
    assert_eq!(routes.route(0, &dispatch, |_| true), vec![1, 2, 0]);
    assert!(routes.is_unsure(0));
    let not_leader = |hint| {
        ServerMsg::Reply(TxnReply {
            id: TxnId { client: 1, seq: 1 },
            shard: 0,
            ts: 0,
            outcome: Err(TxnError::NotLeader { hint }),
            watermark: 0,
            arrival_delta_us: 0,
            rounds: 0,
            position: None,
            order: None,
            early: false,
        })
    };
    // While unsure, any replica naming the leader is followed.
    routes.on_server_msg(NodeId { shard: 0, replica: 0 }, &not_leader(Some(2)));
    assert_eq!((routes.guess(0), routes.is_unsure(0)), (2, false));
    // Sure again: a hint from a replica that is not the guess changes nothing.
    routes.on_server_msg(NodeId { shard: 0, replica: 0 }, &not_leader(Some(0)));
    assert_eq!(routes.guess(0), 2);
    // The guess itself naming nobody: the next one, unsure.
    routes.on_server_msg(NodeId { shard: 0, replica: 2 }, &not_leader(None));
    assert_eq!((routes.guess(0), routes.is_unsure(0)), (0, true));
    routes.on_server_msg(NodeId { shard: 0, replica: 0 }, &ServerMsg::Watermark { shard: 0, watermark: 10 });
    assert_eq!((routes.guess(0), routes.is_unsure(0)), (0, false), "only a leader broadcasts a newer watermark");
    routes.on_server_msg(NodeId { shard: 0, replica: 1 }, &ServerMsg::Watermark { shard: 0, watermark: 9 });
    assert_eq!(routes.guess(0), 0, "an older one changes nothing");
    // An unreachable guess falls to the next reachable replica; a ping goes to one only.
    assert_eq!(routes.route(0, &ClientMsg::Ping { sent_us: 0 }, |r| r != 0), vec![1]);
    let other = ClientMsg::Dispatch { txn: kv_txn(1, 2), sent_us: 0, acked_below: 0, fast: true };
    assert_eq!(routes.route(0, &other, |r| r != 0), vec![1, 2], "every reachable replica while unsure");
    routes.forget(TxnId { client: 1, seq: 1 });
    routes.forget(TxnId { client: 1, seq: 2 });
    assert_eq!(routes.remembered(), 0);
}

#[test]
fn baseline_clients_never_broadcast_a_dispatch() {
    // Their leaders answer a lock conflict without logging it: a second copy of the same
    // transaction could run after the first was answered `Aborted`.
    let mut routes = ClientRoutes::for_protocol(vec![3], Protocol::TwoPl);
    let dispatch = ClientMsg::Dispatch { txn: kv_txn(1, 1), sent_us: 0, acked_below: 0, fast: true };
    assert_eq!(routes.route(0, &dispatch, |_| true), vec![0]);
    assert_eq!(routes.route(0, &dispatch, |_| true), vec![1], "unsure, and still one replica");
    assert!(routes.is_unsure(0));
}
