//! Snapshot reads waiting at a replica for its safe time to reach their timestamp (DESIGN.md
//! rule 23). A read whose snapshot the replica's applied state already covers is served at
//! once; one above it waits here, in timestamp order, until the safe time passes it.
//!
//! Bounded in count ([`SnapshotReadConfig::waiting_max`]: a full table refuses with `Busy`)
//! and in time (a read held past [`SnapshotReadConfig::wait_us_max`] is refused `TimedOut`,
//! and one whose snapshot lies further ahead of the replica's clock than that is refused at
//! once), so nothing waits here for good and nothing goes unanswered.

use std::collections::{BTreeMap, BTreeSet};

use luigi_txn::read_only::{ReadRefusal, SnapshotRead};
use luigi_txn::types::{ClientId, TimeUs, Timestamp};

/// The bounds of the table, and the mutation the simulator's check must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotReadConfig {
    /// Reads held at most.
    pub waiting_max: usize,
    /// How long a read is held at most, and how far ahead of the clock a snapshot may lie.
    pub wait_us_max: TimeUs,
    /// Mutation (tests only): serve every read at once, before the safe time reaches it.
    pub serve_before_safe_time: bool,
}

impl Default for SnapshotReadConfig {
    fn default() -> Self {
        SnapshotReadConfig { waiting_max: 16_384, wait_us_max: 5_000_000, serve_before_safe_time: false }
    }
}

/// A read held until the safe time reaches its snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingRead {
    /// Who asked.
    pub client: ClientId,
    /// The read.
    pub read: SnapshotRead,
    /// Its arrival clock minus its `sent_us` (echoed in the answer).
    pub arrival_delta_us: i64,
    /// When it arrived (the answer says how long it was held).
    pub arrived: TimeUs,
    /// When it is refused if still waiting.
    pub deadline: TimeUs,
}

/// Counters of the table, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotReadStats {
    /// Reads answered with the procedure's result.
    pub served: u64,
    /// Of those, how many waited first.
    pub served_after_waiting: u64,
    /// Reads refused because the table was full.
    pub refused_busy: u64,
    /// Reads refused because the safe time did not reach them in time, or never could.
    pub refused_timeout: u64,
    /// Reads refused as malformed or unsupported.
    pub refused_other: u64,
}

/// What to do with an arriving read.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Serve it now: the safe time covers its snapshot.
    Serve(WaitingRead),
    /// Held.
    Held,
    /// Refuse it.
    Refuse(WaitingRead, ReadRefusal),
}

/// The reads waiting at one replica.
#[derive(Debug, Default)]
pub struct SnapshotReads {
    config: SnapshotReadConfig,
    /// By (snapshot, arrival number).
    waiting: BTreeMap<(Timestamp, u64), WaitingRead>,
    /// By (deadline, arrival number) -> snapshot, for expiry.
    deadlines: BTreeSet<(TimeUs, u64, Timestamp)>,
    arrivals: u64,
    stats: SnapshotReadStats,
}

impl SnapshotReads {
    /// An empty table under `config`.
    pub fn new(config: SnapshotReadConfig) -> Self {
        SnapshotReads { config, ..SnapshotReads::default() }
    }

    /// Its bounds.
    pub fn config(&self) -> SnapshotReadConfig {
        self.config
    }

    /// Sets its bounds (reads already held keep their deadlines).
    pub fn set_config(&mut self, config: SnapshotReadConfig) {
        self.config = config;
    }

    /// A read arriving at `now` at a replica whose safe time is `safe_ts`.
    pub fn arrive(&mut self, now: TimeUs, client: ClientId, read: SnapshotRead, safe_ts: Timestamp) -> Arrival {
        let arrival_delta_us = luigi_txn::msg::arrival_delta_us(now, read.sent_us);
        let deadline = now.saturating_add(self.config.wait_us_max);
        let ts = read.ts;
        let w = WaitingRead { client, read, arrival_delta_us, arrived: now, deadline };
        if ts <= safe_ts || self.config.serve_before_safe_time {
            self.stats.served += 1;
            return Arrival::Serve(w);
        }
        if ts > deadline {
            self.stats.refused_timeout += 1;
            return Arrival::Refuse(w, ReadRefusal::TooFarAhead { ahead_us: ts - now });
        }
        if self.waiting.len() >= self.config.waiting_max {
            self.stats.refused_busy += 1;
            return Arrival::Refuse(w, ReadRefusal::Busy);
        }
        self.arrivals += 1;
        self.deadlines.insert((deadline, self.arrivals, ts));
        self.waiting.insert((ts, self.arrivals), w);
        Arrival::Held
    }

