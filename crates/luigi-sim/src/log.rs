//! A simulated replicated log: a record commits a seeded delay after it is appended (one
//! replication round), in log order, like a Raft group whose leader is healthy.

use std::collections::VecDeque;

use luigi_proto::log::{LogEntry, LogError, LogIndex, LogRecord, ReplicatedLog};
use rand_chacha::ChaCha8Rng;

use crate::config::Delay;
use crate::net::VirtualUs;

/// The log of one simulated shard. The simulator sets the virtual time with
/// [`SimLog::set_now`] before every call into the leader; a record appended at `t` commits at
/// `max(t + delay, commit time of the previous record)`. With [`Delay::ZERO`] it behaves like
/// `luigi_proto::log::LocalLog`: every record is committed as soon as it is appended.
pub struct SimLog {
    rng: ChaCha8Rng,
    delay: Delay,
    now: VirtualUs,
    next_index: LogIndex,
    last_commit_at: VirtualUs,
    /// Appended records with their commit times (non-decreasing), not yet taken.
    waiting: VecDeque<(VirtualUs, LogEntry)>,
    capacity: usize,
}

impl SimLog {
    /// A log whose commit delays are drawn from `delay` with `rng`; at most `capacity`
    /// records may wait to be taken.
    pub fn new(rng: ChaCha8Rng, delay: Delay, capacity: usize) -> Self {
        assert!(capacity > 0, "a log holds at least one record");
        Self {
            rng,
            delay,
            now: 0,
            next_index: 1,
            last_commit_at: 0,
            waiting: VecDeque::new(),
            capacity,
        }
    }

    /// Sets the current virtual time.
    pub fn set_now(&mut self, now: VirtualUs) {
        self.now = self.now.max(now);
    }

    /// When the next record commits (virtual time), if one is waiting.
    pub fn next_commit_at(&self) -> Option<VirtualUs> {
        self.waiting.front().map(|(at, _)| *at)
    }

    /// Records appended and not yet taken.
    pub fn backlog(&self) -> usize {
        self.waiting.len()
    }
}

impl ReplicatedLog for SimLog {
    fn propose(&mut self, record: LogRecord) -> Result<LogIndex, LogError> {
        if self.waiting.len() >= self.capacity {
            return Err(LogError::Backlogged(self.waiting.len()));
        }
        let index = self.next_index;
        self.next_index += 1;
        let at = (self.now + self.delay.sample(&mut self.rng)).max(self.last_commit_at);
        self.last_commit_at = at;
        self.waiting.push_back((at, LogEntry { index, record }));
        Ok(index)
    }

    fn take_committed(&mut self, out: &mut Vec<LogEntry>) {
        while let Some((at, _)) = self.waiting.front() {
            if *at > self.now {
                break;
            }
            let (_, entry) = self.waiting.pop_front().expect("front exists");
            out.push(entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn commits_in_order_after_the_delay() {
        let mut log = SimLog::new(ChaCha8Rng::seed_from_u64(1), Delay::new(100, 90), 8);
        log.set_now(1_000);
        for ts in 0..5 {
            log.propose(LogRecord::Floor { ts }).expect("room");
        }
        let mut out = Vec::new();
        log.take_committed(&mut out);
        assert!(out.is_empty(), "nothing commits before its delay");
        log.set_now(1_200);
        log.take_committed(&mut out);
        let indexes: Vec<_> = out.iter().map(|e| e.index).collect();
        assert_eq!(indexes, vec![1, 2, 3, 4, 5]);
        assert_eq!(log.next_commit_at(), None);
    }

    #[test]
    fn zero_delay_commits_on_append() {
        let mut log = SimLog::new(ChaCha8Rng::seed_from_u64(1), Delay::ZERO, 1);
        log.set_now(5);
        log.propose(LogRecord::Floor { ts: 1 }).expect("room");
        assert_eq!(
            log.propose(LogRecord::Floor { ts: 2 }),
            Err(LogError::Backlogged(1))
        );
        let mut out = Vec::new();
        log.take_committed(&mut out);
        assert_eq!(out.len(), 1);
    }
}
