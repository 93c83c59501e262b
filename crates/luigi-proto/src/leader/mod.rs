//! The shard leader: admission, the timestamp-ordered hold queue, execution, the watermark and
//! exactly-once answers (DESIGN.md rules 3, 5 and 7). Sans-I/O: every entry point takes the
//! current time and pushes effects into an output vector; the log is a [`ReplicatedLog`].
//!
//! Life of a transaction on this shard:
//! 1. `Dispatch` arrives; [`admission`] bumps its proposal above the conflicting released
//!    floors and the watermark (and up to the clock if it is late) and appends `PREPARE`.
//! 2. The `PREPARE` commits: the transaction is durable and (single shard) decided.
//! 3. [`queue`] releases it once the clock has passed its timestamp and no conflicting
//!    transaction with a smaller timestamp is still pending here; it executes.
//! 4. Its answer is sent once the watermark has passed its timestamp.

pub mod admission;
pub mod queue;

use std::collections::{BTreeMap, BTreeSet};

use crate::Map;
use std::sync::Arc;

use luigi_store::Store;

use crate::log::{LogEntry, LogError, LogRecord, ReplicatedLog};
use crate::msg::{ClientMsg, ServerMsg, TxnError, TxnReply};
use crate::procedure::Registry;
use crate::types::{ClientId, ShardId, TimeUs, Timestamp, Txn, TxnId};

use admission::Floors;
use queue::HoldQueue;

/// Knobs of a shard leader.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// This shard.
    pub shard: ShardId,
    /// How far ahead of the clock a `Floor` promise is logged. Must exceed the log's commit
    /// latency or the watermark stalls while a promise is in flight.
    pub floor_lookahead_us: u64,
    /// Largest number of transactions pending (admitted, not executed) at once; beyond it new
    /// dispatches are rejected with an error reply rather than queued without bound.
    pub max_pending: usize,
    /// Fault-injection switches for tests only. All off in production.
    pub mutations: Mutations,
}

impl LeaderConfig {
    /// Defaults for `shard`.
    pub fn new(shard: ShardId) -> Self {
        Self {
            shard,
            floor_lookahead_us: 1_000_000,
            max_pending: 1 << 20,
            mutations: Mutations::default(),
        }
    }
}

/// Deliberate protocol bugs, used only by tests that prove the checker catches them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mutations {
    /// Release a transaction even when a conflicting smaller-timestamp one is pending.
    pub release_ignores_conflicts: bool,
}

/// An effect of the leader for its shell to carry out.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaderOutput {
    /// Send `msg` to client `client`.
    ToClient {
        /// Destination.
        client: ClientId,
        /// Message.
        msg: ServerMsg,
    },
}

/// A transaction admitted here and not yet executed.
#[derive(Debug)]
struct Pending {
    txn: Arc<Txn>,
    /// Current proposal (final once decided).
    ts: Timestamp,
    /// Its `PREPARE` is committed in the log.
    durable: bool,
    arrival_delta_us: i64,
}

/// An executed transaction's answer, kept until the client acknowledges it.
#[derive(Debug, Clone)]
struct Answer {
    ts: Timestamp,
    outcome: Result<Vec<u8>, TxnError>,
    arrival_delta_us: i64,
}

#[derive(Debug, Default)]
struct ClientTable {
    /// The client has every answer below this sequence number.
    acked_below: u64,
    answers: BTreeMap<u64, Answer>,
}

/// Counters for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaderStats {
    /// Transactions admitted.
    pub admitted: u64,
    /// Admissions whose proposal was moved above the coordinator's timestamp.
    pub bumped: u64,
    /// Transactions executed.
    pub executed: u64,
    /// Dispatches rejected at admission.
    pub rejected: u64,
    /// Retried dispatches answered from the answer table or already pending.
    pub duplicates: u64,
}

