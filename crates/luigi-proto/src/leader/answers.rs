//! The exactly-once answer table (DESIGN.md rule 7), kept by leaders and followers alike so
//! that a new leader answers a retry from it instead of executing the transaction again.
//!
//! An answer stays until its client acknowledges it (`acked_below` on a later dispatch), or
//! until its client expires: a client whose transactions are all older than the expiry
//! ([`ANSWER_EXPIRY_US`]) behind the watermark is forgotten whole, so a client
//! that never comes back (every `luigi get/put/scan/txn` invocation) costs nothing after it.
//! A dispatch of a forgotten client's transaction is answered `Expired`, never executed
//! again ([`Answers::is_expired`]). For cross-shard transactions the final timestamp is
//! remembered a while longer (bounded by count): a participant's new leader may still ask
//! for it while recovering (see `PeerItem::Recover`), after the client has acknowledged the
//! answer everywhere else.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::msg::TxnError;
use crate::types::{ClientId, Timestamp, TxnId};
use crate::Map;

/// How long a client's answers outlive its newest transaction, in timestamp µs behind the
/// watermark (DESIGN.md rule 7, expiry). A protocol constant, not a setting: every replica
/// must forget a client no sooner than every leader refuses its old dispatches as expired.
/// Two minutes: far longer than a client resends (10 attempts of 2 s, plus `NotLeader`
/// waits), short enough that a command-line client run every second costs 120 tables.
pub const ANSWER_EXPIRY_US: u64 = 120_000_000;

/// Answers one client may have kept on a shard (answered, not acknowledged): past it its
/// dispatches are answered `Busy` until it acknowledges. A correct coordinator has at most
/// its unresolved and in-flight transactions unacknowledged (`UNRESOLVED_MAX` plus its
/// pending cap), well below.
pub const ANSWERS_PER_CLIENT_MAX: usize = 1 << 18;

/// How far the watermark moves between two expiry scans (a scan visits every client).
pub const EXPIRY_SCAN_US: u64 = ANSWER_EXPIRY_US / 8;

/// Final timestamps of acknowledged cross-shard transactions remembered for recovering peers
/// (kept small: they are in every snapshot).
pub const RECENT_FINAL_MAX: usize = 1 << 17;

/// An executed (or refused) transaction's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// Final timestamp (0 for a refusal).
    pub ts: Timestamp,
    /// What the client is told.
    pub outcome: Result<Vec<u8>, TxnError>,
    /// Echoed to the client for its one-way-delay estimate.
    pub arrival_delta_us: i64,
    /// Agreement rounds (0 single-shard or refused, 1 or 2 cross-shard).
    pub rounds: u8,
}

impl Answer {
    /// A refusal: never ordered or executed.
    pub fn refusal(reason: String, arrival_delta_us: i64) -> Self {
        Answer { ts: 0, outcome: Err(TxnError::Rejected(reason)), arrival_delta_us, rounds: 0 }
    }

    /// True for a refusal (admission refused it, or recovery aborted it).
    pub fn is_refusal(&self) -> bool {
        self.ts == 0 && matches!(self.outcome, Err(TxnError::Rejected(_)))
    }
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct ClientTable {
    /// The client has every answer below this sequence number.
    acked_below: u64,
    answers: BTreeMap<u64, Answer>,
    /// The largest timestamp of any transaction of this client seen here (admitted,
    /// answered or refused): once the watermark is the expiry past it, every dispatch of the
    /// client that this table could answer is expired, and the table goes.
    last_ts: Timestamp,
}

/// What the table knows of a transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum Known<'a> {
    /// Never seen (or seen and not answered yet: pending is tracked elsewhere).
    Unknown,
    /// Answered; the answer is kept.
    Answered(&'a Answer),
    /// Answered and acknowledged; for a cross-shard transaction its final timestamp if still
    /// remembered.
    Acknowledged(Option<Timestamp>),
}

/// Answers per client.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Answers {
    clients: Map<ClientId, ClientTable>,
    /// Final timestamps of acknowledged cross-shard transactions, oldest first.
    recent_final: VecDeque<(TxnId, Timestamp)>,
    recent_final_index: Map<TxnId, Timestamp>,
    /// The watermark at or past which [`Answers::expire_at`] next scans. Not replicated
    /// state (not in snapshots): a restored table scans at its first watermark.
    #[serde(skip)]
    expiry_scan_at: Timestamp,
}

