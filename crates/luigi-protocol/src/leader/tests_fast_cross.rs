//! Transcript tests of the cross-shard fast path at a leader (DESIGN.md rules 16-18), over a
//! log that commits only when the test says so: a fast-eligible cross-shard proposal leaves
//! marked and after the leader's vote; another shard's marked proposal is used before its
//! proof once every follower of the proposer's term accepted it, and not otherwise.

use luigi_store::Store;

use super::tests::executed;
use super::tests_common::{deliver, dispatch, id, tick, txn};
use super::tests_speculation::{client_msgs, commit_all, pos, HeldLog, Leader};
use super::*;
use crate::fast::AcceptRecord;
use crate::msg::{PeerBatch, PeerItem};
use luigi_txn::msg::TxnReply;

/// Shard `shard`'s leader of 2 shards of 3 replicas in term 3, with the fast path.
fn leader(shard: ShardId, mutations: Mutations) -> Leader {
    let mut config = LeaderConfig::new(shard, 2);
    config.group_sizes = vec![3, 3];
    config.fast_path = true;
    config.mutations = mutations;
    let mut l = LeaderWithLog::new(config, HeldLog::new(3), Store::new(), luigi_workloads::procedures::builtins());
    tick(&mut l, 0);
    commit_all(&mut l, 1);
    l
}

/// The batches to peers in `out`, with the accept records each waits for (`None`: sent at
/// once).
fn peer_sends(out: &[LeaderOutput]) -> Vec<(PeerBatch, Option<Vec<Vec<u8>>>)> {
    out.iter()
        .filter_map(|o| match o {
            LeaderOutput::ToPeer { batch, .. } => Some((batch.clone(), None)),
            LeaderOutput::ToPeerDurably { batch, records, .. } => Some((batch.clone(), Some(records.clone()))),
            LeaderOutput::ToClient { .. }
            | LeaderOutput::ToClientDurably { .. }
            | LeaderOutput::ToClients { .. }
            | LeaderOutput::ToAllClients { .. }
            | LeaderOutput::Executed { .. } => None,
        })
        .collect()
}

fn from_1(items: Vec<PeerItem>) -> Vec<PeerBatch> {
    vec![PeerBatch { from: 1, watermark: 0, items }]
}

fn accept(replica: u32, term: u64, ts: Timestamp) -> PeerItem {
    PeerItem::FastAccept { replica, term, id: id(1), ts }
}