/// The shard leader state machine.
pub struct ShardLeader<L: ReplicatedLog> {
    config: LeaderConfig,
    log: L,
    store: Store,
    registry: Registry,
    floors: Floors,
    queue: HoldQueue,
    pending: Map<TxnId, Pending>,
    clients: Map<ClientId, ClientTable>,
    /// Executed transactions whose answer waits for the watermark, by (ts, id).
    unanswered: BTreeSet<(Timestamp, TxnId)>,
    watermark: Timestamp,
    /// Nothing is admitted at or below this (set by recovery above everything in the log).
    admission_floor: Timestamp,
    /// Highest committed `Floor` promise.
    floor_committed: Timestamp,
    /// Highest `Floor` proposed (committed or not).
    floor_proposed: Timestamp,
    committed_buf: Vec<LogEntry>,
    stats: LeaderStats,
}

impl<L: ReplicatedLog> ShardLeader<L> {
    /// A leader over `store` with `log`, running `registry`'s procedures.
    pub fn new(config: LeaderConfig, log: L, store: Store, registry: Registry) -> Self {
        Self {
            config,
            log,
            store,
            registry,
            floors: Floors::default(),
            queue: HoldQueue::default(),
            pending: Map::default(),
            clients: Map::default(),
            unanswered: BTreeSet::new(),
            watermark: 0,
            admission_floor: 0,
            floor_committed: 0,
            floor_proposed: 0,
            committed_buf: Vec::new(),
            stats: LeaderStats::default(),
        }
    }

    /// This shard.
    pub fn shard(&self) -> ShardId {
        self.config.shard
    }

    /// The published watermark: every transaction with a final timestamp at or below it is
    /// executed and durable here, and nothing new will be ordered at or below it.
    pub fn watermark(&self) -> Timestamp {
        self.watermark
    }

    /// The shard's store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Counters.
    pub fn stats(&self) -> LeaderStats {
        self.stats
    }

    /// Number of transactions admitted and not yet executed.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The log (for shells that drive its I/O).
    pub fn log_mut(&mut self) -> &mut L {
        &mut self.log
    }

    /// The earliest time at which [`ShardLeader::tick`] has work to do, if any.
    pub fn next_deadline(&self) -> Option<TimeUs> {
        let renew = self
            .floor_proposed
            .saturating_sub(self.config.floor_lookahead_us / 2);
        let release = self.queue.next_clock_deadline();
        Some(release.map_or(renew, |r| r.min(renew)))
    }

    /// Handles a message from client `client`.
    pub fn on_client(
        &mut self,
        now: TimeUs,
        client: ClientId,
        msg: ClientMsg,
        out: &mut Vec<LeaderOutput>,
    ) {
        match msg {
            ClientMsg::Hello { .. } => {}
            ClientMsg::Ping { sent_us } => out.push(LeaderOutput::ToClient {
                client,
                msg: ServerMsg::Pong {
                    shard: self.config.shard,
                    arrival_delta_us: now as i64 - sent_us as i64,
                    watermark: self.watermark,
                },
            }),
            ClientMsg::Dispatch {
                txn,
                sent_us,
                acked_below,
            } => {
                let arrival_delta_us = now as i64 - sent_us as i64;
                self.forget_acked(txn.id.client, acked_below);
                self.on_dispatch(now, txn, arrival_delta_us, out);
            }
        }
        self.pump(now, out);
    }

    /// Advances time: renews the floor promise, releases transactions whose time has come,
    /// publishes the watermark.
    pub fn tick(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        self.pump(now, out);
    }

