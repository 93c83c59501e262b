//! Older versions of keys, kept beside the store's latest values for reads at a snapshot
//! timestamp (DESIGN.md rule 23).
//!
//! The latest value of every key stays in the store's map, where the read-write path reads
//! and writes it as before. A write made at a transaction's timestamp `ts` (the store's
//! `put_at`/`delete_at`) also records here the value it replaced, tagged with `ts`: the
//! value the key had for every snapshot below `ts`. A read at `t` returns the replaced value
//! of the earliest write above `t`, or the latest value when no write above `t` is kept.
//!
//! Versions are kept for a retention window of timestamps: once a write at `newest` has been
//! recorded, every version replaced at or below `newest - retention` is dropped, and reads
//! below that point ([`History::oldest`]) are refused with [`TooOld`], never answered with a
//! newer value. Writes to one key come in timestamp order (rule 5 orders conflicting
//! transactions), so a key's versions are sorted by the timestamp that replaced them.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::{Key, KeyedState, Value};

/// A transaction timestamp (microseconds), as `luigi_txn::Timestamp`.
pub type Timestamp = u64;

/// The retention window by default: 5 s of timestamps. A snapshot read waits at most for a
/// replica's safe time to pass its timestamp, which lies a clock bound ahead of the clocks.
pub const DEFAULT_RETENTION_US: Timestamp = 5_000_000;

/// What one kept version costs beyond its value's bytes (its timestamp and the `Option`),
/// in [`History::bytes`].
pub const VERSION_OVERHEAD_BYTES: usize = 16;

/// A read at a snapshot older than the versions kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooOld {
    /// The snapshot timestamp asked for.
    pub requested: Timestamp,
    /// The oldest timestamp a read may ask for now.
    pub oldest: Timestamp,
}

impl std::fmt::Display for TooOld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "snapshot {} is older than the oldest version kept ({}): past the retention window",
            self.requested, self.oldest
        )
    }
}

impl std::error::Error for TooOld {}

/// The value a key had before the write at `replaced_at` (`None`: it was absent).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Version {
    replaced_at: Timestamp,
    value: Option<Value>,
}

impl Version {
    fn bytes(&self) -> usize {
        self.value.as_ref().map_or(0, Vec::len) + VERSION_OVERHEAD_BYTES
    }
}

/// One key's versions.
#[derive(Clone, Debug, Default)]
struct KeyVersions {
    /// In `replaced_at` order, never empty while in [`History::keys`].
    list: VecDeque<Version>,
    /// The key is in [`History::absent`].
    listed_absent: bool,
}

/// The versions of every key written within the retention window. Bounded by the window:
/// what it holds is what was written in the last `retention` microseconds of timestamps.
///
/// Point lookups go through a hash map (keyed per process, [`KeyedState`]): an ordered map
/// of byte-string keys costs a write a descent of pointer-chasing comparisons, twice (record
/// and prune), which made a 5 s window cost micro 0.37 of its throughput. Scans find the keys
/// present now in the store's own index, and the keys absent now (deleted) in
/// [`History::absent`], the only ordered structure here, touched by deletes only.
#[derive(Clone, Debug)]
pub struct History {
    /// Per key with versions, its versions.
    keys: HashMap<Key, KeyVersions, KeyedState>,
    /// Every kept version's `(replaced_at, key)`, in `replaced_at` order (ties in record
    /// order), for pruning in order: as many entries as versions.
    order: VecDeque<(Timestamp, Key)>,
    /// At least every key with versions whose latest value is absent (those a snapshot scan
    /// cannot find in the store's index), and only keys with versions.
    absent: BTreeSet<Key>,
    retention_us: Timestamp,
    /// The largest timestamp a write was recorded at.
    newest: Timestamp,
    /// Reads below this are [`TooOld`]: versions replaced at or below it are gone.
    oldest: Timestamp,
    versions: usize,
    bytes: usize,
}

impl Default for History {
    fn default() -> Self {
        History {
            keys: HashMap::default(),
            order: VecDeque::new(),
            absent: BTreeSet::new(),
            retention_us: DEFAULT_RETENTION_US,
            newest: 0,
            oldest: 0,
            versions: 0,
            bytes: 0,
        }
    }
}

