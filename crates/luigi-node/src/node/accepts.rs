//! The node's part of the fast path (DESIGN.md, the fast path): a new leader's questions for
//! the group's undecided accepts and their answers, and the accept log (its records written
//! with the log's persistence, the answers that wait for them).

use luigi_protocol::msg::ReplicationMsg;
use luigi_txn::types::TimeUs;

use super::outputs::HeldMsg;
use super::{NodeError, ReplicaNode};
use crate::effect::{Effect, Persist};
use luigi_txn::types::NodeId;

/// How long a new leader waits for the group's accepts before asking again.
pub const ACCEPTS_ASK_AGAIN_US: TimeUs = 200_000;

/// The last question for the group's accepts: its term and when it was asked.
#[derive(Clone, Copy, Default)]
pub(super) struct AcceptsAsked {
    term: u64,
    at: TimeUs,
}

/// A question for accepts (`AcceptsQuery`) of `term`, by `asker`.
pub(super) struct AcceptsQuestion {
    pub(super) asker: NodeId,
    pub(super) term: u64,
}

/// A write of the accept log, and the messages that leave once it is durable.
pub(super) struct AcceptsWrite {
    /// The persist number that makes its records durable.
    pub(super) number: u64,
    /// The messages waiting for it (then for the Raft log, see `ReplicaNode::held`).
    pub(super) held: Vec<HeldMsg>,
}

impl ReplicaNode {
    /// Answers the questions for accepts whose term this replica has reached (V2); the
    /// others wait for it.
    pub(super) fn answer_accepts_questions(&mut self, fx: &mut Vec<Effect>) {
        let me = self.config.node;
        let (replica, log) = (&self.replica, &self.log);
        self.accepts_questions.retain(|&AcceptsQuestion { asker, term }| {
            // Without a fast path, nothing is undecided: the answer is empty.
            let answer = replica.fast_path().map_or(Some(Vec::new()), |fast| fast.accepts_of(log, term));
            let Some(records) = answer else { return true };
            let msg = ReplicationMsg::Accepts { shard: me.shard, from: me.raft_id(), term, records };
            fx.push(Effect::Replicate { to: asker, msg });
            false
        });
    }

    /// A new leader's fast-path recovery round waits for the group's undecided accepts: asks
    /// every other replica of the group, again every [`ACCEPTS_ASK_AGAIN_US`] while it waits
    /// (a question or an answer may be lost).
    pub(super) fn ask_for_accepts(&mut self, now: TimeUs, fx: &mut Vec<Effect>) {
        let Some(term) = self.replica.fast_path().and_then(|fast| fast.accepts_wanted(&self.log)) else { return };
        let asked = self.accepts_asked;
        if asked.term == term && now < asked.at.saturating_add(ACCEPTS_ASK_AGAIN_US) {
            return;
        }
        self.accepts_asked = AcceptsAsked { term, at: now };
        let me = self.config.node;
        for replica in (0..self.config.group_size()).filter(|r| *r != me.replica) {
            let msg = ReplicationMsg::AcceptsQuery { shard: me.shard, from: me.raft_id(), term };
            fx.push(Effect::Replicate { to: NodeId { shard: me.shard, replica }, msg });
        }
    }

    /// The accept records the shell's disk found at open (`DiskStorage::take_found_accepts`),
    /// given right after [`ReplicaNode::new`].
    ///
    /// # Errors
    /// A damaged record.
    pub fn restore_accepts(&mut self, records: &[(u64, Vec<u8>)]) -> Result<(), NodeError> {
        let node = self.config.node;
        self.accepts_written = records.len() as u64; // a long log found is rewritten soon
        let restored = match (self.replica.fast_path_mut(), records.first()) {
            (Some(fast), _) => fast.restore_accepts(records),
            (None, None) => Ok(()),
            (None, Some((n, _))) => Err(format!("accept record {n} found, but this protocol has no fast path")),
        };
        restored.map_err(|reason| NodeError::Accepts { node, reason })
    }

    /// `held` leaves after this turn's accept-log write is durable (`after`), and then once
    /// the Raft log is durable up to its position.
    pub(super) fn hold_for_accepts(&mut self, held: HeldMsg, after: &mut Vec<HeldMsg>) {
        if self.config.leader.mutations.accept_before_durable {
            self.held.push_back(held); // the broken rule: not after the record
        } else {
            after.push(held);
        }
    }

    /// One group commit of the accept log (with whatever the Raft log has buffered):
    /// `records`, or every record still needed when a rewrite is due; `after` leaves when
    /// it is reported durable.
    pub(super) fn write_accepts(&mut self, mut records: Vec<Vec<u8>>, after: Vec<HeldMsg>, fx: &mut Vec<Effect>) {
        self.accepts_written += records.len() as u64;
        let rewrite = self.accepts_written >= self.config.tuning.accepts_rewrite_records;
        if rewrite {
            // Every record still needed (these ones among them), written again: the
            // accept log then drops what came before.
            records = self.replica.fast_path().map(|fast| fast.accepts_live()).unwrap_or_default();
            self.accepts_written = 0;
        }
        let number = self.last_ready;
        let ready = luigi_raft::Ready { number, ..Default::default() };
        fx.push(Effect::Persist(Persist { number, sync: true, ready, accepts: records, accepts_rewrite: rewrite }));
        self.awaiting_accepts.push_back(AcceptsWrite { number, held: after });
    }
}
