//! Baseline leaders, driven by hand: the exact answers and states each rule produces.

mod common;

use common::*;
use luigi_baseline::msg::BaseItem;
use luigi_baseline::Mode;
use luigi_txn::msg::TxnError;
use luigi_txn::procedure::ProcError;
use luigi_workloads::procedures::MicroOutput;

fn output(r: &luigi_txn::msg::TxnReply) -> MicroOutput {
    postcard::from_bytes(r.outcome.as_ref().expect("committed")).unwrap()
}

#[test]
fn a_single_shard_write_is_installed_at_once_and_answered_once_durable() {
    let mut c = Cluster::new(2, Mode::Occ);
    c.dispatch(0, micro(1, 2, &[(2, Some(5))]));
    assert_eq!(c.value(0, 2), Some(5), "installed before it is durable (speculative)");
    assert!(c.take_replies().is_empty(), "not answered before the log commits it");
    // A read-only transaction that read it waits for it too.
    c.dispatch(0, micro(2, 2, &[(2, None)]));
    assert!(c.take_replies().is_empty());
    c.commit();
    let r = c.take_replies();
    assert_eq!(r.len(), 2);
    assert_eq!(output(&r[1]), vec![(2, Some(5))]);
    // A read changes nothing, and still waits for a barrier it logs: a leader that lost its
    // group (and can commit nothing) never answers from a state a newer leader moved past.
    c.dispatch(0, micro(3, 2, &[(4, None)]));
    assert!(c.take_replies().is_empty(), "not answered before its barrier commits");
    let history = c.crash(0);
    c.elect(0, history);
    c.dispatch(0, micro(4, 2, &[(2, Some(6))]));
    c.commit();
    c.dispatch(0, micro(3, 2, &[(2, None)]));
    c.commit();
    let r = c.take_replies();
    assert_eq!(r.len(), 2);
    assert_eq!(output(&r[0]), vec![(2, Some(6))], "the read at the new leader sees the newer write");
    let leader = c.leader(0);
    let micro_commits = leader.procedure_commits().get(luigi_workloads::procedures::Micro::NAME);
    assert_eq!(micro_commits, leader.stats().local_commits, "every local commit counted by procedure");
    assert_eq!(micro_commits, 1, "the new leader's one write");
}

#[test]
fn a_cross_shard_transaction_commits_once_every_participant_prepared_durably() {
    for mode in [Mode::Occ, Mode::TwoPl] {
        let mut c = Cluster::new(2, mode);
        let t = micro(1, 2, &[(2, Some(20)), (3, Some(30)), (5, None)]);
        c.dispatch(0, t.clone());
        c.deliver(); // round 1 and the prepares
        assert!(c.take_replies().is_empty(), "{mode:?}: no vote before the prepares are durable");
        assert_eq!((c.value(0, 2), c.value(1, 3)), (None, None), "writes wait for the decision");
        c.commit(); // the prepares are durable: the votes leave
        c.deliver();
        let r = c.take_replies();
        assert_eq!(r.iter().map(|r| r.shard).collect::<Vec<_>>(), vec![0, 1], "{mode:?}: one answer per participant");
        assert_eq!(output(&r[1]), vec![(5, None)]);
        assert!(r.iter().all(|r| r.rounds == 2));
        assert_eq!((c.value(0, 2), c.value(1, 3)), (Some(20), Some(30)), "installed on the decision");
        c.settle();
        for s in 0..2 {
            assert!(c.leader(s).state().prepared().is_empty());
            assert_eq!(c.leader(s).stats().lock_conflicts, 0);
        }
        assert_eq!(c.leader(0).stats().coordinated_commits, 1);
        let micro_commits = c.leader(0).procedure_commits().get(luigi_workloads::procedures::Micro::NAME);
        assert_eq!(micro_commits, 1, "{mode:?}: counted by procedure with the commit");
    }
}