/// How much the versions hold, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistoryStats {
    /// Versions kept (each an older value of one key).
    pub versions: usize,
    /// Their bytes: values, keys (once per key with versions) and [`VERSION_OVERHEAD_BYTES`]
    /// per version.
    pub bytes: usize,
    /// The oldest snapshot a read may ask for.
    pub oldest: Timestamp,
}

impl History {
    /// Sets the retention window (0 keeps no versions: only reads at or above the newest write
    /// are served). Takes effect at the next recorded write.
    pub fn set_retention(&mut self, retention_us: Timestamp) {
        self.retention_us = retention_us;
    }

    /// The retention window.
    pub fn retention(&self) -> Timestamp {
        self.retention_us
    }

    /// The oldest snapshot a read may ask for.
    pub fn oldest(&self) -> Timestamp {
        self.oldest
    }

    /// Refuses reads below `ts` from now on (a store restored from a snapshot holds the state
    /// at `ts` and no versions before it). Never lowers the bound.
    pub fn forget_below(&mut self, ts: Timestamp) {
        self.prune_to(ts);
    }

    /// What the versions hold.
    pub fn stats(&self) -> HistoryStats {
        HistoryStats { versions: self.versions, bytes: self.bytes, oldest: self.oldest }
    }

    /// Records that a write at `ts` replaced `prior` under `key`. Returns true when a version
    /// was kept (the caller's rollback then calls [`History::unrecord`]). Nothing is kept when
    /// every read allowed sees the write anyway (`ts <= oldest`), when the key already has a
    /// version replaced at `ts` (an earlier write of the same timestamp replaced the value
    /// older snapshots see), or when a later write to the key was recorded (writes to one
    /// key come in timestamp order; rule 5).
    ///
    /// With a window of 0 nothing is kept or copied (the write path then costs what it cost
    /// before versions existed): the newest write's timestamp becomes the oldest snapshot.
    pub fn record(&mut self, key: &[u8], prior: &Option<Value>, ts: Timestamp) -> bool {
        if self.retention_us == 0 {
            self.newest = self.newest.max(ts);
            self.prune_to(self.newest);
            return false;
        }
        if ts <= self.oldest {
            return false;
        }
        match self.keys.get_mut(key) {
            Some(versions) => {
                if versions.list.back().is_some_and(|v| v.replaced_at >= ts) {
                    return false;
                }
                let version = Version { replaced_at: ts, value: prior.clone() };
                self.bytes += version.bytes();
                versions.list.push_back(version);
            }
            None => {
                let version = Version { replaced_at: ts, value: prior.clone() };
                self.bytes += version.bytes() + key.len();
                let list = VecDeque::from([version]);
                self.keys.insert(key.to_vec(), KeyVersions { list, listed_absent: false });
            }
        }
        self.versions += 1;
        self.enqueue(ts, key.to_vec());
        self.newest = self.newest.max(ts);
        self.prune_to(self.newest.saturating_sub(self.retention_us));
        true
    }

    /// Adds `(ts, key)` to [`History::order`] in its place: at the back but for a write
    /// recorded after a later one of another key.
    fn enqueue(&mut self, ts: Timestamp, key: Key) {
        if self.order.back().is_none_or(|(last, _)| *last <= ts) {
            self.order.push_back((ts, key));
        } else {
            let at = self.order.partition_point(|(t, _)| *t <= ts);
            self.order.insert(at, (ts, key));
        }
    }

    /// Notes that `key`'s latest value is now absent (deleted), so that snapshot scans find
    /// it while it has versions.
    pub fn note_absent(&mut self, key: &[u8]) {
        if self.keys.is_empty() {
            return;
        }
        if let Some(versions) = self.keys.get_mut(key) {
            if !versions.listed_absent {
                versions.listed_absent = true;
                self.absent.insert(key.to_vec());
            }
        }
    }

    /// Drops the version a rolled-back write at `ts` recorded under `key`.
    pub fn unrecord(&mut self, key: &[u8], ts: Timestamp) {
        let Some(versions) = self.keys.get_mut(key) else { return };
        if versions.list.back().is_none_or(|v| v.replaced_at != ts) {
            return;
        }
        let gone = versions.list.pop_back().expect("checked");
        self.versions -= 1;
        self.bytes -= gone.bytes();
        if versions.list.is_empty() {
            self.forget_key(key);
        }
        // Its entry in `order`: among those of timestamp `ts`, near the back.
        let from = self.order.partition_point(|(t, _)| *t < ts);
        let to = self.order.partition_point(|(t, _)| *t <= ts);
        if let Some(at) = (from..to).rev().find(|&i| self.order[i].1 == key) {
            self.order.remove(at);
        }
    }

