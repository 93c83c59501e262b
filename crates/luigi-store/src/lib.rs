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

mod chunks;
pub mod hashing;
mod map_key;
pub mod versions;

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::ops::Bound;

use chunks::Chunks;
pub use hashing::KeyedState;
use versions::{History, ListRef};
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
/// Older versions live on the side ([`versions::History`]), named from each key's entry; a
/// deleted key keeps its entry (and its place in the index) while it has versions. Equality
/// compares the latest values only (replicas hold the same state, not necessarily the same
/// history).
#[derive(Clone, Debug, Default)]
pub struct Store {
    map: Chunks<Entry>,
    index: BTreeSet<Key>,
    /// Keys whose latest value is present.
    live: usize,
    history: History,
}

/// A key's entry: its latest value (`None`: deleted, kept for its versions) and its versions.
#[derive(Clone, Debug, Default)]
struct Entry {
    value: Option<Value>,
    versions: ListRef,
}

impl PartialEq for Store {
    fn eq(&self, other: &Self) -> bool {
        self.live == other.live && self.latest().all(|(k, v)| other.get(k) == Some(v))
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
        self.map.get(key)?.value.as_ref()
    }

    /// The entry of a key the index holds.
    fn entry(&self, key: &[u8]) -> &Entry {
        self.map.get(key).expect("the index holds the map's keys")
    }