#[test]
fn a_fast_eligible_cross_shard_proposal_leaves_marked_after_the_leaders_vote() {
    let mut a = leader(0, Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let out = dispatch(&mut a, 100, &t);
    let mine = a.log().last_index();
    let vote = AcceptRecord { txn: t.clone(), ts: 1_000 };
    let sent = peer_sends(&out);
    let [(batch, Some(records))] = sent.as_slice() else { panic!("one batch waiting for the vote: {sent:?}") };
    assert_eq!(batch.items, vec![PeerItem::Propose { id: id(1), ts: 1_000, at: pos(mine), fast: true }]);
    assert_eq!(records, &vec![vote.encode()], "rule 16: the vote is written before the marked proposal leaves");
    assert_eq!(a.fast_votes(), vec![vote], "kept for a new leader's recovery until its PREPARE commits");
    // Arrived after its timestamp: moved, so neither marked nor voted for.
    let late = txn(2, 500, &[(0, 3, Some(5)), (1, 4, Some(6))]);
    let sent = peer_sends(&dispatch(&mut a, 600, &late));
    assert!(matches!(sent.as_slice(), [(b, None)] if matches!(b.items[..], [PeerItem::Propose { fast: false, .. }])));
    assert_eq!(a.fast_votes().len(), 1);
    commit_all(&mut a, 700);
    assert!(a.fast_votes().is_empty());
}

#[test]
fn a_marked_proposal_is_used_before_its_proof_once_every_follower_of_its_term_accepted_it() {
    let mut a = leader(0, Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    dispatch(&mut a, 100, &t);
    let marked = PeerItem::Propose { id: id(1), ts: 1_000, at: pos(9), fast: true };
    assert!(executed(&deliver(&mut a, 200, from_1(vec![marked, accept(1, 3, 1_000)]))).is_empty());
    assert!(executed(&tick(&mut a, 5_000)).is_empty(), "one follower of two");
    assert!(executed(&deliver(&mut a, 5_001, from_1(vec![accept(2, 2, 1_000)]))).is_empty(), "of another term");
    let out = deliver(&mut a, 5_002, from_1(vec![accept(2, 3, 1_000)]));
    assert_eq!(executed(&out), vec![(0, id(1), 1_000)], "rule 18: both followers of term 3 accepted at 1000");
    assert_eq!(a.stats().fast_proposals, 1);
}

#[test]
fn accepts_make_no_unmarked_proposal_usable_and_the_mutation_needs_none() {
    let mut a = leader(0, Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    dispatch(&mut a, 100, &t);
    let unmarked = PeerItem::Propose { id: id(1), ts: 1_000, at: pos(9), fast: false };
    let out = deliver(&mut a, 200, from_1(vec![accept(1, 3, 1_000), accept(2, 3, 1_000), unmarked]));
    assert!(executed(&out).is_empty());
    assert!(executed(&tick(&mut a, 5_000)).is_empty(), "waits for its proof (rule 14)");

    let mut b = leader(0, Mutations { fast_trusts_marked_proposals: true, ..Mutations::default() });
    dispatch(&mut b, 100, &t);
    let marked = PeerItem::Propose { id: id(1), ts: 1_000, at: pos(9), fast: true };
    deliver(&mut b, 200, from_1(vec![marked]));
    assert_eq!(executed(&tick(&mut b, 1_000)).len(), 1, "the mutation: decided without any accept");
}

#[test]
fn rule_20_a_dispatch_that_did_not_ask_leaves_its_proposal_unmarked_at_once_without_a_vote() {
    let mut a = leader(0, Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let mut out = Vec::new();
    let quiet = ClientMsg::Dispatch { txn: t.clone(), sent_us: 100, acked_below: 1, fast: false };
    a.on_client(100, 9, quiet, &mut out);
    a.tick(100, &mut out);
    let sent = peer_sends(&out);
    assert!(
        matches!(sent.as_slice(), [(b, None)] if matches!(b.items[..], [PeerItem::Propose { fast: false, .. }])),
        "{sent:?}"
    );
    assert!(a.fast_votes().is_empty(), "no vote: it cannot commit fast");
    a.check_invariants().unwrap();
}

/// What `luigi_transactions_total{outcome="fast_path"}` reads: of the transactions that
/// asked, those moved at admission (F1), those executed after a predecessor that was not
/// clean (rule C), and those answered marked.
#[test]
fn the_fast_path_counters_say_where_an_asked_transaction_lost_it() {
    let mut a = leader(0, Mutations::default());
    dispatch(&mut a, 100, &txn(1, 1_000, &[(0, 1, Some(5))])); // clean: marked
    dispatch(&mut a, 200, &txn(2, 50, &[(0, 3, Some(5))])); // late: moved to the clock
    let quiet =
        ClientMsg::Dispatch { txn: txn(3, 2_000, &[(0, 1, Some(6))]), sent_us: 300, acked_below: 1, fast: false };
    a.on_client(300, 9, quiet, &mut Vec::new());
    dispatch(&mut a, 300, &txn(4, 3_000, &[(0, 1, Some(7))])); // behind the quiet one: unclean
    tick(&mut a, 5_000);
    let s = a.stats();
    assert_eq!((s.fast_asked, s.fast_ineligible, s.fast_unclean, s.fast_marked), (3, 1, 1, 1), "{s:?}");
}

/// The answers to transaction 1 in `out`, with the accept record each waits for.
fn durable_replies(out: &[LeaderOutput]) -> Vec<(TxnReply, Option<Vec<u8>>)> {
    client_msgs(out).into_iter().filter(|(r, _)| r.id == id(1)).collect()
}

fn marked(seq: u64, ts: Timestamp) -> PeerItem {
    PeerItem::Propose { id: id(seq), ts, at: pos(9), fast: true }
}

#[test]
fn rule_21_an_early_answer_leaves_once_the_clock_passed_and_matches_the_regular_answer_that_follows() {
    let mut a = leader(0, Mutations::default());
    // 2 writes key 1 at 500 and is executed; 1 reads it at 1000 on both shards.
    let w = txn(2, 500, &[(0, 1, Some(5))]);
    dispatch(&mut a, 100, &w);
    let t = txn(1, 1_000, &[(0, 1, None), (1, 2, Some(6))]);
    dispatch(&mut a, 110, &t);
    let mine = a.log().last_index();
    assert!(durable_replies(&deliver(&mut a, 200, from_1(vec![marked(1, 1_000)]))).is_empty());
    assert_eq!(executed(&tick(&mut a, 500)), vec![(0, id(2), 500)]);
    assert!(durable_replies(&tick(&mut a, 1_000)).is_empty(), "the clock has not passed 1000");
    let out = tick(&mut a, 1_001);
    assert!(executed(&out).is_empty(), "nothing executed or decided");
    let early = durable_replies(&out);
    let [(reply, None)] = early.as_slice() else { panic!("one early answer after the votes: {early:?}") };
    assert!(reply.early && reply.ts == 1_000 && reply.rounds == 1 && reply.watermark < 1_000, "{reply:?}");
    assert_eq!(reply.order, Some(crate::fast::entry_hash(id(2), 500)), "rules C and H: over its predecessor");
    assert_eq!(reply.position, pos(mine), "its own PREPARE, after the predecessor's");
    assert_eq!(a.stats().early_answers, 1);
    assert!(durable_replies(&tick(&mut a, 2_000)).is_empty(), "once");
    // Rule 18 then decides it the regular way, and its answer says the same.
    let out = deliver(&mut a, 2_001, from_1(vec![accept(1, 3, 1_000), accept(2, 3, 1_000)]));
    assert_eq!(executed(&out), vec![(0, id(1), 1_000)]);
    let regular = durable_replies(&out);
    let [(r, Some(_))] = regular.as_slice() else { panic!("the regular answer, with its vote: {regular:?}") };
    assert!(!r.early);
    assert_eq!((&r.outcome, r.order, r.ts), (&reply.outcome, reply.order, reply.ts));
}

#[test]
fn rule_21_no_early_answer_when_a_proposal_moved_is_unmarked_or_a_conflicting_one_is_ahead() {
    // Moved here: arrived after its timestamp.
    let mut a = leader(0, Mutations::default());
    let late = txn(1, 1_000, &[(0, 1, None), (1, 2, Some(6))]);
    dispatch(&mut a, 1_500, &late);
    deliver(&mut a, 1_600, from_1(vec![marked(1, 1_000)]));
    assert!(durable_replies(&tick(&mut a, 3_000)).is_empty(), "F1: moved");
    // Unmarked: no candidate.
    let mut b = leader(0, Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, None), (1, 2, Some(6))]);
    dispatch(&mut b, 100, &t);
    let unmarked = PeerItem::Propose { id: id(1), ts: 1_000, at: pos(9), fast: false };
    deliver(&mut b, 200, from_1(vec![unmarked]));
    assert!(durable_replies(&tick(&mut b, 3_000)).is_empty(), "rule 16: only a marked proposal");
    // A conflicting cross-shard one below it, undecided: ahead of it in the queue.
    let mut c = leader(0, Mutations::default());
    let below = txn(3, 800, &[(0, 1, Some(4)), (1, 3, Some(6))]);
    dispatch(&mut c, 90, &below);
    dispatch(&mut c, 100, &t);
    deliver(&mut c, 200, from_1(vec![marked(1, 1_000)]));
    assert!(durable_replies(&tick(&mut c, 3_000)).is_empty(), "3 is ahead, undecided");
    assert_eq!(c.stats().early_answers, 0);
    // Another shard's proposal above it: it will move.
    let mut d = leader(0, Mutations::default());
    dispatch(&mut d, 100, &t);
    deliver(&mut d, 200, from_1(vec![marked(1, 1_200)]));
    assert!(durable_replies(&tick(&mut d, 3_000)).is_empty(), "decided above 1000: never fast");
}

#[test]
fn rule_21_an_early_answer_before_the_clock_passed_would_miss_a_conflicting_one_admitted_below_it() {
    // 1 reads key 1 at 1000; its marked proposal comes at 200; 2 writes key 1 at 900 and
    // arrives at 300, below 1 (the clock is at 300), so it runs first.
    let run = |mutations: Mutations| {
        let mut a = leader(0, mutations);
        let t = txn(1, 1_000, &[(0, 1, None), (1, 2, Some(6))]);
        dispatch(&mut a, 100, &t);
        let mut early = durable_replies(&deliver(&mut a, 200, from_1(vec![marked(1, 1_000)])));
        early.extend(durable_replies(&dispatch(&mut a, 300, &txn(2, 900, &[(0, 1, Some(5))]))));
        early.extend(durable_replies(&tick(&mut a, 1_001)));
        let out = deliver(&mut a, 1_002, from_1(vec![accept(1, 3, 1_000), accept(2, 3, 1_000)]));
        assert_eq!(executed(&out), vec![(0, id(1), 1_000)], "after 2, at 900");
        let regular = durable_replies(&out).into_iter().map(|(r, _)| r.outcome).collect::<Vec<_>>();
        (early.into_iter().map(|(r, _)| r.outcome).collect::<Vec<_>>(), regular)
    };
    let (early, regular) = run(Mutations::default());
    assert!(early.is_empty(), "not before 1000, and then 2 is not clean (rule C): {early:?}");
    assert_eq!(regular.len(), 1);
    let (early, regular) = run(Mutations { early_before_its_time: true, ..Mutations::default() });
    assert_eq!(early.len(), 1, "the mutation answered at 200");
    assert_ne!(early, regular, "what 1 read before 2 ran is not what it reads at 1000");
}