    fn on_dispatch(
        &mut self,
        now: TimeUs,
        txn: Arc<Txn>,
        arrival_delta_us: i64,
        out: &mut Vec<LeaderOutput>,
    ) {
        let id = txn.id;
        if self.pending.contains_key(&id) {
            // A retry of a transaction still in progress: its answer will follow.
            self.stats.duplicates += 1;
            return;
        }
        if let Some(table) = self.clients.get(&id.client) {
            if id.seq < table.acked_below {
                self.stats.duplicates += 1;
                self.reply_now(id, 0, Err(TxnError::Forgotten), arrival_delta_us, out);
                return;
            }
            if let Some(answer) = table.answers.get(&id.seq) {
                self.stats.duplicates += 1;
                if answer.ts <= self.watermark {
                    let a = answer.clone();
                    self.reply_now(id, a.ts, a.outcome, a.arrival_delta_us, out);
                } // else: still in `unanswered`, the reply goes out when the watermark passes.
                return;
            }
        }
        if let Err(reason) = self.validate(&txn) {
            self.reject(id, reason, arrival_delta_us, out);
            return;
        }
        let keys = txn.piece(self.config.shard).expect("validated");
        let floor = self.watermark.max(self.admission_floor);
        let proposal = admission::propose(txn.ts, now, floor, &self.floors, keys);
        match self.log.propose(LogRecord::Prepare {
            txn: txn.clone(),
            ts: proposal,
            arrival_delta_us,
        }) {
            Ok(_) => {}
            Err(e @ (LogError::NotLeader | LogError::Backlogged(_))) => {
                self.reject(id, e.to_string(), arrival_delta_us, out);
                return;
            }
        }
        self.stats.admitted += 1;
        if proposal != txn.ts {
            self.stats.bumped += 1;
        }
        self.queue.insert(id, proposal, keys);
        self.pending.insert(
            id,
            Pending {
                txn,
                ts: proposal,
                durable: false,
                arrival_delta_us,
            },
        );
    }

    /// Refuses a dispatch for good: the refusal is stored as the transaction's answer, so a
    /// retry still on its way (or sent after a lost refusal) gets the same answer instead of
    /// being admitted after the client was told it never would be.
    fn reject(
        &mut self,
        id: TxnId,
        reason: String,
        arrival_delta_us: i64,
        out: &mut Vec<LeaderOutput>,
    ) {
        self.stats.rejected += 1;
        let outcome = Err(TxnError::Rejected(reason));
        let answer = Answer {
            ts: 0,
            outcome: outcome.clone(),
            arrival_delta_us,
        };
        self.clients
            .entry(id.client)
            .or_default()
            .answers
            .insert(id.seq, answer);
        self.reply_now(id, 0, outcome, arrival_delta_us, out);
    }

    /// Checks a dispatch before admission; the error text goes to the client.
    fn validate(&self, txn: &Txn) -> Result<(), String> {
        let shard = self.config.shard;
        let Some(keys) = txn.piece(shard) else {
            return Err(format!("shard {shard} is not a participant"));
        };
        if keys.is_empty() {
            return Err(format!("empty key set on shard {shard}"));
        }
        if !self.registry.contains(&txn.procedure) {
            return Err(format!("unknown procedure '{}'", txn.procedure));
        }
        if txn.is_cross_shard() {
            return Err("cross-shard transactions are not supported by this leader yet".into());
        }
        if self.pending.len() >= self.config.max_pending {
            return Err(format!(
                "shard {shard} has {} transactions pending",
                self.pending.len()
            ));
        }
        Ok(())
    }

    /// Applies committed log records, renews the floor, releases and executes what is ready,
    /// and sends the answers the watermark now covers.
    fn pump(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        self.renew_floor(now);
        self.apply_committed();
        let mut released = Vec::new();
        let ignore_conflicts = self.config.mutations.release_ignores_conflicts;
        self.queue.release(now, &mut released, ignore_conflicts);
        for id in released {
            self.execute(id);
        }
        self.advance_watermark(now, out);
    }

    fn renew_floor(&mut self, now: TimeUs) {
        let lookahead = self.config.floor_lookahead_us;
        if self.floor_proposed < now + lookahead / 2 {
            let ts = now + lookahead;
            if self.log.propose(LogRecord::Floor { ts }).is_ok() {
                self.floor_proposed = ts;
            }
        }
        self.apply_committed();
    }

