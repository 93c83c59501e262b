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

use std::collections::{BTreeMap, VecDeque};

use crate::{Key, Value};

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

/// The versions of every key written within the retention window. Bounded by the window:
/// what it holds is what was written in the last `retention` microseconds of timestamps.
#[derive(Clone, Debug)]
pub struct History {
    /// Per key, its replaced versions in `replaced_at` order (never empty).
    keys: BTreeMap<Key, VecDeque<Version>>,
    /// The keys that have a version replaced at each timestamp, for pruning in order.
    by_ts: BTreeMap<Timestamp, Vec<Key>>,
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
            keys: BTreeMap::new(),
            by_ts: BTreeMap::new(),
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
        let version = Version { replaced_at: ts, value: prior.clone() };
        match self.keys.get_mut(key) {
            Some(versions) => {
                if versions.back().is_some_and(|v| v.replaced_at >= ts) {
                    return false;
                }
                self.bytes += version.bytes();
                versions.push_back(version);
            }
            None => {
                self.bytes += version.bytes() + key.len();
                self.keys.insert(key.to_vec(), VecDeque::from([version]));
            }
        }
        self.versions += 1;
        self.by_ts.entry(ts).or_default().push(key.to_vec());
        self.newest = self.newest.max(ts);
        self.prune_to(self.newest.saturating_sub(self.retention_us));
        true
    }

    /// Drops the version a rolled-back write at `ts` recorded under `key`.
    pub fn unrecord(&mut self, key: &[u8], ts: Timestamp) {
        let Some(versions) = self.keys.get_mut(key) else { return };
        if versions.back().is_none_or(|v| v.replaced_at != ts) {
            return;
        }
        let gone = versions.pop_back().expect("checked");
        self.versions -= 1;
        self.bytes -= gone.bytes();
        if versions.is_empty() {
            self.keys.remove(key);
            self.bytes -= key.len();
        }
        if let Some(keys) = self.by_ts.get_mut(&ts) {
            if let Some(at) = keys.iter().position(|k| k == key) {
                keys.swap_remove(at);
            }
            if keys.is_empty() {
                self.by_ts.remove(&ts);
            }
        }
    }

    /// Drops every version replaced at or below `horizon`, and refuses reads below it.
    fn prune_to(&mut self, horizon: Timestamp) {
        if horizon <= self.oldest {
            return;
        }
        self.oldest = horizon;
        while let Some(entry) = self.by_ts.first_entry() {
            if *entry.key() > horizon {
                break;
            }
            for key in entry.remove() {
                self.drop_versions_of(&key, horizon);
            }
        }
    }

    fn drop_versions_of(&mut self, key: &[u8], horizon: Timestamp) {
        let Some(versions) = self.keys.get_mut(key) else { return };
        while versions.front().is_some_and(|v| v.replaced_at <= horizon) {
            let gone = versions.pop_front().expect("checked");
            self.versions -= 1;
            self.bytes -= gone.bytes();
        }
        if versions.is_empty() {
            self.keys.remove(key);
            self.bytes -= key.len();
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
        let Some(versions) = self.keys.get(key) else { return latest };
        let first_after = versions.partition_point(|v| v.replaced_at <= ts);
        match versions.get(first_after) {
            Some(v) => v.value.as_ref(),
            None => latest,
        }
    }

    /// The keys with versions in `[start, end)`, in order.
    pub(crate) fn keys_in<'a>(
        &'a self,
        start: &'a [u8],
        end: &'a [u8],
    ) -> impl DoubleEndedIterator<Item = &'a Key> + 'a {
        use std::ops::Bound;
        self.keys.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end))).map(|(k, _)| k)
    }
}
