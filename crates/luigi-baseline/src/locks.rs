//! The leader's lock table and key versions, both by key hash
//! ([`luigi_txn::keyhash::stable_key_hash`] of a declared key: the unit of conflict; stable
//! because `PREPARE` records carry the hashes a new leader locks again).
//! A hash collision only makes two keys conflict needlessly.
//!
//! Locks are no-wait: a request that finds a conflicting holder fails at once (the
//! transaction aborts) instead of waiting, so there is no deadlock to detect.

use luigi_txn::types::TxnId;
use luigi_txn::Map;

/// Locks held on one key.
#[derive(Clone, Debug, Default)]
struct Lock {
    writer: Option<TxnId>,
    readers: Vec<TxnId>,
}

impl Lock {
    fn is_free(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty()
    }

    fn may_read(&self, id: TxnId) -> bool {
        self.writer.is_none_or(|w| w == id)
    }

    fn may_write(&self, id: TxnId) -> bool {
        self.may_read(id) && self.readers.iter().all(|r| *r == id)
    }
}

/// Shared and exclusive locks by key hash.
#[derive(Clone, Debug, Default)]
pub struct LockTable {
    locks: Map<u64, Lock>,
}

impl LockTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keys with a lock held.
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// True when no lock is held.
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    /// The first key `id` could not lock now (shared on `reads`, exclusive on `writes`), if any.
    pub fn conflict(&self, id: TxnId, reads: &[u64], writes: &[u64]) -> Option<u64> {
        let read_blocked = reads.iter().find(|h| self.locks.get(h).is_some_and(|l| !l.may_read(id)));
        let write_blocked = || writes.iter().find(|h| self.locks.get(h).is_some_and(|l| !l.may_write(id)));
        read_blocked.or_else(write_blocked).copied()
    }

    /// Locks `reads` shared and `writes` exclusive for `id`, all or none.
    ///
    /// # Errors
    /// The first key held by another transaction in a conflicting mode.
    pub fn try_lock(&mut self, id: TxnId, reads: &[u64], writes: &[u64]) -> Result<(), u64> {
        if let Some(h) = self.conflict(id, reads, writes) {
            return Err(h);
        }
        for h in reads {
            let l = self.locks.entry(*h).or_default();
            if !l.readers.contains(&id) {
                l.readers.push(id);
            }
        }
        for h in writes {
            self.locks.entry(*h).or_default().writer = Some(id);
        }
        Ok(())
    }

    /// Releases what `id` holds on `reads` and `writes`.
    pub fn release(&mut self, id: TxnId, reads: &[u64], writes: &[u64]) {
        for h in reads.iter().chain(writes) {
            if let Some(l) = self.locks.get_mut(h) {
                l.readers.retain(|r| *r != id);
                if l.writer == Some(id) {
                    l.writer = None;
                }
                if l.is_free() {
                    self.locks.remove(h);
                }
            }
        }
    }
}

/// Version counters of the keys written through this leader (OCC validation): a piece notes
/// the versions of its declared keys when it executes, and prepares only if none moved.
/// Leader-local: a new leader starts again from zero, and a piece executed under an earlier
/// leader cannot prepare under this one (its buffered execution is gone with that leader).
#[derive(Clone, Debug, Default)]
pub struct Versions {
    versions: Map<u64, u64>,
}

impl Versions {
    /// The version of key hash `h`.
    pub fn get(&self, h: u64) -> u64 {
        self.versions.get(&h).copied().unwrap_or(0)
    }

    /// Key hash `h` was written.
    pub fn bump(&mut self, h: u64) {
        *self.versions.entry(h).or_insert(0) += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(seq: u64) -> TxnId {
        TxnId { client: 1, seq }
    }

    #[test]
    fn shared_locks_share_exclusive_ones_do_not_and_all_or_none_is_taken() {
        let mut locks = LockTable::new();
        locks.try_lock(t(1), &[10, 11], &[20]).unwrap();
        locks.try_lock(t(2), &[10], &[]).unwrap();
        assert_eq!(locks.try_lock(t(3), &[], &[10]), Err(10), "readers block a writer");
        assert_eq!(locks.try_lock(t(3), &[12], &[20]), Err(20), "a writer blocks everyone");
        assert_eq!(locks.conflict(t(3), &[12], &[]), None, "nothing of the failed request was taken");
        assert_eq!(locks.try_lock(t(1), &[20], &[11]), Ok(()), "a holder may re-lock and upgrade alone");
        locks.release(t(1), &[10, 11, 20], &[20, 11]);
        assert_eq!(locks.try_lock(t(3), &[], &[10]), Err(10), "t2 still reads 10");
        locks.release(t(2), &[10], &[]);
        assert!(locks.is_empty());
        locks.try_lock(t(3), &[], &[10]).unwrap();
        assert_eq!(locks.len(), 1);
    }

    #[test]
    fn versions_count_writes() {
        let mut v = Versions::default();
        assert_eq!(v.get(5), 0);
        v.bump(5);
        v.bump(5);
        assert_eq!((v.get(5), v.get(6)), (2, 0));
    }
}
