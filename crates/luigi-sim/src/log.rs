//! A simulated replicated log: a record commits a seeded delay after it is appended (one
//! replication round), in log order, like a Raft group whose leader is healthy. The
//! unit-level tests of the leader core (`tests/inversion.rs`) lend it to a `ShardLeader`
//! directly; the simulator's runs use the node's own Raft log. Also here: what a committed
//! log holds of a transaction ([`Durable`]) and the rule-4 check both kinds of run make of it.

use std::collections::{HashMap, VecDeque};

use luigi_protocol::log::{LogEntry, LogError, LogIndex, LogRecord, ReplicatedLog};
use luigi_txn::types::{ShardId, Timestamp, TxnId};
use rand_chacha::ChaCha8Rng;

use crate::config::Delay;
use crate::net::VirtualUs;

/// The log of one simulated shard. The simulator sets the virtual time with
/// [`SimLog::set_now`] before every call into the leader; a record appended at `t` commits at
/// `max(t + delay, commit time of the previous record)`. With [`Delay::ZERO`] it behaves like
/// `luigi_protocol::log::LocalLog`: every record is committed as soon as it is appended.
pub struct SimLog {
    rng: ChaCha8Rng,
    delay: Delay,
    now: VirtualUs,
    next_index: LogIndex,
    last_commit_at: VirtualUs,
    /// Appended records with their commit times (non-decreasing), not yet taken.
    waiting: VecDeque<(VirtualUs, LogEntry)>,
    capacity: usize,
    /// Every transaction record ever appended, with its commit time, for the checks.
    txns: HashMap<TxnId, Vec<(VirtualUs, TxnRecordKind)>>,
    /// Every entry handed to the leader as committed, in log order (replayed into a follower).
    committed: Vec<LogEntry>,
}

/// A log record about one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnRecordKind {
    /// `PREPARE` with this proposal.
    Prepare(Timestamp),
    /// `DECIDE` with this final timestamp.
    Decide(Timestamp),
    /// `ABORT`.
    Abort,
    /// `REFUSE`.
    Refuse,
}

/// What a shard's log holds, committed, about one transaction at some moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Durable {
    /// Proposal of the committed `PREPARE`.
    pub prepared: Option<Timestamp>,
    /// Largest committed `DECIDE`.
    pub decided: Option<Timestamp>,
    /// A committed `ABORT`.
    pub aborted: bool,
    /// A committed `REFUSE` (refused at admission, never prepared).
    pub refused: bool,
    /// Committed `PREPARE` records (more than one is a protocol bug).
    pub prepares: u32,
}

impl Durable {
    /// The timestamp a replica replaying this log would give the transaction: the `DECIDE`,
    /// else the `PREPARE`.
    pub fn ts(&self) -> Option<Timestamp> {
        self.decided.or(self.prepared)
    }
}