    /// Drops every version replaced at or below `horizon`, and refuses reads below it.
    fn prune_to(&mut self, horizon: Timestamp) {
        if horizon <= self.oldest {
            return;
        }
        self.oldest = horizon;
        while self.order.front().is_some_and(|(t, _)| *t <= horizon) {
            let (ts, key) = self.order.pop_front().expect("checked");
            self.drop_oldest_of(ts, key);
        }
    }

    /// Drops the oldest version of `key` (the one its entry in `order` stands for).
    fn drop_oldest_of(&mut self, ts: Timestamp, key: Key) {
        use std::collections::hash_map::Entry;
        let Entry::Occupied(mut versions) = self.keys.entry(key) else {
            debug_assert!(false, "every entry in `order` has its version");
            return;
        };
        let Some(gone) = versions.get_mut().list.pop_front() else { return };
        debug_assert_eq!(gone.replaced_at, ts, "the oldest version of its key");
        self.versions -= 1;
        self.bytes -= gone.bytes();
        if versions.get().list.is_empty() {
            let (key, versions) = versions.remove_entry();
            self.bytes -= key.len();
            if versions.listed_absent {
                self.absent.remove(&key);
            }
        }
    }

    /// Removes `key`, whose last version went.
    fn forget_key(&mut self, key: &[u8]) {
        if let Some(versions) = self.keys.remove(key) {
            self.bytes -= key.len();
            if versions.listed_absent {
                self.absent.remove(key);
            }
        }
    }

    /// The value of `key` at snapshot `ts`, given its `latest` value.
    pub fn value_at<'a>(
        &'a self,
        key: &[u8],
        ts: Timestamp,
        latest: Option<&'a Value>,
    ) -> Result<Option<&'a Value>, TooOld> {
        self.check(ts)?;
        Ok(self.resolve(key, ts, latest))
    }

    /// Refuses a snapshot below the versions kept.
    pub fn check(&self, ts: Timestamp) -> Result<(), TooOld> {
        if ts < self.oldest {
            return Err(TooOld { requested: ts, oldest: self.oldest });
        }
        Ok(())
    }

    /// As [`History::value_at`] for a snapshot already checked.
    pub(crate) fn resolve<'a>(&'a self, key: &[u8], ts: Timestamp, latest: Option<&'a Value>) -> Option<&'a Value> {
        if self.keys.is_empty() {
            return latest;
        }
        let Some(versions) = self.keys.get(key) else { return latest };
        let first_after = versions.list.partition_point(|v| v.replaced_at <= ts);
        match versions.list.get(first_after) {
            Some(v) => v.value.as_ref(),
            None => latest,
        }
    }

    /// The keys in `[start, end)` with versions that may be absent from the latest values
    /// (snapshot scans find the others in the store's index), in order.
    pub(crate) fn keys_in<'a>(
        &'a self,
        start: &'a [u8],
        end: &'a [u8],
    ) -> impl DoubleEndedIterator<Item = &'a Key> + 'a {
        use std::ops::Bound;
        self.absent.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
    }

    /// The counters recounted from what is held, and checks of the structures' invariants
    /// (tests: the counters must match).
    #[cfg(test)]
    pub(crate) fn recount(&self) -> HistoryStats {
        let mut stats = HistoryStats { versions: 0, bytes: 0, oldest: self.oldest };
        for (key, versions) in &self.keys {
            assert!(!versions.list.is_empty(), "a key without versions is kept");
            assert!(versions.list.iter().zip(versions.list.iter().skip(1)).all(|(a, b)| a.replaced_at < b.replaced_at));
            assert!(versions.list.iter().all(|v| v.replaced_at > self.oldest), "a version past the window is kept");
            assert_eq!(versions.listed_absent, self.absent.contains(key));
            stats.versions += versions.list.len();
            stats.bytes += key.len() + versions.list.iter().map(Version::bytes).sum::<usize>();
        }
        assert!(self.absent.iter().all(|k| self.keys.contains_key(k)), "an absent key without versions");
        assert_eq!(self.order.len(), stats.versions, "one entry in `order` per version");
        assert!(self.order.iter().zip(self.order.iter().skip(1)).all(|(a, b)| a.0 <= b.0), "`order` is sorted");
        stats
    }
}
