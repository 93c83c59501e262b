//! Read-only transactions at a snapshot, the client's half (DESIGN.md rule 23). A
//! transaction whose pieces declare no writes, on a cluster with the read-only path on, is
//! read at `ts = max(the highest timestamp this client has observed, now +
//! max_clock_offset_us)` from one replica of each participant, the nearest by measured delay
//! ([`Nearest`]): no agreement, no hold queue, no log record. Its pieces all read at the same
//! `ts`, so together they are the state at `ts` on every shard.
//!
//! A refused piece (`Busy`, `TimedOut`, `TooFarAhead`, a snapshot older than the replica
//! keeps) is sent to another replica, at the same snapshot, after the "not the leader" pause;
//! a silent one after the resend timeout. After `max_attempts` sends of one piece, or on a
//! refusal no replica will lift (`Malformed`, `NotSupported`), the transaction is reported
//! `Rejected` with the replica's reason: a read changes nothing, so it executed nowhere. The
//! table is bounded ([`READS_MAX`]): while full, the shell holds new submissions.
//!
//! The table is indexed so that no message costs a pass over every read in flight: by the
//! time each read is next due (what the shell's wake-up asks after every message), and the
//! served reads by snapshot (a watermark looks only at those it can pass).
//!
//! Once every piece is served, the read is answered under the commit rule of the read-write
//! path (rule 7): with `AllShards`, once every other shard's watermark passed `ts` too (a
//! participant's answer proves its own), so that whatever starts after the answer, anywhere,
//! is ordered above the snapshot (rule 23, (d)).

use luigi_txn::client_core::{ClientOutput, Completion, InvalidPieces, TxnOutcome};
use luigi_txn::msg::{ClientMsg, TxnError};
use luigi_txn::procedure::ProcError;
use luigi_txn::progress::{LogPos, Progress};
use luigi_txn::read_only::{ReadRefusal, SnapshotRead, SnapshotReadReply};
use luigi_txn::types::{KeySet, ShardId, ShardPiece, TimeUs, Timestamp, TxnId};
use luigi_txn::Map;
use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Unbounded};

use super::nearest::Nearest;
use super::Coordinator;

/// Read-only transactions in flight at most (the shell holds new ones while full).
pub const READS_MAX: usize = 1 << 16;

/// One participant's piece of a read-only transaction.
#[derive(Clone, Debug)]
struct ReadPiece {
    shard: ShardId,
    keys: KeySet,
    /// The replica it was last sent to (`None`: to the shell's choice).
    replica: Option<u32>,
    /// When it was last sent.
    sent_us: TimeUs,
    /// When it is sent again: the resend timeout after a send, the pause after a refusal.
    due_us: TimeUs,
    /// It was refused (a resend then does not count the replica as silent).
    refused: bool,
    /// Sends so far.
    sends: u32,
    /// Its result, once a replica served it.
    result: Option<Result<Vec<u8>, TxnError>>,
    /// The log position `result` rests on while not proven committed (a leader's read ahead
    /// of its commits, rule 23 (e)): the piece counts once progress reports prove it.
    position: Option<LogPos>,
}

impl ReadPiece {
    /// Served, on proven ground: it counts.
    fn settled(&self) -> bool {
        self.result.is_some() && self.position.is_none()
    }
}

/// A read-only transaction in flight.
#[derive(Clone, Debug)]
pub(super) struct ReadFlight {
    procedure: String,
    args: Vec<u8>,
    ts: Timestamp,
    submitted_us: TimeUs,
    pieces: Vec<ReadPiece>,
    /// Its key in [`Reads::due`]: its earliest due unserved piece, as last indexed.
    indexed_due: Option<TimeUs>,
}

/// The read-only transactions in flight and where their pieces go.
#[derive(Clone, Debug, Default)]
pub(super) struct Reads {
    flights: Map<TxnId, ReadFlight>,
    /// Every flight with an unserved piece, by when that piece is next due.
    pub(super) due: BTreeSet<(TimeUs, TxnId)>,
    /// Served on every participant, waiting for the other shards' watermarks, by snapshot.
    awaiting: BTreeSet<(Timestamp, TxnId)>,
    /// Every piece served on a position not proven yet, by shard and position.
    unproven: BTreeSet<(ShardId, LogPos, TxnId)>,
    pub(super) nearest: Nearest,
    /// The highest timestamp this client has observed: its answers' and its snapshots'.
    pub(super) observed_ts: Timestamp,
}

