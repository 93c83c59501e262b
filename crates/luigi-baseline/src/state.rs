//! [`ShardState`]: what a baseline shard's log amounts to. A follower applies committed
//! records to it; the leader applies each record as it logs it (so its state is the log's
//! end, ahead of what is committed) and keeps its locks and coordinator state beside it.

use std::collections::{BTreeMap, BTreeSet};

use luigi_protocol::log::LogEntry;
use luigi_store::{Key, Store, StoreFork, Value};
use luigi_txn::types::{ShardId, TxnId};
use serde::{Deserialize, Serialize};

use crate::record::{BaseRecord, Write};

/// Outcomes remembered at most (beyond the clients' acknowledgements, which prune them first):
/// the oldest goes when full.
pub const OUTCOMES_MAX: usize = 1 << 20;

/// A piece prepared and not decided yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prepared {
    /// The transaction's participants (the first coordinates).
    pub shards: Vec<ShardId>,
    /// The piece's writes, installed if it commits.
    #[serde(with = "luigi_txn::byte_strings::writes")]
    pub writes: Vec<Write>,
    /// The piece's output.
    #[serde(with = "luigi_txn::byte_strings::one")]
    pub output: Vec<u8>,
    /// Hashes of the keys it holds shared locks on.
    pub read_locks: Vec<u64>,
    /// Hashes of the keys it holds exclusive locks on.
    pub write_locks: Vec<u64>,
}

/// How a transaction ended on this shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Installed, with the piece's output.
    Committed {
        /// The output.
        #[serde(with = "luigi_txn::byte_strings::one")]
        output: Vec<u8>,
    },
    /// Aborted, or refused for good before it prepared.
    Aborted {
        /// Why.
        reason: String,
    },
}

/// A shard's replicated state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardState {
    shard: ShardId,
    store: Store,
    prepared: BTreeMap<TxnId, Prepared>,
    outcomes: BTreeMap<TxnId, Outcome>,
    /// The outcomes of single-shard transactions (and direct pieces), which a client's
    /// acknowledgement may prune. A cross-shard transaction's outcome is never pruned that way:
    /// its client may hold the answer while another participant still has the piece prepared,
    /// and that participant's resolution asks this shard; a shard that forgot a commit would
    /// answer it never prepared the piece (and log a tombstone after its own commit), and the
    /// resolution would abort a transaction its client was told committed.
    local: BTreeSet<TxnId>,
    applied_index: u64,
    /// Installed since the last [`ShardState::take_executed`]: (transaction, log index).
    executed: Vec<(TxnId, u64)>,
}

/// The serialized form of a [`ShardState`] (a snapshot), as read; written from a
/// [`StateFork`] ([`ImageOut`]).
#[derive(Deserialize)]
struct Image {
    shard: ShardId,
    applied_index: u64,
    #[serde(with = "luigi_txn::byte_strings::pairs")]
    store: Vec<(Key, Value)>,
    prepared: Vec<(TxnId, Prepared)>,
    outcomes: Vec<(TxnId, Outcome)>,
    local: Vec<TxnId>,
}

/// An [`Image`] as written: the same fields in the same order, borrowed from a fork.
#[derive(Serialize)]
struct ImageOut<'a> {
    shard: ShardId,
    applied_index: u64,
    #[serde(with = "luigi_txn::byte_strings::pairs")]
    store: Vec<(&'a [u8], &'a Value)>,
    prepared: &'a [(TxnId, Prepared)],
    outcomes: &'a [(TxnId, Outcome)],
    local: &'a [TxnId],
}

/// A [`ShardState`] at one moment ([`ShardState::fork`]), to serialize off the event loop:
/// its store a fork sharing memory with the live one, the rest copied.
pub struct StateFork {
    shard: ShardId,
    applied_index: u64,
    store: StoreFork,
    prepared: Vec<(TxnId, Prepared)>,
    outcomes: Vec<(TxnId, Outcome)>,
    local: Vec<TxnId>,
}

impl StateFork {
    /// The snapshot image of the state it holds (the same state gives the same bytes).
    pub fn image(&self) -> Vec<u8> {
        let image = ImageOut {
            shard: self.shard,
            applied_index: self.applied_index,
            store: self.store.entries(),
            prepared: &self.prepared,
            outcomes: &self.outcomes,
            local: &self.local,
        };
        postcard::to_stdvec(&image).expect("serializing to memory cannot fail")
    }
}

