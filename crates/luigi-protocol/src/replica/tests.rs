//! Luigi's replica over a one-voter group's log: role switches, snapshots, the fast path's
//! accepts and recovery.

use std::sync::Arc;

use crate::fast::AcceptRecord;
use luigi_txn::msg::ServerMsg;
use luigi_txn::types::{KeySet, ShardPiece, Txn, TxnId};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};

use super::*;
use luigi_raft::RaftConfig;

/// A one-voter group's replica and its node's log; readies are "persisted" at once.
pub(super) struct Lone {
    pub(super) r: Replica,
    pub(super) log: RaftLog,
}

pub(super) fn lone_over(config: LeaderConfig, recovered: Option<luigi_raft::RecoveredState>) -> Lone {
    let log = RaftLog::new(RaftConfig::new(1, vec![1], 7), recovered).unwrap();
    let r = start(config, luigi_workloads::procedures::builtins(), empty_store(), &log).unwrap();
    Lone { r, log }
}

pub(super) fn lone_replica() -> Lone {
    lone_over(LeaderConfig::new(0, 1), None)
}

pub(super) fn drive(log: &mut RaftLog) {
    while let Some(rd) = log.ready().unwrap() {
        log.advance(rd.number);
    }
}

pub(super) fn dispatch(seq: u64) -> ClientMsg {
    let ops = vec![MicroOp { key: 1, write: Some(seq) }];
    let txn = Arc::new(Txn {
        id: TxnId { client: 4, seq },
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(&ops).unwrap(),
        pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(vec![], vec![micro_key(1)]) }],
        ts: 1,
    });
    ClientMsg::Dispatch { txn, sent_us: 90, acked_below: 1, fast: true }
}

/// Drives `n` and turns it at `now` until nothing is left to do; returns the replies.
pub(super) fn settle(n: &mut Lone, now: TimeUs) -> Vec<LeaderOutput> {
    let mut out = Vec::new();
    for _ in 0..8 {
        drive(&mut n.log);
        n.r.turn(&mut n.log, now, &mut out).unwrap();
    }
    out
}

#[test]
fn the_leader_of_a_group_of_one_snapshots_what_a_follower_would_hold() {
    let mut n = lone_replica();
    n.log.campaign().unwrap();
    settle(&mut n, 100);
    assert!(n.r.is_serving());
    // The election's no-op and the new leader's floor promise.
    let elected_at = n.log.handed_out();
    assert!(n.r.own_snapshot_due(&n.log, elected_at + 1).unwrap().is_none(), "not due yet");
    let mut out = Vec::new();
    for seq in 1..=5 {
        n.r.on_client(&mut n.log, 1_000 * seq, 4, dispatch(seq), &mut out);
    }
    // Long after every timestamp: executed, answered, and covered by an Applied marker.
    out.extend(settle(&mut n, 60_000_000));
    let replies = out.iter().filter(|o| matches!(o, LeaderOutput::ToClient { msg: ServerMsg::Reply(_), .. }));
    assert_eq!(replies.count(), 5, "{out:?}");
    let index = n.log.handed_out();
    assert!(index > elected_at + 5, "the writes and a marker are logged");
    let job = n.r.own_snapshot_due(&n.log, index).unwrap().expect("due");
    assert_eq!(job.index(), index);
    // More writes before the job runs (as while it runs on another thread) change nothing in it.
    n.r.on_client(&mut n.log, 10_000, 4, dispatch(6), &mut Vec::new());
    settle(&mut n, 70_000_000);
    let image = std::thread::spawn(move || job.run()).join().unwrap().unwrap();
    assert_eq!(image.crc32, crc32fast::hash(&image.data));
    let (at, data) = (image.index, image.data);
    assert_eq!(at, index);
    let value = |store: &Store| store.get(&micro_key(1)).map(|v| v.as_slice().to_vec());
    let image = Follower::from_snapshot(0, luigi_workloads::procedures::builtins(), &data).unwrap();
    assert_eq!(value(image.store()), Some(5u64.to_le_bytes().to_vec()), "the state at the job's index");
    assert_eq!(value(n.r.store()), Some(6u64.to_le_bytes().to_vec()));

    // Compacted behind it, the log restarts from the snapshot and the entries after it.
    let snap = n.log.compact(at, data).unwrap();
    let log = &n.log;
    let entries =
        (at + 1..=log.last_index()).map(|i| luigi_raft::codec::encode_entry(&log.entry(i).unwrap())).collect();
    let recovered = luigi_raft::RecoveredState {
        hard_state: luigi_raft::HardState { term: log.term(), vote: 1, commit: at },
        snapshot: Some(snap),
        entries,
        applied: 0,
        rejoining: false,
    };
    let mut restarted = lone_over(LeaderConfig::new(0, 1), Some(recovered));
    restarted.log.campaign().unwrap();
    settle(&mut restarted, 60_000_100);
    assert!(restarted.r.is_serving());
    assert_eq!(restarted.r.store().get(&micro_key(1)), n.r.store().get(&micro_key(1)));
}

