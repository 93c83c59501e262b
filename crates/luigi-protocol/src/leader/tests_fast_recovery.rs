//! The fast path's leader rules against recovery, as one transcript each: a leader marks
//! answers, two followers accept what reached them, and a new leader recovers from the
//! followers' accept sets (`fast::to_recover`). Each test shows what the rule prevents: with
//! its mutation on, an answer the coordinator would commit fast is not recovered as it was
//! executed; with the rule kept, that answer is not fast.

use std::sync::Arc;

use super::tests::replies;
use super::tests_common::{dispatch, id, tick, txn};
use super::{LeaderConfig, LeaderWithLog, Mutations};
use crate::fast::{to_recover, AcceptedTxn, Acceptor};
use crate::log::{LocalLog, LogRecord};
use luigi_store::Store;
use luigi_txn::types::{Timestamp, Txn, TxnId};

fn leader(mutations: Mutations) -> LeaderWithLog<LocalLog> {
    let mut config = LeaderConfig::new(0, 2);
    config.fast_path = true;
    config.mutations = mutations;
    LeaderWithLog::new(config, LocalLog::default(), Store::new(), luigi_workloads::procedures::builtins())
}

/// The leader's answers to `txns` (each dispatched at the given time), executed by ticking
/// to `until`: id to (timestamp, order hash).
fn leader_answers(mutations: Mutations, txns: &[(u64, &Arc<Txn>)], until: u64) -> Vec<(TxnId, Timestamp, Option<u64>)> {
    let mut l = leader(mutations);
    let mut out = Vec::new();
    for (now, t) in txns {
        out.extend(dispatch(&mut l, *now, t));
    }
    out.extend(tick(&mut l, until));
    let mut got: Vec<_> = replies(&out).into_iter().map(|r| (r.id, r.ts, r.order)).collect();
    got.sort();
    got
}

/// A follower offered `txns` (at the given times): its accept set and each accept's order
/// hash.
fn follower(direct_hash: bool, txns: &[(u64, &Arc<Txn>)]) -> (Vec<AcceptedTxn>, Vec<(TxnId, u64)>) {
    let mut f = Acceptor::new(direct_hash);
    let accepted = txns.iter().filter_map(|(now, t)| f.offer(*now, t, t.piece(0).unwrap()).ok());
    let hashes = accepted.map(|a| (a.id, a.order)).collect();
    let set = f.undecided_records().into_iter().map(|r| (r.txn, r.ts)).collect();
    (set, hashes)
}

/// Whether the leader's answer to `t` commits fast with these followers: marked, at its
/// timestamp, and every follower accepted it with the same order hash.
fn fast_commits(answers: &[(TxnId, Timestamp, Option<u64>)], t: &Txn, followers: &[Vec<(TxnId, u64)>]) -> bool {
    let Some(&(_, ts, Some(order))) = answers.iter().find(|(a, ..)| *a == t.id) else { return false };
    ts == t.ts && followers.iter().all(|f| f.contains(&(t.id, order)))
}

#[test]
fn f2_a_transaction_below_a_conflicting_one_admitted_first_is_not_fast_and_its_mutation_loses_it() {
    // Y (write k at 200) arrives first, then T (write k at 100), early. The followers never
    // got Y's dispatch; they accept T. The leader's log holds Y's PREPARE before T's; the
    // leader dies and the new leader's log kept Y's PREPARE only.
    let (y, t) = (txn(1, 200, &[(0, 1, Some(5))]), txn(2, 100, &[(0, 1, Some(6))]));
    let dispatches = [(10, &y), (20, &t)];
    let (set, hashes) = follower(false, &[(20, &t)]);
    let sets = vec![set.clone(), set];
    let log = [LogRecord::Prepare { txn: y.clone(), ts: 200, arrival_delta_us: 0, acked_below: 0 }];
    let recovered: Vec<TxnId> = to_recover(0, &sets, &log, |_| false).iter().map(|(t, _)| t.id).collect();
    assert!(recovered.is_empty(), "R2: Y's PREPARE above T says T was not fast");

    let kept = leader_answers(Mutations::default(), &dispatches, 300);
    assert!(!fast_commits(&kept, &t, &[hashes.clone(), hashes.clone()]), "F2: T is not fast");
    let broken = Mutations { fast_ignores_f2: true, ..Mutations::default() };
    let answers = leader_answers(broken, &dispatches, 300);
    assert!(fast_commits(&answers, &t, &[hashes.clone(), hashes]), "the mutation: T fast, then lost by R2");
}

