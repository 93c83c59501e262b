//! Checks both simulated worlds make of the replies leaders send and the answers clients get
//! (DESIGN.md rule 7): a reply is signed by its shard, its watermark covers its timestamp, it
//! is ordered above the watermark its shard had published when the dispatch (or a `Recover`
//! item) first reached it, one shard never answers a transaction at two timestamps, and a
//! client's answer carries the timestamp every participant replied with.

use std::collections::HashMap;

use luigi_txn::client_core::{Completion, TxnOutcome};
use luigi_txn::msg::{TxnError, TxnReply};
use luigi_txn::types::{ShardId, Timestamp, TxnId};

use crate::violation::ViolationKind;

/// A violation found by the ledger: its kind and message (the world adds the time).
pub type Finding = (ViolationKind, String);

/// What the ledger has seen, per (transaction, shard).
#[derive(Debug, Default)]
pub struct ReplyLedger {
    /// The timestamp of the non-rejected replies whose position is committed.
    reply_ts: HashMap<(TxnId, ShardId), Timestamp>,
    /// The timestamps of speculative replies (rule 14): any may be the one a client uses,
    /// once proven.
    speculative_ts: HashMap<(TxnId, ShardId), Vec<Timestamp>>,
    /// The shard's published watermark when the transaction first reached it.
    watermark_at_arrival: HashMap<(TxnId, ShardId), Timestamp>,
}

impl ReplyLedger {
    /// `id` reached `shard` (a dispatch, or a `Recover` item that admits it) while the shard's
    /// published watermark was `watermark`; only the first arrival counts.
    pub fn arrived(&mut self, id: TxnId, shard: ShardId, watermark: Timestamp) {
        self.watermark_at_arrival.entry((id, shard)).or_insert(watermark);
    }

    /// A peer batch reached `shard` while its published watermark was `watermark`, admitting
    /// `admits` there like dispatches would (Luigi's `Recover` items, as its protocol's
    /// `PeerFacts` say: a shard that never saw the transaction prepares it).
    pub fn arrived_in_batch(&mut self, shard: ShardId, watermark: Timestamp, admits: &[TxnId]) {
        for id in admits {
            self.arrived(*id, shard, watermark);
        }
    }

    /// Checks a reply as `shard` sends it. Refusals, forgotten and expired answers carry no
    /// order.
    pub fn check_reply(&mut self, shard: ShardId, r: &TxnReply) -> Result<(), Finding> {
        if matches!(r.outcome, Err(TxnError::Rejected(_) | TxnError::Forgotten | TxnError::Expired(_))) {
            return Ok(());
        }
        if r.shard != shard {
            let msg = format!("shard {shard} sent a reply for {:?} signed as shard {}", r.id, r.shard);
            return Err((ViolationKind::Invariant, msg));
        }
        // An early answer (rule 21) leaves before its transaction is decided, so before the
        // watermark passes it; it always names a position (checked below like speculative
        // answers).
        if r.watermark < r.ts && !r.early {
            let msg =
                format!("shard {shard} answered {:?} at ts {} with watermark {} below it", r.id, r.ts, r.watermark);
            return Err((ViolationKind::Invariant, msg));
        }
        if r.early && r.position.is_none() {
            let msg = format!("shard {shard} sent an early answer for {:?} naming no position", r.id);
            return Err((ViolationKind::Invariant, msg));
        }
        if r.position.is_some() {
            // Speculative (rule 14): it may be lost with its leader (a deposed leader that
            // still serves clients for a while answers so, below what its successor
            // published), and the transaction answered later at another timestamp; only a
            // proven answer counts, which the coordinator waits for: its completion is checked
            // against the watermarks (`check_completion`), and the end-of-run checks hold it
            // to the committed logs.
            let seen = self.speculative_ts.entry((r.id, shard)).or_default();
            if !seen.contains(&r.ts) {
                seen.push(r.ts);
            }
            return Ok(());
        }
        self.above_arrival_watermark(r.id, shard, r.ts)?;
        match self.reply_ts.insert((r.id, shard), r.ts) {
            Some(old) if old != r.ts => Err((
                ViolationKind::TimestampMismatch,
                format!("shard {shard} answered {:?} first at ts {old}, then at ts {}", r.id, r.ts),
            )),
            _ => Ok(()),
        }
    }

    /// Rule 7: `shard` ordered `id` at `ts` above the watermark it had published when the
    /// transaction first reached it.
    fn above_arrival_watermark(&self, id: TxnId, shard: ShardId, ts: Timestamp) -> Result<(), Finding> {
        match self.watermark_at_arrival.get(&(id, shard)) {
            Some(&w) if ts <= w => Err((
                ViolationKind::Invariant,
                format!(
                    "shard {shard} ordered {id:?} at ts {ts} although its watermark was already {w} when the \
                     transaction first reached it (rule 7)"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Checks a client's answer against the participants' replies.
    pub fn check_completion(&self, done: &Completion) -> Result<(), Finding> {
        let TxnOutcome::Ordered { ts, results } = &done.outcome else { return Ok(()) };
        for (shard, _) in results {
            self.above_arrival_watermark(done.id, *shard, *ts)?;
            let speculative = self.speculative_ts.get(&(done.id, *shard)).is_some_and(|seen| seen.contains(ts));
            match self.reply_ts.get(&(done.id, *shard)) {
                Some(t) if t == ts => {}
                _ if speculative => {}
                other => {
                    return Err((
                        ViolationKind::TimestampMismatch,
                        format!("{:?} completed at ts {ts} but shard {shard} replied with ts {other:?}", done.id),
                    ))
                }
            }
        }
        Ok(())
    }
}