impl Reads {
    /// No read in flight; distances to shards of `group_sizes[s]` replicas.
    pub(super) fn new(group_sizes: &[u32]) -> Self {
        Reads {
            flights: Map::default(),
            due: BTreeSet::new(),
            awaiting: BTreeSet::new(),
            unproven: BTreeSet::new(),
            nearest: Nearest::new(group_sizes),
            observed_ts: 0,
        }
    }

    /// Puts `flight` in the table, indexed by when it is next due and by the positions its
    /// pieces wait on.
    fn put(&mut self, id: TxnId, mut flight: ReadFlight) {
        flight.indexed_due = flight.next_due();
        if let Some(due) = flight.indexed_due {
            self.due.insert((due, id));
        }
        for (shard, pos) in flight.unproven() {
            self.unproven.insert((shard, pos, id));
        }
        self.flights.insert(id, flight);
    }

    /// Takes read `id` out of the table and its due and position indexes (not out of
    /// `awaiting`).
    fn take(&mut self, id: TxnId) -> Option<ReadFlight> {
        let flight = self.flights.remove(&id)?;
        if let Some(due) = flight.indexed_due {
            self.due.remove(&(due, id));
        }
        for (shard, pos) in flight.unproven() {
            self.unproven.remove(&(shard, pos, id));
        }
        Some(flight)
    }

    /// The reads with a piece on a position `progress` now proves. Positions of one term are
    /// proven in index order, so the scan passes over the rest of a term at its first
    /// unproven one.
    fn proven_by(&self, progress: &Progress, trust_unproven: bool) -> Vec<TxnId> {
        let mut ids = Vec::new();
        let mut next = self.unproven.first().copied();
        while let Some((shard, pos, id)) = next {
            if trust_unproven || progress.proven(shard, pos) {
                ids.push(id);
                next = self.unproven.range((Excluded((shard, pos, id)), Unbounded)).next().copied();
                continue;
            }
            let first = TxnId { client: 0, seq: 0 };
            let from = match (pos.term.checked_add(1), shard.checked_add(1)) {
                (Some(term), _) => (shard, LogPos { term, index: 0 }, first),
                (None, Some(shard)) => (shard, LogPos::default(), first),
                (None, None) => break,
            };
            next = self.unproven.range(from..).next().copied();
        }
        ids
    }

    /// The reads with a piece due at or before `now`.
    fn due_by(&self, now: TimeUs) -> Vec<TxnId> {
        self.due.iter().take_while(|(due, _)| *due <= now).map(|(_, id)| *id).collect()
    }

    /// Read-only transactions in flight.
    pub(super) fn len(&self) -> usize {
        self.flights.len()
    }

    /// Nothing in flight.
    pub(super) fn is_empty(&self) -> bool {
        self.flights.is_empty()
    }

    /// The indexes match the table: every read with an unserved piece is indexed by when its
    /// earliest one is due, and every read served on all participants waits for the
    /// watermarks under its snapshot (the simulator checks it after each event).
    pub(super) fn check_invariants(&self) -> Result<(), String> {
        for (id, flight) in &self.flights {
            let due = flight.next_due();
            if flight.indexed_due != due || due.is_some_and(|due| !self.due.contains(&(due, *id))) {
                return Err(format!("read {id:?} is due at {due:?} but indexed at {:?}", flight.indexed_due));
            }
            for (shard, pos) in flight.unproven() {
                if !self.unproven.contains(&(shard, pos, *id)) {
                    return Err(format!("read {id:?}'s piece on shard {shard} waits on {pos:?}, unindexed"));
                }
            }
            let awaiting = self.awaiting.contains(&(flight.ts, *id));
            if due.is_none() != awaiting {
                return Err(format!(
                    "read {id:?} served everywhere: {}, awaiting watermarks: {awaiting}",
                    due.is_none()
                ));
            }
        }
        let pieces_unproven: usize = self.flights.values().map(|f| f.unproven().count()).sum();
        if pieces_unproven != self.unproven.len() {
            return Err(format!("{pieces_unproven} pieces wait on positions, {} indexed", self.unproven.len()));
        }
        if self.due.len() + self.awaiting.len() != self.flights.len() {
            let (due, awaiting, reads) = (self.due.len(), self.awaiting.len(), self.flights.len());
            return Err(format!("{due} reads due and {awaiting} awaiting watermarks, but {reads} in flight"));
        }
        Ok(())
    }