/// DESIGN.md rules 4 and 14 at the moment `who`, a replica of shard `own`, executes `id`, given
/// what each participant's committed log holds of it (`durable`, one entry per participant):
/// every other participant's `PREPARE` is committed (once, and no `ABORT`), and if the
/// proposals differed, every participant's committed log already holds the final timestamp (a
/// `DECIDE` at it, or its own `PREPARE` if that was the largest). Without this a replica or a
/// new leader of a participant that only holds the old, smaller proposal would order the
/// transaction differently from what was executed. The executing shard's own `PREPARE` may
/// still be on its way (rule 14: a leader executes speculatively; whoever acts on the result
/// waits for its position to commit, which the end-of-run checks hold answers to). Both
/// cluster models check every execution with it.
///
/// `executed_ts` is the timestamp the replica executed at, when known: a leader executes at
/// its decision, at or above its own proposal, so an own committed `PREPARE` above it is a
/// later leader's (found in a replicated run with a deposed leader that had used another
/// shard's proposal by rule 18). That leader's own `PREPARE` can then never commit (one
/// `PREPARE` per transaction per shard, checked below): its execution is speculative on a
/// branch no answer can be proven from, like one whose `PREPARE` is still on its way.
pub(crate) fn check_rule4(
    who: &str,
    own: ShardId,
    id: TxnId,
    executed_ts: Option<Timestamp>,
    durable: &[(ShardId, Durable)],
) -> Result<(), String> {
    let mut proposals = Vec::new();
    let superseded = |d: &Durable| d.prepares == 1 && d.prepared.zip(executed_ts).is_some_and(|(c, e)| c > e);
    let speculative = |p: ShardId, d: &Durable| {
        p == own && !d.aborted && ((d.prepared.is_none() && d.prepares == 0) || superseded(d))
    };
    let durable: Vec<(ShardId, Durable)> = durable.iter().filter(|(p, d)| !speculative(*p, d)).copied().collect();
    for (p, d) in &durable {
        let why = if d.prepares > 1 {
            Some(format!("shard {p} has {} committed PREPAREs of it", d.prepares))
        } else if d.aborted {
            Some(format!("shard {p} has a committed ABORT of it"))
        } else if d.prepared.is_none() {
            Some(format!("shard {p}'s PREPARE of it is not committed"))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(format!("{who} executed {id:?}, but {why}"));
        }
        proposals.push((*p, d.prepared.expect("checked")));
    }
    let Some(final_ts) = proposals.iter().map(|(_, ts)| *ts).max() else { return Ok(()) };
    if proposals.iter().all(|(_, ts)| *ts == final_ts) {
        return Ok(());
    }
    match durable.iter().find(|(_, d)| d.ts() != Some(final_ts)) {
        None => Ok(()),
        Some((p, d)) => Err(format!(
            "{who} executed {id:?} (proposals by shard {proposals:?}, final ts {final_ts}) before shard {p} \
             durably adopted the final timestamp: its committed log holds PREPARE at {:?} and DECIDE at {:?} \
             (rule 4: no release on the first round when proposals differ)",
            d.prepared, d.decided
        )),
    }
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
            txns: HashMap::new(),
            committed: Vec::new(),
        }
    }

    /// What is committed about `id` at virtual time `now`.
    pub fn durable(&self, id: TxnId, now: VirtualUs) -> Durable {
        let mut d = Durable::default();
        for (at, kind) in self.txns.get(&id).map(Vec::as_slice).unwrap_or_default() {
            if *at > now {
                continue;
            }
            match *kind {
                TxnRecordKind::Prepare(ts) => {
                    d.prepares += 1;
                    d.prepared.get_or_insert(ts);
                }
                TxnRecordKind::Decide(ts) => d.decided = d.decided.max(Some(ts)),
                TxnRecordKind::Abort => d.aborted = true,
                TxnRecordKind::Refuse => d.refused = true,
            }
        }
        d
    }

    /// Transactions with an appended `PREPARE` and no `ABORT`, sorted by id.
    pub fn prepared_ids(&self) -> Vec<TxnId> {
        let mut ids: Vec<TxnId> = self
            .txns
            .iter()
            .filter(|(_, r)| {
                r.iter().any(|(_, k)| matches!(k, TxnRecordKind::Prepare(_)))
                    && !r.iter().any(|(_, k)| *k == TxnRecordKind::Abort)
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Every transaction record appended about `id`, with commit times.
    pub fn records(&self, id: TxnId) -> &[(VirtualUs, TxnRecordKind)] {
        self.txns.get(&id).map(Vec::as_slice).unwrap_or_default()
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

impl SimLog {
    /// Every entry ever appended, in log order: the committed ones, then those still in
    /// flight (which the simulated log commits eventually, in order).
    pub fn all_entries(&self) -> impl Iterator<Item = &LogEntry> {
        self.committed.iter().chain(self.waiting.iter().map(|(_, e)| e))
    }
}

impl ReplicatedLog<LogRecord> for SimLog {
    fn propose(&mut self, record: LogRecord) -> Result<LogIndex, LogError> {
        if self.waiting.len() >= self.capacity {
            return Err(LogError::Backlogged(self.waiting.len()));
        }
        let index = self.next_index;
        self.next_index += 1;
        let at = (self.now + self.delay.sample_us(&mut self.rng)).max(self.last_commit_at);
        self.last_commit_at = at;
        let kind = match &record {
            LogRecord::Prepare { txn, ts, .. } => Some((txn.id, TxnRecordKind::Prepare(*ts))),
            LogRecord::Decide { id, ts } => Some((*id, TxnRecordKind::Decide(*ts))),
            LogRecord::Abort { id } => Some((*id, TxnRecordKind::Abort)),
            LogRecord::Refuse { id, .. } => Some((*id, TxnRecordKind::Refuse)),
            LogRecord::Floor { .. } | LogRecord::Applied { .. } | LogRecord::PeerApplied { .. } => None,
        };
        if let Some((id, kind)) = kind {
            self.txns.entry(id).or_default().push((at, kind));
        }
        self.waiting.push_back((at, LogEntry { index, record }));
        Ok(index)
    }

    fn take_committed(&mut self, out: &mut Vec<LogEntry>) {
        while let Some((at, _)) = self.waiting.front() {
            if *at > self.now {
                break;
            }
            let (_, entry) = self.waiting.pop_front().expect("front exists");
            self.committed.push(entry.clone());
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
    fn durable_reports_what_is_committed_about_a_transaction() {
        use luigi_txn::types::Txn;
        use std::sync::Arc;
        let mut log = SimLog::new(ChaCha8Rng::seed_from_u64(1), Delay::new(100, 0), 8);
        let id = TxnId { client: 1, seq: 1 };
        let txn = Arc::new(Txn { id, procedure: "p".into(), args: vec![], pieces: vec![], ts: 5 });
        log.set_now(1_000);
        log.propose(LogRecord::Prepare { txn, ts: 40, arrival_delta_us: 0, acked_below: 0 }).expect("room");
        log.set_now(1_050);
        log.propose(LogRecord::Decide { id, ts: 70 }).expect("room");
        assert_eq!(log.durable(id, 1_099), Durable::default(), "nothing committed yet");
        let prepared = log.durable(id, 1_100);
        assert_eq!((prepared.prepared, prepared.decided, prepared.ts()), (Some(40), None, Some(40)));
        assert_eq!(log.durable(id, 1_150).ts(), Some(70), "the DECIDE wins once committed");
        assert_eq!(log.prepared_ids(), vec![id]);
        log.propose(LogRecord::Abort { id }).expect("room");
        assert!(log.durable(id, 2_000).aborted);
        assert!(log.prepared_ids().is_empty());
    }

    #[test]
    fn zero_delay_commits_on_append() {
        let mut log = SimLog::new(ChaCha8Rng::seed_from_u64(1), Delay::ZERO, 1);
        log.set_now(5);
        log.propose(LogRecord::Floor { ts: 1 }).expect("room");
        assert_eq!(log.propose(LogRecord::Floor { ts: 2 }), Err(LogError::Backlogged(1)));
        let mut out = Vec::new();
        log.take_committed(&mut out);
        assert_eq!(out.len(), 1);
    }
}
