//! The baselines' peer vocabulary: the two-phase-commit items between a transaction's
//! coordinator and its participants' leaders ([`BaseItem`]), in batches ([`BaseBatch`]) that
//! travel through the node opaque, encoded here ([`PeerVocabulary`]).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use luigi_txn::msg::TxnError;
use luigi_txn::peer::{
    decode_batch, encode_batch, PeerBody, PeerDecodeError, PeerFacts, PeerMsg, PeerOut, PeerVocabulary, ReplicaOutput,
};
use luigi_txn::types::{ShardId, Txn, TxnId};

/// A baseline leader's effects: the neutral outputs with its typed batches.
pub type BaseOutput = ReplicaOutput<BaseBatch>;

/// Leader to leader: a batch of two-phase-commit items for one peer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseBatch {
    /// Sending shard.
    pub from: ShardId,
    /// Items in the order they were produced.
    pub items: Vec<BaseItem>,
}

/// The batch travels as its postcard encoding. The baselines take no progress reports (their
/// factory does not ask for them): one is an error.
impl PeerVocabulary for BaseBatch {
    fn encode(&self) -> PeerOut {
        PeerOut { msg: encode_batch(self.from, self), rests_on: 0 }
    }

    fn decode(msg: PeerMsg) -> Result<Self, PeerDecodeError> {
        let from = msg.from;
        match msg.body {
            PeerBody::Protocol(bytes) => decode_batch(from, &bytes, |b: &BaseBatch| b.from),
            PeerBody::Progress(_) => {
                Err(PeerDecodeError { from, why: "a progress report: the baselines take none".to_string() })
            }
        }
    }

    fn facts(&self) -> PeerFacts {
        let mut facts = PeerFacts::default();
        for item in &self.items {
            match item {
                BaseItem::Vote { id, .. } => facts.proposals.push(*id),
                BaseItem::Decide { .. } => facts.decides = true,
                BaseItem::Execute { .. }
                | BaseItem::Executed { .. }
                | BaseItem::Prepare { .. }
                | BaseItem::Release { .. }
                | BaseItem::Status { .. }
                | BaseItem::StatusIs { .. } => {}
            }
        }
        facts
    }
}

/// Two-phase-commit messages of the baseline protocols (`luigi-baseline`: OCC and 2PL), between
/// a transaction's coordinator (the leader of its first participant shard) and the leaders of
/// its participants. They travel in [`BaseBatch`]es.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BaseItem {
    /// Coordinator to participant: execute your piece of `txn` on your current state and
    /// keep its writes buffered (2PL: take its locks first, no-wait).
    Execute {
        /// The whole transaction.
        txn: Arc<Txn>,
        /// The client's acknowledgement (see `luigi_txn::msg::ClientMsg::Dispatch`).
        acked_below: u64,
    },
    /// Participant to coordinator: the piece's output, or why it did not run (its
    /// procedure failed, or a lock was held).
    Executed {
        /// Transaction.
        id: TxnId,
        /// The output, or the error.
        #[serde(with = "luigi_txn::byte_strings::outcome")]
        outcome: Result<Vec<u8>, TxnError>,
    },
    /// Coordinator to participant: lock and validate the piece executed for `id`, and log
    /// its writes durably (the vote follows once the record is committed).
    Prepare {
        /// Transaction.
        id: TxnId,
    },
    /// Participant to coordinator: `Ok` once the piece is durably prepared, or why not
    /// (the refusal is durable too: the participant will never prepare `id`).
    Vote {
        /// Transaction.
        id: TxnId,
        /// Prepared, or why not.
        outcome: Result<(), String>,
    },
    /// The decision on `id`, to every participant.
    Decide {
        /// Transaction.
        id: TxnId,
        /// Commit (else abort).
        commit: bool,
    },
    /// Coordinator to participant: `id` ended before any prepare (a piece failed or could
    /// not lock); drop its buffered execution and locks.
    Release {
        /// Transaction.
        id: TxnId,
    },
    /// A resolver (a coordinator that timed out, or a participant whose prepared piece waited
    /// too long for a decision) asks for a participant's durable state of `id`. A participant
    /// that never prepared it first logs that it never will.
    Status {
        /// Transaction.
        id: TxnId,
    },
    /// Answer to `Status`.
    StatusIs {
        /// Transaction.
        id: TxnId,
        /// The participant's durable state.
        state: BaseState,
    },
}

/// A participant's durable state of a transaction (see [`BaseItem::StatusIs`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BaseState {
    /// Prepared (its writes are logged and its locks held), with the piece's output.
    Prepared {
        /// The piece's output.
        #[serde(with = "luigi_txn::byte_strings::one")]
        output: Vec<u8>,
    },
    /// Committed, with the piece's output.
    Committed {
        /// The piece's output.
        #[serde(with = "luigi_txn::byte_strings::one")]
        output: Vec<u8>,
    },
    /// Aborted, or never to be prepared.
    Aborted,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> BaseBatch {
        let id = TxnId { client: 1, seq: 2 };
        BaseBatch {
            from: 3,
            items: vec![BaseItem::Vote { id, outcome: Ok(()) }, BaseItem::Decide { id, commit: true }],
        }
    }

    #[test]
    fn a_batch_decodes_as_it_was_encoded_and_tells_its_vote_and_decision() {
        let out = batch().encode();
        assert_eq!(out.rests_on, 0);
        let back = BaseBatch::decode(out.msg).unwrap();
        assert_eq!(back, batch());
        let facts = back.facts();
        assert_eq!(facts.proposals, vec![TxnId { client: 1, seq: 2 }]);
        assert!(facts.decides);
    }

    #[test]
    fn garbled_bytes_another_sender_and_a_progress_report_are_errors() {
        let PeerOut { msg, .. } = batch().encode();
        let PeerBody::Protocol(mut bytes) = msg.body.clone() else { panic!() };
        bytes.truncate(bytes.len() - 1);
        assert!(BaseBatch::decode(PeerMsg { from: 3, body: PeerBody::Protocol(bytes) }).is_err());
        assert!(BaseBatch::decode(PeerMsg { from: 4, ..msg }).is_err(), "another sender");
        let report = luigi_txn::progress::ProgressReport {
            shard: 3,
            replica: 0,
            term: 1,
            pos: luigi_txn::progress::LogPos { term: 1, index: 1 },
            committed: true,
        };
        assert!(BaseBatch::decode(PeerMsg { from: 3, body: PeerBody::Progress(report) }).is_err());
    }
}
