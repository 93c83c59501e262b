//! Transcripts of the read-only path's client half (DESIGN.md rule 23): which snapshot a
//! read takes, where its pieces go, and what a refusal or a silent replica does.

use super::tests::{piece, quiet, reply};
use super::*;
use luigi_txn::client_core::{ClientCore, Completion, TxnOutcome};
use luigi_txn::msg::{ServerMsg, TxnError};
use luigi_txn::procedure::ProcError;
use luigi_txn::progress::{LogPos, ProgressReport};
use luigi_txn::read_only::{ReadRefusal, SnapshotRead, SnapshotReadReply};
use luigi_txn::types::{KeySet, ShardPiece};

const OFFSET_US: u64 = 10_000;

fn reading(client: ClientId) -> CoordinatorConfig {
    CoordinatorConfig {
        read_only_path: true,
        max_clock_offset_us: OFFSET_US,
        group_sizes: vec![3, 3],
        retry_timeout_us: 1_000_000,
        not_leader_retry_us: 50_000,
        max_attempts: 4,
        ..quiet(client)
    }
}

fn read_piece(shard: ShardId) -> ShardPiece {
    ShardPiece { shard, keys: KeySet::new(vec![vec![shard as u8]], vec![]) }
}

/// The snapshot reads in `out`: (shard, replica, read).
fn reads(out: &[ClientOutput]) -> Vec<(ShardId, u32, SnapshotRead)> {
    out.iter()
        .filter_map(|o| match o {
            ClientOutput::SendTo { shard, replica, msg: ClientMsg::SnapshotRead(r) } => {
                Some((*shard, *replica, r.clone()))
            }
            ClientOutput::SendTo { .. }
            | ClientOutput::Send { .. }
            | ClientOutput::Done(_)
            | ClientOutput::Resolved(_) => None,
        })
        .collect()
}

fn done(out: &[ClientOutput]) -> Option<&Completion> {
    out.iter().find_map(|o| match o {
        ClientOutput::Done(d) => Some(d),
        ClientOutput::Send { .. } | ClientOutput::SendTo { .. } | ClientOutput::Resolved(_) => None,
    })
}

fn answer(
    read: &SnapshotRead,
    replica: u32,
    held_us: u64,
    outcome: Result<Result<Vec<u8>, ProcError>, ReadRefusal>,
) -> ServerMsg {
    ServerMsg::SnapshotRead(SnapshotReadReply {
        id: read.id,
        shard: read.shard,
        replica,
        ts: read.ts,
        outcome,
        arrival_delta_us: 0,
        held_us,
        position: None,
    })
}

/// A leader's answer served ahead of its commits, resting on `position` (rule 23 (e)).
fn answer_at(read: &SnapshotRead, replica: u32, value: u8, position: LogPos) -> ServerMsg {
    let ServerMsg::SnapshotRead(reply) = answer(read, replica, 0, Ok(Ok(vec![value]))) else { unreachable!() };
    ServerMsg::SnapshotRead(SnapshotReadReply { position: Some(position), ..reply })
}

fn leader_commit(shard: ShardId, pos: LogPos) -> ServerMsg {
    ServerMsg::Progress(ProgressReport { shard, replica: 0, term: pos.term, pos, committed: true })
}

