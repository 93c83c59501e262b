//! The hold queue (DESIGN.md rule 5): pending transactions ordered by (timestamp, id), with a
//! per-key wait list so that a transaction blocks only the conflicting ones behind it.
//!
//! A transaction is released when it is ready (durable and decided), the clock has reached
//! its timestamp, and no conflicting transaction with a smaller (timestamp, id) is pending.
//! Release is event driven: a transaction is re-examined only when something that could
//! unblock it happens (it became ready, its time came, or a transaction ahead of it on one of
//! its keys left), so the cost per transaction is proportional to its keys, not the queue.
//!
//! Keys are tracked by hash (see [`crate::keyhash`]); a collision only adds a false conflict.

use std::collections::BTreeSet;

use smallvec::SmallVec;

use luigi_txn::Map;

use luigi_txn::keyhash::{key_hash, HashKeyMap};
use luigi_txn::types::{Access, KeySet, TimeUs, Timestamp, TxnId};

type Pos = (Timestamp, TxnId);

#[derive(Debug)]
struct Entry {
    ts: Timestamp,
    keys: Vec<(u64, Access)>,
    ready: bool,
}

/// The transactions waiting on one key, sorted by position (usually one or two).
#[derive(Debug, Default)]
struct WaitList(SmallVec<[(Pos, Access); 2]>);

impl WaitList {
    fn insert(&mut self, pos: Pos, access: Access) {
        match self.0.binary_search_by(|(p, _)| p.cmp(&pos)) {
            // The same transaction twice on one hash (a collision): keep the stronger access.
            Ok(i) => {
                if access == Access::Write {
                    self.0[i].1 = Access::Write;
                }
            }
            Err(i) => self.0.insert(i, (pos, access)),
        }
    }

    fn remove(&mut self, pos: &Pos) {
        if let Ok(i) = self.0.binary_search_by(|(p, _)| p.cmp(pos)) {
            self.0.remove(i);
        }
    }
}

/// Pending transactions of one shard.
#[derive(Debug, Default)]
pub struct HoldQueue {
    by_ts: BTreeSet<Pos>,
    entries: Map<TxnId, Entry>,
    per_key: HashKeyMap<WaitList>,
    /// Ready transactions waiting only for the clock.
    clock_wait: BTreeSet<Pos>,
    /// Transactions to re-examine, processed in timestamp order.
    candidates: BTreeSet<Pos>,
    /// Size of `per_key` after the last sweep of empty wait lists.
    per_key_len_after_prune: usize,
}

impl HoldQueue {
    /// Adds a pending transaction at `ts` (not ready yet).
    pub fn insert(&mut self, id: TxnId, ts: Timestamp, keys: &KeySet) {
        let keys: Vec<(u64, Access)> = keys.entries().map(|(k, a)| (key_hash(k), a)).collect();
        for (k, a) in &keys {
            self.per_key.entry(*k).or_default().insert((ts, id), *a);
        }
        self.prune_empty_wait_lists();
        let fresh = self.by_ts.insert((ts, id));
        assert!(fresh, "transaction {id:?} queued twice");
        self.entries.insert(id, Entry { ts, keys, ready: false });
    }

    /// Empty wait lists are kept (a hot key's list is reused without reallocating) and swept
    /// once the map has doubled, so memory stays proportional to the keys in use.
    fn prune_empty_wait_lists(&mut self) {
        if self.per_key.len() < 2 * self.per_key_len_after_prune + 4096 {
            return;
        }
        self.per_key.retain(|_, q| !q.0.is_empty());
        self.per_key_len_after_prune = self.per_key.len();
    }

