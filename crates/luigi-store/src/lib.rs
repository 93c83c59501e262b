//! Ordered in-memory key-value store of one Luigi shard.
//!
//! Keys and values are byte strings. Keys are ordered bytewise, so a table is simply a key
//! prefix (see [`table_key`]) and an ordered range scan within a table is a scan over a prefix
//! range. The store knows nothing about transactions: the protocol crate wraps it in a
//! per-transaction context that checks key sets and keeps an undo log.
//!
//! Writes made at a transaction's timestamp (`put_at`, `delete_at`) also keep the value they
//! replaced for a retention window ([`versions`]), so a read at a snapshot timestamp
//! (`get_at`, `scan_at`) sees the values as of that timestamp (DESIGN.md rule 23).

pub mod hashing;
pub mod versions;

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::ops::Bound;

pub use hashing::KeyedState;
use versions::History;
pub use versions::{HistoryStats, Timestamp, TooOld};

/// A key: bytes, ordered bytewise. By convention the first two bytes are the table id.
pub type Key = Vec<u8>;
/// A value: opaque bytes (procedures encode rows as they like; integers are 8 bytes LE).
pub type Value = Vec<u8>;

/// Builds a key in `table` from the big-endian encoding of `parts`, so that keys of one table
/// sort by their parts in order (e.g. `(warehouse, district, order)`).
pub fn table_key(table: u16, parts: &[u64]) -> Key {
    let mut key = Vec::with_capacity(2 + 8 * parts.len());
    key.extend_from_slice(&table.to_be_bytes());
    for part in parts {
        key.extend_from_slice(&part.to_be_bytes());
    }
    key
}

/// Direction of a range scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanOrder {
    /// Smallest keys first.
    Ascending,
    /// Largest keys first.
    Descending,
}

/// The ordered store of one shard: a hash map for point operations (one probe instead of a
/// B-tree descent of pointer-chasing comparisons) plus an ordered index of keys for scans.
/// The map's hasher is keyed per process ([`KeyedState`]): clients choose the keys. Nothing
/// depends on its order (scans, [`Store::iter`] and [`Store::state_hash`] follow the index).
/// Older versions live on the side ([`versions::History`]); equality compares the latest
/// values only (replicas hold the same state, not necessarily the same history).
#[derive(Clone, Debug, Default)]
pub struct Store {
    map: HashMap<Key, Value, KeyedState>,
    index: BTreeSet<Key>,
    history: History,
}

impl PartialEq for Store {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl Eq for Store {}

/// What a write at a timestamp replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replaced {
    /// The key's value before the write (`None`: absent).
    pub old: Option<Value>,
    /// True when the write kept `old` as a version: a rollback calls [`Store::unrecord`].
    pub versioned: bool,
}

impl Store {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value under `key`, if any.
    pub fn get(&self, key: &[u8]) -> Option<&Value> {
        self.map.get(key)
    }

    /// Stores `value` under `key`, returning the previous value.
    pub fn put(&mut self, key: Key, value: Value) -> Option<Value> {
        if let Some(slot) = self.map.get_mut(&key) {
            return Some(std::mem::replace(slot, value));
        }
        self.index.insert(key.clone());
        self.map.insert(key, value)
    }

    /// Like [`Store::put`] for a borrowed key: allocates a key only when it is new.
    pub fn put_slice(&mut self, key: &[u8], value: Value) -> Option<Value> {
        if let Some(slot) = self.map.get_mut(key) {
            return Some(std::mem::replace(slot, value));
        }
        self.put(key.to_vec(), value)
    }

    /// Removes `key`, returning its value.
    pub fn delete(&mut self, key: &[u8]) -> Option<Value> {
        let old = self.remove_latest(key)?;
        // A snapshot scan finds a key absent now through the history.
        self.history.note_absent(key);
        Some(old)
    }

    fn remove_latest(&mut self, key: &[u8]) -> Option<Value> {
        let old = self.map.remove(key)?;
        self.index.remove(key);
        Some(old)
    }