impl Answers {
    /// What is known of `id`.
    pub fn known(&self, id: TxnId) -> Known<'_> {
        let Some(table) = self.clients.get(&id.client) else { return Known::Unknown };
        if let Some(a) = table.answers.get(&id.seq) {
            return Known::Answered(a);
        }
        if id.seq < table.acked_below {
            return Known::Acknowledged(self.recent_final_index.get(&id).copied());
        }
        Known::Unknown
    }

    /// The kept answer of `id`.
    pub fn get(&self, id: TxnId) -> Option<&Answer> {
        self.clients.get(&id.client).and_then(|t| t.answers.get(&id.seq))
    }

    /// True if `id` was answered (kept or acknowledged).
    pub fn is_answered(&self, id: TxnId) -> bool {
        !matches!(self.known(id), Known::Unknown)
    }

    /// Stores the answer of `id`, a transaction stamped `ts` by its coordinator (a refusal
    /// is kept at least until the expiry passes that; an execution until it passes its
    /// final timestamp, which is not below).
    pub fn insert(&mut self, id: TxnId, answer: Answer, ts: Timestamp) {
        let table = self.clients.entry(id.client).or_default();
        table.last_ts = table.last_ts.max(ts).max(answer.ts);
        table.answers.insert(id.seq, answer);
    }

    /// A transaction of `client` stamped `ts` was admitted here: its table stays at least
    /// until the expiry passes `ts` (its answer and its acknowledgements must outlive it).
    pub fn heard(&mut self, client: ClientId, ts: Timestamp) {
        let table = self.clients.entry(client).or_default();
        table.last_ts = table.last_ts.max(ts);
    }

    /// Answers kept for `client`.
    pub fn kept_for(&self, client: ClientId) -> usize {
        self.clients.get(&client).map_or(0, |t| t.answers.len())
    }

    /// Number of clients with a table.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// The watermark reached `watermark` (a leader's, or the `Applied` marker a follower
    /// applied): every [`EXPIRY_SCAN_US`] of it, forgets the clients whose every transaction
    /// is the expiry behind it. Deterministic on the log for followers; either role may keep
    /// a client longer than another, never forget it sooner than [`Answers::is_expired`]
    /// refuses its dispatches.
    pub fn expire_at(&mut self, watermark: Timestamp) {
        if watermark >= self.expiry_scan_at {
            self.expire_before(watermark.saturating_sub(ANSWER_EXPIRY_US));
            self.expiry_scan_at = watermark.saturating_add(EXPIRY_SCAN_US);
        }
    }

    /// Forgets every client whose every transaction seen here is stamped below `before`,
    /// remembering cross-shard final timestamps like an acknowledgement does.
    fn expire_before(&mut self, before: Timestamp) {
        let mut remembered = Vec::new();
        self.clients.retain(|client, table| {
            if table.last_ts >= before {
                return true;
            }
            for (seq, a) in &table.answers {
                if a.ts > 0 && a.rounds > 0 {
                    remembered.push((TxnId { client: *client, seq: *seq }, a.ts));
                }
            }
            false
        });
        remembered.sort_unstable_by_key(|(id, ts)| (*ts, *id));
        for (id, ts) in remembered {
            self.remember_final(id, ts);
        }
    }

    /// Whether a dispatch of a transaction stamped `ts` that this table does not know may be
    /// one whose client expired here (its answer gone) at `watermark`. Such a dispatch is
    /// answered `Expired`, never admitted: it may have executed.
    pub fn is_expired(ts: Timestamp, watermark: Timestamp) -> bool {
        ts.saturating_add(ANSWER_EXPIRY_US) < watermark
    }

    /// The client has every answer below `acked_below`: forget them, except those with a
    /// timestamp above `keep_above_ts` (not sent yet, so they cannot have been received).
    /// Cross-shard transactions' final timestamps (answers with agreement rounds) are
    /// remembered a while longer.
    pub fn forget_acked(&mut self, client: ClientId, acked_below: u64, keep_above_ts: Timestamp) {
        let table = self.clients.entry(client).or_default();
        if acked_below <= table.acked_below {
            return;
        }
        // The table must outlive what it forgets: a retry of an acknowledged transaction is
        // answered `Forgotten` from it, or `Expired` once it is gone.
        table.last_ts = table.answers.range(..acked_below).map(|(_, a)| a.ts).fold(table.last_ts, Timestamp::max);
        table.acked_below = acked_below;
        let keep = table.answers.split_off(&acked_below);
        let dropped = std::mem::replace(&mut table.answers, keep);
        let mut remembered = Vec::new();
        for (seq, a) in dropped {
            if a.ts > keep_above_ts {
                table.answers.insert(seq, a);
            } else if a.ts > 0 && a.rounds > 0 {
                remembered.push((TxnId { client, seq }, a.ts));
            }
        }
        for (id, ts) in remembered {
            self.remember_final(id, ts);
        }
    }

    fn remember_final(&mut self, id: TxnId, ts: Timestamp) {
        if self.recent_final.len() >= RECENT_FINAL_MAX {
            if let Some((old, _)) = self.recent_final.pop_front() {
                self.recent_final_index.remove(&old);
            }
        }
        self.recent_final.push_back((id, ts));
        self.recent_final_index.insert(id, ts);
    }

    /// Number of kept answers (for tests and reports).
    pub fn len(&self) -> usize {
        self.clients.values().map(|t| t.answers.len()).sum()
    }

    /// True if no answer is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(ts: Timestamp, rounds: u8) -> Answer {
        Answer { ts, outcome: Ok(vec![1]), arrival_delta_us: 0, rounds }
    }

    #[test]
    fn acknowledged_answers_go_but_cross_shard_final_timestamps_stay() {
        let mut a = Answers::default();
        let id = |seq| TxnId { client: 3, seq };
        a.insert(id(1), ok(10, 0), 10);
        a.insert(id(2), ok(20, 1), 20);
        a.insert(id(3), ok(90, 2), 90);
        a.insert(id(4), Answer::refusal("full".into(), 0), 95);
        assert_eq!(a.known(id(2)), Known::Answered(&ok(20, 1)));
        a.forget_acked(3, 5, 50);
        assert_eq!(a.known(id(1)), Known::Acknowledged(None), "single-shard: nothing to remember");
        assert_eq!(a.known(id(2)), Known::Acknowledged(Some(20)));
        assert_eq!(a.known(id(3)), Known::Answered(&ok(90, 2)), "above the watermark: not sent yet, kept");
        assert_eq!(a.known(id(4)), Known::Acknowledged(None));
        assert_eq!(a.known(id(5)), Known::Unknown);
        assert!(a.get(id(4)).is_none());
        assert_eq!(a.len(), 1);
    }

    /// Issue 26: every `luigi put` is a client that never comes back; its table goes once
    /// its newest transaction is the expiry behind the watermark, a cross-shard final
    /// timestamp is remembered as on an acknowledgement, and a refusal (final timestamp 0)
    /// stays as long as its transaction's own timestamp says.
    #[test]
    fn clients_expire_whole_once_their_newest_transaction_is_old_enough() {
        let mut a = Answers::default();
        let gone = |seq| TxnId { client: 1, seq };
        a.insert(gone(1), ok(10, 0), 10);
        a.insert(gone(2), ok(30, 1), 25);
        a.insert(TxnId { client: 2, seq: 1 }, Answer::refusal("ahead".into(), 0), 5_000);
        a.heard(3, 40);
        a.forget_acked(4, 2, 0);
        a.expire_before(30);
        assert_eq!(a.clients(), 3, "client 1's newest is 30: kept until the bound passes it; 4 went");
        a.expire_before(41);
        assert_eq!((a.clients(), a.kept_for(1)), (1, 0), "clients 1, 3 and the empty 4 went");
        assert_eq!(a.known(gone(2)), Known::Unknown);
        assert_eq!(a.known(TxnId { client: 2, seq: 1 }), Known::Answered(&Answer::refusal("ahead".into(), 0)));
        assert_eq!(a.recent_final_index.get(&gone(2)), Some(&30), "a cross-shard final timestamp stays a while");
        assert!(Answers::is_expired(30, 31 + ANSWER_EXPIRY_US) && !Answers::is_expired(31, 31 + ANSWER_EXPIRY_US));
        assert!(!Answers::is_expired(u64::MAX, u64::MAX), "saturating");
        a.expire_at(5_000 + ANSWER_EXPIRY_US + 1);
        assert_eq!(a.clients(), 0, "the refusal's client went once the watermark passed its timestamp");
    }

    #[test]
    fn an_acknowledged_answer_keeps_its_table_until_it_is_old_enough() {
        let mut a = Answers::default();
        a.insert(TxnId { client: 1, seq: 1 }, ok(50, 0), 40);
        a.forget_acked(1, 2, 100);
        a.expire_before(50);
        assert_eq!(a.known(TxnId { client: 1, seq: 1 }), Known::Acknowledged(None), "still answered Forgotten");
        a.expire_before(51);
        assert_eq!(a.clients(), 0);
    }

    #[test]
    fn refusals_are_recognised() {
        assert!(Answer::refusal("x".into(), 0).is_refusal());
        assert!(!ok(5, 0).is_refusal());
    }
}
