//! The table's retry rules on their own, under a toy policy (an answer counts once it is
//! there; the dispatch goes to each waiting participant): what every protocol inherits.

use super::*;
use crate::client_core::TxnOutcome;
use crate::msg::{ClientMsg, TxnError, TxnReply};
use crate::types::{KeySet, ShardPiece, Txn};
use std::sync::Arc;

const TIMEOUT: u64 = 1_000;
const NOT_LEADER: u64 = 50;

struct Toy;

impl FlightPolicy<()> for Toy {
    fn settled(&self, flight: &Flight<()>, slot: usize) -> bool {
        flight.replies[slot].is_some()
    }

    fn dispatch_to(&self) -> DispatchTo {
        DispatchTo::EachWaiting
    }
}

fn table() -> InFlightTable<()> {
    InFlightTable::new(1, 4, RetryKnobs { retry_timeout_us: TIMEOUT, max_attempts: 2, not_leader_retry_us: NOT_LEADER })
}

/// Submits a transaction over `shards` at `now`.
fn open(t: &mut InFlightTable<()>, now: TimeUs, shards: &[ShardId], out: &mut Vec<ClientOutput>) -> TxnId {
    let mut pieces: Vec<ShardPiece> =
        shards.iter().map(|&shard| ShardPiece { shard, keys: KeySet::new(vec![], vec![vec![shard as u8]]) }).collect();
    let id = t.issue(&mut pieces).expect("well-formed pieces");
    let txn = Arc::new(Txn { id, procedure: "p".into(), args: vec![], pieces, ts: now.max(1) });
    t.open(&Toy, now, txn, false, (), out);
    id
}

fn reply(id: TxnId, shard: ShardId, outcome: Result<Vec<u8>, TxnError>) -> TxnReply {
    TxnReply {
        id,
        shard,
        ts: 1,
        outcome,
        watermark: 0,
        arrival_delta_us: 0,
        rounds: 1,
        position: None,
        order: None,
        early: false,
    }
}

/// Records `r` as the protocol would (the table only says whether to).
fn answer(t: &mut InFlightTable<()>, now: TimeUs, r: TxnReply) {
    if let Some(slot) = t.on_reply(now, &r) {
        let id = r.id;
        t.get_mut(id).expect("in flight").replies[slot] = Some(r);
    }
}

/// Ticks at `now`, reporting unknown what runs out; returns the dispatches' shards and the
/// unknown reports.
fn tick(t: &mut InFlightTable<()>, now: TimeUs) -> (Vec<ShardId>, Vec<TxnId>) {
    let mut out = Vec::new();
    t.tick(&Toy, now, &mut out, |t, id, why, out| {
        t.report(id, TxnOutcome::Unknown(why), 0, false, out);
        true
    });
    let sends = out.iter().filter_map(|o| if let ClientOutput::Send { shard, .. } = o { Some(*shard) } else { None });
    let unknown = out.iter().filter_map(|o| if let ClientOutput::Done(c) = o { Some(c.id) } else { None });
    (sends.collect(), unknown.collect())
}

/// Attempts run out into one `Unknown` (asked about afterwards, never reported twice) while
/// an answer is missing; a transaction whose answers all count is never declared unknown
/// (it waits only for its protocol's commit rule), whatever the protocol.
#[test]
fn only_a_missing_answer_makes_a_transaction_unknown() {
    let mut t = table();
    let mut out = Vec::new();
    let silent = open(&mut t, 0, &[0, 1], &mut out);
    let settled = open(&mut t, 0, &[0, 1], &mut out);
    answer(&mut t, 10, reply(silent, 0, Ok(vec![])));
    answer(&mut t, 10, reply(settled, 0, Ok(vec![])));
    answer(&mut t, 10, reply(settled, 1, Ok(vec![])));
    let (sends, unknown) = tick(&mut t, TIMEOUT);
    assert_eq!((sends, unknown), (vec![1], vec![]), "the second attempt goes to the silent participant only");
    let (_, unknown) = tick(&mut t, 2 * TIMEOUT);
    assert_eq!(unknown, vec![silent], "out of attempts: unknown; the settled one is not");
    assert_eq!((t.in_flight(), t.unresolved(), t.counts().unknown), (1, 1, 1));
    let (_, unknown) = tick(&mut t, 3 * TIMEOUT);
    assert!(unknown.is_empty(), "reported once, still asked about");
    t.check_invariants("toy").unwrap();
}

