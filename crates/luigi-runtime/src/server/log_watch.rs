//! The Raft log as the server shell sees it, for the metrics: how long its writes take to be
//! durable (TiKV's append latency), how long a leader's entries take to commit (TiKV's commit
//! latency), the entries a leader appended and had not seen committed when it lost its
//! leadership (etcd's failed proposals), and the fast path's accept-log records it wrote. All
//! of it read from the effects the shell executes and the log's indexes after each turn:
//! nothing here is known to the node, and nothing changes what it does.

use std::collections::VecDeque;
use std::time::Instant;

use luigi_node::{Persist, ReplicaNode};

use crate::metrics::Timings;

/// Writes awaited, or marks kept, at most: beyond it new ones are not timed (the histograms
/// sample the rest), never a growing queue.
const WATCHED_MAX: usize = 4096;

/// A write the node waits for, handed to the disk at `at`.
#[derive(Clone, Copy, Debug)]
struct Write {
    number: u64,
    at: Instant,
}

/// The leader's log reached `index` (its last entry) at `at`.
#[derive(Clone, Copy, Debug)]
struct Mark {
    index: u64,
    at: Instant,
}

/// What the shell watches of its log (see the module docs).
#[derive(Debug)]
pub(super) struct LogWatch {
    timings: Timings,
    /// Synced writes handed to the disk, not reported durable yet, oldest first.
    writes: VecDeque<Write>,
    /// The leader's appended entries not known committed yet, oldest first.
    marks: VecDeque<Mark>,
    /// The last index this replica appended while leading (0: not leading).
    led_to: u64,
    /// Entries appended while leading and not seen committed when leadership was lost.
    proposals_failed: u64,
    /// Records in the accept log now (since its last rewrite).
    accept_entries: u64,
    /// Records appended to the accept log since the server started.
    accept_written: u64,
}

/// [`LogWatch`]'s counts, for a scrape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct LogCounts {
    pub proposals_failed: u64,
    pub accept_entries: u64,
    pub accept_written: u64,
}

impl LogWatch {
    /// Observes into `timings`' append and commit histograms.
    pub(super) fn new(timings: &Timings) -> Self {
        LogWatch {
            timings: timings.clone(),
            writes: VecDeque::new(),
            marks: VecDeque::new(),
            led_to: 0,
            proposals_failed: 0,
            accept_entries: 0,
            accept_written: 0,
        }
    }

    /// `p` is handed to the disk now.
    pub(super) fn submitted(&mut self, p: &Persist) {
        let records = p.accepts.len() as u64;
        self.accept_written = self.accept_written.saturating_add(records);
        self.accept_entries = if p.accepts_rewrite { records } else { self.accept_entries.saturating_add(records) };
        if p.sync && self.writes.len() < WATCHED_MAX {
            self.writes.push_back(Write { number: p.number, at: Instant::now() });
        }
    }

    /// The writes up to `number` are durable.
    pub(super) fn persisted(&mut self, number: u64) {
        let now = Instant::now();
        while let Some(w) = self.writes.front().filter(|w| w.number <= number) {
            Timings::observe(&self.timings.append, now.duration_since(w.at));
            self.writes.pop_front();
        }
    }

    /// After a turn: marks what the leader appended, times what committed, and counts what
    /// a lost leadership left uncommitted.
    pub(super) fn turned(&mut self, node: &ReplicaNode) {
        let log = node.log();
        let commit = log.commit_index();
        if !log.is_leader() {
            if self.led_to > 0 {
                self.proposals_failed = self.proposals_failed.saturating_add(self.led_to.saturating_sub(commit));
                self.led_to = 0;
                self.marks.clear();
            }
            return;
        }
        let last = log.last_index();
        if last > self.led_to {
            self.led_to = last;
            if self.marks.len() < WATCHED_MAX {
                self.marks.push_back(Mark { index: last, at: Instant::now() });
            }
        }
        if self.marks.front().is_some_and(|m| m.index <= commit) {
            let now = Instant::now();
            while let Some(m) = self.marks.front().filter(|m| m.index <= commit) {
                Timings::observe(&self.timings.commit, now.duration_since(m.at));
                self.marks.pop_front();
            }
        }
    }

    /// The counts, for a scrape.
    pub(super) fn counts(&self) -> LogCounts {
        LogCounts {
            proposals_failed: self.proposals_failed,
            accept_entries: self.accept_entries,
            accept_written: self.accept_written,
        }
    }
}