    /// Looks `keys` up and touches their values without using them: a transaction's declared
    /// keys, looked up one after another before its procedure runs, so that their cache
    /// misses (a large store's slots and values are rarely cached) overlap instead of each
    /// stalling the procedure in turn (the lookups do not depend on each other).
    pub fn warm<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) {
        for key in keys {
            let first = self.map.get(key).and_then(|e| e.value.as_ref()).and_then(|v| v.first().copied());
            std::hint::black_box(first);
        }
    }

    /// The present entries, in no order.
    fn latest(&self) -> impl Iterator<Item = (&[u8], &Value)> {
        self.map.iter().filter_map(|(k, e)| Some((k, e.value.as_ref()?)))
    }

    /// Stores `value` under `key`, returning the previous value.
    pub fn put(&mut self, key: Key, value: Value) -> Option<Value> {
        if let Some(entry) = self.map.get_mut(&key) {
            return Self::replace(entry, value, &mut self.live);
        }
        self.insert_new(key, value, ListRef::NONE);
        None
    }

    /// Like [`Store::put`] for a borrowed key: allocates a key only when it is new.
    pub fn put_slice(&mut self, key: &[u8], value: Value) -> Option<Value> {
        if let Some(entry) = self.map.get_mut(key) {
            return Self::replace(entry, value, &mut self.live);
        }
        self.insert_new(key.to_vec(), value, ListRef::NONE);
        None
    }

    /// Sets an existing entry's latest value, returning the one it replaced. Branch-free:
    /// a branch on the old value here measured 120-150 ns a put slower
    /// (`examples/versions_cost.rs`, window `plain`).
    fn replace(entry: &mut Entry, value: Value, live: &mut usize) -> Option<Value> {
        let old = entry.value.replace(value);
        *live += usize::from(old.is_none());
        old
    }

    fn insert_new(&mut self, key: Key, value: Value, versions: ListRef) {
        self.live += 1;
        self.map.insert(&key, Entry { value: Some(value), versions });
        self.index.insert(key);
    }

    /// Removes `key`, returning its value.
    pub fn delete(&mut self, key: &[u8]) -> Option<Value> {
        if self.history.is_empty() {
            let old = self.map.remove(key)?.value;
            self.index.remove(key);
            self.live -= usize::from(old.is_some());
            return old;
        }
        let entry = self.map.get_mut(key)?;
        let old = entry.value.take()?;
        self.live -= 1;
        let versions = entry.versions;
        self.settle_absent(key, versions);
        Some(old)
    }

    /// A key whose latest value just went: its entry stays while it has versions (snapshot
    /// reads and scans find it there), else goes.
    fn settle_absent(&mut self, key: &[u8], versions: ListRef) {
        if !self.history.note_absent(versions, key) {
            self.map.remove(key);
            self.index.remove(key);
        }
    }

    /// Removes the entries of deleted keys whose last version went.
    fn remove_gone(&mut self) {
        while let Some(key) = self.history.take_gone() {
            if self.map.get(&key).is_some_and(|e| e.value.is_none() && !self.history.is_live(e.versions)) {
                self.map.remove(&key);
                self.index.remove(&*key);
            }
        }
    }

    /// Up to `limit` entries with `start <= key < end`, in `order`.
    pub fn scan(&self, start: &[u8], end: &[u8], limit: usize, order: ScanOrder) -> Vec<(Key, Value)> {
        if start >= end {
            return Vec::new();
        }
        let range = self.index.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)));
        let present = |k: &Key| Some((k.clone(), self.entry(k).value.as_ref()?.clone()));
        match order {
            ScanOrder::Ascending => range.filter_map(present).take(limit).collect(),
            ScanOrder::Descending => range.rev().filter_map(present).take(limit).collect(),
        }
    }

    /// Stores `value` under `key` as written by a transaction at timestamp `ts`, keeping the
    /// replaced value for snapshots below `ts`.
    pub fn put_at(&mut self, key: &[u8], value: Value, ts: Timestamp) -> Replaced {
        let replaced = match self.map.get_mut(key) {
            Some(entry) => {
                let old = Self::replace(entry, value, &mut self.live);
                let versioned = self.history.record(&mut entry.versions, key.len(), &old, ts);
                Replaced { old, versioned }
            }
            None => {
                let mut versions = ListRef::NONE;
                let versioned = self.history.record(&mut versions, key.len(), &None, ts);
                self.insert_new(key.to_vec(), value, versions);
                Replaced { old: None, versioned }
            }
        };
        self.remove_gone();
        replaced
    }

    /// Removes `key` as a transaction at timestamp `ts` does, keeping the removed value for
    /// snapshots below `ts`.
    pub fn delete_at(&mut self, key: &[u8], ts: Timestamp) -> Replaced {
        let Some(entry) = self.map.get_mut(key) else { return Replaced { old: None, versioned: false } };
        let Some(old) = entry.value.take() else { return Replaced { old: None, versioned: false } };
        self.live -= 1;
        let old = Some(old);
        let versioned = self.history.record(&mut entry.versions, key.len(), &old, ts);
        let versions = entry.versions;
        self.settle_absent(key, versions);
        self.remove_gone();
        Replaced { old, versioned }
    }

    /// Drops the version a write at `ts` kept under `key` (its transaction rolled back; the
    /// caller restores the latest value with [`Store::put`]/[`Store::delete`]).
    pub fn unrecord(&mut self, key: &[u8], ts: Timestamp) {
        let Some(entry) = self.map.get(key) else { return };
        let versions = entry.versions;
        self.history.unrecord(versions, ts);
        if entry.value.is_none() && !self.history.is_live(versions) {
            // A deleted key left without versions: the caller's restore puts it back.
            self.map.remove(key);
            self.index.remove(key);
        }
    }

    /// The value under `key` at snapshot `ts`: what the last write at or below `ts` left.
    pub fn get_at(&self, key: &[u8], ts: Timestamp) -> Result<Option<&Value>, TooOld> {
        match self.map.get(key) {
            Some(entry) => self.history.value_at(entry.versions, ts, entry.value.as_ref()),
            None => self.history.check(ts).map(|()| None),
        }
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
        let range = self.index.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)));
        let at = |k: &Key| {
            let entry = self.entry(k);
            let value = self.history.resolve(entry.versions, ts, entry.value.as_ref())?;
            Some((k.clone(), value.clone()))
        };
        Ok(match order {
            ScanOrder::Ascending => range.filter_map(at).take(limit).collect(),
            ScanOrder::Descending => range.rev().filter_map(at).take(limit).collect(),
        })
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
        self.remove_gone();
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
        self.live
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Iterates over all entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Value)> {
        self.index.iter().filter_map(|k| Some((k, self.entry(k).value.as_ref()?)))
    }

    /// The latest values as they are now, shared copy-on-write with this store: O(number of
    /// chunks), whatever the store's size. Writes after it copy the chunks they touch first,
    /// so the fork never changes (what a snapshot job serializes off the event loop,
    /// DESIGN.md rule 11).
    pub fn fork(&self) -> StoreFork {
        StoreFork { map: self.map.fork(), live: self.live }
    }

    /// How many chunks of the map a fork still alive shares (a write to one copies it).
    pub fn shared_chunks(&self) -> usize {
        self.map.shared_chunks()
    }

    /// A deterministic hash of the whole content: equal stores give equal hashes on every
    /// replica and every run (SipHash with fixed keys), so replicas can be compared cheaply.
    pub fn state_hash(&self) -> u64 {
        #[allow(deprecated)]
        let mut hasher = std::hash::SipHasher::new_with_keys(0x4c75_6967, 0x6920_6b76);
        self.live.hash(&mut hasher);
        for (k, v) in self.iter() {
            k.hash(&mut hasher);
            v.hash(&mut hasher);
        }
        hasher.finish()
    }
}