/// A "not the leader" (or "busy") answer stores nothing and brings the resend forward; it
/// is not an attempt. A lost link brings forward only the dispatches waiting on its shard.
#[test]
fn not_leader_and_lost_links_resend_soon_without_counting_attempts() {
    let mut t = table();
    let mut out = Vec::new();
    let a = open(&mut t, 0, &[0], &mut out);
    answer(&mut t, 10, reply(a, 0, Err(TxnError::NotLeader { hint: None })));
    assert!(t.get(a).unwrap().replies[0].is_none(), "nothing stored");
    assert_eq!(t.next_retry(), Some(10 + NOT_LEADER));
    assert_eq!(tick(&mut t, 10 + NOT_LEADER).0, vec![0]);
    assert_eq!((t.get(a).unwrap().attempts, t.counts().retries), (1, 0), "not an attempt");
    let b = open(&mut t, 100, &[1], &mut out);
    t.shard_unreachable(&Toy, 200, 1);
    assert_eq!(t.next_retry(), Some(200 + NOT_LEADER), "b, waiting on shard 1, goes soon");
    assert_eq!(tick(&mut t, 200 + NOT_LEADER).0, vec![1]);
    let _ = b;
}

/// Resends after "not the leader", "busy" or a lost link are counted apart from timeout
/// resends (attempts), in the table's counters and in the transaction's answer.
#[test]
fn resends_after_not_leader_busy_or_a_lost_link_are_counted_apart() {
    let mut t = table();
    let mut out = Vec::new();
    let a = open(&mut t, 0, &[0], &mut out);
    answer(&mut t, 10, reply(a, 0, Err(TxnError::NotLeader { hint: None })));
    tick(&mut t, 10 + NOT_LEADER);
    assert_eq!((t.counts().resends, t.counts().retries), (1, 0), "one resend, no attempt");
    answer(&mut t, 100, reply(a, 0, Err(TxnError::Busy("full".into()))));
    tick(&mut t, 100 + NOT_LEADER);
    t.shard_unreachable(&Toy, 200, 0);
    tick(&mut t, 200 + NOT_LEADER);
    assert_eq!(t.counts().resends, 3, "busy and the lost link count too");
    // A timeout resend is an attempt, not one of these.
    tick(&mut t, 200 + NOT_LEADER + TIMEOUT);
    assert_eq!((t.counts().resends, t.counts().retries), (3, 1));
    let mut done = Vec::new();
    t.report(a, TxnOutcome::Ordered { ts: 1, results: vec![(0, Ok(vec![]))] }, 0, false, &mut done);
    let [ClientOutput::Done(c)] = done.as_slice() else { panic!("one answer: {done:?}") };
    assert_eq!((c.resends, c.attempts), (3, 2), "the answer carries both");
}

/// `acked_below` is the smallest sequence number still in the table: an answered
/// transaction is acknowledged only once every earlier one left.
#[test]
fn acked_below_waits_for_the_oldest_in_flight() {
    let mut t = table();
    let mut out = Vec::new();
    let a = open(&mut t, 0, &[0], &mut out);
    let b = open(&mut t, 0, &[0], &mut out);
    assert_eq!(t.acked_below(), a.seq);
    t.forget(b);
    assert_eq!(t.acked_below(), a.seq, "b left, a holds it");
    t.forget(a);
    assert_eq!(t.acked_below(), b.seq + 1);
    let c = open(&mut t, 0, &[0], &mut out);
    let Some(ClientOutput::Send { msg: ClientMsg::Dispatch { acked_below, .. }, .. }) = out.last() else {
        panic!("a dispatch")
    };
    assert_eq!(*acked_below, c.seq, "c's dispatch acknowledges a and b");
}

/// Malformed pieces (none, two for one shard, a shard the cluster lacks) are refused with
/// what is wrong, numbering nothing: the shells hand the error to their caller instead of
/// panicking the client's driver.
#[test]
fn malformed_pieces_are_refused_with_what_is_wrong() {
    let piece = |shard| ShardPiece { shard, keys: KeySet::new(vec![], vec![vec![1]]) };
    let mut t = table();
    let err = |t: &mut InFlightTable<()>, mut pieces: Vec<ShardPiece>| t.issue(&mut pieces).unwrap_err().to_string();
    assert!(err(&mut t, vec![]).contains("no shard takes part"));
    assert!(err(&mut t, vec![piece(1), piece(0), piece(1)]).contains("two pieces name shard 1"));
    assert!(err(&mut t, vec![piece(0), piece(4)]).contains("names shard 4; the cluster has 4"));
    let mut pieces = vec![piece(3), piece(0)];
    assert_eq!(t.issue(&mut pieces), Ok(TxnId { client: 1, seq: 1 }), "nothing numbered before");
    assert_eq!(pieces.iter().map(|p| p.shard).collect::<Vec<_>>(), vec![0, 3], "sorted by shard");
}
