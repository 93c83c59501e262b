//! What must hold of a coordinator between steps (the simulator checks it after each event).

use super::Coordinator;
use luigi_txn::client_core::Reported;
use luigi_txn::msg::TxnError;

impl Coordinator {
    /// Checks the invariants that hold between steps, and describes the first one broken:
    /// the in-flight table's (see [`InFlightTable::check_invariants`](luigi_txn::client_core::InFlightTable::check_invariants): `acked_below` rests on
    /// the transactions in flight, rule 7: nothing unanswered is acknowledged; one reply slot
    /// per participant, holding only its answer), and
    ///
    /// - a transaction holds a refusal exactly when it was reported rejected; one that every
    ///   participant answered otherwise waits only for a watermark (the commit rule), and
    ///   only such transactions wait for one;
    /// - the read-only table's indexes match its reads (`Reads::check_invariants`).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.flights.check_invariants("coordinator")?;
        let broken = |what: String| format!("client {} coordinator: {what}", self.config.client);
        for (id, f) in self.flights.flights() {
            let refused = f.replies.iter().flatten().any(|r| matches!(r.outcome, Err(TxnError::Rejected(_))));
            if refused != (f.reported == Some(Reported::Rejected)) {
                return Err(broken(format!("{id:?} refused: {refused}, but reported {:?}", f.reported)));
            }
            let all_answered = f.replies.iter().all(Option::is_some);
            if (all_answered && !refused) != self.awaiting_watermark.contains(id) {
                return Err(broken(format!(
                    "{id:?} answered by every participant: {all_answered}, waiting for a watermark: {}",
                    self.awaiting_watermark.contains(id)
                )));
            }
        }
        if let Some(id) = self.awaiting_watermark.iter().find(|id| self.flights.get(**id).is_none()) {
            return Err(broken(format!("{id:?} waits for a watermark but is not in flight")));
        }
        self.reads.check_invariants().map_err(broken)
    }
}

#[cfg(test)]
impl Coordinator {
    /// Forgets that `id` waits for a watermark (tests only): its answer would never go out.
    pub(super) fn corrupt_drop_awaiting(&mut self, id: luigi_txn::types::TxnId) {
        assert!(self.awaiting_watermark.remove(&id), "{id:?} was waiting");
    }
}