#[test]
fn occ_aborts_a_piece_whose_declared_keys_changed_since_it_executed() {
    let mut c = Cluster::new(2, Mode::Occ);
    c.dispatch(0, micro(1, 2, &[(2, Some(20)), (3, None)]));
    // Round 1 reaches shard 1, the prepares do not go out yet.
    let (to, batch) = c.net.pop_front().unwrap();
    assert_eq!(to, 1);
    let mut out = Vec::new();
    c.leader(1).on_peer(0, batch, &mut out);
    // Meanwhile a single-shard transaction writes key 3 on shard 1.
    c.dispatch(1, micro(2, 2, &[(3, Some(99))]));
    for o in out {
        if let luigi_baseline::msg::BaseOutput::ToPeer { shard, batch } = o {
            c.net.push_back((shard, batch));
        }
    }
    c.settle();
    let r = c.take_replies();
    let t1: Vec<_> = r.iter().filter(|r| r.id.seq == 1).collect();
    assert_eq!(t1.len(), 2);
    assert!(t1.iter().all(|r| is_aborted(r)), "{t1:?}");
    assert!(matches!(&t1[0].outcome, Err(TxnError::Aborted(why)) if why.contains("validation failed")));
    assert_eq!(c.value(0, 2), None, "nothing of it installed");
    assert_eq!(c.leader(1).stats().validation_failures, 1);
    assert!(c.leader(0).state().prepared().is_empty() && c.leader(1).state().prepared().is_empty());
}

#[test]
fn two_phase_locking_refuses_a_conflicting_transaction_at_once() {
    let mut c = Cluster::new(2, Mode::TwoPl);
    c.dispatch(0, micro(1, 2, &[(2, Some(20)), (3, Some(30))]));
    c.deliver(); // executed (locks held) and prepared, not durable
    c.dispatch(1, micro(2, 2, &[(3, None)]));
    let r = c.take_replies();
    assert_eq!(r.len(), 1);
    assert!(matches!(&r[0].outcome, Err(TxnError::Aborted(why)) if why.contains("locked")), "{r:?}");
    c.settle();
    assert_eq!(c.take_replies().len(), 2, "the first one commits");
    c.dispatch(1, micro(3, 2, &[(3, None)]));
    c.settle();
    let r = c.take_replies();
    assert_eq!(output(&r[0]), vec![(3, Some(30))], "locks released on commit");
}

#[test]
fn a_piece_that_aborts_on_purpose_ends_the_transaction_in_round_one() {
    let mut c = Cluster::new(2, Mode::TwoPl);
    let mut t = (*micro(1, 2, &[(2, Some(20)), (3, Some(30))])).clone();
    t.procedure = "user-abort".into();
    c.dispatch(0, std::sync::Arc::new(t));
    c.settle();
    let r = c.take_replies();
    assert_eq!(r.len(), 2);
    assert!(r.iter().all(|r| matches!(r.outcome, Err(TxnError::Proc(ProcError::UserAbort(_))))));
    assert!(r.iter().all(|r| r.rounds == 1));
    // Its locks are gone: the same keys commit next.
    c.dispatch(0, micro(2, 2, &[(2, Some(1)), (3, Some(1))]));
    c.settle();
    assert!(c.take_replies().iter().all(|r| r.outcome.is_ok()));
}