    /// Counts a read refused before it reached the table (malformed, unsupported).
    pub fn refused_other(&mut self) {
        self.stats.refused_other += 1;
    }

    /// The held reads the safe time `safe_ts` now covers, in snapshot order.
    pub fn ready(&mut self, safe_ts: Timestamp) -> Vec<WaitingRead> {
        let mut out = Vec::new();
        while let Some(entry) = self.waiting.first_entry() {
            let (ts, n) = *entry.key();
            if ts > safe_ts {
                break;
            }
            let w = entry.remove();
            self.deadlines.remove(&(w.deadline, n, ts));
            out.push(w);
        }
        self.stats.served += out.len() as u64;
        self.stats.served_after_waiting += out.len() as u64;
        out
    }

    /// The held reads whose deadline has come at `now` (to be refused `TimedOut`).
    pub fn expired(&mut self, now: TimeUs) -> Vec<WaitingRead> {
        let mut out = Vec::new();
        while let Some(&(deadline, n, ts)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            out.extend(self.waiting.remove(&(ts, n)));
        }
        self.stats.refused_timeout += out.len() as u64;
        out
    }

    /// When the next held read times out.
    pub fn next_deadline(&self) -> Option<TimeUs> {
        self.deadlines.first().map(|(deadline, ..)| *deadline)
    }

    /// Reads held now.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Its counters.
    pub fn stats(&self) -> SnapshotReadStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_txn::types::{KeySet, TxnId};

    fn read(seq: u64, ts: Timestamp) -> SnapshotRead {
        SnapshotRead {
            id: TxnId { client: 1, seq },
            shard: 0,
            procedure: "get".into(),
            args: vec![],
            keys: KeySet::new(vec![b"k".to_vec()], vec![]),
            ts,
            sent_us: 0,
        }
    }

    fn config(waiting_max: usize) -> SnapshotReadConfig {
        SnapshotReadConfig { waiting_max, wait_us_max: 1_000, ..SnapshotReadConfig::default() }
    }

    #[test]
    fn a_read_is_served_once_the_safe_time_reaches_its_snapshot_and_not_before() {
        let mut t = SnapshotReads::new(config(8));
        assert!(matches!(t.arrive(100, 7, read(1, 50), 50), Arrival::Serve(_)), "at the safe time: at once");
        assert_eq!(t.arrive(100, 7, read(2, 300), 50), Arrival::Held);
        assert_eq!(t.arrive(100, 7, read(3, 200), 50), Arrival::Held);
        assert!(t.ready(199).is_empty());
        let ids: Vec<u64> = t.ready(300).iter().map(|w| w.read.id.seq).collect();
        assert_eq!(ids, vec![3, 2], "in snapshot order");
        assert!(t.is_empty() && t.next_deadline().is_none());
        assert_eq!(t.stats().served, 3);
        assert_eq!(t.stats().served_after_waiting, 2);
    }

    #[test]
    fn the_table_is_bounded_in_count_and_time_and_refuses_clearly() {
        let mut t = SnapshotReads::new(config(2));
        assert_eq!(t.arrive(0, 7, read(1, 500), 0), Arrival::Held);
        assert_eq!(t.arrive(10, 7, read(2, 500), 0), Arrival::Held);
        assert!(matches!(t.arrive(20, 7, read(3, 500), 0), Arrival::Refuse(_, ReadRefusal::Busy)));
        let far = t.arrive(20, 7, read(4, u64::MAX), 0);
        assert!(matches!(far, Arrival::Refuse(_, ReadRefusal::TooFarAhead { ahead_us }) if ahead_us == u64::MAX - 20));
        assert_eq!(t.next_deadline(), Some(1_000));
        assert!(t.expired(999).is_empty());
        let gone: Vec<u64> = t.expired(1_000).iter().map(|w| w.read.id.seq).collect();
        assert_eq!(gone, vec![1]);
        assert_eq!(t.len(), 1);
        assert!(t.ready(499).is_empty());
        assert_eq!(t.ready(500).len(), 1);
        let s = t.stats();
        assert_eq!((s.refused_busy, s.refused_timeout, s.served), (1, 2, 1));
    }

    #[test]
    fn the_mutation_serves_before_the_safe_time() {
        let mut t = SnapshotReads::new(SnapshotReadConfig { serve_before_safe_time: true, ..config(2) });
        assert!(matches!(t.arrive(0, 7, read(1, 500), 0), Arrival::Serve(_)));
    }
}