/// A store's latest values at one moment ([`Store::fork`]), sharing its memory until the store
/// writes over it.
#[derive(Debug)]
pub struct StoreFork {
    map: Chunks<Entry>,
    live: usize,
}

impl StoreFork {
    /// The present entries in key order, as [`Store::iter`] gives them (sorted here: a fork
    /// holds no index).
    pub fn entries(&self) -> Vec<(&[u8], &Value)> {
        let mut entries: Vec<(&[u8], &Value)> =
            self.map.iter().filter_map(|(k, e)| Some((k, e.value.as_ref()?))).collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries
    }

    /// Number of keys stored.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
}

#[cfg(test)]
impl Store {
    /// The history's counters recounted, checking on the way the store's own invariants: the
    /// index holds the map's keys, `live` counts the present ones, and a deleted key's entry
    /// stays only while it has versions.
    fn recount_history(&self) -> HistoryStats {
        assert!(
            self.index.iter().eq(self.map.iter().map(|(k, _)| k).collect::<BTreeSet<_>>()),
            "the index holds the map's keys"
        );
        assert_eq!(self.live, self.latest().count());
        let entries: Vec<_> = self.map.iter().map(|(_, e)| (e.versions, e.value.is_none())).collect();
        for (versions, absent) in &entries {
            assert!(!absent || self.history.is_live(*versions), "a deleted key without versions keeps its entry");
        }
        self.history.recount(&entries)
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
    fn a_fork_holds_the_latest_values_of_its_moment_whatever_the_store_does_after() {
        let mut s = Store::new();
        s.set_retention(1_000);
        for i in 0..3000u64 {
            s.put_at(&table_key(1, &[i]), i.to_le_bytes().to_vec(), 10);
        }
        s.delete_at(&table_key(1, &[5]), 11);
        let expected: Vec<(Key, Value)> = s.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let fork = s.fork();
        assert!(s.shared_chunks() > 0);
        for i in 0..3000u64 {
            s.put_at(&table_key(1, &[i]), vec![], 20);
        }
        s.put(table_key(1, &[5]), vec![1]);
        s.delete(&table_key(1, &[6]));
        s.forget_below(15);
        let held: Vec<(Key, Value)> = fork.entries().into_iter().map(|(k, v)| (k.to_vec(), v.clone())).collect();
        assert_eq!(held, expected, "in key order, the deleted key absent");
        assert_eq!(fork.len(), 2999);
        drop(fork);
        assert_eq!(s.shared_chunks(), 0);
        s.recount_history();
    }

    #[test]
    fn a_map_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<(map_key::MapKey, Entry)>(), 64);
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
