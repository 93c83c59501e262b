//! Transcript tests of speculative execution (DESIGN.md rule 14), over a log that commits only
//! when the test says so: a leader executes before its `PREPARE` commits and answers with the
//! position the answer depends on, uses another shard's proposal only once that shard's
//! progress proves it committed, and answers `Recover` about a speculative execution only
//! once it is committed.

use std::collections::VecDeque;

use luigi_store::Store;

use super::tests::{executed, replies};
use super::tests_common::{deliver, dispatch, id, items, tick, to_peer, txn};
use super::*;
use crate::log::{LogError, LogIndex};
use crate::msg::{PeerBatch, PeerItem};
use luigi_txn::msg::TxnReply;
use luigi_txn::progress::{LogPos, ProgressReport};
use luigi_txn::snapshot::ScannedRange;

/// A log of term `term` whose records commit when [`HeldLog::commit_through`] says so.
pub(super) struct HeldLog {
    term: u64,
    next: LogIndex,
    held: VecDeque<LogEntry>,
    committed: VecDeque<LogEntry>,
}

impl HeldLog {
    pub(super) fn new(term: u64) -> Self {
        HeldLog { term, next: 1, held: VecDeque::new(), committed: VecDeque::new() }
    }

    pub(super) fn last_index(&self) -> LogIndex {
        self.next - 1
    }

    pub(super) fn commit_through(&mut self, index: LogIndex) {
        while self.held.front().is_some_and(|e| e.index <= index) {
            self.committed.push_back(self.held.pop_front().expect("checked"));
        }
    }
}

impl ReplicatedLog<LogRecord> for HeldLog {
    fn propose(&mut self, record: LogRecord) -> Result<LogIndex, LogError> {
        let index = self.next;
        self.next += 1;
        self.held.push_back(LogEntry { index, record });
        Ok(index)
    }

    fn take_committed(&mut self, out: &mut Vec<LogEntry>) {
        out.extend(self.committed.drain(..));
    }

    fn term(&self) -> u64 {
        self.term
    }
}

pub(super) type Leader = LeaderWithLog<HeldLog>;

/// Shard `shard`'s leader in term 3 of groups of 3, its first floor promise committed.
fn leader(shard: ShardId, mutations: Mutations) -> Leader {
    let mut config = LeaderConfig::new(shard, 8);
    config.group_sizes = vec![3; 8];
    config.mutations = mutations;
    let mut l = LeaderWithLog::new(config, HeldLog::new(3), Store::new(), luigi_workloads::procedures::builtins());
    tick(&mut l, 0);
    commit_all(&mut l, 1);
    l
}

pub(super) fn commit_all(l: &mut Leader, now: TimeUs) -> Vec<LeaderOutput> {
    let last = l.log().last_index();
    l.log_mut().commit_through(last);
    tick(l, now)
}

pub(super) fn pos(index: LogIndex) -> Option<LogPos> {
    Some(LogPos { term: 3, index })
}

fn report(shard: ShardId, replica: u32, index: LogIndex) -> PeerBatch {
    let pos = LogPos { term: 3, index };
    PeerBatch {
        from: shard,
        watermark: 0,
        items: vec![PeerItem::Progress(ProgressReport { shard, replica, term: 3, pos, committed: false })],
    }
}

#[test]
fn a_single_shard_transaction_executes_before_its_prepare_commits_and_answers_with_its_position() {
    let mut a = leader(0, Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5))]);
    dispatch(&mut a, 100, &t);
    let prepare = a.log().last_index();
    let out = tick(&mut a, 1_000);
    assert_eq!(executed(&out), vec![(0, id(1), 1_000)], "due: executed, its PREPARE still in flight");
    let r = replies(&out);
    assert_eq!((r.len(), r[0].position), (1, pos(prepare)), "answered with the position it rests on");
    // Once committed, a retry's answer needs no proof.
    commit_all(&mut a, 1_001);
    let again = replies(&dispatch(&mut a, 1_002, &t));
    assert_eq!((again.len(), again[0].position), (1, None));
}

