//! The exactly-once answer table (DESIGN.md rule 7), kept by leaders and followers alike so
//! that a new leader answers a retry from it instead of executing the transaction again.
//!
//! An answer stays until its client acknowledges it (`acked_below` on a later dispatch), or
//! until its client expires: a client whose transactions are all older than the expiry
//! (`LeaderConfig::answer_expiry_us`, [`DEFAULT_ANSWER_EXPIRY_US`] by default) behind the
//! watermark is forgotten whole, so a client
//! that never comes back (every `luigi get/put/scan/txn` invocation) costs nothing after it.
//! A dispatch of a forgotten client's transaction is answered `Expired`, never executed
//! again ([`Answers::is_expired`]). A cross-shard transaction's outcome is kept apart, in
//! [`Outcomes`], for as long as another participant's recovery may still ask for it (see
//! `PeerItem::Recover`): neither acknowledgement nor expiry loses it.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::outcomes::{Outcome, Outcomes};
use luigi_txn::msg::TxnError;
use luigi_txn::types::{ClientId, ShardId, Timestamp, TxnId};
use luigi_txn::Map;

/// How long a client's answers outlive its newest transaction by default, in timestamp µs
/// behind the watermark (DESIGN.md rule 7, expiry; `[protocol] answer_expiry_s` sets it).
/// Every server of a cluster must use the same value: every replica must forget a client no
/// sooner than every leader refuses its old dispatches as expired. Two minutes: far longer
/// than a client resends (10 attempts of 2 s, plus `NotLeader` waits), short enough that a
/// command-line client run every second costs 120 tables.
pub const DEFAULT_ANSWER_EXPIRY_US: u64 = 120_000_000;

/// The shortest answer expiry a cluster may set: a client must be done resending long
/// before its answers go (10 attempts of 2 s by default).
pub const MIN_ANSWER_EXPIRY_US: u64 = 30_000_000;

/// Answers one client may have kept on a shard (answered, not acknowledged): past it its
/// dispatches are answered `Busy` until it acknowledges. A correct coordinator has at most
/// its unresolved and in-flight transactions unacknowledged (`UNRESOLVED_MAX` plus its
/// pending cap), well below.
pub const ANSWERS_PER_CLIENT_MAX: usize = 1 << 18;

/// An executed (or refused) transaction's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// Final timestamp (0 for a refusal).
    pub ts: Timestamp,
    /// What the client is told.
    #[serde(with = "luigi_txn::byte_strings::outcome")]
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
    /// Answered and acknowledged (a cross-shard outcome may still be in
    /// [`Answers::outcomes`]).
    Acknowledged,
}

/// Answers per client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Answers {
    clients: Map<ClientId, ClientTable>,
    /// Cross-shard outcomes kept for the other participants' recoveries.
    outcomes: Outcomes,
    /// Only with `Mutations::outcomes_fifo`: outcomes whose answers left the table, oldest
    /// first, and how many are kept. Not replicated (a leader's mutation).
    #[serde(skip)]
    fifo: Option<(usize, VecDeque<TxnId>)>,
    /// The watermark at or past which [`Answers::expire_at`] next scans. Not replicated
    /// state (not in snapshots): a restored table scans at its first watermark.
    #[serde(skip)]
    expiry_scan_at: Timestamp,
    /// The cluster's answer expiry (configuration, not replicated state).
    #[serde(skip, default = "default_expiry")]
    expiry_us: u64,
}

fn default_expiry() -> u64 {
    DEFAULT_ANSWER_EXPIRY_US
}

impl Default for Answers {
    fn default() -> Self {
        Answers {
            clients: Map::default(),
            outcomes: Outcomes::default(),
            fifo: None,
            expiry_scan_at: 0,
            expiry_us: default_expiry(),
        }
    }
}

impl Answers {
    /// Sets the answer expiry (`LeaderConfig::answer_expiry_us`); a table restored from a
    /// snapshot or handed from follower to leader is set again by its owner.
    pub fn set_expiry(&mut self, expiry_us: u64) {
        self.expiry_us = expiry_us;
    }

    /// The answer expiry in force.
    pub fn expiry_us(&self) -> u64 {
        self.expiry_us
    }

    /// How far the watermark moves between two expiry scans (a scan visits every client).
    pub fn expiry_scan_us(&self) -> u64 {
        self.expiry_us / 8
    }