/// Why a snapshot does not load.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// It does not decode.
    #[error("baseline snapshot does not decode: {0}")]
    Decode(String),
    /// It is another shard's, or of another index.
    #[error("baseline snapshot of shard {shard} at index {index}, expected shard {expected_shard}{}",
        .expected_index.map(|i| format!(" at index {i}")).unwrap_or_default())]
    Mismatch {
        /// Its shard.
        shard: ShardId,
        /// Its index.
        index: u64,
        /// The shard expected.
        expected_shard: ShardId,
        /// The index expected, if any.
        expected_index: Option<u64>,
    },
}

impl ShardState {
    /// The state of `shard` before its log's first record.
    pub fn new(shard: ShardId, store: Store) -> Self {
        ShardState {
            shard,
            store,
            prepared: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            local: BTreeSet::new(),
            applied_index: 0,
            executed: Vec::new(),
        }
    }

    /// Its shard.
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store, to run a procedure on (the leader rolls back what it does not log).
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// The index of the last record applied.
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// Pieces prepared and not decided.
    pub fn prepared(&self) -> &BTreeMap<TxnId, Prepared> {
        &self.prepared
    }

    /// How `id` ended here, if it did and is remembered.
    pub fn outcome(&self, id: TxnId) -> Option<&Outcome> {
        self.outcomes.get(&id)
    }

    /// Installs since the last call: (transaction, index of the record that installed it).
    pub fn take_executed(&mut self) -> Vec<(TxnId, u64)> {
        std::mem::take(&mut self.executed)
    }

    /// Applies a committed record (a follower), or one just logged (the leader).
    pub fn apply(&mut self, entry: &LogEntry<BaseRecord>) {
        assert!(entry.index > self.applied_index, "records apply in log order");
        self.applied_index = entry.index;
        match &entry.record {
            BaseRecord::Local { id, writes, output, acked_below } => {
                install(&mut self.store, writes);
                self.executed.push((*id, entry.index));
                self.remember(*id, Outcome::Committed { output: output.clone() });
                self.local.insert(*id);
                self.prune(id.client, *acked_below);
            }
            BaseRecord::Prepare { id, shards, writes, output, read_locks, write_locks, acked_below } => {
                let prepared = Prepared {
                    shards: shards.clone(),
                    writes: writes.clone(),
                    output: output.clone(),
                    read_locks: read_locks.clone(),
                    write_locks: write_locks.clone(),
                };
                let before = self.prepared.insert(*id, prepared);
                debug_assert!(before.is_none(), "{id:?} prepared twice");
                self.prune(id.client, *acked_below);
            }
            BaseRecord::Commit { id } => {
                // A commit of a piece not prepared here is a duplicate (it was decided before).
                if let Some(p) = self.prepared.remove(id) {
                    install(&mut self.store, &p.writes);
                    self.executed.push((*id, entry.index));
                    self.remember(*id, Outcome::Committed { output: p.output });
                }
            }
            BaseRecord::Barrier { .. } => {}
            BaseRecord::Abort { id, reason } => {
                self.prepared.remove(id);
                let committed = matches!(self.outcomes.get(id), Some(Outcome::Committed { .. }));
                debug_assert!(!committed, "{id:?} aborted after it committed");
                if !committed {
                    self.remember(*id, Outcome::Aborted { reason: reason.clone() });
                }
            }
        }
    }

    fn remember(&mut self, id: TxnId, outcome: Outcome) {
        if self.outcomes.len() >= OUTCOMES_MAX && !self.outcomes.contains_key(&id) {
            if let Some((oldest, _)) = self.outcomes.pop_first() {
                self.local.remove(&oldest);
            }
        }
        self.outcomes.insert(id, outcome);
    }

    /// Forgets the outcomes of `client`'s single-shard transactions below `acked_below`: it
    /// holds their answers, and nobody else asks about them (see `local`).
    fn prune(&mut self, client: u64, acked_below: u64) {
        let stale: Vec<TxnId> =
            self.local.range(TxnId { client, seq: 0 }..TxnId { client, seq: acked_below }).copied().collect();
        for id in stale {
            self.local.remove(&id);
            self.outcomes.remove(&id);
        }
    }

    /// The state, serialized (a snapshot at [`ShardState::applied_index`]).
    pub fn snapshot(&self) -> Vec<u8> {
        self.fork().image()
    }

    /// The state as it is now, to serialize later and elsewhere ([`StateFork::image`] gives
    /// what [`ShardState::snapshot`] gives now): the store is forked (its chunks shared until
    /// written over), the rest copied.
    pub fn fork(&self) -> StateFork {
        StateFork {
            shard: self.shard,
            applied_index: self.applied_index,
            store: self.store.fork(),
            prepared: self.prepared.iter().map(|(id, p)| (*id, p.clone())).collect(),
            outcomes: self.outcomes.iter().map(|(id, o)| (*id, o.clone())).collect(),
            local: self.local.iter().copied().collect(),
        }
    }

