//! Records in and out of the byte log: proposed and taken as bytes
//! ([`RaftLog::propose_bytes`], [`RaftLog::take_committed_bytes`]), and the typed view:
//! [`RaftLog`] is a [`ReplicatedLog<R>`] for every [`Record`] type `R`. A protocol's leader
//! proposes its records through it (postcard, the encoding the entries have always had on
//! disk and on the wire) and takes committed ones back decoded; the log itself holds bytes, as raft-rs's does, so the node that owns it
//! knows no record type and lends it to the protocol's replica.

use bytes::Bytes;
use luigi_txn::log::{LogEntry, LogError, LogIndex, ReplicatedLog};

#[cfg(doc)]
use super::RaftConfig;
use super::{RaftError, RaftLog, Record, Undecodable};

impl RaftLog {
    /// Appends `data` (a record encoded by the log's user) to the leader's log and returns its
    /// index. Indexes increase but are not consecutive: election no-ops take indexes too.
    ///
    /// # Errors
    /// [`LogError::NotLeader`] on a non-leader or during a leadership transfer (see
    /// [`RaftLog::leader_id`] for a hint); [`LogError::Backlogged`] past
    /// [`RaftConfig::max_pending`].
    pub fn propose_bytes(&mut self, data: Vec<u8>) -> Result<LogIndex, LogError> {
        if let Some(refused) = self.refusal() {
            return Err(refused);
        }
        let before = self.last_index();
        let result = self.raw.propose(Vec::new(), data);
        self.after_call();
        match result {
            Ok(()) if self.last_index() == before + 1 => Ok(before + 1),
            // Dropped: raft-rs refuses proposals while transferring leadership.
            _ => Err(LogError::NotLeader),
        }
    }

    /// Why a proposal made now would be refused, if it would.
    fn refusal(&self) -> Option<LogError> {
        if !self.is_leader() || self.raw.raft.lead_transferee.is_some() {
            return Some(LogError::NotLeader);
        }
        let pending = self.pending();
        (pending >= self.max_pending).then_some(LogError::Backlogged(pending))
    }

    /// Moves every committed record not yet taken, in log order, into `out`, as the bytes
    /// it was proposed as.
    pub fn take_committed_bytes(&mut self, out: &mut Vec<LogEntry<Bytes>>) {
        out.extend(self.committed.drain(..));
    }

    /// The committed records not yet taken, oldest first (a typed view decodes them in place
    /// and drops those it took with [`RaftLog::drop_taken`]).
    fn untaken(&self) -> impl Iterator<Item = &LogEntry<Bytes>> {
        self.committed.iter()
    }

    /// Drops the `n` oldest records not yet taken.
    fn drop_taken(&mut self, n: usize) {
        self.committed.drain(..n);
    }

    /// A committed record at `index` did not decode as the record type it was taken as: the
    /// log stops there (it and the records after it stay untaken) and reports it from then
    /// on ([`RaftLog::undecodable`]).
    fn set_undecodable(&mut self, index: u64, reason: String) {
        self.undecodable.get_or_insert(Undecodable { index, reason });
    }

    /// [`RaftError::BadEntry`] once a committed record taken through a typed view
    /// ([`ReplicatedLog::take_committed`]) did not decode: fatal for the replica (its log
    /// was written by an incompatible build or another protocol), reported by every
    /// [`RaftLog::ready`] from then on and by the role machine's turn.
    pub fn undecodable(&self) -> Option<RaftError> {
        self.undecodable.as_ref().map(|u| RaftError::BadEntry { index: u.index, reason: u.reason.clone() })
    }
}

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
