//! Admission (DESIGN.md rule 3): the proposal must lie above every conflicting timestamp
//! already released on this shard and above the published watermark; a late transaction is
//! moved up to the clock.

use luigi_txn::keyhash::{key_hash, HashKeyMap};
use luigi_txn::types::{KeySet, TimeUs, Timestamp};

/// Per key, the largest timestamp released for reading and for writing. Entries at or below
/// the watermark are redundant (admission is above the watermark anyway) and get pruned.
/// Keys are tracked by hash (see [`crate::keyhash`]): a collision can only raise a proposal.
#[derive(Debug, Default)]
pub struct Floors {
    read: HashKeyMap<Timestamp>,
    write: HashKeyMap<Timestamp>,
    len_after_prune: usize,
}

impl Floors {
    /// Records that a transaction with `keys` was released at `ts`.
    pub fn record_release(&mut self, keys: &KeySet, ts: Timestamp) {
        for k in &keys.reads {
            bump(&mut self.read, k, ts);
        }
        for k in &keys.writes {
            bump(&mut self.write, k, ts);
        }
    }

    /// The smallest timestamp a transaction with `keys` may take: one above every conflicting
    /// released timestamp (a read conflicts with released writes, a write with both).
    pub fn min_allowed(&self, keys: &KeySet) -> Timestamp {
        let get = |m: &HashKeyMap<Timestamp>, k: &[u8]| m.get(&key_hash(k)).copied().unwrap_or(0);
        let reads = keys.reads.iter().map(|k| get(&self.write, k));
        let writes = keys.writes.iter().map(|k| get(&self.write, k).max(get(&self.read, k)));
        reads.chain(writes).max().map_or(0, |ts| ts.saturating_add(1))
    }

    /// Drops entries at or below `watermark`, amortized: only once the maps have doubled.
    pub fn prune_at_or_below(&mut self, watermark: Timestamp) {
        let len = self.read.len() + self.write.len();
        if len < 2 * self.len_after_prune + 4096 {
            return;
        }
        self.read.retain(|_, ts| *ts > watermark);
        self.write.retain(|_, ts| *ts > watermark);
        self.len_after_prune = self.read.len() + self.write.len();
    }

    /// Number of keys tracked.
    pub fn len(&self) -> usize {
        self.read.len() + self.write.len()
    }

    /// True when no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn bump(map: &mut HashKeyMap<Timestamp>, key: &[u8], ts: Timestamp) {
    let old = map.entry(key_hash(key)).or_insert(ts);
    *old = (*old).max(ts);
}

/// The proposal for a transaction stamped `ts` by its coordinator, arriving at `now`:
/// `max(ts, now, floor + 1, conflicting released + 1)`, where `floor` is the published
/// watermark (or the recovered admission floor, whichever is higher). Saturating: rule 22
/// keeps `ts` near the clock, but nothing here may panic on a value from the wire or the disk.
pub fn propose(ts: Timestamp, now: TimeUs, floor: Timestamp, floors: &Floors, keys: &KeySet) -> Timestamp {
    ts.max(now).max(floor.saturating_add(1)).max(floors.min_allowed(keys))
}

/// Why an admission moved a proposal above the coordinator's timestamp: the term of
/// [`propose`]'s maximum that won (the first of conflict, floor, clock that reached it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BumpCause {
    /// The dispatch arrived after the leader's clock had passed its timestamp.
    Late,
    /// The watermark or the recovered admission floor had passed it.
    Floor,
    /// A conflicting transaction with a larger timestamp had been released.
    Conflict,
}

/// The cause of the bump from `ts` to `proposal` (what [`propose`] gave for these inputs),
/// `None` when the timestamp is kept. It takes the proposal already made, so an admission
/// looks its keys' floors up a second time only when it was bumped.
pub fn bump_cause(
    ts: Timestamp,
    proposal: Timestamp,
    floor: Timestamp,
    floors: &Floors,
    keys: &KeySet,
) -> Option<BumpCause> {
    if proposal == ts {
        None
    } else if proposal == floors.min_allowed(keys) {
        Some(BumpCause::Conflict)
    } else if proposal == floor.saturating_add(1) {
        Some(BumpCause::Floor)
    } else {
        Some(BumpCause::Late)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ks(reads: &[&str], writes: &[&str]) -> KeySet {
        let v = |s: &[&str]| s.iter().map(|k| k.as_bytes().to_vec()).collect();
        KeySet::new(v(reads), v(writes))
    }

    #[test]
    fn unconflicted_on_time_transaction_keeps_its_timestamp() {
        let f = Floors::default();
        assert_eq!(propose(100, 50, 10, &f, &ks(&["a"], &["b"])), 100);
    }

    #[test]
    fn a_bump_names_the_term_that_moved_it() {
        let mut f = Floors::default();
        f.record_release(&ks(&[], &["w"]), 700); // a released write of w
        let cause = |ts, now, floor, keys: &KeySet| bump_cause(ts, propose(ts, now, floor, &f, keys), floor, &f, keys);
        assert_eq!(cause(100, 50, 10, &ks(&["a"], &[])), None, "on time, no conflict");
        assert_eq!(cause(100, 250, 10, &ks(&["a"], &[])), Some(BumpCause::Late));
        assert_eq!(cause(100, 50, 300, &ks(&["a"], &[])), Some(BumpCause::Floor));
        assert_eq!(cause(100, 250, 300, &ks(&["w"], &[])), Some(BumpCause::Conflict), "the conflict is the max");
        assert_eq!(cause(100, 900, 300, &ks(&["w"], &[])), Some(BumpCause::Late), "the clock is the max");
    }

    #[test]
    fn late_transaction_moves_up_to_the_clock() {
        let f = Floors::default();
        assert_eq!(propose(100, 250, 10, &f, &ks(&[], &["b"])), 250);
    }

    #[test]
    fn proposal_lies_above_the_watermark() {
        let f = Floors::default();
        assert_eq!(propose(100, 50, 300, &f, &ks(&[], &["b"])), 301);
    }

    #[test]
    fn read_conflicts_only_with_released_writes() {
        let mut f = Floors::default();
        f.record_release(&ks(&["x"], &[]), 500); // a released read of x
        f.record_release(&ks(&[], &["y"]), 400); // a released write of y
                                                 // Reading x: no conflict with the released read.
        assert_eq!(propose(100, 0, 0, &f, &ks(&["x"], &[])), 100);
        // Reading y: above the released write.
        assert_eq!(propose(100, 0, 0, &f, &ks(&["y"], &[])), 401);
        // Writing x: above the released read.
        assert_eq!(propose(100, 0, 0, &f, &ks(&[], &["x"])), 501);
        // Writing y: above the released write.
        assert_eq!(propose(100, 0, 0, &f, &ks(&[], &["y"])), 401);
        // Unrelated key: untouched.
        assert_eq!(propose(100, 0, 0, &f, &ks(&["z"], &["w"])), 100);
    }

    #[test]
    fn floors_keep_the_maximum_and_prune_below_watermark() {
        let mut f = Floors::default();
        f.record_release(&ks(&[], &["k"]), 700);
        f.record_release(&ks(&[], &["k"]), 600);
        assert_eq!(f.min_allowed(&ks(&["k"], &[])), 701);
        for i in 0..5000u32 {
            f.record_release(&ks(&[], &[&format!("key{i}")]), 10);
        }
        f.prune_at_or_below(100);
        assert_eq!(f.len(), 1, "only the entry above the watermark stays");
        assert_eq!(f.min_allowed(&ks(&["k"], &[])), 701);
    }
}