#[test]
fn h_a_predecessor_of_a_predecessor_the_followers_missed_makes_the_hashes_differ_and_its_mutation_loses_it() {
    // Q writes x at 100; P reads x and writes k at 150; T reads k at 200: T's result
    // depends on Q through P. Q's dispatch reached neither follower.
    let q = txn(1, 100, &[(0, 1, Some(5))]);
    let p = txn(2, 150, &[(0, 1, None), (0, 2, Some(6))]);
    let t = txn(3, 200, &[(0, 2, None)]);
    let dispatches = [(10, &q), (11, &p), (12, &t)];
    let reached = [(11, &p), (12, &t)];

    // Rule H: the leader's hash of T covers Q, the followers' cannot: not fast.
    let kept = leader_answers(Mutations::default(), &dispatches, 300);
    let (_, hashes) = follower(false, &reached);
    assert!(!fast_commits(&kept, &t, &[hashes.clone(), hashes]), "H: T's hash covers Q");

    // The mutation: direct predecessors only, so T's hashes agree (over P) and T is fast;
    // recovery from the followers' sets then prepares P and T without Q, and P re-executes
    // on another x.
    let broken = Mutations { fast_hashes_direct_predecessors: true, ..Mutations::default() };
    let answers = leader_answers(broken, &dispatches, 300);
    let (set, hashes) = follower(true, &reached);
    assert!(fast_commits(&answers, &t, &[hashes.clone(), hashes]), "the mutation: T fast");
    let sets = vec![set.clone(), set];
    let recovered: Vec<TxnId> = to_recover(0, &sets, &[], |_| false).iter().map(|(t, _)| t.id).collect();
    assert_eq!(recovered, vec![id(2), id(3)], "P and T are recovered, Q is not");
}

#[test]
fn c_a_transaction_that_read_an_unclean_predecessor_is_not_fast_and_its_mutation_loses_it() {
    // Seed 1053 in small: Z (write m at 300) is admitted first, so W (write k and m at 50,
    // early) is not fast-eligible (F2) and the leader never votes for it; T (read k at 200)
    // reads W's write. Both followers missed Z and accepted W and T, so T's hashes agree.
    let z = txn(1, 300, &[(0, 2, Some(4))]);
    let w = txn(2, 50, &[(0, 1, Some(5)), (0, 2, Some(5))]);
    let t = txn(3, 200, &[(0, 1, None)]);
    let dispatches = [(5, &z), (10, &w), (12, &t)];
    let (set, hashes) = follower(false, &[(10, &w), (12, &t)]);
    let kept = leader_answers(Mutations::default(), &dispatches, 400);
    assert!(!fast_commits(&kept, &t, &[hashes.clone(), hashes.clone()]), "C: W was not clean, so T is not fast");

    let broken = Mutations { fast_ignores_unclean_predecessors: true, ..Mutations::default() };
    let answers = leader_answers(broken, &dispatches, 400);
    assert!(fast_commits(&answers, &t, &[hashes.clone(), hashes]), "the mutation: T fast");
    // A new follower-turned-leader whose log lost W's PREPARE reads its own set and the old
    // leader's, which holds its vote for T and nothing for W: T is recovered without W.
    let old_leader = vec![(t.clone(), 200)];
    let recovered: Vec<TxnId> = to_recover(0, &[set, old_leader], &[], |_| false).iter().map(|(t, _)| t.id).collect();
    assert_eq!(recovered, vec![id(3)], "T is recovered without W before it");
}
