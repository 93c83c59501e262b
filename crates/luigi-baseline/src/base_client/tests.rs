//! Transcript tests of the baseline client: exact outputs for each input, invariants checked
//! after every step.

use super::*;
use luigi_txn::client_core::ClientCore;
use luigi_txn::client_core::Completion;
use luigi_txn::msg::ClientMsg;
use luigi_txn::procedure::ProcError;
use luigi_txn::types::{KeySet, Timestamp};

const TIMEOUT: u64 = 1_000;
const NOT_LEADER: u64 = 50;

fn client(protocol: Protocol) -> BaseClient {
    BaseClient::new(BaseClientConfig {
        retry_timeout_us: TIMEOUT,
        max_attempts: 3,
        not_leader_retry_us: NOT_LEADER,
        ..BaseClientConfig::new(7, protocol)
    })
}

fn piece(shard: ShardId) -> ShardPiece {
    ShardPiece { shard, keys: KeySet::new(vec![], vec![vec![shard as u8]]) }
}

fn reply(id: TxnId, shard: ShardId, ts: Timestamp, outcome: Result<Vec<u8>, TxnError>) -> ServerMsg {
    ServerMsg::Reply(TxnReply {
        id,
        shard,
        ts,
        outcome,
        watermark: 0,
        arrival_delta_us: 0,
        rounds: 1,
        position: None,
        order: None,
        early: false,
    })
}

/// The transaction `c` dispatched as `id` (as it travels).
fn txn_of(out: &[ClientOutput]) -> Arc<Txn> {
    match &out[0] {
        ClientOutput::Send { msg: ClientMsg::Dispatch { txn, .. }, .. } => txn.clone(),
        other => panic!("not a dispatch: {other:?}"),
    }
}

fn dispatch(shard: ShardId, txn: &Arc<Txn>, sent_us: TimeUs, acked_below: u64) -> ClientOutput {
    ClientOutput::Send { shard, msg: ClientMsg::Dispatch { txn: txn.clone(), sent_us, acked_below, fast: false } }
}

fn done(id: TxnId, submitted_us: TimeUs, attempts: u32, rounds: u8, outcome: TxnOutcome) -> ClientOutput {
    done_after_resends(id, submitted_us, attempts, 0, rounds, outcome)
}

/// [`done`] of a transaction resent `resends` times after NotLeader, Busy or a lost link.
fn done_after_resends(
    id: TxnId,
    submitted_us: TimeUs,
    attempts: u32,
    resends: u32,
    rounds: u8,
    outcome: TxnOutcome,
) -> ClientOutput {
    ClientOutput::Done(Completion {
        id,
        submitted_us,
        attempts,
        resends,
        rounds,
        fast: false,
        asked_fast: false,
        read_only: false,
        outcome,
    })
}

/// Feeds `msg` at `now` and returns exactly what came out; checks the invariants.
fn step(c: &mut BaseClient, now: TimeUs, msg: ServerMsg) -> Vec<ClientOutput> {
    let mut out = Vec::new();
    c.on_message(now, msg, &mut out);
    c.check_invariants().unwrap();
    out
}

fn tick(c: &mut BaseClient, now: TimeUs) -> Vec<ClientOutput> {
    let mut out = Vec::new();
    c.tick(now, &mut out);
    c.check_invariants().unwrap();
    out
}

fn submit(c: &mut BaseClient, now: TimeUs, shards: &[ShardId]) -> (TxnId, Vec<ClientOutput>) {
    let mut out = Vec::new();
    let id = c.submit(now, "p", vec![1], shards.iter().map(|s| piece(*s)).collect(), &mut out).unwrap();
    c.check_invariants().unwrap();
    (id, out)
}

