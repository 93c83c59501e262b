//! What must hold of a coordinator between steps (the simulator checks it after each event).

use super::{Coordinator, Reported};
use crate::msg::TxnError;

impl Coordinator {
    /// Checks the invariants that hold between steps, and describes the first one broken:
    ///
    /// - `acked_below` rests on the in-flight transactions: their sequence numbers are
    ///   exactly the ones held back (rule 7: nothing unanswered is acknowledged), each is
    ///   this client's and was issued;
    /// - each transaction has one reply slot per participant, holding only that
    ///   participant's answer to it;
    /// - a transaction holds a refusal exactly when it was reported rejected; one that every
    ///   participant answered otherwise waits only for a watermark (the commit rule), and
    ///   only such transactions wait for one.
    pub fn check_invariants(&self) -> Result<(), String> {
        let broken = |what: String| format!("client {} coordinator: {what}", self.config.client);
        if self.in_flight_seqs.len() != self.in_flight.len() {
            let (s, f) = (self.in_flight_seqs.len(), self.in_flight.len());
            return Err(broken(format!("{s} sequence numbers held back for {f} transactions in flight")));
        }
        for (id, f) in &self.in_flight {
            if id.client != self.config.client || id.seq >= self.next_seq || !self.in_flight_seqs.contains(&id.seq) {
                return Err(broken(format!("{id:?} in flight is not held back, or not this client's issue")));
            }
            if f.txn.id != *id || f.replies.len() != f.txn.pieces.len() {
                return Err(broken(format!(
                    "{id:?} has {} reply slots for {} pieces",
                    f.replies.len(),
                    f.txn.pieces.len()
                )));
            }
            for (piece, reply) in f.txn.pieces.iter().zip(&f.replies) {
                if reply.as_ref().is_some_and(|r| r.id != *id || r.shard != piece.shard) {
                    return Err(broken(format!("{id:?}'s slot for shard {} holds {reply:?}", piece.shard)));
                }
            }
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
        if let Some(id) = self.awaiting_watermark.iter().find(|id| !self.in_flight.contains_key(id)) {
            return Err(broken(format!("{id:?} waits for a watermark but is not in flight")));
        }
        Ok(())
    }
}

#[cfg(test)]
impl Coordinator {
    /// Forgets that `id` waits for a watermark (tests only): its answer would never go out.
    pub(super) fn corrupt_drop_awaiting(&mut self, id: crate::types::TxnId) {
        assert!(self.awaiting_watermark.remove(&id), "{id:?} was waiting");
    }
}