/// Rule 23 (e) and rule 14: a piece served on a position not proven committed counts only
/// once the shard's progress proves it; one never proven is asked again elsewhere, at the
/// same snapshot, after the resend timeout, and the newer answer replaces it.
#[test]
fn a_piece_served_on_an_unproven_position_counts_once_proven_and_is_asked_elsewhere_if_never() {
    for trust in [false, true] {
        let mutations = CoordMutations { count_unproven_reads: trust, ..CoordMutations::default() };
        let mut c = Coordinator::new(CoordinatorConfig { mutations, ..reading(1) });
        let mut out = Vec::new();
        c.submit(0, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
        let (_, r, read) = reads(&out)[0].clone();
        out.clear();
        let at = LogPos { term: 2, index: 10 };
        c.on_message(1_000, answer_at(&read, r, 1, at), &mut out);
        c.check_invariants().unwrap();
        if trust {
            assert!(done(&out).is_some(), "the mutation counts the unproven answer");
            continue;
        }
        assert!(done(&out).is_none(), "not proven: waits");
        c.on_message(2_000, leader_commit(0, LogPos { term: 2, index: 9 }), &mut out);
        assert!(done(&out).is_none(), "a commit below it proves nothing");
        c.on_message(3_000, leader_commit(0, at), &mut out);
        let d = done(&out).expect("proven: answered");
        assert_eq!(d.outcome, TxnOutcome::Ordered { ts: read.ts, results: vec![(0, Ok(vec![1]))] });
        out.clear();
        // Never proven (the leader of term 3 deposed before its write committed).
        c.submit(10_000, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
        let (_, r, read) = reads(&out)[0].clone();
        out.clear();
        c.on_message(11_000, answer_at(&read, r, 2, LogPos { term: 3, index: 20 }), &mut out);
        c.on_message(12_000, leader_commit(0, LogPos { term: 4, index: 30 }), &mut out);
        assert!(done(&out).is_none(), "another term's commit proves nothing");
        c.check_invariants().unwrap();
        c.tick(10_000 + 1_000_000, &mut out);
        let [(0, again, ref resent)] = reads(&out)[..] else { panic!("asked again: {out:?}") };
        assert!(again != r && resent.ts == read.ts, "elsewhere, at the same snapshot");
        out.clear();
        c.on_message(1_020_000, answer(resent, again, 0, Ok(Ok(vec![3]))), &mut out);
        let d = done(&out).expect("the newer answer counts");
        assert_eq!(d.outcome, TxnOutcome::Ordered { ts: read.ts, results: vec![(0, Ok(vec![3]))] });
        assert_eq!(c.in_flight(), 0);
        c.check_invariants().unwrap();
    }
}

#[test]
fn a_transaction_without_writes_reads_every_shard_at_one_snapshot_above_what_the_client_observed() {
    let mut c = Coordinator::new(reading(1));
    let mut out = Vec::new();
    // A read-write transaction answered at 900_000: the client has observed it.
    let w = c.submit(0, "p", vec![], vec![piece(0)], &mut out).unwrap();
    out.clear();
    c.on_message(10, reply(w, 0, 900_000, 900_000, 5), &mut out);
    assert!(done(&out).is_some_and(|d| d.outcome.is_committed() && !d.read_only));
    out.clear();
    let id = c.submit(20, "get", vec![7], vec![read_piece(1), read_piece(0)], &mut out).unwrap();
    let sent = reads(&out);
    assert_eq!(sent.len(), 2, "one replica per participant: {out:?}");
    assert!(sent.iter().all(|(_, _, r)| r.ts == 900_000 && r.id == id), "the observed answer, above now + bound");
    assert!(sent.iter().all(|(s, _, r)| r.shard == *s && r.procedure == "get" && r.args == vec![7]));
    assert_eq!(c.in_flight(), 1);
    out.clear();
    let later = c.snapshot_ts(2_000_000);
    assert_eq!(later, 2_000_000 + OFFSET_US, "now plus the clock bound once that is higher");
    for (_, replica, read) in &sent {
        c.on_message(30, answer(read, *replica, 0, Ok(Ok(vec![read.shard as u8]))), &mut out);
    }
    let d = done(&out).expect("answered once both pieces are served");
    assert!(d.read_only && d.id == id);
    assert_eq!(d.outcome, TxnOutcome::Ordered { ts: 900_000, results: vec![(0, Ok(vec![0])), (1, Ok(vec![1]))] });
    assert_eq!((c.in_flight(), c.stats().read_only), (0, 1));
    c.check_invariants().unwrap();
}

#[test]
fn pieces_go_to_the_replica_that_answers_soonest_its_wait_there_included() {
    let mut c = Coordinator::new(reading(1));
    let mut out = Vec::new();
    // Three reads measure the three replicas of shard 0: 1 is nearest by the wire, but it held
    // its read 400 ms for its safe time (a follower behind its leader); 2 answers soonest.
    let rtts = [(0u32, 150_000u64, 0u64), (1, 402_000, 400_000), (2, 80_000, 0)];
    for (k, (replica, rtt, held)) in rtts.into_iter().enumerate() {
        out.clear();
        let now = k as u64 * 1_000_000;
        c.submit(now, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
        let [(0, r, ref read)] = reads(&out)[..] else { panic!("one read: {out:?}") };
        assert_eq!(r, replica, "unmeasured replicas are tried in turn");
        c.on_message(now + rtt, answer(read, r, held, Ok(Ok(vec![]))), &mut out);
    }
    out.clear();
    c.submit(5_000_000, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
    assert_eq!(reads(&out)[0].1, 2, "then the soonest");
}

#[test]
fn a_refused_or_silent_piece_goes_to_another_replica_at_the_same_snapshot_and_runs_out_clearly() {
    let mut c = Coordinator::new(reading(1));
    let mut out = Vec::new();
    let id = c.submit(0, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
    let (_, first, read) = reads(&out)[0].clone();
    out.clear();
    c.on_message(1_000, answer(&read, first, 0, Err(ReadRefusal::Busy)), &mut out);
    assert!(out.is_empty(), "a refusal waits the pause");
    assert_eq!(c.next_deadline(), Some(1_000 + 50_000));
    c.tick(51_000, &mut out);
    let [(0, second, ref again)] = reads(&out)[..] else { panic!("resent: {out:?}") };
    assert!(second != first && again.ts == read.ts && again.id == id, "elsewhere, same snapshot");
    out.clear();
    // Silent: resent after the resend timeout, to yet another replica.
    c.tick(51_000 + 999_999, &mut out);
    assert!(out.is_empty());
    c.tick(51_000 + 1_000_000, &mut out);
    let [(0, third, _)] = reads(&out)[..] else { panic!("resent after silence: {out:?}") };
    assert!(third != second);
    out.clear();
    // A snapshot older than the replica keeps is a refusal too; the fourth send is the last.
    c.on_message(1_100_000, answer(&read, third, 0, Ok(Err(too_old()))), &mut out);
    c.tick(1_200_000, &mut out);
    assert_eq!(reads(&out).len(), 1, "the fourth and last attempt");
    out.clear();
    c.tick(3_000_000, &mut out);
    let d = done(&out).expect("out of attempts: reported");
    assert!(matches!(&d.outcome, TxnOutcome::Rejected(why) if why.contains("no replica of shard 0")), "{d:?}");
    assert!(d.read_only && d.attempts == 4);
    assert_eq!(c.in_flight(), 0);
}

fn too_old() -> ProcError {
    ProcError::SnapshotTooOld { requested: 1, oldest: 2 }
}

#[test]
fn a_refusal_no_replica_lifts_fails_at_once_and_a_late_answer_changes_nothing() {
    let mut c = Coordinator::new(reading(1));
    let mut out = Vec::new();
    c.submit(0, "get", vec![], vec![read_piece(0), read_piece(1)], &mut out).unwrap();
    let sent = reads(&out);
    out.clear();
    let (_, r0, read0) = &sent[0];
    c.on_message(5, answer(read0, *r0, 0, Err(ReadRefusal::NotSupported("baseline".into()))), &mut out);
    let d = done(&out).expect("reported at once");
    assert!(matches!(&d.outcome, TxnOutcome::Rejected(why) if why.contains("not supported")));
    out.clear();
    let (_, r1, read1) = &sent[1];
    c.on_message(6, answer(read1, *r1, 0, Ok(Ok(vec![]))), &mut out);
    assert!(out.is_empty() && c.in_flight() == 0, "the other piece's answer is dropped");
    // A procedure's own error is its result, not a refusal.
    c.submit(10, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
    let (_, r, read) = reads(&out)[0].clone();
    out.clear();
    let failed = ProcError::WriteInReadOnly(vec![1]);
    c.on_message(20, answer(&read, r, 0, Ok(Err(failed.clone()))), &mut out);
    let d = done(&out).expect("answered");
    assert_eq!(d.outcome, TxnOutcome::Ordered { ts: read.ts, results: vec![(0, Err(TxnError::Proc(failed)))] });
}

#[test]
fn a_lost_link_moves_waiting_pieces_and_the_path_off_takes_the_read_write_path() {
    let mut c = Coordinator::new(reading(1));
    let mut out = Vec::new();
    c.submit(0, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
    let (_, first, _) = reads(&out)[0].clone();
    out.clear();
    c.replica_link(100, 0, first, false);
    assert_eq!(c.next_deadline(), Some(100), "due at once");
    c.tick(100, &mut out);
    assert!(reads(&out).iter().all(|(_, r, _)| *r != first), "{out:?}");
    // Off: the same transaction is dispatched to the leaders.
    let mut off = Coordinator::new(CoordinatorConfig { read_only_path: false, ..reading(2) });
    out.clear();
    off.submit(0, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
    assert!(reads(&out).is_empty());
    assert!(matches!(out.as_slice(), [ClientOutput::Send { msg: ClientMsg::Dispatch { .. }, .. }]));
    // Declared writes are refused by the explicit entry.
    let e = c.submit_read_only(0, "put", vec![], vec![piece(0)], &mut out).unwrap_err();
    assert!(e.to_string().contains("declares writes"), "{e}");
}

#[test]
fn with_the_all_shards_rule_a_served_read_waits_for_the_other_shards_watermarks() {
    let cfg = CoordinatorConfig { commit_rule: CommitRule::AllShards { shards: 2 }, keepalive_us: 100, ..reading(1) };
    let mut c = Coordinator::new(cfg);
    let mut out = Vec::new();
    c.submit(0, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
    let (_, r, read) = reads(&out)[0].clone();
    assert_eq!(read.ts, OFFSET_US);
    out.clear();
    c.on_message(5, answer(&read, r, 0, Ok(Ok(vec![]))), &mut out);
    assert!(done(&out).is_none(), "shard 1 has not passed the snapshot: a later writer there could go below it");
    assert_eq!(c.next_deadline(), Some(100), "the keepalive keeps the watermarks coming");
    c.on_message(6, ServerMsg::Watermark { shard: 1, watermark: OFFSET_US - 1 }, &mut out);
    assert!(done(&out).is_none());
    c.on_message(7, ServerMsg::Watermark { shard: 1, watermark: OFFSET_US }, &mut out);
    assert!(done(&out).is_some_and(|d| d.read_only && d.outcome.is_committed()), "{out:?}");
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn a_full_table_of_reads_holds_new_submissions_until_one_is_answered() {
    let mut c = Coordinator::new(reading(1));
    let mut out = Vec::new();
    let mut first = None;
    for k in 0..read_only::READS_MAX {
        assert!(c.can_submit(), "room for read {k}");
        c.submit(0, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
        if first.is_none() {
            first = reads(&out).into_iter().next();
        }
        out.clear();
    }
    assert!(!c.can_submit(), "full: the shell holds new submissions");
    assert_eq!(c.in_flight(), read_only::READS_MAX);
    let (_, r, read) = first.expect("the first read was sent");
    c.on_message(10, answer(&read, r, 0, Ok(Ok(vec![]))), &mut out);
    assert!(done(&out).is_some(), "answered");
    assert!(c.can_submit(), "room again once one is answered");
}

#[test]
fn with_many_reads_in_flight_only_the_due_piece_is_resent_and_only_passed_snapshots_answered() {
    let mut c = Coordinator::new(CoordinatorConfig {
        commit_rule: CommitRule::AllShards { shards: 2 },
        keepalive_us: 10_000_000,
        ..reading(1)
    });
    let mut out = Vec::new();
    let mut sent = Vec::new();
    for now in [0, 100, 200] {
        c.submit(now, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
        sent.push(reads(&out).remove(0));
        out.clear();
    }
    assert_eq!(c.reads.next_due(), Some(1_000_000), "the first read's resend timeout");
    let (_, r1, ref b) = sent[1];
    c.on_message(300, answer(b, r1, 0, Err(ReadRefusal::Busy)), &mut out);
    assert_eq!(c.reads.next_due(), Some(50_300), "the refused read, after the pause");
    let (_, r0, ref a) = sent[0];
    c.on_message(400, answer(a, r0, 0, Ok(Ok(vec![]))), &mut out);
    c.check_invariants().unwrap();
    assert_eq!(c.next_deadline(), Some(50_300));
    out.clear();
    c.tick(50_300, &mut out);
    let resent = reads(&out);
    assert_eq!(resent.len(), 1, "only the due piece: {out:?}");
    assert_eq!((resent[0].2.id, resent[0].2.ts), (b.id, b.ts));
    assert_ne!(resent[0].1, r1, "to another replica");
    assert_eq!(c.reads.next_due(), Some(1_000_200), "the third read's resend timeout is next");
    // The third read is served too; shard 1's watermark passes the first snapshot only.
    let (_, r2, ref third) = sent[2];
    c.on_message(50_400, answer(third, r2, 0, Ok(Ok(vec![]))), &mut out);
    out.clear();
    c.on_message(50_500, ServerMsg::Watermark { shard: 1, watermark: a.ts }, &mut out);
    let answered: Vec<_> = out.iter().filter(|o| matches!(o, ClientOutput::Done(_))).collect();
    assert_eq!(answered.len(), 1, "{out:?}");
    assert!(done(&out).is_some_and(|d| d.id == a.id), "the read at the passed snapshot");
    c.check_invariants().unwrap();
    out.clear();
    c.on_message(50_600, ServerMsg::Watermark { shard: 1, watermark: third.ts }, &mut out);
    assert!(done(&out).is_some_and(|d| d.id == third.id));
    assert_eq!(c.in_flight(), 1, "the resent read is still out");
    c.check_invariants().unwrap();
}

#[test]
fn the_invariant_check_catches_a_read_missing_from_its_due_index() {
    let mut c = Coordinator::new(reading(1));
    let mut out = Vec::new();
    c.submit(0, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
    c.check_invariants().unwrap();
    let entry = *c.reads.due.first().expect("indexed");
    c.reads.due.remove(&entry);
    let err = c.check_invariants().unwrap_err();
    assert!(err.contains("indexed"), "{err}");
}

/// The proof scan passes over a term it cannot prove to the next, and over the last term
/// (`u64::MAX`) to the next shard: a piece waiting on a position of another shard is still
/// found.
#[test]
fn a_proof_is_found_past_unproven_positions_of_any_term_on_another_shard() {
    let mut c = Coordinator::new(reading(1));
    let mut out = Vec::new();
    let a = c.submit(0, "get", vec![], vec![read_piece(0)], &mut out).unwrap();
    let b = c.submit(0, "get", vec![], vec![read_piece(1)], &mut out).unwrap();
    let sent = reads(&out);
    out.clear();
    let (_, ra, read_a) = sent.iter().find(|(_, _, r)| r.id == a).unwrap().clone();
    let (_, rb, read_b) = sent.iter().find(|(_, _, r)| r.id == b).unwrap().clone();
    c.on_message(1_000, answer_at(&read_a, ra, 1, LogPos { term: u64::MAX, index: u64::MAX }), &mut out);
    c.on_message(1_000, answer_at(&read_b, rb, 2, LogPos { term: 2, index: 5 }), &mut out);
    assert!(done(&out).is_none());
    c.on_message(2_000, leader_commit(1, LogPos { term: 2, index: 5 }), &mut out);
    let d = done(&out).expect("shard 1's piece proven");
    assert_eq!(d.id, b);
    assert_eq!(c.in_flight(), 1, "shard 0's still waits");
    c.check_invariants().unwrap();
}