#[test]
fn a_reader_of_an_uncommitted_write_depends_on_the_writers_position() {
    let mut a = leader(0, Mutations::default());
    let reader = txn(1, 2_000, &[(0, 1, None)]);
    let writer = txn(2, 1_000, &[(0, 1, Some(7))]);
    dispatch(&mut a, 100, &reader);
    let reader_at = a.log().last_index();
    dispatch(&mut a, 100, &writer);
    let writer_at = a.log().last_index();
    assert!(writer_at > reader_at);
    // The reader's own PREPARE commits; the writer's does not.
    a.log_mut().commit_through(reader_at);
    let r = replies(&tick(&mut a, 2_000));
    let by_id = |seq| r.iter().find(|r| r.id == id(seq)).expect("answered").clone();
    assert_eq!(by_id(2).position, pos(writer_at));
    assert_eq!(by_id(1).position, pos(writer_at), "it read the writer's value: lost with it if the writer is");
}

#[test]
fn another_shards_proposal_is_used_only_once_its_progress_proves_it_committed() {
    let mut a = leader(0, Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    let out = dispatch(&mut a, 100, &t);
    let mine = a.log().last_index();
    assert_eq!(items(&to_peer(&out, 1)), vec![PeerItem::Propose { id: id(1), ts: 1_000, at: pos(mine), fast: false }]);
    let theirs = PeerBatch {
        from: 1,
        watermark: 0,
        items: vec![PeerItem::Propose { id: id(1), ts: 1_000, at: pos(9), fast: false }],
    };
    deliver(&mut a, 200, vec![theirs]);
    assert!(executed(&tick(&mut a, 5_000)).is_empty(), "shard 1's PREPARE is not proven committed");
    assert!(executed(&deliver(&mut a, 5_001, vec![report(1, 1, 8)])).is_empty(), "below its position");
    let out = deliver(&mut a, 5_002, vec![report(1, 2, 9)]);
    assert_eq!(executed(&out), vec![(0, id(1), 1_000)], "proven: decided and executed, own PREPARE still in flight");
    assert_eq!(replies(&out)[0].position, pos(mine));
}

#[test]
fn the_mutation_that_trusts_unproven_proposals_decides_at_once() {
    let mutations = Mutations { trust_unproven_proposals: true, ..Mutations::default() };
    let mut a = leader(0, mutations);
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    dispatch(&mut a, 100, &t);
    let theirs = PeerBatch {
        from: 1,
        watermark: 0,
        items: vec![PeerItem::Propose { id: id(1), ts: 1_000, at: pos(9), fast: false }],
    };
    assert_eq!(executed(&deliver(&mut a, 1_000, vec![theirs])).len(), 1);
}

#[test]
fn recover_about_a_speculative_execution_is_answered_once_it_is_committed() {
    let mut a = leader(0, Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5)), (1, 2, Some(6))]);
    dispatch(&mut a, 100, &t);
    let theirs = PeerBatch {
        from: 1,
        watermark: 0,
        items: vec![PeerItem::Propose { id: id(1), ts: 1_000, at: None, fast: false }],
    };
    assert_eq!(executed(&deliver(&mut a, 1_000, vec![theirs])).len(), 1);
    let recover = PeerBatch { from: 1, watermark: 0, items: vec![PeerItem::Recover { txn: t.clone(), ts: 1_000 }] };
    let out = deliver(&mut a, 1_001, vec![recover]);
    assert!(items(&to_peer(&out, 1)).is_empty(), "its execution could still be lost: no answer yet");
    let out = commit_all(&mut a, 1_002);
    let committed = ProgressReport {
        shard: 0,
        replica: 0,
        term: 3,
        pos: LogPos { term: 3, index: a.log().last_index() },
        committed: true,
    };
    assert_eq!(
        items(&to_peer(&out, 1)),
        vec![PeerItem::Executed { id: id(1), ts: 1_000 }, PeerItem::Progress(committed)],
        "the answer, and this shard's commit for the proposal it sent before it was committed"
    );
}