    /// What is known of `id`.
    pub fn known(&self, id: TxnId) -> Known<'_> {
        let Some(table) = self.clients.get(&id.client) else { return Known::Unknown };
        if let Some(a) = table.answers.get(&id.seq) {
            return Known::Answered(a);
        }
        if id.seq < table.acked_below {
            return Known::Acknowledged;
        }
        Known::Unknown
    }

    /// The cross-shard outcomes kept for the other participants' recoveries.
    pub fn outcomes(&self) -> &Outcomes {
        &self.outcomes
    }

    /// A cross-shard transaction `id` of participants `shards` executed here at `final_ts`:
    /// kept for the others (this shard, `me`, never asks itself).
    pub fn executed_cross(&mut self, me: ShardId, id: TxnId, final_ts: Timestamp, shards: &[ShardId]) {
        let others: Vec<ShardId> = shards.iter().copied().filter(|s| *s != me).collect();
        self.outcomes.remember(id, Outcome::Executed(final_ts), &others, self.expiry_us);
    }

    /// This shard refused `id` (a `Refuse` record), a transaction stamped `ts` whose other
    /// participants are `others`: kept for them.
    pub fn refused_cross(&mut self, id: TxnId, reason: String, ts: Timestamp, others: &[ShardId]) {
        self.outcomes.remember(id, Outcome::Refused { reason, ts }, others, self.expiry_us);
    }

    /// `Mutations::outcomes_fifo`: with `Some(max)`, an outcome is forgotten once its answer
    /// left the table and `max` more left after it (main's memory before issue 26).
    pub fn emulate_fifo(&mut self, max: Option<usize>) {
        self.fifo = max.map(|max| (max, VecDeque::new()));
    }

    /// `id`'s answer `a` left the table (the FIFO emulation's hook; nothing otherwise).
    fn answer_left(&mut self, id: TxnId, a: &Answer) {
        let Some((max, order)) = self.fifo.as_mut() else { return };
        if a.ts > 0 && a.rounds > 0 {
            order.push_back(id);
        }
        while order.len() > *max {
            let old = order.pop_front().expect("longer than its bound");
            self.outcomes.forget(old);
        }
    }

    /// Shard `shard`'s committed `Applied` marker reached `ts` (a `PeerApplied` record).
    pub fn peer_applied(&mut self, shard: ShardId, ts: Timestamp) {
        self.outcomes.peer_applied(shard, ts);
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
    /// applied): every [`Answers::expiry_scan_us`] of it, forgets the clients whose every transaction
    /// is the expiry behind it. Deterministic on the log for followers; either role may keep
    /// a client longer than another, never forget it sooner than [`Answers::is_expired`]
    /// refuses its dispatches.
    pub fn expire_at(&mut self, watermark: Timestamp) {
        if watermark >= self.expiry_scan_at {
            self.expire_before(watermark.saturating_sub(self.expiry_us));
            self.expiry_scan_at = watermark.saturating_add(self.expiry_scan_us());
        }
    }

    /// Forgets every client whose every transaction seen here is stamped below `before`
    /// (cross-shard outcomes stay in [`Answers::outcomes`]).
    fn expire_before(&mut self, before: Timestamp) {
        let mut left = Vec::new();
        let emulating = self.fifo.is_some();
        self.clients.retain(|client, table| {
            if table.last_ts >= before {
                return true;
            }
            if emulating {
                left.extend(table.answers.iter().map(|(seq, a)| (TxnId { client: *client, seq: *seq }, a.clone())));
            }
            false
        });
        left.sort_unstable_by_key(|(id, a)| (a.ts, *id));
        for (id, a) in left {
            self.answer_left(id, &a);
        }
    }

    /// Whether a dispatch of a transaction stamped `ts` that this table does not know may be
    /// one whose client expired here (its answer gone) at `watermark`. Such a dispatch is
    /// answered `Expired`, never admitted: it may have executed.
    pub fn is_expired(&self, ts: Timestamp, watermark: Timestamp) -> bool {
        ts.saturating_add(self.expiry_us) < watermark
    }

    /// The client has every answer below `acked_below`: forget them, except those with a
    /// timestamp above `keep_above_ts` (not sent yet, so they cannot have been received).
    /// Cross-shard outcomes stay in [`Answers::outcomes`].
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
        let mut left = Vec::new();
        for (seq, a) in dropped {
            if a.ts > keep_above_ts {
                table.answers.insert(seq, a);
            } else {
                left.push((TxnId { client, seq }, a));
            }
        }
        for (id, a) in left {
            self.answer_left(id, &a);
        }
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
    fn acknowledged_answers_go_but_cross_shard_outcomes_stay() {
        let mut a = Answers::default();
        let id = |seq| TxnId { client: 3, seq };
        a.insert(id(1), ok(10, 0), 10);
        a.insert(id(2), ok(20, 1), 20);
        a.executed_cross(0, id(2), 20, &[0, 1]);
        a.insert(id(3), ok(90, 2), 90);
        a.insert(id(4), Answer::refusal("full".into(), 0), 95);
        assert_eq!(a.known(id(2)), Known::Answered(&ok(20, 1)));
        a.forget_acked(3, 5, 50);
        assert_eq!(a.known(id(1)), Known::Acknowledged, "single-shard: nothing to remember");
        assert_eq!(a.known(id(2)), Known::Acknowledged);
        assert_eq!(a.outcomes().get(id(2)), Some(&Outcome::Executed(20)), "shard 1 may still ask");
        assert_eq!(a.outcomes().get(id(1)), None);
        assert_eq!(a.known(id(3)), Known::Answered(&ok(90, 2)), "above the watermark: not sent yet, kept");
        assert_eq!(a.known(id(4)), Known::Acknowledged);
        assert_eq!(a.known(id(5)), Known::Unknown);
        assert!(a.get(id(4)).is_none());
        assert_eq!(a.len(), 1);
    }

    /// Issue 26: every `luigi put` is a client that never comes back; its table goes once
    /// its newest transaction is the expiry behind the watermark, a cross-shard outcome
    /// stays for the other participants, and a refusal (final timestamp 0)
    /// stays as long as its transaction's own timestamp says.
    #[test]
    fn clients_expire_whole_once_their_newest_transaction_is_old_enough() {
        let mut a = Answers::default();
        let gone = |seq| TxnId { client: 1, seq };
        a.insert(gone(1), ok(10, 0), 10);
        a.insert(gone(2), ok(30, 1), 25);
        a.executed_cross(2, gone(2), 30, &[1, 2]);
        a.insert(TxnId { client: 2, seq: 1 }, Answer::refusal("ahead".into(), 0), 5_000);
        a.heard(3, 40);
        a.forget_acked(4, 2, 0);
        a.expire_before(30);
        assert_eq!(a.clients(), 3, "client 1's newest is 30: kept until the bound passes it; 4 went");
        a.expire_before(41);
        assert_eq!((a.clients(), a.kept_for(1)), (1, 0), "clients 1, 3 and the empty 4 went");
        assert_eq!(a.known(gone(2)), Known::Unknown);
        assert_eq!(a.known(TxnId { client: 2, seq: 1 }), Known::Answered(&Answer::refusal("ahead".into(), 0)));
        assert_eq!(a.outcomes().get(gone(2)), Some(&Outcome::Executed(30)), "until shard 1 applied past it");
        a.peer_applied(1, 30);
        assert!(a.outcomes().is_empty());
        let expiry = DEFAULT_ANSWER_EXPIRY_US;
        assert!(a.is_expired(30, 31 + expiry) && !a.is_expired(31, 31 + expiry));
        assert!(!a.is_expired(u64::MAX, u64::MAX), "saturating");
        a.expire_at(5_000 + expiry + 1);
        assert_eq!(a.clients(), 0, "the refusal's client went once the watermark passed its timestamp");
    }

    /// A configured expiry is the one that forgets clients and refuses their old dispatches.
    #[test]
    fn a_configured_expiry_forgets_and_refuses_at_its_own_age() {
        let mut a = Answers::default();
        a.set_expiry(MIN_ANSWER_EXPIRY_US);
        a.insert(TxnId { client: 1, seq: 1 }, ok(50, 0), 40);
        assert!(a.is_expired(49, 50 + MIN_ANSWER_EXPIRY_US) && !a.is_expired(50, 50 + MIN_ANSWER_EXPIRY_US));
        a.expire_at(50 + MIN_ANSWER_EXPIRY_US);
        assert_eq!(a.clients(), 1, "its newest transaction is exactly the expiry behind");
        a.expire_at(51 + MIN_ANSWER_EXPIRY_US + a.expiry_scan_us());
        assert_eq!(a.clients(), 0);
        assert_eq!(a.expiry_scan_us(), MIN_ANSWER_EXPIRY_US / 8);
    }

    #[test]
    fn an_acknowledged_answer_keeps_its_table_until_it_is_old_enough() {
        let mut a = Answers::default();
        a.insert(TxnId { client: 1, seq: 1 }, ok(50, 0), 40);
        a.forget_acked(1, 2, 100);
        a.expire_before(50);
        assert_eq!(a.known(TxnId { client: 1, seq: 1 }), Known::Acknowledged, "still answered Forgotten");
        a.expire_before(51);
        assert_eq!(a.clients(), 0);
    }

    #[test]
    fn refusals_are_recognised() {
        assert!(Answer::refusal("x".into(), 0).is_refusal());
        assert!(!ok(5, 0).is_refusal());
    }
}
