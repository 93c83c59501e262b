//! The typed view of the byte log: [`RaftLog`] is a [`ReplicatedLog<R>`] for every
//! [`Record`] type `R`. A protocol's leader proposes its records through it (postcard, the
//! encoding the entries have always had on disk and on the wire) and takes committed ones
//! back decoded; the log itself holds bytes, as raft-rs's does, so the node that owns it
//! knows no record type and lends it to the protocol's replica.

use luigi_protocol::log::{LogEntry, LogError, LogIndex, ReplicatedLog};

#[cfg(doc)]
use super::RaftError;
use super::{RaftLog, Record};

impl<R: Record> ReplicatedLog<R> for RaftLog {
    fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// Appends `record`, encoded, to the leader's log (see [`RaftLog::propose_bytes`]).
    ///
    /// # Panics
    /// If `record` does not serialize (see [`Record`]).
    fn propose(&mut self, record: R) -> Result<LogIndex, LogError> {
        if let Some(refused) = self.refusal() {
            return Err(refused);
        }
        // Serializing plain data into a Vec cannot fail.
        let data = postcard::to_stdvec(&record).expect("a log record serializes with postcard");
        self.propose_bytes(data)
    }

    /// Moves every committed record not yet taken, in log order, into `out`, decoded. A
    /// record that does not decode as an `R` stops the taking: it and those after it stay
    /// untaken, and the log reports [`RaftError::BadEntry`] from then on
    /// ([`RaftLog::undecodable`]), which the node treats as fatal for the replica.
    fn take_committed(&mut self, out: &mut Vec<LogEntry<R>>) {
        if self.undecodable.is_some() {
            return;
        }
        let mut taken = 0;
        let mut bad = None;
        for e in self.untaken() {
            match postcard::from_bytes::<R>(&e.record) {
                Ok(record) => out.push(LogEntry { index: e.index, record }),
                Err(err) => {
                    bad = Some((e.index, err.to_string()));
                    break;
                }
            }
            taken += 1;
        }
        self.drop_taken(taken);
        if let Some((index, reason)) = bad {
            self.set_undecodable(index, reason);
        }
    }
}