#[test]
fn single_shard_happy_path() {
    for protocol in [Protocol::Occ, Protocol::TwoPl, Protocol::Direct] {
        let mut c = client(protocol);
        let (id, out) = submit(&mut c, 100, &[2]);
        assert_eq!(id, TxnId { client: 7, seq: 1 });
        let txn = txn_of(&out);
        assert_eq!((txn.ts, txn.pieces.len()), (100, 1), "the client's clock as the (non-zero) timestamp");
        assert_eq!(out, vec![dispatch(2, &txn, 100, 1)]);
        assert_eq!(c.in_flight(), 1);
        let out = step(&mut c, 150, reply(id, 2, 100, Ok(vec![9])));
        let outcome = TxnOutcome::Ordered { ts: 100, results: vec![(2, Ok(vec![9]))] };
        assert!(outcome.is_committed());
        assert_eq!(out, vec![done(id, 100, 1, 1, outcome)]);
        assert_eq!((c.in_flight(), c.next_deadline()), (0, None));
        // The next dispatch acknowledges it.
        let (_, out) = submit(&mut c, 200, &[2]);
        assert_eq!(out, vec![dispatch(2, &txn_of(&out), 200, 2)]);
    }
}

#[test]
fn cross_shard_goes_to_the_first_shard_and_completes_with_every_participant() {
    for protocol in [Protocol::Occ, Protocol::TwoPl] {
        let mut c = client(protocol);
        // Pieces are sorted: shard 1 coordinates.
        let (id, out) = submit(&mut c, 10, &[3, 1]);
        let txn = txn_of(&out);
        assert_eq!(txn.pieces.iter().map(|p| p.shard).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(out, vec![dispatch(1, &txn, 10, 1)], "to the coordinator only");
        assert_eq!(step(&mut c, 40, reply(id, 3, 10, Ok(vec![3]))), vec![]);
        // A duplicate of an answer changes nothing.
        assert_eq!(step(&mut c, 41, reply(id, 3, 10, Ok(vec![3]))), vec![]);
        // An answer for a shard that is no participant is ignored.
        assert_eq!(step(&mut c, 42, reply(id, 2, 10, Ok(vec![]))), vec![]);
        let out = step(&mut c, 45, reply(id, 1, 10, Ok(vec![1])));
        let outcome = TxnOutcome::Ordered { ts: 10, results: vec![(1, Ok(vec![1])), (3, Ok(vec![3]))] };
        assert_eq!(out, vec![done(id, 10, 1, 1, outcome)]);
        // A late duplicate of a finished transaction is ignored.
        assert_eq!(step(&mut c, 50, reply(id, 1, 10, Ok(vec![1]))), vec![]);
    }
}

#[test]
fn a_user_abort_on_one_shard_is_an_ordered_outcome_with_that_result() {
    let mut c = client(Protocol::Occ);
    let (id, _) = submit(&mut c, 10, &[0, 1]);
    let abort = Err(TxnError::Proc(ProcError::UserAbort("unused item".into())));
    assert_eq!(step(&mut c, 20, reply(id, 0, 10, Ok(vec![]))), vec![]);
    let out = step(&mut c, 21, reply(id, 1, 10, abort.clone()));
    let outcome = TxnOutcome::Ordered { ts: 10, results: vec![(0, Ok(vec![])), (1, abort)] };
    assert_eq!(outcome.user_abort(), Some("unused item"));
    assert_eq!(outcome.protocol_abort(), None);
    assert_eq!(out, vec![done(id, 10, 1, 1, outcome)]);
}

#[test]
fn a_protocol_abort_is_final_at_once_for_every_participant() {
    for protocol in [Protocol::Occ, Protocol::TwoPl] {
        let mut c = client(protocol);
        let (id, _) = submit(&mut c, 10, &[0, 1]);
        let out = step(&mut c, 30, reply(id, 1, 0, Err(TxnError::Aborted("lock held".into()))));
        let aborted = || Err(TxnError::Aborted("lock held".into()));
        let outcome = TxnOutcome::Ordered { ts: 0, results: vec![(0, aborted()), (1, aborted())] };
        assert_eq!(outcome.protocol_abort(), Some("lock held"));
        assert!(!outcome.is_committed());
        assert_eq!(out, vec![done(id, 10, 1, 1, outcome)]);
        assert_eq!(c.stats().aborted, 1);
        // The other participant's answer comes after: ignored. Nothing is resent.
        assert_eq!(step(&mut c, 31, reply(id, 0, 0, Err(TxnError::Aborted("lock held".into())))), vec![]);
        assert_eq!(tick(&mut c, 10_000), vec![]);
    }
}

#[test]
fn not_leader_resends_the_same_dispatch_soon_without_counting_an_attempt() {
    let mut c = client(Protocol::TwoPl);
    let (id, out) = submit(&mut c, 0, &[0, 1]);
    let txn = txn_of(&out);
    assert_eq!(step(&mut c, 10, reply(id, 0, 0, Err(TxnError::NotLeader { hint: Some(2) }))), vec![]);
    assert_eq!(c.next_deadline(), Some(10 + NOT_LEADER));
    assert_eq!(tick(&mut c, 59), vec![]);
    // Same transaction (same id), to the same shard: the shell routes it to the hinted replica.
    assert_eq!(tick(&mut c, 60), vec![dispatch(0, &txn, 60, 1)]);
    assert_eq!(c.next_deadline(), Some(60 + TIMEOUT));
    // Busy is handled alike.
    assert_eq!(step(&mut c, 70, reply(id, 0, 0, Err(TxnError::Busy("log full".into())))), vec![]);
    assert_eq!(tick(&mut c, 120), vec![dispatch(0, &txn, 120, 1)]);
    let out = step(&mut c, 130, reply(id, 0, 0, Ok(vec![])));
    assert_eq!(out, vec![]);
    let out = step(&mut c, 131, reply(id, 1, 0, Ok(vec![])));
    let outcome = TxnOutcome::Ordered { ts: 0, results: vec![(0, Ok(vec![])), (1, Ok(vec![]))] };
    assert_eq!(out, vec![done_after_resends(id, 0, 1, 2, 1, outcome)], "still the first attempt, resent twice");
}

#[test]
fn a_timeout_resends_then_reports_unknown_then_resolves() {
    let mut c = client(Protocol::Occ);
    let (id, out) = submit(&mut c, 0, &[0, 1]);
    let txn = txn_of(&out);
    // A partial answer: the coordinator's reply for shard 1 was lost.
    assert_eq!(step(&mut c, 5, reply(id, 0, 0, Ok(vec![]))), vec![]);
    assert_eq!(tick(&mut c, TIMEOUT - 1), vec![]);
    assert_eq!(tick(&mut c, TIMEOUT), vec![dispatch(0, &txn, TIMEOUT, 1)], "attempt 2, to the coordinator");
    assert_eq!(tick(&mut c, 2 * TIMEOUT), vec![dispatch(0, &txn, 2 * TIMEOUT, 1)], "attempt 3");
    let why = "no complete answer after 3 attempts".to_string();
    assert_eq!(
        tick(&mut c, 3 * TIMEOUT),
        vec![done(id, 0, 3, 0, TxnOutcome::Unknown(why)), dispatch(0, &txn, 3 * TIMEOUT, 1)],
        "reported unknown, and still asked about under the same id"
    );
    assert_eq!((c.in_flight(), c.unresolved(), c.stats().unknown), (0, 1, 1));
    // It holds the acknowledgement of later transactions.
    let (_, out) = submit(&mut c, 3 * TIMEOUT + 1, &[1]);
    assert_eq!(out, vec![dispatch(1, &txn_of(&out), 3 * TIMEOUT + 1, 1)]);
    let out = step(&mut c, 3 * TIMEOUT + 2, reply(id, 1, 0, Ok(vec![])));
    let outcome = TxnOutcome::Ordered { ts: 0, results: vec![(0, Ok(vec![])), (1, Ok(vec![]))] };
    let resolved = Completion {
        id,
        submitted_us: 0,
        attempts: 3,
        resends: 0,
        rounds: 1,
        fast: false,
        asked_fast: false,
        read_only: false,
        outcome,
    };
    assert_eq!(out, vec![ClientOutput::Resolved(resolved)]);
    assert_eq!((c.unresolved(), c.stats().resolved), (0, 1));
}

#[test]
fn a_lost_connection_resends_soon() {
    let mut c = client(Protocol::Occ);
    let (_, out) = submit(&mut c, 0, &[0, 1]);
    let txn = txn_of(&out);
    c.shard_unreachable(5, 1); // not the coordinator's shard: nothing waits on it
    assert_eq!(c.next_deadline(), Some(TIMEOUT));
    c.shard_unreachable(5, 0);
    assert_eq!(c.next_deadline(), Some(5 + NOT_LEADER));
    assert_eq!(tick(&mut c, 5 + NOT_LEADER), vec![dispatch(0, &txn, 5 + NOT_LEADER, 1)]);
}

#[test]
fn direct_fans_out_and_each_shard_answers_for_itself() {
    let mut c = client(Protocol::Direct);
    let (id, out) = submit(&mut c, 0, &[2, 0, 1]);
    let txn = txn_of(&out);
    assert_eq!(out, vec![dispatch(0, &txn, 0, 1), dispatch(1, &txn, 0, 1), dispatch(2, &txn, 0, 1)]);
    assert_eq!(step(&mut c, 10, reply(id, 1, 0, Ok(vec![1]))), vec![]);
    assert_eq!(step(&mut c, 11, reply(id, 0, 0, Err(TxnError::NotLeader { hint: None }))), vec![]);
    // Only the shards that have not answered get it again.
    assert_eq!(tick(&mut c, 11 + NOT_LEADER), vec![dispatch(0, &txn, 61, 1), dispatch(2, &txn, 61, 1)]);
    // An abort on one shard is that shard's result only (the others ran regardless).
    let aborted = Err(TxnError::Aborted("whatever".into()));
    assert_eq!(step(&mut c, 70, reply(id, 2, 0, aborted.clone())), vec![]);
    let out = step(&mut c, 80, reply(id, 0, 0, Ok(vec![0])));
    let outcome = TxnOutcome::Ordered { ts: 0, results: vec![(0, Ok(vec![0])), (1, Ok(vec![1])), (2, aborted)] };
    assert_eq!(out, vec![done_after_resends(id, 0, 1, 1, 1, outcome)], "one resend round after NotLeader");
}

#[test]
fn refused_by_every_participant_is_rejected_and_partly_refused_is_not() {
    let mut c = client(Protocol::Direct);
    let (id, _) = submit(&mut c, 0, &[0, 1]);
    let refused = || Err(TxnError::Rejected("bad keys".into()));
    assert_eq!(step(&mut c, 1, reply(id, 0, 0, refused())), vec![]);
    let out = step(&mut c, 2, reply(id, 1, 0, refused()));
    assert_eq!(out, vec![done(id, 0, 1, 1, TxnOutcome::Rejected("bad keys".into()))]);
    let (id, _) = submit(&mut c, 3, &[0, 1]);
    assert_eq!(step(&mut c, 4, reply(id, 0, 0, refused())), vec![]);
    let out = step(&mut c, 5, reply(id, 1, 0, Ok(vec![])));
    let outcome = TxnOutcome::Ordered { ts: 0, results: vec![(0, refused()), (1, Ok(vec![]))] };
    assert_eq!(out, vec![done(id, 3, 1, 1, outcome)], "shard 1 ran it: not 'executed nowhere'");
}

#[test]
fn watermarks_and_pongs_are_ignored() {
    let mut c = client(Protocol::Occ);
    let (_, _) = submit(&mut c, 0, &[0]);
    assert_eq!(step(&mut c, 1, ServerMsg::Watermark { shard: 0, watermark: 1 << 40 }), vec![]);
    assert_eq!(step(&mut c, 1, ServerMsg::Pong { shard: 0, arrival_delta_us: 3, sent_us: 0, watermark: 9 }), vec![]);
    assert_eq!(c.in_flight(), 1);
}

#[test]
#[should_panic(expected = "Coordinator")]
fn luigi_has_its_own_client() {
    let _ = BaseClient::new(BaseClientConfig::new(1, Protocol::Luigi));
}
