//! Which replica of a shard a snapshot read goes to (DESIGN.md rule 23): the nearest by
//! measured delay. Each answer's whole round trip, the read's wait at the replica included,
//! is one sample of that replica's distance: every replica waits out the clock bound alike,
//! but a leader serves ahead of its followers (rule 23 (e)), so a near follower can answer
//! later than a farther leader, and the soonest is what a client wants. A replica never measured is tried
//! first, so every replica is measured once; after that the nearest is taken, and every
//! [`EXPLORE_EVERY`]th pick of a shard goes to the next replica in turn, so a distance that
//! changed is noticed. A replica that stayed silent counts as a resend timeout away until it
//! answers again; one whose link is down is passed over while another is up.

use luigi_txn::types::{ShardId, TimeUs};

/// Every this many picks of a shard, the pick goes round the replicas instead.
pub const EXPLORE_EVERY: u64 = 64;

/// What is known of one replica's distance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Distance {
    /// Smoothed round trip, µs; `None` until an answer came.
    rtt_us: Option<u64>,
    /// It stayed silent for this long (the resend timeout): it counts as at least that far
    /// until it answers again.
    silent_us: Option<u64>,
    /// The shell's link to it is down.
    down: bool,
}

impl Distance {
    /// What a pick compares: the round trip, a silence's timeout if longer, 0 unmeasured.
    fn key_us(&self) -> u64 {
        self.rtt_us.unwrap_or(0).max(self.silent_us.unwrap_or(0))
    }
}

/// The distances to every replica of every shard.
#[derive(Clone, Debug, Default)]
pub struct Nearest {
    /// By shard, by replica.
    shards: Vec<Vec<Distance>>,
    /// Picks made, by shard (exploration takes every [`EXPLORE_EVERY`]th).
    picks: Vec<u64>,
}

impl Nearest {
    /// Distances to shards of `group_sizes[s]` replicas each, none measured yet.
    pub fn new(group_sizes: &[u32]) -> Self {
        let shards = group_sizes.iter().map(|&n| vec![Distance::default(); n as usize]).collect();
        Nearest { shards, picks: vec![0; group_sizes.len()] }
    }

    /// The replica of `shard` a read goes to now, other than `avoid` where another one is
    /// up; `None` when the shard's group is unknown (the shell's routes pick then).
    pub fn pick(&mut self, shard: ShardId, avoid: Option<u32>) -> Option<u32> {
        let group = self.shards.get(shard as usize).filter(|g| !g.is_empty())?;
        let n = group.len() as u32;
        let usable = |r: &u32| Some(*r) != avoid && !group[*r as usize].down;
        let mut candidates: Vec<u32> = (0..n).filter(usable).collect();
        if candidates.is_empty() {
            candidates = (0..n).filter(|r| Some(*r) != avoid || n == 1).collect();
        }
        candidates.sort_by_key(|&r| (group[r as usize].key_us(), r));
        let picks = &mut self.picks[shard as usize];
        *picks += 1;
        if (*picks).is_multiple_of(EXPLORE_EVERY) && candidates.len() > 1 {
            // The others in turn, so that each is measured again now and then.
            let turn = (*picks / EXPLORE_EVERY) as usize % (candidates.len() - 1);
            return Some(candidates[1 + turn]);
        }
        candidates.first().copied()
    }

    /// An answer from `replica` of `shard` took `rtt_us` beyond its wait there.
    pub fn sample(&mut self, shard: ShardId, replica: u32, rtt_us: TimeUs) {
        let Some(d) = self.distance(shard, replica) else { return };
        d.silent_us = None;
        d.rtt_us = Some(match d.rtt_us {
            None => rtt_us,
            Some(old) => old - old / 4 + rtt_us / 4,
        });
    }

    /// `replica` of `shard` did not answer within `timeout_us`: it counts as at least that
    /// far until it answers.
    pub fn silent(&mut self, shard: ShardId, replica: u32, timeout_us: u64) {
        if let Some(d) = self.distance(shard, replica) {
            d.silent_us = Some(timeout_us);
        }
    }

    /// The shell's link to `replica` of `shard` went down or came up.
    pub fn link(&mut self, shard: ShardId, replica: u32, up: bool) {
        if let Some(d) = self.distance(shard, replica) {
            d.down = !up;
        }
    }

    fn distance(&mut self, shard: ShardId, replica: u32) -> Option<&mut Distance> {
        self.shards.get_mut(shard as usize)?.get_mut(replica as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_replica_is_measured_once_then_the_nearest_is_taken_and_others_are_revisited() {
        let mut n = Nearest::new(&[3]);
        assert_eq!(n.pick(0, None), Some(0), "unmeasured replicas first, in order");
        n.sample(0, 0, 150_000);
        assert_eq!(n.pick(0, None), Some(1));
        n.sample(0, 1, 2_000);
        assert_eq!(n.pick(0, None), Some(2));
        n.sample(0, 2, 80_000);
        let picks: Vec<u32> = (0..2 * EXPLORE_EVERY).filter_map(|_| n.pick(0, None)).collect();
        let near = picks.iter().filter(|&&r| r == 1).count();
        assert_eq!(near, picks.len() - 2, "all but the exploring picks go to the nearest: {picks:?}");
        assert!(picks.iter().any(|&r| r != 1), "a far replica is revisited now and then");
    }

    #[test]
    fn a_silent_or_unreachable_replica_is_passed_over_and_taken_back_once_it_answers() {
        let mut n = Nearest::new(&[3, 1]);
        for (r, rtt) in [(0, 5_000), (1, 1_000), (2, 9_000)] {
            n.sample(0, r, rtt);
        }
        assert_eq!(n.pick(0, None), Some(1));
        n.silent(0, 1, 2_000_000);
        assert_eq!(n.pick(0, None), Some(0), "silent: as far as the resend timeout");
        n.link(0, 0, false);
        assert_eq!(n.pick(0, None), Some(2), "down links are passed over");
        assert_eq!(n.pick(0, Some(2)), Some(1), "the avoided one too, while another is up");
        n.link(0, 1, false);
        n.link(0, 2, false);
        assert!(n.pick(0, Some(0)).is_some_and(|r| r != 0), "all down: still somewhere else");
        assert_eq!(n.pick(1, Some(0)), Some(0), "a group of one has nowhere else");
        assert_eq!(n.pick(7, None), None, "an unknown group: the shell routes");
        for r in 0..3 {
            n.link(0, r, true);
        }
        n.sample(0, 1, 1_000);
        assert_eq!(n.pick(0, None), Some(1), "an answer brings it back at once");
    }
}