    /// The earliest time a piece is due to be sent again.
    pub(super) fn next_due(&self) -> Option<TimeUs> {
        self.due.first().map(|(due, _)| *due)
    }
}

/// `pieces` declare no writes: a read-only transaction.
pub fn reads_only(pieces: &[ShardPiece]) -> bool {
    pieces.iter().all(|p| p.keys.writes.is_empty())
}

/// What to do with a piece after its replica's answer.
enum Next {
    /// Served: the procedure's result (or its error).
    Done(Result<Vec<u8>, TxnError>),
    /// Ask another replica, after the pause.
    Elsewhere,
    /// No replica will serve it: report the transaction rejected.
    Fail(String),
}

/// What `outcome` means for the piece.
fn next_of(outcome: Result<Result<Vec<u8>, ProcError>, ReadRefusal>) -> Next {
    match outcome {
        Ok(Ok(value)) => Next::Done(Ok(value)),
        // Another replica (a follower that has not pruned as far) may still hold it.
        Ok(Err(ProcError::SnapshotTooOld { .. })) => Next::Elsewhere,
        Ok(Err(e)) => Next::Done(Err(TxnError::Proc(e))),
        Err(ReadRefusal::Busy | ReadRefusal::TimedOut { .. } | ReadRefusal::TooFarAhead { .. }) => Next::Elsewhere,
        Err(why @ (ReadRefusal::Malformed(_) | ReadRefusal::NotSupported(_))) => Next::Fail(why.to_string()),
    }
}

impl Coordinator {
    /// Starts a read-only transaction calling `procedure(args)` over `pieces` (no writes
    /// declared) at a snapshot (rule 23); refuses malformed pieces without sending anything.
    pub fn submit_read_only(
        &mut self,
        now: TimeUs,
        procedure: &str,
        args: Vec<u8>,
        mut pieces: Vec<ShardPiece>,
        out: &mut Vec<ClientOutput>,
    ) -> Result<TxnId, InvalidPieces> {
        if !reads_only(&pieces) {
            return Err(InvalidPieces("a read-only transaction declares writes".into()));
        }
        let id = self.flights.issue(&mut pieces)?;
        self.stats.read_only += 1;
        let ts = self.snapshot_ts(now);
        self.reads.observed_ts = ts;
        let to_piece = |p: ShardPiece| ReadPiece {
            shard: p.shard,
            keys: p.keys,
            replica: None,
            sent_us: now,
            due_us: now,
            refused: false,
            sends: 0,
            result: None,
            position: None,
        };
        let pieces = pieces.into_iter().map(to_piece).collect();
        if self.flights.is_empty() && self.reads.is_empty() {
            // Watermarks must come while it waits for them (rule 7's keepalive).
            self.keepalive_at_us = now.saturating_add(self.config.keepalive_us);
        }
        let mut flight =
            ReadFlight { procedure: procedure.to_string(), args, ts, submitted_us: now, pieces, indexed_due: None };
        for slot in 0..flight.pieces.len() {
            self.send_piece(now, id, &mut flight, slot, out);
        }
        self.reads.put(id, flight);
        Ok(id)
    }

    /// The snapshot a read-only transaction submitted at `now` reads at: no lower than
    /// anything this client observed, and at or above every timestamp answered anywhere
    /// before `now` under the clock bound (rule 23's argument).
    pub fn snapshot_ts(&self, now: TimeUs) -> Timestamp {
        let ahead = now.saturating_add(self.config.max_clock_offset_us);
        ahead.max(self.reads.observed_ts).max(1)
    }