    /// The state a snapshot holds, checked to be `shard`'s (and at `index`, if given).
    ///
    /// # Errors
    /// It does not decode, or is another shard's or index's.
    pub fn from_snapshot(shard: ShardId, index: Option<u64>, bytes: &[u8]) -> Result<Self, ImageError> {
        let image: Image = postcard::from_bytes(bytes).map_err(|e| ImageError::Decode(e.to_string()))?;
        if image.shard != shard || index.is_some_and(|i| i != image.applied_index) {
            return Err(ImageError::Mismatch {
                shard: image.shard,
                index: image.applied_index,
                expected_shard: shard,
                expected_index: index,
            });
        }
        let mut store = Store::new();
        for (k, v) in image.store {
            store.put(k, v);
        }
        Ok(ShardState {
            shard,
            store,
            prepared: image.prepared.into_iter().collect(),
            outcomes: image.outcomes.into_iter().collect(),
            local: image.local.into_iter().collect(),
            applied_index: image.applied_index,
            executed: Vec::new(),
        })
    }
}

/// Installs `writes` into `store`.
pub fn install(store: &mut Store, writes: &[Write]) {
    for (key, value) in writes {
        match value {
            Some(v) => {
                store.put_slice(key, v.clone());
            }
            None => {
                store.delete(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(seq: u64) -> TxnId {
        TxnId { client: 7, seq }
    }

    fn entry(index: u64, record: BaseRecord) -> LogEntry<BaseRecord> {
        LogEntry { index, record }
    }

    #[test]
    fn records_install_prepare_commit_abort_and_prune() {
        let mut s = ShardState::new(0, Store::new());
        let w = |k: &str, v: &str| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec()));
        s.apply(&entry(1, BaseRecord::Local { id: id(1), writes: vec![w("a", "1")], output: vec![1], acked_below: 0 }));
        assert_eq!(s.store().get(b"a"), Some(&b"1".to_vec()));
        let prepare = |i: u64, writes| BaseRecord::Prepare {
            id: id(i),
            shards: vec![0, 1],
            writes,
            output: vec![i as u8],
            read_locks: vec![],
            write_locks: vec![9],
            acked_below: 0,
        };
        s.apply(&entry(2, prepare(2, vec![w("b", "2")])));
        s.apply(&entry(3, prepare(3, vec![w("c", "3")])));
        assert_eq!(s.store().get(b"b"), None, "prepared writes wait for the decision");
        s.apply(&entry(4, BaseRecord::Commit { id: id(2) }));
        s.apply(&entry(5, BaseRecord::Abort { id: id(3), reason: "no".into() }));
        assert_eq!(s.store().get(b"b"), Some(&b"2".to_vec()));
        assert_eq!(s.store().get(b"c"), None);
        assert!(s.prepared().is_empty());
        assert_eq!(s.outcome(id(2)), Some(&Outcome::Committed { output: vec![2] }));
        assert_eq!(s.outcome(id(3)), Some(&Outcome::Aborted { reason: "no".into() }));
        assert_eq!(s.take_executed(), vec![(id(1), 1), (id(2), 4)]);
        // A tombstone for a piece never prepared, then the client acknowledges everything below 4.
        s.apply(&entry(6, BaseRecord::Abort { id: id(9), reason: "lost".into() }));
        s.apply(&entry(7, BaseRecord::Local { id: id(4), writes: vec![], output: vec![], acked_below: 4 }));
        assert_eq!(s.outcome(id(1)), None, "acknowledged: forgotten");
        assert!(s.outcome(id(9)).is_some() && s.outcome(id(4)).is_some());
        // A cross-shard outcome outlives the acknowledgement: another participant's
        // resolution may still ask about it.
        assert_eq!(s.outcome(id(2)), Some(&Outcome::Committed { output: vec![2] }));
        assert_eq!(s.outcome(id(3)), Some(&Outcome::Aborted { reason: "no".into() }));

        s.take_executed();
        let image = s.snapshot();
        let back = ShardState::from_snapshot(0, Some(7), &image).unwrap();
        assert_eq!(back, s);
        assert!(ShardState::from_snapshot(1, None, &image).unwrap_err().to_string().contains("expected shard 1"));
        assert!(ShardState::from_snapshot(0, Some(8), &image).is_err());
        assert!(ShardState::from_snapshot(0, None, &image[..3]).is_err());
    }
}
