//! Proof that a shard's log is committed up to a position (DESIGN.md rule 14), one copy for
//! the coordinators and the shard leaders alike.
//!
//! A leader sends a result or a proposal before the record it depends on is committed, with
//! the position it depends on: its Raft term and a log index of that term. Every replica
//! reports its progress ([`ProgressReport`]): a follower the index it acknowledged to its
//! term's leader (after writing it), a leader its commit index. A position `(T, i)` is
//! proven committed once
//! - the leader of term `T` reports a commit index `>= i`, or
//! - `floor(n / 2)` distinct followers of term `T` report an acknowledged index `>= i`: with
//!   the leader's own copy (a leader sends a position only once its own log is durable up to
//!   it) that is a majority of the `n` replicas holding the term-`T` entry at `i`, which Raft
//!   commits. A report from another term proves nothing about `(T, i)`.

use serde::{Deserialize, Serialize};

use crate::types::ShardId;

/// Position of a record in a shard's log, from 1.
pub type LogIndex = u64;

/// A position in one shard's log: an index appended by the leader of `term`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct LogPos {
    /// The Raft term of the leader that appended the entry.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
    pub term: u64,
    /// The entry's index.
    pub index: LogIndex,
}

/// One replica's progress, sent every millisecond while it moves to the connected clients and
/// to the other shards' leaders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct ProgressReport {
    /// The reporting replica's shard.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
    pub shard: ShardId,
    /// Its index in the shard's replica list (not used for a leader's report: the
    /// leader's term speaks for the majority that elected it).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::replica()"))]
    pub replica: u32,
    /// Its current Raft term (a follower that voted in an election is past its old leader's
    /// term before it acknowledges anything of the new one).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::small_u64()"))]
    pub term: u64,
    /// A follower: its term and the last index it acknowledged to that term's leader (its
    /// log matches the leader's up to there, and is durable). A leader: its term and commit
    /// index.
    pub pos: LogPos,
    /// True when the reporter leads `pos.term` and `pos.index` is its commit index.
    pub committed: bool,
}

/// What one shard's replicas last reported.
#[derive(Clone, Debug, Default)]
struct ShardProgress {
    /// Replicas in the group (0: unknown, only the leader's word counts).
    group: u32,
    /// Per replica, the latest follower report (by term, then index).
    acked: Vec<LogPos>,
    /// Per replica, the highest current term it reported.
    terms: Vec<u64>,
    /// The latest commit reported by a leader.
    committed: LogPos,
}

/// The progress of every shard's replicas, as reported to one coordinator or leader.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    shards: Vec<ShardProgress>,
    /// Test-only mutation: count reports of any term (a stale follower "proves" a position
    /// of a term whose entries it never held).
    any_term: bool,
}

impl Progress {
    /// A table for `shards` shards whose groups have `group_sizes[s]` replicas. A shard not
    /// listed (or listed with 0) is proven only by its leader's commit reports; a report about
    /// a shard past `shards` is ignored.
    pub fn new(group_sizes: &[u32], shards: u32) -> Self {
        let size = |s: usize| group_sizes.get(s).copied().unwrap_or(0);
        let shards = (0..group_sizes.len().max(shards as usize)).map(|s| ShardProgress {
            group: size(s),
            acked: vec![LogPos::default(); size(s) as usize],
            terms: vec![0; size(s) as usize],
            ..Default::default()
        });
        Progress { shards: shards.collect(), any_term: false }
    }

    /// The same table with the test-only mutation that counts reports of any term.
    pub fn accepting_any_term(mut self) -> Self {
        self.any_term = true;
        self
    }

    /// Takes a report in. Returns true if it taught something new (a later position or term).
    pub fn on_report(&mut self, r: &ProgressReport) -> bool {
        let Some(s) = self.shards.get_mut(r.shard as usize) else { return false };
        let mut news = false;
        if !r.committed {
            if let Some(term) = s.terms.get_mut(r.replica as usize) {
                if r.term > *term {
                    *term = r.term;
                    news = true;
                }
            }
        }
        let slot = if r.committed {
            &mut s.committed
        } else {
            match s.acked.get_mut(r.replica as usize) {
                Some(slot) => slot,
                None => return false, // a replica the group does not have: ignore
            }
        };
        if r.pos > *slot {
            *slot = r.pos;
            news = true;
        }
        news
    }

    /// True once a majority of `shard`'s replicas is known to be past `term`: a majority of
    /// them reported a later term, or a leader of a later term reported (a majority voted
    /// for it there). Then the leader of `term` can no longer commit anything (a majority
    /// refuses its messages), and every later leader's log holds what was committed in `term`
    /// (DESIGN.md rule 15).
    pub fn moved_past(&self, shard: ShardId, term: u64) -> bool {
        let Some(s) = self.shards.get(shard as usize) else { return false };
        if s.committed.term > term {
            return true;
        }
        let past = s.terms.iter().filter(|t| **t > term).count() as u32;
        s.group > 0 && past > s.group / 2
    }