    /// Sends piece `slot` of read `id` to the nearest replica other than the one it was last
    /// sent to, and sets when it is due again.
    fn send_piece(
        &mut self,
        now: TimeUs,
        id: TxnId,
        flight: &mut ReadFlight,
        slot: usize,
        out: &mut Vec<ClientOutput>,
    ) {
        let piece = &mut flight.pieces[slot];
        let replica = self.reads.nearest.pick(piece.shard, piece.replica.filter(|_| piece.sends > 0));
        let read = SnapshotRead {
            id,
            shard: piece.shard,
            procedure: flight.procedure.clone(),
            args: flight.args.clone(),
            keys: piece.keys.clone(),
            ts: flight.ts,
            sent_us: now,
        };
        let (shard, msg) = (piece.shard, ClientMsg::SnapshotRead(read));
        out.push(match replica {
            Some(replica) => ClientOutput::SendTo { shard, replica, msg },
            None => ClientOutput::Send { shard, msg },
        });
        piece.replica = replica;
        piece.sends += 1;
        piece.sent_us = now;
        piece.due_us = now.saturating_add(self.config.retry_timeout_us);
        piece.refused = false;
    }

    /// A replica's answer to a snapshot read.
    pub(super) fn on_snapshot_read(&mut self, now: TimeUs, reply: SnapshotReadReply, out: &mut Vec<ClientOutput>) {
        let id = reply.id;
        let Some(mut flight) = self.reads.take(id) else { return };
        let failed = self.note_piece_answer(now, &mut flight, reply);
        self.reads.put(id, flight);
        self.after_answer(id, failed, out);
    }

    /// Read `id` after news of its pieces: reported, waiting for the watermarks, or still
    /// waiting for a piece.
    fn after_answer(&mut self, id: TxnId, failed: Option<String>, out: &mut Vec<ClientOutput>) {
        let flight = &self.reads.flights[&id];
        let ts = flight.ts;
        let served = flight.pieces.iter().all(ReadPiece::settled);
        let covered = served && self.read_covered(ts, &flight.pieces);
        match failed {
            Some(why) => self.finish_read(id, Some(why), out),
            None if covered => self.finish_read(id, None, out),
            None if served => {
                self.reads.awaiting.insert((ts, id));
            }
            None => {}
        }
    }

    /// Notes a replica's answer for its piece of `flight`: `Some(why)` when no replica will
    /// serve the piece.
    fn note_piece_answer(&mut self, now: TimeUs, flight: &mut ReadFlight, reply: SnapshotReadReply) -> Option<String> {
        let piece = flight.pieces.iter_mut().find(|p| p.shard == reply.shard)?;
        if piece.settled() || reply.ts != flight.ts {
            return None; // a late answer to an earlier send, or not this read's
        }
        let current = piece.replica.is_none_or(|r| r == reply.replica);
        if current {
            // The whole round trip, the wait there included: a leader serves ahead of its
            // followers (rule 23 (e)), so the nearest replica is not always the soonest.
            self.reads.nearest.sample(reply.shard, reply.replica, now.saturating_sub(piece.sent_us));
        }
        match next_of(reply.outcome) {
            Next::Done(result) => {
                // A newer answer replaces an unproven one (rule 14).
                let trust = self.config.mutations.count_unproven_reads;
                piece.position = reply.position.filter(|pos| !trust && !self.progress.proven(reply.shard, *pos));
                piece.result = Some(result);
            }
            // Only the replica asked last can send it elsewhere: an earlier one's refusal is
            // old news.
            Next::Elsewhere if current && !piece.refused => {
                piece.refused = true;
                piece.due_us = now.saturating_add(self.config.not_leader_retry_us);
            }
            Next::Elsewhere => {}
            Next::Fail(why) => return Some(why),
        }
        None
    }

    /// Counts the pieces whose positions the progress reports now prove, and answers the
    /// reads that completes.
    pub(super) fn prove_reads(&mut self, out: &mut Vec<ClientOutput>) {
        let trust = self.config.mutations.count_unproven_reads;
        for id in self.reads.proven_by(&self.progress, trust) {
            let Some(mut flight) = self.reads.take(id) else { continue }; // done with an earlier piece
            for p in &mut flight.pieces {
                if p.position.is_some_and(|pos| trust || self.progress.proven(p.shard, pos)) {
                    p.position = None;
                }
            }
            self.reads.put(id, flight);
            self.after_answer(id, None, out);
        }
    }

    /// Answers the served reads whose snapshot the commit rule's shards have all passed.
    /// Only snapshots some shard has passed can pass (a read waits here only on a shard it
    /// does not take part in), so the scan stops at the first above them.
    pub(super) fn complete_reads(&mut self, out: &mut Vec<ClientOutput>) {
        let reach = self.commit_rule_reach();
        let within = self.reads.awaiting.iter().take_while(|(ts, _)| *ts <= reach);
        let covered = within.filter(|(ts, id)| self.read_covered(*ts, &self.reads.flights[id].pieces));
        let ready: Vec<TxnId> = covered.map(|(_, id)| *id).collect();
        for id in ready {
            self.finish_read(id, None, out);
        }
    }

