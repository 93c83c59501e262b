//! Deterministic election timeouts (see [`RaftLog`], "Determinism").

use super::{RaftLog, Record};
use crate::rng::SplitMix64;

/// The election-timeout offset of the replica in `slot` for `term`: its entry in a permutation
/// of `0..base` drawn from `(seed, term)`, so replicas in the same term get distinct offsets
/// (while there are at most `base` of them).
fn timeout_offset(seed: u64, term: u64, slot: usize, base: usize) -> usize {
    let mut rng = SplitMix64::new(seed ^ term.wrapping_mul(0xd6e8_feb8_6659_fd93).rotate_left(17));
    let mut perm: Vec<usize> = (0..base).collect();
    for i in (1..base).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        perm.swap(i, j);
    }
    perm[slot % base]
}

impl<R: Record> RaftLog<R> {
    pub(super) fn redraw_election_timeout(&mut self) {
        let base = self.election_base;
        let t = base + timeout_offset(self.seed, self.raw.raft.term, self.slot, base);
        self.raw.raft.set_randomized_election_timeout(t);
    }

    /// Called after every call into raft-rs: redraw the election timeout if raft-rs reset it.
    pub(super) fn after_call(&mut self) {
        let now = (self.raw.raft.term, self.raw.raft.state);
        if now != self.observed {
            self.observed = now;
            self.redraw_election_timeout();
        }
    }
}