    /// Marks `id` ready (durable and decided); it is examined at the next release.
    pub fn mark_ready(&mut self, id: TxnId) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.ready = true;
            self.candidates.insert((e.ts, id));
        }
    }

    /// Moves `id` to a new timestamp (cross-shard agreement raised it). Transactions that were
    /// behind it may now be ahead, so they are re-examined.
    pub fn reposition(&mut self, id: TxnId, new_ts: Timestamp) {
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        let old = (e.ts, id);
        if e.ts == new_ts {
            return;
        }
        e.ts = new_ts;
        let keys = e.keys.clone();
        self.by_ts.remove(&old);
        self.by_ts.insert((new_ts, id));
        self.clock_wait.remove(&old);
        self.candidates.remove(&old);
        for (k, a) in &keys {
            let q = self.per_key.get_mut(k).expect("queued keys have wait lists");
            q.remove(&old);
            q.insert((new_ts, id), *a);
        }
        self.wake_fronts(&keys);
        self.candidates.insert((new_ts, id));
    }

    /// Removes `id` without releasing it (recovery abort).
    pub fn remove(&mut self, id: TxnId) -> bool {
        let Some(e) = self.entries.remove(&id) else {
            return false;
        };
        self.unlink(id, &e);
        true
    }

    /// The smallest pending timestamp.
    pub fn min_ts(&self) -> Option<Timestamp> {
        self.by_ts.first().map(|&(ts, _)| ts)
    }

    /// The earliest time a ready transaction waits for.
    pub fn next_clock_deadline(&self) -> Option<TimeUs> {
        self.clock_wait.first().map(|&(ts, _)| ts)
    }

    /// Number of pending transactions.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Where `id` is queued and whether it is ready, if it is queued.
    pub fn position(&self, id: TxnId) -> Option<(Timestamp, bool)> {
        self.entries.get(&id).map(|e| (e.ts, e.ready))
    }

    /// Checks that the indexes agree with the entries: every entry is in the timestamp order
    /// and on the wait list of each of its keys, at its current position and nowhere else;
    /// wait lists are sorted; transactions waiting for the clock are ready and queued where
    /// they are. Linear in the queued keys (for tests and the simulator).
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.by_ts.len() != self.entries.len() {
            return Err(format!("{} entries but {} in timestamp order", self.entries.len(), self.by_ts.len()));
        }
        let mut on_lists = 0;
        for (id, e) in &self.entries {
            let pos = (e.ts, *id);
            if !self.by_ts.contains(&pos) {
                return Err(format!("{id:?} at {} is missing from the timestamp order", e.ts));
            }
            let mut hashes: Vec<u64> = e.keys.iter().map(|(k, _)| *k).collect();
            hashes.sort_unstable();
            hashes.dedup();
            on_lists += hashes.len();
            for k in hashes {
                let listed = self.per_key.get(&k).is_some_and(|q| q.0.binary_search_by(|(p, _)| p.cmp(&pos)).is_ok());
                if !listed {
                    return Err(format!("{id:?} at {} is missing from the wait list of key hash {k:#x}", e.ts));
                }
            }
        }
        let listed: usize = self.per_key.values().map(|q| q.0.len()).sum();
        if listed != on_lists {
            return Err(format!("{listed} wait-list entries for {on_lists} queued keys"));
        }
        if let Some(k) = self.per_key.iter().find(|(_, q)| q.0.windows(2).any(|w| w[0].0 >= w[1].0)).map(|(k, _)| k) {
            return Err(format!("the wait list of key hash {k:#x} is out of order"));
        }
        for &(ts, id) in &self.clock_wait {
            if self.entries.get(&id).is_none_or(|e| e.ts != ts || !e.ready) {
                return Err(format!("{id:?} waits for the clock at {ts} but is not ready and queued there"));
            }
        }
        Ok(())
    }

    /// Releases, in (timestamp, id) order, every transaction that may execute at `now`, and
    /// pushes their ids into `out`. `ignore_conflicts` is a test-only mutation.
    pub fn release(&mut self, now: TimeUs, out: &mut Vec<TxnId>, ignore_conflicts: bool) {
        while let Some(&(ts, id)) = self.clock_wait.first() {
            if ts > now {
                break;
            }
            self.clock_wait.pop_first();
            self.candidates.insert((ts, id));
        }
        while let Some((ts, id)) = self.candidates.pop_first() {
            let Some(e) = self.entries.get(&id) else {
                continue;
            };
            if e.ts != ts || !e.ready {
                continue; // stale position, or it is re-examined when it becomes ready
            }
            if ts > now {
                self.clock_wait.insert((ts, id));
                continue;
            }
            if !ignore_conflicts && self.blocked(id, e) {
                continue; // re-examined when a transaction ahead of it leaves
            }
            let e = self.entries.remove(&id).expect("present");
            self.unlink(id, &e);
            out.push(id);
        }
    }

    /// Whether `id` would be released at `now` were it decided: its timestamp has come and
    /// no conflicting transaction is ahead of it (DESIGN.md rule 21).
    pub fn would_release(&self, id: TxnId, now: TimeUs) -> bool {
        self.entries.get(&id).is_some_and(|e| e.ts <= now && !self.blocked(id, e))
    }

    /// True when a conflicting transaction is ahead of `id` on one of its keys.
    fn blocked(&self, id: TxnId, e: &Entry) -> bool {
        let me = (e.ts, id);
        e.keys.iter().any(|(k, access)| {
            self.per_key[k].0.iter().take_while(|(pos, _)| *pos < me).any(|(_, other)| access.conflicts(*other))
        })
    }

    fn unlink(&mut self, id: TxnId, e: &Entry) {
        let pos = (e.ts, id);
        self.by_ts.remove(&pos);
        self.clock_wait.remove(&pos);
        self.candidates.remove(&pos);
        for (k, _) in &e.keys {
            if let Some(q) = self.per_key.get_mut(k) {
                q.remove(&pos);
            }
        }
        self.wake_fronts(&e.keys);
    }

    /// Re-examines, on each key, the transactions that could be first to go: every read
    /// ahead of the first write, and that write.
    fn wake_fronts(&mut self, keys: &[(u64, Access)]) {
        for (k, _) in keys {
            let Some(q) = self.per_key.get(k) else {
                continue;
            };
            for (pos, access) in &q.0 {
                self.candidates.insert(*pos);
                if *access == Access::Write {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(seq: u64) -> TxnId {
        TxnId { client: 1, seq }
    }

    fn ks(reads: &[&str], writes: &[&str]) -> KeySet {
        let v = |s: &[&str]| s.iter().map(|k| k.as_bytes().to_vec()).collect();
        KeySet::new(v(reads), v(writes))
    }

    fn released(q: &mut HoldQueue, now: TimeUs) -> Vec<u64> {
        let mut out = Vec::new();
        q.release(now, &mut out, false);
        out.iter().map(|i| i.seq).collect()
    }

    #[test]
    fn waits_for_the_clock_and_readiness() {
        let mut q = HoldQueue::default();
        q.insert(id(1), 100, &ks(&[], &["a"]));
        assert!(released(&mut q, 1000).is_empty(), "not ready yet");
        q.mark_ready(id(1));
        assert!(released(&mut q, 99).is_empty(), "clock has not reached ts");
        assert_eq!(q.next_clock_deadline(), Some(100));
        assert_eq!(released(&mut q, 100), vec![1]);
        assert!(q.is_empty());
    }

    #[test]
    fn conflicting_transactions_go_in_timestamp_order() {
        let mut q = HoldQueue::default();
        q.insert(id(1), 200, &ks(&[], &["a"]));
        q.insert(id(2), 100, &ks(&[], &["a"]));
        q.mark_ready(id(1));
        // 1 is ready but 2 (smaller ts, same key) is pending: 1 must wait.
        assert!(released(&mut q, 1000).is_empty());
        q.mark_ready(id(2));
        assert_eq!(released(&mut q, 1000), vec![2, 1]);
    }

    #[test]
    fn non_conflicting_transactions_pass_a_blocked_one() {
        let mut q = HoldQueue::default();
        q.insert(id(1), 100, &ks(&[], &["a"])); // never ready (e.g. awaiting agreement)
        q.insert(id(2), 150, &ks(&["b"], &["c"]));
        q.insert(id(3), 160, &ks(&["a"], &[])); // reads a: blocked by 1's write
        q.mark_ready(id(2));
        q.mark_ready(id(3));
        assert_eq!(released(&mut q, 1000), vec![2]);
        assert_eq!(q.min_ts(), Some(100));
        q.mark_ready(id(1));
        assert_eq!(released(&mut q, 1000), vec![1, 3]);
    }

    #[test]
    fn reads_share_but_block_a_later_write() {
        let mut q = HoldQueue::default();
        q.insert(id(1), 100, &ks(&["a"], &[]));
        q.insert(id(2), 110, &ks(&["a"], &[]));
        q.insert(id(3), 120, &ks(&[], &["a"]));
        q.mark_ready(id(3));
        q.mark_ready(id(2));
        assert_eq!(released(&mut q, 1000), vec![2], "reads do not block reads");
        q.mark_ready(id(1));
        assert_eq!(released(&mut q, 1000), vec![1, 3]);
    }

    #[test]
    fn equal_timestamps_are_ordered_by_id() {
        let mut q = HoldQueue::default();
        q.insert(id(2), 100, &ks(&[], &["a"]));
        q.insert(id(1), 100, &ks(&[], &["a"]));
        q.mark_ready(id(2));
        q.mark_ready(id(1));
        assert_eq!(released(&mut q, 100), vec![1, 2]);
    }

    #[test]
    fn an_undecided_transaction_would_be_released_once_its_time_came_and_nothing_conflicting_is_ahead() {
        let mut q = HoldQueue::default();
        q.insert(id(1), 10, &ks(&[], &["a"]));
        q.insert(id(2), 20, &ks(&["a"], &[]));
        q.insert(id(3), 20, &ks(&[], &["b"]));
        assert!(!q.would_release(id(3), 19), "its time has not come");
        assert!(q.would_release(id(3), 20), "undecided, and nothing ahead on b");
        assert!(!q.would_release(id(2), 20), "1 is ahead on a");
        assert!(q.would_release(id(1), 20));
        assert!(!q.would_release(id(4), 20), "not queued");
    }

    #[test]
    fn reposition_lets_others_pass() {
        let mut q = HoldQueue::default();
        q.insert(id(1), 100, &ks(&[], &["a"]));
        q.insert(id(2), 200, &ks(&[], &["a"]));
        q.mark_ready(id(2));
        assert!(released(&mut q, 1000).is_empty());
        q.reposition(id(1), 300); // agreement raised 1 above 2
        assert_eq!(released(&mut q, 1000), vec![2]);
        q.mark_ready(id(1));
        assert_eq!(released(&mut q, 1000), vec![1]);
    }

    #[test]
    fn removal_unblocks_waiters() {
        let mut q = HoldQueue::default();
        q.insert(id(1), 100, &ks(&[], &["a"]));
        q.insert(id(2), 200, &ks(&["a"], &[]));
        q.mark_ready(id(2));
        assert!(released(&mut q, 1000).is_empty());
        assert!(q.remove(id(1)));
        assert_eq!(released(&mut q, 1000), vec![2]);
    }

    #[test]
    fn mutation_breaks_the_order() {
        let mut q = HoldQueue::default();
        q.insert(id(1), 100, &ks(&[], &["a"]));
        q.insert(id(2), 200, &ks(&[], &["a"]));
        q.mark_ready(id(2));
        let mut out = Vec::new();
        q.release(1000, &mut out, true);
        assert_eq!(out, vec![id(2)], "the mutation releases past a pending conflict");
    }
}