    fn apply_committed(&mut self) {
        let mut entries = std::mem::take(&mut self.committed_buf);
        self.log.take_committed(&mut entries);
        for entry in entries.drain(..) {
            match entry.record {
                LogRecord::Prepare { txn, .. } => {
                    if let Some(p) = self.pending.get_mut(&txn.id) {
                        p.durable = true;
                        self.queue.mark_ready(txn.id);
                    }
                }
                LogRecord::Floor { ts } => self.floor_committed = self.floor_committed.max(ts),
                LogRecord::Decide { .. } | LogRecord::Abort { .. } => {
                    // Cross-shard records are produced only by the agreement layer.
                }
            }
        }
        self.committed_buf = entries;
    }

    fn execute(&mut self, id: TxnId) {
        let p = self
            .pending
            .remove(&id)
            .expect("released transactions are pending");
        debug_assert!(p.durable);
        let shard = self.config.shard;
        let keys = p.txn.piece(shard).expect("participant");
        let outcome = self
            .registry
            .execute(&p.txn.procedure, &p.txn.args, &mut self.store, keys, shard)
            .map_err(TxnError::from);
        self.floors.record_release(keys, p.ts);
        self.stats.executed += 1;
        let table = self.clients.entry(id.client).or_default();
        table.answers.insert(
            id.seq,
            Answer {
                ts: p.ts,
                outcome,
                arrival_delta_us: p.arrival_delta_us,
            },
        );
        self.unanswered.insert((p.ts, id));
    }

    fn advance_watermark(&mut self, now: TimeUs, out: &mut Vec<LeaderOutput>) {
        let below_pending = self.queue.min_ts().map_or(Timestamp::MAX, |ts| ts - 1);
        let w = now.min(below_pending).min(self.floor_committed);
        if w > self.watermark {
            self.watermark = w;
            self.floors.prune_at_or_below(w);
        }
        while let Some(&(ts, id)) = self.unanswered.first() {
            if ts > self.watermark {
                break;
            }
            self.unanswered.pop_first();
            let Some(answer) = self
                .clients
                .get(&id.client)
                .and_then(|t| t.answers.get(&id.seq))
                .cloned()
            else {
                continue; // acknowledged meanwhile (cannot happen before an answer, but be safe)
            };
            self.reply_now(id, answer.ts, answer.outcome, answer.arrival_delta_us, out);
        }
    }

    fn reply_now(
        &self,
        id: TxnId,
        ts: Timestamp,
        outcome: Result<Vec<u8>, TxnError>,
        arrival_delta_us: i64,
        out: &mut Vec<LeaderOutput>,
    ) {
        out.push(LeaderOutput::ToClient {
            client: id.client,
            msg: ServerMsg::Reply(TxnReply {
                id,
                shard: self.config.shard,
                ts,
                outcome,
                watermark: self.watermark,
                arrival_delta_us,
            }),
        });
    }