    /// The commit rule holds for a read at `ts` over `pieces`: a participant passed `ts` by
    /// serving it (its safe time, at most its leader's watermark, reached `ts`).
    fn read_covered(&self, ts: Timestamp, pieces: &[ReadPiece]) -> bool {
        let participants = pieces.iter().map(|p| p.shard);
        self.commit_rule_passed(ts, participants.clone(), |s| participants.clone().any(|p| p == s))
    }

    /// Sends again the pieces that are due: silent past the resend timeout, or refused.
    pub(super) fn tick_reads(&mut self, now: TimeUs, out: &mut Vec<ClientOutput>) {
        for id in self.reads.due_by(now) {
            let mut flight = self.reads.take(id).expect("indexed reads are in the table");
            let mut failed = None;
            for slot in 0..flight.pieces.len() {
                let piece = &mut flight.pieces[slot];
                if piece.settled() || piece.due_us > now {
                    continue;
                }
                // Served, but on a position not proven in time (its leader deposed, say):
                // asked again elsewhere, at the same snapshot.
                piece.result = None;
                piece.position = None;
                if let (false, Some(replica)) = (piece.refused, piece.replica) {
                    self.reads.nearest.silent(piece.shard, replica, self.config.retry_timeout_us);
                }
                if piece.sends >= self.config.max_attempts {
                    failed = Some(format!("no replica of shard {} served the snapshot read", piece.shard));
                    break;
                }
                self.send_piece(now, id, &mut flight, slot, out);
            }
            self.reads.put(id, flight);
            if failed.is_some() {
                self.finish_read(id, failed, out);
            }
        }
    }

    /// The shell's link to `replica` of `shard` changed; pieces waiting there go elsewhere
    /// at the next tick when it went down.
    pub fn replica_link(&mut self, now: TimeUs, shard: ShardId, replica: u32, up: bool) {
        self.reads.nearest.link(shard, replica, up);
        if up {
            return;
        }
        let there = |p: &ReadPiece| p.shard == shard && p.replica == Some(replica) && p.result.is_none();
        let hit = self.reads.flights.iter().filter(|(_, f)| f.pieces.iter().any(there));
        let ids: Vec<TxnId> = hit.map(|(id, _)| *id).collect();
        for id in ids {
            let mut flight = self.reads.take(id).expect("listed above");
            for p in flight.pieces.iter_mut().filter(|p| there(p)) {
                p.due_us = p.due_us.min(now);
            }
            self.reads.put(id, flight);
        }
    }

    /// Reports read `id`: its results, or rejected for `failed`.
    fn finish_read(&mut self, id: TxnId, failed: Option<String>, out: &mut Vec<ClientOutput>) {
        let flight = self.reads.take(id).expect("finishing a read in flight");
        self.reads.awaiting.remove(&(flight.ts, id));
        let outcome = match failed {
            Some(why) => TxnOutcome::Rejected(format!("snapshot read at {}: {why}", flight.ts)),
            None => {
                let results = flight.pieces.iter().map(|p| (p.shard, p.result.clone().expect("all served")));
                TxnOutcome::Ordered { ts: flight.ts, results: results.collect() }
            }
        };
        let attempts = flight.pieces.iter().map(|p| p.sends).max().unwrap_or(1);
        out.push(ClientOutput::Done(Completion {
            id,
            submitted_us: flight.submitted_us,
            attempts,
            resends: 0,
            rounds: 0,
            fast: false,
            asked_fast: false,
            read_only: true,
            outcome,
        }));
    }
}

impl ReadFlight {
    /// When its earliest unserved piece is due (`None`: every piece is served).
    fn next_due(&self) -> Option<TimeUs> {
        self.pieces.iter().filter(|p| !p.settled()).map(|p| p.due_us).min()
    }

    /// The positions its pieces wait on, by shard.
    fn unproven(&self) -> impl Iterator<Item = (ShardId, LogPos)> + '_ {
        self.pieces.iter().filter_map(|p| p.position.map(|pos| (p.shard, pos)))
    }
}
