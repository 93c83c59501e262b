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
//!
//! Layout, for a cheap write (issue 31: keeping 5 s of versions in two ordered maps of
//! byte-string keys ran micro at 0.63x; `examples/versions_cost.rs` measures): a key's
//! versions are a list in a slab here, which the key's entry in the store's map names by a
//! [`ListRef`] (slot and generation), so that recording a version takes no lookup beyond the
//! store's own and copies no key. Pruning pops a queue of `(timestamp, slot)` sorted by
//! timestamp and drops the oldest version of that slot's list, again without a key; a list
//! left empty frees its slot (its generation moves on, so the entry's stale reference reads
//! as no versions). A deleted key keeps its entry (latest value absent) while it has versions,
//! so that snapshot reads and scans find it; its list holds the key, handed back to the store
//! to remove the entry when the last version goes.

use std::collections::VecDeque;

use crate::Value;

/// A transaction timestamp (microseconds), as `luigi_txn::Timestamp`.
pub type Timestamp = u64;

/// The retention window by default: 5 s of timestamps. A snapshot read waits at most for a
/// replica's safe time to pass its timestamp, which lies a clock bound ahead of the clocks.
pub const DEFAULT_RETENTION_US: Timestamp = 5_000_000;

/// What one kept version costs beyond its value's bytes, in [`HistoryStats::bytes`]: its
/// place in its key's list (timestamp and value) and in the pruning queue.
pub const VERSION_OVERHEAD_BYTES: usize = std::mem::size_of::<Version>() + std::mem::size_of::<(Timestamp, u32)>();

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

/// Names a key's list of versions in [`History`] (kept in the key's entry of the store's
/// map). Stale once the list is freed: the slot's generation has moved on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ListRef {
    slot: u32,
    generation: u32,
}

impl ListRef {
    /// No list.
    pub(crate) const NONE: ListRef = ListRef { slot: u32::MAX, generation: 0 };
}

impl Default for ListRef {
    fn default() -> Self {
        ListRef::NONE
    }
}

/// One key's versions, in a slot of [`History::lists`]. One cache line: a write reads only
/// this header (generation and newest timestamp) and appends to its buffer.
#[derive(Clone, Debug, Default)]
#[repr(align(64))]
struct List {
    /// Moves on when the slot is freed. A slot reaching [`RETIRED`] is never reused, so that
    /// a stale [`ListRef`] can never name a later list.
    generation: u32,
    /// Its key's length (saturated), counted in [`HistoryStats::bytes`] once per key with
    /// versions.
    key_len: u32,
    /// The `replaced_at` of its newest version.
    newest: Timestamp,
    /// In `replaced_at` order; empty only while the slot is free.
    versions: VecDeque<Version>,
    /// The key, once its latest value was absent (deleted) while the list lived: when the
    /// list empties, the store removes its entry if the value is still absent. Kept if the
    /// key is written again (the write path takes no branch for it).
    absent_key: Option<Box<[u8]>>,
}

const _: () = assert!(std::mem::size_of::<List>() == 64, "a list header is one cache line");

/// The generation of a retired slot, which no [`ListRef`] carries.
const RETIRED: u32 = u32::MAX;

/// The versions of every key written within the retention window. Bounded by the window:
/// what it holds is what was written in the last `retention` microseconds of timestamps
/// (the slab keeps the slots of its peak, reused).
#[derive(Clone, Debug)]
pub struct History {
    /// The lists of versions, by slot; free slots are in `free`.
    lists: Vec<List>,
    free: Vec<u32>,
    /// Every kept version's `(replaced_at, slot)`, in `replaced_at` order (ties in record
    /// order), for pruning in order: as many entries as versions.
    order: VecDeque<(Timestamp, u32)>,
    /// Keys of deleted entries whose last version went, for the store to remove.
    gone: Vec<Box<[u8]>>,
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
            lists: Vec::new(),
            free: Vec::new(),
            order: VecDeque::new(),
            gone: Vec::new(),
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

    /// True while `list` names a list with versions.
    pub(crate) fn is_live(&self, list: ListRef) -> bool {
        self.lists.get(list.slot as usize).is_some_and(|l| l.generation == list.generation)
    }

    /// True when no version is kept (the read-write path then skips the history).
    pub(crate) fn is_empty(&self) -> bool {
        self.versions == 0
    }

