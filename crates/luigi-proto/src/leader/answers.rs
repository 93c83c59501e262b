//! The exactly-once answer table (DESIGN.md rule 7), kept by leaders and followers alike so
//! that a new leader answers a retry from it instead of executing the transaction again.
//!
//! An answer stays until its client acknowledges it (`acked_below` on a later dispatch). For
//! cross-shard transactions the final timestamp is remembered a while longer (bounded by
//! count): a participant's new leader may still ask for it while recovering (see
//! `PeerItem::Recover`), after the client has acknowledged the answer everywhere else.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::msg::TxnError;
use crate::types::{ClientId, Timestamp, TxnId};
use crate::Map;

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

    /// Stores the answer of `id`.
    pub fn insert(&mut self, id: TxnId, answer: Answer) {
        self.clients.entry(id.client).or_default().answers.insert(id.seq, answer);
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
        a.insert(id(1), ok(10, 0));
        a.insert(id(2), ok(20, 1));
        a.insert(id(3), ok(90, 2));
        a.insert(id(4), Answer::refusal("full".into(), 0));
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

    #[test]
    fn refusals_are_recognised() {
        assert!(Answer::refusal("x".into(), 0).is_refusal());
        assert!(!ok(5, 0).is_refusal());
    }
}