/// The client messages in `out` and the accept records they wait for.
pub(super) fn client_msgs(out: &[LeaderOutput]) -> Vec<(TxnReply, Option<Vec<u8>>)> {
    out.iter()
        .filter_map(|o| match o {
            LeaderOutput::ToClient { msg: ServerMsg::Reply(r), .. } => Some((r.clone(), None)),
            LeaderOutput::ToClientDurably { msg: ServerMsg::Reply(r), record, .. } => Some((r.clone(), record.clone())),
            LeaderOutput::ToClient { .. }
            | LeaderOutput::ToClientDurably { .. }
            | LeaderOutput::ToClients { .. }
            | LeaderOutput::ToAllClients { .. }
            | LeaderOutput::ToPeer { .. }
            | LeaderOutput::ToPeerDurably { .. }
            | LeaderOutput::Executed { .. } => None,
        })
        .collect()
}

fn fast_leader(mutations: Mutations) -> Leader {
    let mut config = LeaderConfig::new(0, 1);
    config.group_sizes = vec![3];
    config.fast_path = true;
    config.mutations = mutations;
    let mut l = LeaderWithLog::new(config, HeldLog::new(3), Store::new(), luigi_workloads::procedures::builtins());
    tick(&mut l, 0);
    commit_all(&mut l, 1);
    l
}

#[test]
fn a_fast_answer_before_its_prepare_commits_carries_the_leaders_vote_until_it_commits() {
    let mut l = fast_leader(Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5))]);
    dispatch(&mut l, 100, &t);
    let prepare = l.log().last_index();
    let sent = client_msgs(&tick(&mut l, 1_000));
    let record = crate::fast::AcceptRecord { txn: t.clone(), ts: 1_000 };
    let [(reply, Some(bytes))] = sent.as_slice() else { panic!("one answer waiting for its vote, got {sent:?}") };
    assert_eq!((reply.order, reply.position), (Some(0), pos(prepare)));
    assert_eq!(crate::fast::AcceptRecord::decode(bytes).unwrap(), record, "the vote written first");
    assert_eq!(l.fast_votes(), vec![record], "kept for a new leader's recovery");
    commit_all(&mut l, 1_001);
    assert!(l.fast_votes().is_empty(), "its PREPARE committed: every later log holds it");
    // Committed before the watermark passes it: a plain answer, no vote needed.
    let u = txn(2, 2_000, &[(0, 2, Some(5))]);
    dispatch(&mut l, 1_100, &u);
    commit_all(&mut l, 1_200);
    let sent = client_msgs(&tick(&mut l, 2_000));
    assert!(matches!(sent.as_slice(), [(r, None)] if r.position.is_none()), "{sent:?}");
    assert!(l.fast_votes().is_empty());
}

#[test]
fn a_leader_whose_log_moved_to_a_later_term_no_longer_votes() {
    let mut l = fast_leader(Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5))]);
    dispatch(&mut l, 100, &t);
    l.log_mut().term = 4; // deposed: a new leader may have read this replica's accepts already
    let sent = client_msgs(&tick(&mut l, 1_000));
    assert!(matches!(sent.as_slice(), [(r, None)] if r.order.is_none()), "not fast: {sent:?}");
    assert!(l.fast_votes().is_empty());
}

#[test]
fn the_mutation_that_skips_the_vote_answers_fast_with_nothing_written() {
    let mut l = fast_leader(Mutations { skip_leader_vote: true, ..Mutations::default() });
    dispatch(&mut l, 100, &txn(1, 1_000, &[(0, 1, Some(5))]));
    let sent = client_msgs(&tick(&mut l, 1_000));
    assert!(matches!(sent.as_slice(), [(r, None)] if r.order.is_some() && r.position.is_some()), "{sent:?}");
    assert!(l.fast_votes().is_empty());
}