/// Rule 22 (issue 26): an accept of a malformed transaction in the accept log (written
/// by a replica that did not check it, as before rule 22) is never recovered: its leader
/// refused it, and the client was told it would run nowhere. Unsorted keys once made a
/// new leader execute part of such a transaction.
#[test]
fn a_new_leader_recovers_no_malformed_accept() {
    let config = LeaderConfig { fast_path: true, ..LeaderConfig::new(0, 1) };
    let mut n = lone_over(config, None);
    let ClientMsg::Dispatch { txn, .. } = dispatch(1) else { unreachable!() };
    let unsorted = KeySet { reads: vec![], writes: vec![micro_key(2), micro_key(1)] };
    let bad = Txn { pieces: vec![ShardPiece { shard: 0, keys: unsorted }], ts: 500, ..(*txn).clone() };
    let good = Txn { id: TxnId { client: 4, seq: 2 }, ts: 600, ..(*txn).clone() };
    let records: Vec<(u64, Vec<u8>)> = [bad, good]
        .into_iter()
        .enumerate()
        .map(|(n, t)| (n as u64, AcceptRecord { ts: t.ts, txn: Arc::new(t) }.encode()))
        .collect();
    n.r.restore_accepts(&records).unwrap();
    assert_eq!(n.r.protocol().acceptor.as_ref().unwrap().undecided().len(), 2);
    n.log.campaign().unwrap();
    let mut out = settle(&mut n, 100);
    assert!(n.r.is_serving(), "{out:?}");
    out.extend(settle(&mut n, 10_000));
    let executed: Vec<u64> = out
        .iter()
        .filter_map(|o| match o {
            LeaderOutput::Executed { id, .. } => Some(id.seq),
            _ => None,
        })
        .collect();
    assert_eq!(executed, vec![2], "only the well-formed accept is recovered: {out:?}");
}

#[test]
fn through_the_seam_a_peer_message_that_does_not_decode_is_counted_and_dropped_never_a_panic() {
    use luigi_txn::peer::PeerBody;
    let mut n = lone_replica();
    n.log.campaign().unwrap();
    drive(&mut n.log);
    assert_eq!(n.r.turn(&mut n.log, 300, &mut Vec::new()).unwrap(), Some(Transition::Promoted));
    let seam: &mut dyn ShardReplica = &mut n.r;
    let mut out = Vec::new();
    let garbled = PeerMsg { from: 1, body: PeerBody::Protocol(vec![0xff; 3]) };
    assert!(!seam.on_peer(&mut n.log, 310, garbled, &mut out), "a garbled batch is not taken");
    // A batch naming another sender than its envelope is refused too.
    let forged = PeerMsg { from: 2, ..PeerBatch { from: 1, watermark: 0, items: vec![] }.encode().msg };
    assert!(!seam.on_peer(&mut n.log, 320, forged, &mut out));
    let good = PeerBatch { from: 1, watermark: 0, items: vec![] }.encode().msg;
    assert!(seam.on_peer(&mut n.log, 330, good, &mut out), "a serving replica takes a batch that decodes");
    assert_eq!(n.r.stats().undecodable_peer, 2);
    assert!(n.r.is_serving());
}

