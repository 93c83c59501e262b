//! Deterministic election timeouts (see [`RaftLog`], "Determinism").

use super::RaftLog;
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

/// The election-timeout offset of the replica in `slot` of a group of `n` whose timeouts are
/// spaced `spacing` ticks apart within `0..base`: its place in a permutation of the group drawn
/// from `(seed, term)`, times the spacing (narrowed to fit the range).
fn spaced_offset(seed: u64, term: u64, slot: usize, n: usize, base: usize, spacing: usize) -> usize {
    let spacing = spacing.min((base - 1) / n.saturating_sub(1).max(1)).max(1);
    timeout_offset(seed, term, slot, n.max(1)) * spacing
}

impl RaftLog {
    /// The election-timeout offset, in ticks above the base, of the replica in `slot` of this
    /// group of `n` in `term`.
    pub(super) fn election_offset(&self, term: u64, slot: usize, n: usize) -> usize {
        let base = self.election_base;
        if self.election_spacing > 1 {
            spaced_offset(self.seed, term, slot, n, base, self.election_spacing)
        } else {
            timeout_offset(self.seed, term, slot, base)
        }
    }

    pub(super) fn redraw_election_timeout(&mut self) {
        let offset = self.election_offset(self.raw.raft.term, self.slot, self.voters.len());
        self.raw.raft.set_randomized_election_timeout(self.election_base + offset);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaced_timeouts_are_a_spacing_apart_within_the_range() {
        for term in 0..50 {
            let mut offsets: Vec<usize> = (0..3).map(|slot| spaced_offset(7, term, slot, 3, 14, 6)).collect();
            offsets.sort();
            assert_eq!(offsets, vec![0, 6, 12], "term {term}");
        }
        // Narrowed to fit: 5 replicas in a range of 14 ticks are 3 apart.
        let mut five: Vec<usize> = (0..5).map(|slot| spaced_offset(7, 1, slot, 5, 14, 6)).collect();
        five.sort();
        assert_eq!(five, vec![0, 3, 6, 9, 12]);
        // Who times out first changes with the term.
        let firsts: std::collections::BTreeSet<usize> =
            (0..30).map(|term| (0..3).find(|&slot| spaced_offset(7, term, slot, 3, 14, 6) == 0).unwrap()).collect();
        assert_eq!(firsts.len(), 3);
    }
}