    /// Records that a write at `ts` replaced `prior` under the key of `key_len` bytes whose
    /// versions `list` names (a new list is made when it names none). Returns true when a
    /// version was kept (the caller's rollback then calls [`History::unrecord`]). Nothing is
    /// kept when every read allowed sees the write anyway (`ts <= oldest`), when the key
    /// already has a version replaced at `ts` (an earlier write of the same timestamp replaced
    /// the value older snapshots see), or when a later write to the key was recorded (writes
    /// to one key come in timestamp order; rule 5).
    ///
    /// With a window of 0 nothing is kept or copied (the write path then costs what it cost
    /// before versions existed): the newest write's timestamp becomes the oldest snapshot.
    pub(crate) fn record(&mut self, list: &mut ListRef, key_len: usize, prior: &Option<Value>, ts: Timestamp) -> bool {
        if self.retention_us == 0 {
            self.newest = self.newest.max(ts);
            self.prune_to(self.newest);
            return false;
        }
        if ts <= self.oldest {
            return false;
        }
        if self.is_live(*list) {
            if self.lists[list.slot as usize].newest >= ts {
                return false;
            }
        } else {
            *list = self.new_list(key_len);
        }
        let version = Version { replaced_at: ts, value: prior.clone() };
        self.bytes += version.bytes();
        self.versions += 1;
        let slot = &mut self.lists[list.slot as usize];
        slot.newest = ts;
        slot.versions.push_back(version);
        self.enqueue(ts, list.slot);
        self.newest = self.newest.max(ts);
        self.prune_to(self.newest.saturating_sub(self.retention_us));
        true
    }

    /// An empty list in a free slot, or a new one.
    fn new_list(&mut self, key_len: usize) -> ListRef {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = u32::try_from(self.lists.len()).expect("fewer lists than 2^32 - 1 (one per version kept)");
                assert!(slot != ListRef::NONE.slot, "fewer lists than 2^32 - 1 (one per version kept)");
                self.lists.push(List::default());
                slot
            }
        };
        let list = &mut self.lists[slot as usize];
        list.key_len = u32::try_from(key_len).unwrap_or(u32::MAX);
        self.bytes += list.key_len as usize;
        ListRef { slot, generation: list.generation }
    }

    /// Adds `(ts, slot)` to [`History::order`] in its place: at the back but for a write
    /// recorded after a later one of another key.
    fn enqueue(&mut self, ts: Timestamp, slot: u32) {
        if self.order.back().is_none_or(|(last, _)| *last <= ts) {
            self.order.push_back((ts, slot));
        } else {
            let at = self.order.partition_point(|(t, _)| *t <= ts);
            self.order.insert(at, (ts, slot));
        }
    }

    /// Notes that the latest value of `key`, whose versions `list` names, is now absent
    /// (deleted): when its last version goes, the store removes its entry. Returns false, and
    /// notes nothing, when `list` names no versions (the store removes the entry now).
    pub(crate) fn note_absent(&mut self, list: ListRef, key: &[u8]) -> bool {
        if !self.is_live(list) {
            return false;
        }
        let absent_key = &mut self.lists[list.slot as usize].absent_key;
        if absent_key.is_none() {
            *absent_key = Some(key.into());
        }
        true
    }

    /// The keys of deleted entries whose last version went since the last call: the store
    /// removes their entries.
    pub(crate) fn take_gone(&mut self) -> Option<Box<[u8]>> {
        self.gone.pop()
    }

    /// Drops the version a rolled-back write at `ts` recorded in `list`.
    pub(crate) fn unrecord(&mut self, list: ListRef, ts: Timestamp) {
        if !self.is_live(list) {
            return;
        }
        let versions = &mut self.lists[list.slot as usize].versions;
        if versions.back().is_none_or(|v| v.replaced_at != ts) {
            return;
        }
        let gone = versions.pop_back().expect("checked");
        let emptied = versions.is_empty();
        self.lists[list.slot as usize].newest = versions.back().map_or(0, |v| v.replaced_at);
        self.versions -= 1;
        self.bytes -= gone.bytes();
        // Its entry in `order`: among those of timestamp `ts`, near the back.
        let from = self.order.partition_point(|(t, _)| *t < ts);
        let to = self.order.partition_point(|(t, _)| *t <= ts);
        if let Some(at) = (from..to).rev().find(|&i| self.order[i].1 == list.slot) {
            self.order.remove(at);
        }
        if emptied {
            // The caller restores the latest value and with it the entry.
            drop(self.free_list(list.slot));
        }
    }

    /// Drops every version replaced at or below `horizon`, and refuses reads below it.
    fn prune_to(&mut self, horizon: Timestamp) {
        if horizon <= self.oldest {
            return;
        }
        self.oldest = horizon;
        while self.order.front().is_some_and(|(t, _)| *t <= horizon) {
            let (ts, slot) = self.order.pop_front().expect("checked");
            let versions = &mut self.lists[slot as usize].versions;
            // The oldest of its list: `order` and each list are sorted by timestamp.
            let Some(gone) = versions.pop_front() else {
                debug_assert!(false, "every entry in `order` has its version");
                continue;
            };
            debug_assert_eq!(gone.replaced_at, ts);
            let emptied = versions.is_empty();
            self.versions -= 1;
            self.bytes -= gone.bytes();
            if emptied {
                if let Some(key) = self.free_list(slot) {
                    self.gone.push(key);
                }
            }
        }
    }

    /// Frees the slot of a list left empty; returns its key if its latest value is absent.
    fn free_list(&mut self, slot: u32) -> Option<Box<[u8]>> {
        let list = &mut self.lists[slot as usize];
        self.bytes -= list.key_len as usize;
        if list.versions.capacity() > FREE_LIST_CAPACITY {
            list.versions = VecDeque::new();
        }
        // Below `RETIRED` while live: retired slots are never reused.
        list.generation += 1;
        if list.generation == RETIRED {
            list.versions = VecDeque::new();
        } else {
            self.free.push(slot);
        }
        list.absent_key.take()
    }

    /// The value at snapshot `ts` of the key whose latest value is `latest` and whose
    /// versions `list` names.
    pub(crate) fn value_at<'a>(
        &'a self,
        list: ListRef,
        ts: Timestamp,
        latest: Option<&'a Value>,
    ) -> Result<Option<&'a Value>, TooOld> {
        self.check(ts)?;
        Ok(self.resolve(list, ts, latest))
    }

    /// Refuses a snapshot below the versions kept.
    pub fn check(&self, ts: Timestamp) -> Result<(), TooOld> {
        if ts < self.oldest {
            return Err(TooOld { requested: ts, oldest: self.oldest });
        }
        Ok(())
    }

    /// As [`History::value_at`] for a snapshot already checked.
    pub(crate) fn resolve<'a>(&'a self, list: ListRef, ts: Timestamp, latest: Option<&'a Value>) -> Option<&'a Value> {
        if !self.is_live(list) {
            return latest;
        }
        let versions = &self.lists[list.slot as usize].versions;
        let first_after = versions.partition_point(|v| v.replaced_at <= ts);
        match versions.get(first_after) {
            Some(v) => v.value.as_ref(),
            None => latest,
        }
    }

    /// The counters recounted from what is held, checking the structures' invariants on the
    /// way (tests: the counters must match). `absent` says whether a live list's latest
    /// value is absent, from the store.
    #[cfg(test)]
    pub(crate) fn recount(&self, live: &[(ListRef, bool)]) -> HistoryStats {
        let mut stats = HistoryStats { versions: 0, bytes: 0, oldest: self.oldest };
        for (slot, list) in self.lists.iter().enumerate() {
            let is_free = self.free.contains(&(slot as u32)) || list.generation == RETIRED;
            assert_eq!(is_free, list.versions.is_empty(), "slot {slot}: free exactly when empty");
            let named = live.iter().filter(|(r, _)| r.slot as usize == slot && self.is_live(*r)).collect::<Vec<_>>();
            assert_eq!(named.len(), usize::from(!is_free), "slot {slot}: a live list is named by one entry");
            if let Some((_, absent)) = named.first() {
                assert!(!absent || list.absent_key.is_some(), "slot {slot}: keeps its key while deleted");
            }
            let v = &list.versions;
            assert!(v.iter().zip(v.iter().skip(1)).all(|(a, b)| a.replaced_at < b.replaced_at));
            assert!(v.iter().all(|v| v.replaced_at > self.oldest), "a version past the window is kept");
            stats.versions += v.len();
            assert!(is_free || list.newest == v.back().expect("live").replaced_at, "slot {slot}: its newest");
            stats.bytes +=
                v.iter().map(Version::bytes).sum::<usize>() + if is_free { 0 } else { list.key_len as usize };
        }
        assert_eq!(self.order.len(), stats.versions, "one entry in `order` per version");
        assert!(self.order.iter().zip(self.order.iter().skip(1)).all(|(a, b)| a.0 <= b.0), "`order` is sorted");
        assert!(self.gone.is_empty(), "the store took every key gone");
        stats
    }
}