#[test]
fn a_recovered_tail_is_taken_over_pending_at_its_position_and_nothing_is_admitted_below_it() {
    // The fast path's new leader serves with its recovered PREPAREs as its log's uncommitted
    // tail (DESIGN.md, the fast path): they are its own, answered with their position.
    let mut l = fast_leader(Mutations::default());
    let t = txn(1, 1_000, &[(0, 1, Some(5))]);
    let record = LogRecord::Prepare { txn: t.clone(), ts: 1_000, arrival_delta_us: 0, acked_below: 0 };
    let index = l.log_mut().propose(record.clone()).unwrap();
    l.take_over_tail(vec![LogEntry { index, record }]);
    l.check_invariants().unwrap();
    let below = txn(2, 900, &[(0, 1, Some(6))]);
    dispatch(&mut l, 100, &below);
    let out = tick(&mut l, 2_000);
    let by_id = |seq| replies(&out).into_iter().find(|r| r.id == id(seq)).expect("answered");
    let (answer, later) = (by_id(1), by_id(2));
    assert_eq!((answer.ts, answer.position, answer.order), (1_000, pos(index), None), "its position, never fast");
    assert!(later.ts > 1_000, "admitted above the recovered PREPARE, at {}", later.ts);
    commit_all(&mut l, 2_001);
    assert_eq!(l.stats().executed, 2);
}

/// Rule 23 (e): a leader serves a snapshot read above its committed marker once its watermark
/// passed the snapshot; a read of a key whose write is not committed yet names that write's
/// position (a failover could lose it, and the client counts the answer only once proven),
/// one of keys whose writes are committed names none; one that scanned a range names the
/// positions of the uncommitted writes in it (with versions kept, which keeps the writes in
/// key order; without, the highest position of any).
#[test]
fn a_read_ahead_of_the_committed_marker_names_the_position_of_its_keys_uncommitted_writes() {
    let keys = |key: u64| KeySet::new(vec![luigi_workloads::procedures::micro_key(key)], vec![]);
    let everything = [ScannedRange { start: vec![], end: vec![] }];
    let unsettled = Mutations { serve_ahead_unsettled: true, ..Mutations::default() };
    for (mutations, retention_us) in
        [(Mutations::default(), 5_000_000), (Mutations::default(), 0), (unsettled, 5_000_000)]
    {
        let mut config = LeaderConfig::new(0, 8);
        config.group_sizes = vec![3; 8];
        config.mutations = mutations;
        config.snapshot_retention_us = retention_us;
        let registry = luigi_workloads::procedures::builtins();
        let mut a = LeaderWithLog::new(config, HeldLog::new(3), Store::new(), registry);
        tick(&mut a, 0);
        commit_all(&mut a, 1);
        dispatch(&mut a, 100, &txn(1, 1_000, &[(0, 1, Some(5))]));
        tick(&mut a, 2_000);
        let view = a.snapshot_view();
        let ahead = view.ahead.as_ref().expect("a leader serves ahead");
        assert!(ahead.executed_ts >= 1_500 && view.safe_ts < 1_000, "executed past it, nothing marked committed");
        assert_eq!(view.serves_up_to(), ahead.executed_ts, "served up to the watermark, no further");
        assert_eq!(view.position_for(1_500, &keys(2), &[]), None, "key 2 has no uncommitted write");
        assert_eq!(view.position_for(view.safe_ts, &keys(1), &everything), None, "at the safe time: committed state");
        let key_1 = view.position_for(1_500, &keys(1), &[]);
        if mutations.serve_ahead_unsettled {
            assert_eq!(key_1, None, "the mutation names no position");
            continue;
        }
        let pos = key_1.expect("key 1's write is not committed: its position is named");
        let scan = view.position_for(1_500, &keys(2), &everything);
        assert_eq!(scan, Some(pos), "a read that scanned a range names its uncommitted writes' position");
        let elsewhere = [ScannedRange { start: vec![0xff; 8], end: vec![] }];
        let (precise, why) = (retention_us > 0, "a range without writes names none when the keys are in order");
        assert_eq!(view.position_for(1_500, &keys(2), &elsewhere), (!precise).then_some(pos), "{why}");
        assert!(pos.index > a.committed_index && pos.term == a.term, "{pos:?} above the commit, in the leader's term");
        commit_all(&mut a, 2_001);
        assert_eq!(a.snapshot_view().position_for(1_500, &keys(1), &everything), None, "committed: nothing to prove");
    }
}