    fn forget_acked(&mut self, client: ClientId, acked_below: u64) {
        let table = self.clients.entry(client).or_default();
        if acked_below <= table.acked_below {
            return;
        }
        table.acked_below = acked_below;
        // Keep only answers the client may still ask for; answers not yet sent stay.
        let keep = table.answers.split_off(&acked_below);
        let dropped = std::mem::replace(&mut table.answers, keep);
        for (seq, a) in dropped {
            if a.ts > self.watermark {
                table.answers.insert(seq, a); // not yet answered: cannot be acknowledged
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LocalLog;
    use crate::procedures::{micro_key, Micro, MicroOp};
    use crate::types::{KeySet, ShardPiece};

    fn leader() -> ShardLeader<LocalLog> {
        ShardLeader::new(
            LeaderConfig::new(0),
            LocalLog::default(),
            Store::new(),
            Registry::with_builtins(),
        )
    }

    fn txn(seq: u64, ts: Timestamp, ops: &[MicroOp]) -> Arc<Txn> {
        let reads = ops
            .iter()
            .filter(|o| o.write.is_none())
            .map(|o| micro_key(o.key))
            .collect();
        let writes = ops
            .iter()
            .filter(|o| o.write.is_some())
            .map(|o| micro_key(o.key))
            .collect();
        Arc::new(Txn {
            id: TxnId { client: 9, seq },
            procedure: Micro::NAME.into(),
            args: postcard::to_stdvec(ops).unwrap(),
            pieces: vec![ShardPiece {
                shard: 0,
                keys: KeySet::new(reads, writes),
            }],
            ts,
        })
    }

    fn dispatch(l: &mut ShardLeader<LocalLog>, now: TimeUs, t: &Arc<Txn>) -> Vec<LeaderOutput> {
        let mut out = Vec::new();
        l.on_client(
            now,
            9,
            ClientMsg::Dispatch {
                txn: t.clone(),
                sent_us: now - 1,
                acked_below: 1,
            },
            &mut out,
        );
        out
    }

    fn replies(out: &[LeaderOutput]) -> Vec<TxnReply> {
        out.iter()
            .filter_map(|o| match o {
                LeaderOutput::ToClient {
                    msg: ServerMsg::Reply(r),
                    ..
                } => Some(r.clone()),
                LeaderOutput::ToClient { .. } => None,
            })
            .collect()
    }

    fn tick(l: &mut ShardLeader<LocalLog>, now: TimeUs) -> Vec<TxnReply> {
        let mut out = Vec::new();
        l.tick(now, &mut out);
        replies(&out)
    }

    const W: Option<u64> = Some(1);
    const R: Option<u64> = None;

    #[test]
    fn holds_until_the_timestamp_then_answers_exactly_once() {
        let mut l = leader();
        let t = txn(1, 1_000, &[MicroOp { key: 1, write: W }]);
        assert!(replies(&dispatch(&mut l, 100, &t)).is_empty());
        assert!(
            tick(&mut l, 999).is_empty(),
            "held until the clock reaches ts"
        );
        assert!(l.watermark() < 1_000);
        let r = tick(&mut l, 1_000);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].id.seq, r[0].ts), (1, 1_000));
        assert!(
            r[0].watermark >= 1_000,
            "answered only once the watermark passed"
        );
        assert_eq!(r[0].arrival_delta_us, 1);
        assert!(tick(&mut l, 2_000).is_empty(), "never answered twice");
        // A retry gets the stored answer, not a second execution.
        let again = replies(&dispatch(&mut l, 2_100, &t));
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].ts, &again[0].outcome), (1_000, &r[0].outcome));
        assert_eq!(l.stats().executed, 1);
        assert_eq!(l.stats().duplicates, 1);
    }

    #[test]
    fn late_arrival_is_moved_up_to_the_clock() {
        let mut l = leader();
        let t = txn(1, 50, &[MicroOp { key: 1, write: W }]);
        // Its proposal is the clock, which has already come: executed and answered at once.
        let r = replies(&dispatch(&mut l, 500, &t));
        assert_eq!(r[0].ts, 500);
        assert_eq!(l.stats().bumped, 1);
    }

    #[test]
    fn reads_see_writes_in_timestamp_order_not_arrival_order() {
        let mut l = leader();
        // The read arrives first but has the later timestamp; the write arrives second.
        let read = txn(1, 2_000, &[MicroOp { key: 7, write: R }]);
        let write = txn(
            2,
            1_500,
            &[MicroOp {
                key: 7,
                write: Some(42),
            }],
        );
        dispatch(&mut l, 100, &read);
        dispatch(&mut l, 200, &write);
        let r = tick(&mut l, 5_000);
        assert_eq!(r.iter().map(|r| r.id.seq).collect::<Vec<_>>(), vec![2, 1]);
        let out: crate::procedures::MicroOutput =
            postcard::from_bytes(r[1].outcome.as_ref().unwrap()).unwrap();
        assert_eq!(out, vec![(7, Some(42))]);
    }

    #[test]
    fn a_write_after_a_released_read_is_bumped_above_it() {
        let mut l = leader();
        dispatch(&mut l, 100, &txn(1, 1_000, &[MicroOp { key: 3, write: R }]));
        tick(&mut l, 1_000); // read released at 1000
                             // A write stamped below the released read must be ordered after it.
        let late_write = txn(2, 900, &[MicroOp { key: 3, write: W }]);
        dispatch(&mut l, 950, &late_write);
        let r = tick(&mut l, 5_000);
        assert!(
            r[0].ts > 1_000,
            "write ordered at {} after a read released at 1000",
            r[0].ts
        );
    }

    #[test]
    fn watermark_never_passes_a_pending_transaction() {
        let mut l = leader();
        dispatch(
            &mut l,
            100,
            &txn(1, 10_000, &[MicroOp { key: 1, write: W }]),
        );
        dispatch(&mut l, 100, &txn(2, 3_000, &[MicroOp { key: 2, write: W }]));
        assert!(tick(&mut l, 2_000).is_empty());
        assert!(l.watermark() < 2_001);
        let r = tick(&mut l, 4_000);
        assert_eq!(r.len(), 1);
        assert!(l.watermark() >= 3_000 && l.watermark() < 10_000);
        // A new transaction stamped below the watermark is bumped above it.
        dispatch(&mut l, 4_000, &txn(3, 100, &[MicroOp { key: 2, write: W }]));
        let r = tick(&mut l, 20_000);
        assert_eq!(r.len(), 2);
        assert!(r.iter().find(|r| r.id.seq == 3).unwrap().ts > 3_000);
    }

    #[test]
    fn unknown_procedure_and_foreign_shard_are_rejected_at_once() {
        let mut l = leader();
        let mut t = (*txn(1, 100, &[MicroOp { key: 1, write: W }])).clone();
        t.procedure = "nope".into();
        let r = replies(&dispatch(&mut l, 10, &Arc::new(t.clone())));
        assert!(
            matches!(&r[0].outcome, Err(TxnError::Rejected(why)) if why.contains("unknown procedure 'nope'"))
        );
        t.procedure = Micro::NAME.into();
        t.pieces[0].shard = 4;
        t.id.seq = 2;
        let r = replies(&dispatch(&mut l, 10, &Arc::new(t)));
        assert!(
            matches!(&r[0].outcome, Err(TxnError::Rejected(why)) if why.contains("not a participant"))
        );
        assert_eq!(l.pending_len(), 0);
    }

    #[test]
    fn bad_arguments_are_an_ordered_error_answer() {
        let mut l = leader();
        let mut t = (*txn(1, 100, &[MicroOp { key: 1, write: W }])).clone();
        t.args = vec![0xff; 3];
        dispatch(&mut l, 10, &Arc::new(t));
        let r = tick(&mut l, 200);
        assert!(matches!(
            r[0].outcome,
            Err(TxnError::Proc(crate::procedure::ProcError::BadArgs(_)))
        ));
        assert!(l.store().is_empty());
    }

    #[test]
    fn acknowledged_answers_are_forgotten() {
        let mut l = leader();
        let t1 = txn(1, 100, &[MicroOp { key: 1, write: W }]);
        dispatch(&mut l, 10, &t1);
        tick(&mut l, 200);
        let mut out = Vec::new();
        let t2 = txn(2, 300, &[MicroOp { key: 2, write: W }]);
        l.on_client(
            250,
            9,
            ClientMsg::Dispatch {
                txn: t2,
                sent_us: 249,
                acked_below: 2,
            },
            &mut out,
        );
        let r = replies(&dispatch(&mut l, 260, &t1));
        assert_eq!(r[0].outcome, Err(TxnError::Forgotten));
    }

    #[test]
    fn ping_is_answered_with_the_arrival_delta() {
        let mut l = leader();
        let mut out = Vec::new();
        l.on_client(1_000, 9, ClientMsg::Ping { sent_us: 400 }, &mut out);
        assert!(matches!(
            out.as_slice(),
            [LeaderOutput::ToClient {
                client: 9,
                msg: ServerMsg::Pong {
                    shard: 0,
                    arrival_delta_us: 600,
                    ..
                }
            }]
        ));
    }

    #[test]
    fn idle_watermark_follows_the_clock() {
        let mut l = leader();
        tick(&mut l, 5_000);
        assert_eq!(l.watermark(), 5_000);
        tick(&mut l, 9_000);
        assert_eq!(l.watermark(), 9_000);
    }
}