    /// True once `pos` of `shard`'s log is known committed (see the module docs).
    pub fn proven(&self, shard: ShardId, pos: LogPos) -> bool {
        let Some(s) = self.shards.get(shard as usize) else { return false };
        let term_ok = |term: u64| term == pos.term || (self.any_term && term > 0);
        if term_ok(s.committed.term) && s.committed.index >= pos.index {
            return true;
        }
        if s.group == 0 {
            return false;
        }
        let holders = s.acked.iter().filter(|a| term_ok(a.term) && a.index >= pos.index).count();
        holders as u32 >= s.group / 2
    }

    /// The highest term of a position any replica of `shard` reported (acknowledged by a
    /// follower of that term, or committed by its leader).
    pub fn newest_term(&self, shard: ShardId) -> u64 {
        self.shards
            .get(shard as usize)
            .map_or(0, |s| s.acked.iter().map(|a| a.term).max().unwrap_or(0).max(s.committed.term))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(replica: u32, term: u64, index: LogIndex, committed: bool) -> ProgressReport {
        ProgressReport { shard: 0, replica, term, pos: LogPos { term, index }, committed }
    }

    #[test]
    fn one_follower_of_the_term_proves_a_position_in_a_group_of_three() {
        let mut p = Progress::new(&[3], 1);
        let pos = LogPos { term: 2, index: 10 };
        assert!(!p.proven(0, pos));
        assert!(p.on_report(&report(1, 2, 9, false)));
        assert!(!p.proven(0, pos), "below the position");
        assert!(p.on_report(&report(1, 2, 10, false)));
        assert!(p.proven(0, pos));
        assert!(!p.on_report(&report(1, 2, 8, false)), "older news changes nothing");
    }

    #[test]
    fn reports_of_another_term_prove_nothing() {
        let mut p = Progress::new(&[3], 1);
        let pos = LogPos { term: 2, index: 10 };
        p.on_report(&report(1, 1, 50, false));
        p.on_report(&report(2, 3, 50, false));
        assert!(!p.proven(0, pos), "a stale term and a newer term");
        p.on_report(&report(0, 3, 50, true));
        assert!(!p.proven(0, pos), "a later leader's commit index is about its own log");
        let mut q = Progress::new(&[3], 1);
        q.on_report(&report(0, 2, 10, true));
        assert!(q.proven(0, pos), "the leader of the term says committed");
        assert!(!q.on_report(&report(0, 1, 90, true)), "an older term's leader is old news");
    }

    #[test]
    fn five_replicas_need_two_followers_and_one_needs_none() {
        let mut p = Progress::new(&[5, 1], 3);
        let pos = LogPos { term: 1, index: 4 };
        p.on_report(&report(1, 1, 4, false));
        assert!(!p.proven(0, pos));
        p.on_report(&report(1, 1, 9, false));
        assert!(!p.proven(0, pos), "the same follower twice is one holder");
        p.on_report(&report(3, 1, 4, false));
        assert!(p.proven(0, pos));
        assert!(p.proven(1, pos), "a group of one: the leader's durable copy is the majority");
        assert!(!p.proven(2, pos), "an unknown shard needs its leader's word");
        let leader =
            ProgressReport { shard: 2, replica: 0, term: 1, pos: LogPos { term: 1, index: 4 }, committed: true };
        assert!(p.on_report(&leader));
        assert!(p.proven(2, pos), "and takes it");
    }

    #[test]
    fn a_majority_past_a_term_is_counted_from_current_terms() {
        let mut p = Progress::new(&[3], 1);
        assert!(!p.moved_past(0, 4));
        // A follower that voted in term 5 still holds what it acknowledged in term 4.
        let voted =
            ProgressReport { shard: 0, replica: 1, term: 5, pos: LogPos { term: 4, index: 30 }, committed: false };
        assert!(p.on_report(&voted), "a newer term is news");
        assert!(p.proven(0, LogPos { term: 4, index: 30 }), "its acknowledgement still counts");
        assert!(!p.moved_past(0, 4), "one of three");
        p.on_report(&report(2, 5, 0, false));
        assert!(p.moved_past(0, 4), "two of three");
        assert!(!p.moved_past(0, 5));
        assert!(!Progress::new(&[], 0).moved_past(0, 0), "an unknown group never");
        // A leader of a later term speaks for the majority that elected it, whatever replica
        // index it gives.
        let mut q = Progress::new(&[3], 1);
        q.on_report(&report(0, 6, 2, true));
        assert!(q.moved_past(0, 5) && !q.moved_past(0, 6));
    }

    #[test]
    fn reports_from_replicas_or_shards_outside_the_table_are_ignored() {
        let mut p = Progress::new(&[3], 1);
        assert!(!p.on_report(&report(7, 1, 100, false)));
        // Nor from a shard past the table: a garbled shard id grows nothing.
        let stranger =
            ProgressReport { shard: u32::MAX, replica: 0, term: 9, pos: LogPos { term: 9, index: 9 }, committed: true };
        assert!(!p.on_report(&stranger));
        assert_eq!(p.shards.len(), 1);
        assert!(!p.proven(0, LogPos { term: 1, index: 1 }));
        assert_eq!(p.newest_term(0), 0);
    }
}