#[test]
fn a_follower_answers_not_leader_then_serves_once_its_term_has_a_commit() {
    let mut n = lone_replica();
    let mut out = Vec::new();
    // No leader known: the dispatch waits for one (see `Waiting`).
    n.r.on_client(&mut n.log, 100, 4, dispatch(1), &mut out);
    assert!(out.is_empty(), "{out:?}");
    n.r.turn(&mut n.log, 150, &mut out).unwrap();
    assert!(out.is_empty(), "still no leader: {out:?}");
    assert!(!n.r.on_peer(&mut n.log, 100, PeerBatch { from: 1, watermark: 0, items: vec![] }, &mut out));

    n.log.campaign().unwrap();
    assert!(n.log.is_leader());
    // Leader in Raft, but its term's no-op is not committed and applied yet.
    assert_eq!(n.r.turn(&mut n.log, 200, &mut out).unwrap(), None);
    assert!(!n.r.is_serving());
    drive(&mut n.log);
    assert_eq!(n.r.turn(&mut n.log, 300, &mut out).unwrap(), Some(Transition::Promoted));
    assert!(n.r.is_serving());
    // The dispatch that waited is admitted the moment the replica serves (its timestamp
    // has passed: moved up to the clock, not above the floor promise the replica proposed
    // on winning, which bounds only later leaders' admissions), executed, and answered:
    // that promise committed with the no-op, so the watermark passes it at once (rule 8).
    let reply = |o: &LeaderOutput| match o {
        LeaderOutput::ToClient { client: 4, msg: ServerMsg::Reply(r) } => Some((r.id.seq, r.ts, r.position)),
        _ => None,
    };
    let [LeaderOutput::Executed { ts: 300, .. }, answer] = out.as_slice() else { panic!("{out:?}") };
    assert!(matches!(reply(answer), Some((1, 300, Some(_)))), "answered, naming its position: {out:?}");
    // A replica that knows no leader and waited too long says so, without a hint.
    let mut other = lone_replica();
    other.r.on_client(&mut other.log, 100, 4, dispatch(9), &mut Vec::new());
    let mut late = Vec::new();
    other.r.turn(&mut other.log, 100 + luigi_replica::waiting::WAITING_US_MAX + 1, &mut late).unwrap();
    assert!(
        matches!(late.as_slice(), [LeaderOutput::ToClient { client: 4, msg: ServerMsg::Reply(reply) }]
            if reply.outcome == Err(luigi_txn::msg::TxnError::NotLeader { hint: None }) && reply.arrival_delta_us == 10),
        "{late:?}"
    );
    assert_eq!(n.r.leader_hint(&n.log), Some(0));
    assert_eq!((n.log.role(), n.log.term()), (luigi_raft::Role::Leader, 1));
    assert_eq!(n.log.handed_out(), n.log.commit_index(), "everything committed was applied");
    out.clear();
    n.r.on_client(&mut n.log, 400, 4, dispatch(2), &mut out);
    // Rule 14: admitted, executed and answered at once (its timestamp has passed), before
    // its PREPARE commits: the answer names its position.
    let [LeaderOutput::Executed { ts: 400, .. }, answer] = out.as_slice() else { panic!("{out:?}") };
    assert!(matches!(reply(answer), Some((2, 400, Some(_)))), "{out:?}");
    assert!(n.log.commit_index() < n.log.last_index(), "not committed yet");
    assert_eq!(n.r.leader().unwrap().pending_len(), 0);
    settle(&mut n, 500);
    assert_eq!(n.log.commit_index(), n.log.last_index());
    assert_eq!(n.r.stats(), ReplicaStats { promotions: 1, demotions: 0, undecodable_peer: 0 });
}

/// The node's log holds bytes: a committed record that is not a Luigi record (another
/// protocol's, or an incompatible build's) stops the replica with `BadEntry` naming it,
/// from its turn and from every later ready of the log, and panics nowhere.
#[test]
fn a_committed_record_that_does_not_decode_stops_the_replica_with_an_error() {
    let mut n = lone_replica();
    n.log.campaign().unwrap();
    settle(&mut n, 100);
    assert!(n.r.is_serving());
    let bad = n.log.propose_bytes(vec![0xff; 4]).unwrap();
    drive(&mut n.log);
    let fatal = |e: &RaftError| matches!(e, RaftError::BadEntry { index, .. } if *index == bad);
    let err = n.r.turn(&mut n.log, 200, &mut Vec::new()).unwrap_err();
    assert!(fatal(&err), "{err}");
    assert!(n.log.ready().err().is_some_and(|e| fatal(&e)), "the log reports it from then on");
}

/// Every counter of a leader's stats survives the figures a shell reads (`leader_stats` is
/// the inverse of what `figures` makes of them): each field a different value, so that a
/// counter read under another's name is caught.
#[test]
fn leader_stats_read_back_from_the_figures_are_the_leaders_own() {
    use crate::leader::LeaderStats;
    let stats = LeaderStats {
        admitted: 1,
        bumped: 2,
        executed: 3,
        rejected: 4,
        malformed: 5,
        ahead_of_clock: 6,
        expired: 7,
        duplicates: 8,
        cross_decided: 9,
        cross_differed: 10,
        aborted: 11,
        early_overflow: 12,
        recover_sent: 13,
        recover_forgotten: 14,
        recover_kept: 15,
        outcomes_full: 16,
        recover_acknowledged: 17,
        fast_proposals: 18,
        early_answers: 19,
        bumped_late: 20,
        bumped_floor: 21,
        bumped_conflict: 22,
        fast_asked: 23,
        fast_ineligible: 24,
        fast_unclean: 25,
        fast_marked: 26,
    };
    let figures = LeaderFigures {
        agreement: Some(agreement_counters(&stats)),
        txns: txn_counts(&stats),
        ..LeaderFigures::default()
    };
    assert_eq!(leader_stats(&figures), Some(stats));
    assert_eq!(leader_stats(&LeaderFigures::default()), None);
}
