//! The positions of uncommitted writes in key order (DESIGN.md rule 23 (e)), kept beside
//! rule 14's per-key-hash positions while the leader serves snapshot reads: a read that
//! scanned a range names the highest position of the writes that could fall in it, not of
//! every uncommitted write.
//!
//! Keys are the declared write keys. A declared key stands for itself and, as a prefix, for
//! every key under it, so the writes that could fall in `[start, end)` are those declared in
//! it and those declared as a prefix of `start` (a declared `w` below `start` that covers a key
//! `k` in the range is a prefix of `k`, and `w < start <= k` makes it a prefix of `start`).

use std::collections::BTreeMap;

use crate::log::LogIndex;
use luigi_store::Key;
use luigi_txn::snapshot::ScannedRange;

/// Uncommitted write positions by declared key, and the keys by position (to forget them at
/// the commit).
#[derive(Debug, Default)]
pub(super) struct OrderedWrites {
    by_key: BTreeMap<Key, LogIndex>,
    by_position: BTreeMap<LogIndex, Vec<Key>>,
}

impl OrderedWrites {
    /// `keys` were written by an execution resting on `position`.
    pub fn written<'k>(&mut self, keys: impl Iterator<Item = &'k Key>, position: LogIndex) {
        let listed = self.by_position.entry(position).or_default();
        for k in keys {
            let slot = self.by_key.entry(k.clone()).or_insert(position);
            *slot = (*slot).max(position);
            listed.push(k.clone());
        }
    }

    /// The log is committed up to `committed`: forget the writes that covers.
    pub fn committed(&mut self, committed: LogIndex) {
        while let Some(entry) = self.by_position.first_entry() {
            if *entry.key() > committed {
                break;
            }
            for k in entry.remove() {
                if self.by_key.get(&k).is_some_and(|p| *p <= committed) {
                    self.by_key.remove(&k);
                }
            }
        }
    }

    /// The highest position of an uncommitted write that could fall in one of `ranges`.
    pub fn highest_in(&self, ranges: &[ScannedRange]) -> Option<LogIndex> {
        ranges.iter().filter_map(|r| self.highest_in_range(r)).max()
    }

    fn highest_in_range(&self, r: &ScannedRange) -> Option<LogIndex> {
        let inside = self.by_key.range::<[u8], _>((std::ops::Bound::Included(&r.start[..]), end_bound(&r.end)));
        let covering = (0..=r.start.len()).filter_map(|n| self.by_key.get(&r.start[..n]));
        inside.map(|(_, p)| p).chain(covering).copied().max()
    }

    /// Keys held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_key.len()
    }
}

/// A scan's exclusive end; an empty end means no end (the whole key space above `start`).
fn end_bound(end: &[u8]) -> std::ops::Bound<&[u8]> {
    match end.is_empty() {
        true => std::ops::Bound::Unbounded,
        false => std::ops::Bound::Excluded(end),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: &[u8], end: &[u8]) -> ScannedRange {
        ScannedRange { start: start.to_vec(), end: end.to_vec() }
    }

    #[test]
    fn a_range_meets_the_writes_declared_in_it_and_the_prefixes_above_it_until_committed() {
        let mut w = OrderedWrites::default();
        w.written([b"a/1".to_vec(), b"b/5".to_vec()].iter(), 7);
        w.written([b"b/".to_vec()].iter(), 9);
        w.written([b"a/1".to_vec()].iter(), 4);
        assert_eq!(w.highest_in(&[range(b"a/", b"a0")]), Some(7), "a later lower position keeps the higher");
        assert_eq!(w.highest_in(&[range(b"b/3", b"b/4")]), Some(9), "the declared prefix b/ covers it");
        assert_eq!(w.highest_in(&[range(b"c", b"")]), None, "nothing declared at or above c");
        assert_eq!(w.highest_in(&[range(b"a/2", b"a/9")]), None, "a/1 lies below the range");
        assert_eq!(w.highest_in(&[range(b"", b"")]), Some(9), "the whole key space");
        w.committed(7);
        assert_eq!(w.highest_in(&[range(b"a/", b"a0")]), None, "committed: forgotten");
        assert_eq!(w.highest_in(&[range(b"b/", b"b0")]), Some(9));
        assert_eq!(w.len(), 1);
        w.committed(u64::MAX);
        assert_eq!(w.len(), 0);
    }
}