/// The capacity a freed slot keeps for its next list (a hot key's long list is not kept).
const FREE_LIST_CAPACITY: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_whose_generation_would_wrap_is_retired_so_a_stale_reference_never_names_a_later_list() {
        let mut h = History::default();
        h.set_retention(10);
        let mut first = ListRef::NONE;
        assert!(h.record(&mut first, 1, &Some(vec![1]), 5));
        // As after 2^32 - 2 lists in this slot.
        h.lists[first.slot as usize].generation = RETIRED - 1;
        let stale = ListRef { slot: first.slot, generation: RETIRED - 1 };
        assert!(h.is_live(stale));
        h.forget_below(5);
        assert!(!h.is_live(stale), "its last version went");
        let mut next = ListRef::NONE;
        assert!(h.record(&mut next, 1, &Some(vec![2]), 20));
        assert_ne!(next.slot, stale.slot, "the retired slot is not reused");
        assert!(!h.is_live(stale) && h.is_live(next));
        assert_eq!(h.stats(), h.recount(&[(next, false)]));
        // A slot freed below the wrap is reused under its next generation.
        h.forget_below(20);
        let mut again = ListRef::NONE;
        assert!(h.record(&mut again, 1, &None, 30));
        assert_eq!((again.slot, again.generation), (next.slot, next.generation + 1));
        assert!(!h.is_live(next) && h.is_live(again));
    }
}