#[test]
fn direct_runs_each_piece_on_its_own_shard_without_coordination() {
    let mut c = Cluster::new(2, Mode::Direct);
    let t = micro(1, 2, &[(2, Some(20)), (3, Some(30))]);
    c.dispatch(0, t.clone());
    c.dispatch(1, t);
    assert!(c.net.is_empty(), "no message between leaders");
    c.commit();
    let r = c.take_replies();
    assert_eq!(r.iter().map(|r| r.shard).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!((c.value(0, 2), c.value(1, 3)), (Some(20), Some(30)));
}

#[test]
fn a_coordinator_that_dies_after_every_prepare_is_resolved_to_commit_by_a_participant() {
    let mut c = Cluster::new(2, Mode::Occ);
    c.dispatch(0, micro(1, 2, &[(2, Some(20)), (3, Some(30))]));
    c.deliver();
    c.commit(); // both prepares durable; the votes are in flight
    c.drop_items(|_, item| !matches!(item, BaseItem::Vote { .. }));
    let history = c.crash(0);
    assert!(c.take_replies().is_empty());
    // Shard 1 waits a round for a decision, then resolves. Shard 0's new leader holds the
    // prepared piece (from its log) with its locks.
    c.elect(0, history);
    assert_eq!(c.leader(0).state().prepared().len(), 1);
    c.dispatch(0, micro(2, 2, &[(2, None)]));
    assert!(is_aborted(&c.take_replies()[0]), "the prepared piece still holds its lock");
    c.advance(1_000_001);
    c.settle();
    assert_eq!((c.value(0, 2), c.value(1, 3)), (Some(20), Some(30)), "resolved to commit on both shards");
    assert!(c.leader(0).state().prepared().is_empty() && c.leader(1).state().prepared().is_empty());
    // The client's retry at the new coordinator learns the outcome with every output.
    c.take_replies();
    c.dispatch(0, micro(1, 2, &[(2, Some(20)), (3, Some(30))]));
    c.settle();
    let r = c.take_replies();
    assert_eq!(r.len(), 2);
    assert!(r.iter().all(|r| r.outcome.is_ok()), "{r:?}");
}

#[test]
fn a_coordinator_that_dies_before_its_own_prepare_is_durable_leaves_an_abort() {
    let mut c = Cluster::new(2, Mode::TwoPl);
    c.dispatch(0, micro(1, 2, &[(2, Some(20)), (3, Some(30))]));
    c.deliver(); // both prepares logged, none durable
    c.leader(1).log_mut().commit_all(); // shard 1's prepare is durable, shard 0's is lost
    let history = c.crash(0);
    c.net.clear();
    c.elect(0, history);
    assert!(c.leader(0).state().prepared().is_empty());
    c.advance(1_000_001); // shard 1 resolves: shard 0 never prepared it, and now never will
    c.settle();
    assert_eq!((c.value(0, 2), c.value(1, 3)), (None, None));
    assert!(c.leader(1).state().prepared().is_empty(), "shard 1's locks are released");
    // A retry of the same transaction at the new leader is told it aborted.
    c.dispatch(0, micro(1, 2, &[(2, Some(20)), (3, Some(30))]));
    c.settle();
    let r = c.take_replies();
    assert_eq!(r.len(), 2);
    assert!(r.iter().all(is_aborted), "{r:?}");
}

#[test]
fn a_silent_participant_in_round_one_aborts_the_transaction_and_frees_the_others() {
    let mut c = Cluster::new(2, Mode::TwoPl);
    c.dispatch(0, micro(1, 2, &[(2, Some(20)), (3, Some(30))]));
    c.drop_items(|to, _| to != 1); // shard 1 never hears of it
    c.deliver();
    c.advance(1_000_001);
    c.settle();
    let r = c.take_replies();
    assert!(r.len() == 2 && r.iter().all(is_aborted), "{r:?}");
    assert!(matches!(&r[0].outcome, Err(TxnError::Aborted(why)) if why.contains("shard(s) 1")));
    c.dispatch(0, micro(2, 2, &[(2, Some(1))]));
    c.settle();
    assert!(c.take_replies()[0].outcome.is_ok(), "shard 0's locks were released");
}

#[test]
fn a_dispatch_to_another_shard_than_the_first_participant_is_refused() {
    let mut c = Cluster::new(2, Mode::Occ);
    c.dispatch(1, micro(1, 2, &[(2, Some(20)), (3, Some(30))]));
    let r = c.take_replies();
    assert_eq!(r.len(), 2);
    assert!(matches!(&r[0].outcome, Err(TxnError::Rejected(why)) if why.contains("first participant")));
}

#[test]
fn a_full_log_refuses_with_busy_and_stores_nothing() {
    let mut c = Cluster::new(1, Mode::Occ);
    c.leader(0).log_mut().refuse = true;
    c.dispatch(0, micro(1, 1, &[(2, Some(20))]));
    let r = c.take_replies();
    assert!(matches!(r[0].outcome, Err(TxnError::Busy(_))), "{r:?}");
    assert_eq!(c.value(0, 2), None);
}