    /// Up to `limit` entries with `start <= key < end`, in `order`.
    pub fn scan(&self, start: &[u8], end: &[u8], limit: usize, order: ScanOrder) -> Vec<(Key, Value)> {
        if start >= end {
            return Vec::new();
        }
        let range = self.index.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)));
        let clone = |k: &Key| (k.clone(), self.map[k].clone());
        match order {
            ScanOrder::Ascending => range.take(limit).map(clone).collect(),
            ScanOrder::Descending => range.rev().take(limit).map(clone).collect(),
        }
    }

    /// Stores `value` under `key` as written by a transaction at timestamp `ts`, keeping the
    /// replaced value for snapshots below `ts`.
    pub fn put_at(&mut self, key: &[u8], value: Value, ts: Timestamp) -> Replaced {
        let old = self.put_slice(key, value);
        let versioned = self.history.record(key, &old, ts);
        Replaced { old, versioned }
    }

    /// Removes `key` as a transaction at timestamp `ts` does, keeping the removed value for
    /// snapshots below `ts`.
    pub fn delete_at(&mut self, key: &[u8], ts: Timestamp) -> Replaced {
        let old = self.remove_latest(key);
        let versioned = old.is_some() && self.history.record(key, &old, ts);
        if old.is_some() {
            self.history.note_absent(key);
        }
        Replaced { old, versioned }
    }

    /// Drops the version a write at `ts` kept under `key` (its transaction rolled back; the
    /// caller restores the latest value with [`Store::put`]/[`Store::delete`]).
    pub fn unrecord(&mut self, key: &[u8], ts: Timestamp) {
        self.history.unrecord(key, ts);
    }

    /// The value under `key` at snapshot `ts`: what the last write at or below `ts` left.
    pub fn get_at(&self, key: &[u8], ts: Timestamp) -> Result<Option<&Value>, TooOld> {
        self.history.value_at(key, ts, self.map.get(key))
    }

    /// As [`Store::scan`], at snapshot `ts`.
    pub fn scan_at(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        order: ScanOrder,
        ts: Timestamp,
    ) -> Result<Vec<(Key, Value)>, TooOld> {
        self.history.check(ts)?;
        if start >= end {
            return Ok(Vec::new());
        }
        let latest = self.index.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)));
        let versioned = self.history.keys_in(start, end);
        Ok(match order {
            ScanOrder::Ascending => self.merge_at(latest, versioned, limit, ts, Ord::cmp),
            ScanOrder::Descending => self.merge_at(latest.rev(), versioned.rev(), limit, ts, |a, b| b.cmp(a)),
        })
    }

    /// Up to `limit` entries present at `ts` among the union of two key streams sorted by
    /// `before`.
    fn merge_at<'a>(
        &'a self,
        latest: impl Iterator<Item = &'a Key>,
        versioned: impl Iterator<Item = &'a Key>,
        limit: usize,
        ts: Timestamp,
        before: fn(&Key, &Key) -> Ordering,
    ) -> Vec<(Key, Value)> {
        let (mut a, mut b) = (latest.peekable(), versioned.peekable());
        let mut out = Vec::new();
        while out.len() < limit {
            let key = match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (Some(x), Some(y)) => match before(x, y) {
                    Ordering::Less => a.next(),
                    Ordering::Greater => b.next(),
                    Ordering::Equal => b.next().and(a.next()),
                },
            };
            let Some(key) = key else { break };
            if let Some(value) = self.history.resolve(key, ts, self.map.get(key)) {
                out.push((key.clone(), value.clone()));
            }
        }
        out
    }

    /// Sets how long (in timestamps) replaced versions are kept
    /// ([`versions::DEFAULT_RETENTION_US`] by default).
    pub fn set_retention(&mut self, retention_us: Timestamp) {
        self.history.set_retention(retention_us);
    }

    /// Refuses snapshot reads below `ts` (a store rebuilt from a snapshot at `ts` holds no
    /// versions before it).
    pub fn forget_below(&mut self, ts: Timestamp) {
        self.history.forget_below(ts);
    }

    /// The oldest snapshot a read may ask for.
    pub fn oldest_snapshot(&self) -> Timestamp {
        self.history.oldest()
    }

    /// How many versions are kept and their bytes (for the metrics).
    pub fn history_stats(&self) -> HistoryStats {
        self.history.stats()
    }

    /// Number of keys stored.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Iterates over all entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Value)> {
        self.index.iter().map(|k| (k, &self.map[k]))
    }

    /// A deterministic hash of the whole content: equal stores give equal hashes on every
    /// replica and every run (SipHash with fixed keys), so replicas can be compared cheaply.
    pub fn state_hash(&self) -> u64 {
        #[allow(deprecated)]
        let mut hasher = std::hash::SipHasher::new_with_keys(0x4c75_6967, 0x6920_6b76);
        self.map.len().hash(&mut hasher);
        for (k, v) in self.iter() {
            k.hash(&mut hasher);
            v.hash(&mut hasher);
        }
        hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_keys_sort_by_parts() {
        let a = table_key(3, &[1, 255]);
        let b = table_key(3, &[2, 0]);
        let c = table_key(4, &[0]);
        assert!(a < b && b < c);
        assert_eq!(a.len(), 2 + 16);
    }

    #[test]
    fn scan_both_directions_with_limit() {
        let mut s = Store::new();
        for i in 0..10u64 {
            s.put(table_key(1, &[i]), i.to_le_bytes().to_vec());
        }
        s.put(table_key(2, &[0]), vec![]);
        let lo = table_key(1, &[2]);
        let hi = table_key(1, &[7]);
        let asc = s.scan(&lo, &hi, 3, ScanOrder::Ascending);
        assert_eq!(
            asc.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            vec![table_key(1, &[2]), table_key(1, &[3]), table_key(1, &[4])]
        );
        let desc = s.scan(&lo, &hi, 2, ScanOrder::Descending);
        assert_eq!(desc[0].0, table_key(1, &[6]));
        assert_eq!(desc[1].0, table_key(1, &[5]));
        assert!(s.scan(&hi, &lo, 10, ScanOrder::Ascending).is_empty());
    }

    #[test]
    fn state_hash_tracks_content() {
        let mut a = Store::new();
        let mut b = Store::new();
        a.put(b"k".to_vec(), b"v".to_vec());
        b.put(b"k".to_vec(), b"v".to_vec());
        assert_eq!(a.state_hash(), b.state_hash());
        b.put(b"k".to_vec(), b"w".to_vec());
        assert_ne!(a.state_hash(), b.state_hash());
        b.delete(b"k");
        assert_ne!(a.state_hash(), b.state_hash());
        assert_eq!(b.state_hash(), Store::new().state_hash());
    }
}

#[cfg(test)]
mod tests_versions;
