//! Luigi's fast path on a replica (DESIGN.md, the fast path): a follower's accepts, the
//! accept log's records, and a new leader's recovery round (R1-R3) of what a majority's
//! accepts say may have been fast-committed. The node reaches it through the optional
//! [`FastPathReplica`] extension; the role machine through [`LuigiProtocol`]'s hooks.

use std::sync::Arc;

use crate::fast::{to_recover, AcceptRecord, Accepted, AcceptedTxn, Acceptor, NotAccepted};
use crate::leader::admissible::Admission;
use crate::leader::answers::Known;
use crate::leader::follower::Follower;
use crate::leader::{LeaderConfig, LeaderOutput};
use crate::log::{LogEntry, LogRecord, ReplicatedLog};
use crate::msg::{PeerBatch, PeerItem};
use luigi_txn::msg::ServerMsg;
use luigi_txn::types::{ClientId, ShardId, TimeUs, Txn, TxnId};

use luigi_raft::{RaftError, RaftLog};
#[cfg(doc)]
use luigi_replica::FastPathReplica;
use luigi_replica::{FastAcceptCounts, FastPathProtocol};

use super::{LuigiProtocol, Replica};

impl FastPathProtocol for LuigiProtocol {
    fn accept_counts(machine: &Replica) -> FastAcceptCounts {
        machine.protocol().accept_counts
    }

    /// The accept records found on disk at restart: undecided again until the replayed log
    /// decides them (a replica without the fast path ignores them: they are from a run that
    /// had it, and a cluster never turns it off with transactions in flight).
    ///
    /// # Errors
    /// A record that does not decode.
    fn restore_accepts(machine: &mut Replica, records: &[(u64, Vec<u8>)]) -> Result<(), String> {
        let protocol = machine.protocol_mut();
        let shard = protocol.config.shard;
        let Some(acceptor) = protocol.acceptor.as_mut() else { return Ok(()) };
        for (n, bytes) in records {
            let r = AcceptRecord::decode(bytes).map_err(|e| format!("accept record {n}: {e}"))?;
            if let Some(keys) = r.txn.piece(shard) {
                acceptor.restore(&r, keys);
            }
        }
        Ok(())
    }

    /// The term whose fast-path recovery round waits for other replicas' accepts, if any
    /// (see [`FastPathReplica::accepts_wanted`]).
    fn accepts_wanted(machine: &Replica, log: &RaftLog) -> Option<u64> {
        let protocol = machine.protocol();
        protocol.acceptor.as_ref()?;
        // Asked from the candidacy on, beside the vote requests: an answer does not depend on
        // this replica's log, and counts only if it wins this term (the other replica
        // answers once its own term has reached it, as granting the vote makes it).
        machine.follower()?;
        if !running_for_or_leading(log) {
            return None;
        }
        let heard = protocol.recovery.as_ref().filter(|r| r.term == log.term()).map_or(0, |r| r.others.len());
        (heard + 1 < majority(log)).then(|| log.term())
    }

    /// `replica`'s undecided accepts, asked about in `term` (ignored unless this replica runs
    /// for or leads `term` and has not proposed its recovery yet).
    ///
    /// # Errors
    /// An undecodable record: the whole answer is dropped (the question is asked again).
    fn accepts_from(
        machine: &mut Replica,
        log: &RaftLog,
        replica: u32,
        term: u64,
        records: &[Vec<u8>],
    ) -> Result<(), String> {
        if machine.follower().is_none() {
            return Ok(());
        }
        if !running_for_or_leading(log) || log.term() != term {
            return Ok(());
        }
        let rec = FastRecovery::of_term(&mut machine.protocol_mut().recovery, term);
        if rec.proposed.is_some() {
            return Ok(());
        }
        let set = records
            .iter()
            .map(|b| AcceptRecord::decode(b).map(|r| (r.txn, r.ts)))
            .collect::<Result<Vec<AcceptedTxn>, _>>()
            .map_err(|e| format!("undecodable accepts from replica {replica}: {e}"))?;
        rec.others.insert(replica, set);
        Ok(())
    }

    fn accepts_of(machine: &Replica, log: &RaftLog, term: u64) -> Option<Vec<Vec<u8>>> {
        Some(accepts_of(machine, log, term)?.iter().map(AcceptRecord::encode).collect())
    }

    fn accepts_live(machine: &Replica) -> Vec<Vec<u8>> {
        live_accepts(machine).iter().map(AcceptRecord::encode).collect()
    }
}

/// What `machine` answers a new leader's recovery round of `term`: its undecided
/// accepts and, while its leader state is still in place (its log may have moved to the
/// new term already), that leader's votes not known committed. `None` while its own term
/// is older than `term`: only from that term on has it made every accept and vote of the
/// earlier terms it ever will (its later accepts carry the new term, and a leader state
/// of an older term no longer votes), so the answer cannot miss one that a fast commit
/// of an earlier term counted.
fn accepts_of(machine: &Replica, log: &RaftLog, term: u64) -> Option<Vec<AcceptRecord>> {
    if log.term() < term && !machine.protocol().config.mutations.answer_accepts_in_old_term {
        return None;
    }
    Some(live_accepts(machine))
}

/// Every accept record `machine` still needs: its undecided accepts and its leader
/// state's votes not known committed.
fn live_accepts(machine: &Replica) -> Vec<AcceptRecord> {
    let mut records = machine.protocol().acceptor.as_ref().map(Acceptor::undecided_records).unwrap_or_default();
    if let Some(l) = machine.leader() {
        records.extend(l.fast_votes());
    }
    records
}

/// A new leader's fast-path recovery round (DESIGN.md, the fast path, R1-R3).
#[derive(Debug)]
pub(super) struct FastRecovery {
    term: u64,
    /// The undecided accepts heard from the other replicas (its own are read when it has
    /// heard enough).
    others: std::collections::BTreeMap<u32, Vec<AcceptedTxn>>,
    /// Recovered and proposed: the index the new leader's log must commit before it serves,
    /// once every one is.
    pub(super) proposed: Option<u64>,
    /// Those proposed so far (a full log refuses some: the rest go at a later turn), and the
    /// highest index they took.
    done: std::collections::BTreeSet<TxnId>,
    last_index: u64,
}

impl FastRecovery {
    /// The round of `term` (a new one if `slot` holds another term's or none).
    pub(super) fn of_term(slot: &mut Option<FastRecovery>, term: u64) -> &mut FastRecovery {
        if slot.as_ref().is_none_or(|r| r.term != term) {
            *slot = Some(FastRecovery {
                term,
                others: Default::default(),
                proposed: None,
                done: Default::default(),
                last_index: 0,
            });
        }
        slot.as_mut().expect("just set")
    }
}

/// Replicas of `log`'s group that make a majority.
fn majority(log: &RaftLog) -> usize {
    log.voters().len() / 2 + 1
}

/// Whether `log` runs for or holds leadership in its term (a candidate or the leader).
fn running_for_or_leading(log: &RaftLog) -> bool {
    matches!(log.role(), luigi_raft::Role::Candidate | luigi_raft::Role::Leader)
}

/// Whether a replica elected in `log.term()` (with everything handed out applied to `f`)
/// has recovered what a majority's accepts say may have been fast-committed: with the fast
/// path, it reads a majority's undecided accepts and prepares what `to_recover` returns
/// before anything else it admits; it serves with those records as its log's tail, not
/// waiting for them to commit (one round trip more after the no-op, since raft-rs probes a
/// follower until it answers the no-op's append). Without the fast path, at once. It
/// need not wait for its no-op: its whole log (the state applied and the records after it,
/// committed or not) is what it will commit, and R1-R3 read that.
///
/// # Errors
/// The log's tail does not decode (see [`RaftLog::records_after_handed_out`]).
pub(super) fn fast_recovered(
    acceptor: Option<&Acceptor>,
    recovery: &mut Option<FastRecovery>,
    f: &Follower,
    log: &mut RaftLog,
    admission: &Admission,
    skip_recovery: bool,
) -> Result<bool, RaftError> {
    let Some(acceptor) = acceptor else { return Ok(true) };
    let rec = FastRecovery::of_term(recovery, log.term());
    if rec.proposed.is_some() {
        return Ok(true);
    }
    if rec.others.len() + 1 < majority(log) {
        return Ok(false);
    }
    let own: Vec<AcceptedTxn> = acceptor.undecided_records().into_iter().map(|r| (r.txn, r.ts)).collect();
    let sets: Vec<Vec<AcceptedTxn>> = std::iter::once(own).chain(rec.others.values().cloned()).collect();
    let mut records = f.recovery_records();
    records.extend(log.records_after_handed_out()?.into_iter().map(|e| e.record));
    let mut recovered = to_recover(f.shard(), &sets, &records, |id| f.answers().known(id) != Known::Unknown);
    if skip_recovery {
        recovered.clear(); // the mutation: a broken rule the simulator must catch
    }
    // A malformed transaction was refused by every leader, so it never committed fast: an
    // accept of it (written by a replica that did not check, or by an older version) is
    // never prepared (rule 22). Its timestamp is not checked again: an accepted one passed
    // the horizon where it was accepted, and may have committed.
    recovered.retain(|(txn, _)| admission.check_malformed(txn).is_ok());
    for (txn, ts) in recovered {
        if rec.done.contains(&txn.id) {
            continue;
        }
        let id = txn.id;
        match log.propose(LogRecord::Prepare { txn, ts, arrival_delta_us: 0, acked_below: 0 }) {
            Ok(index) => {
                rec.done.insert(id);
                rec.last_index = rec.last_index.max(index);
            }
            Err(_) => return Ok(false), // a full backlog: the rest at a later turn
        }
    }
    // Every recovered PREPARE is in the log: the leader serves with them as its log's tail
    // (the answers wait for their positions, rule 14), keeping the accepts until they commit.
    rec.proposed = Some(rec.last_index);
    Ok(true)
}

/// An acceptor holding nothing, with the mutation of rule H the config may set.
pub(super) fn empty_acceptor(config: &LeaderConfig) -> Acceptor {
    Acceptor::new(config.mutations.fast_hashes_direct_predecessors)
}

/// A stepped-down leader's acceptor: its order table rebuilt from the committed records
/// `replayed`, and its own fast answers whose `PREPARE` is not known committed (`votes`)
/// undecided, like accepts, until its log decides them.
pub(super) fn acceptor_after_leading(config: &LeaderConfig, replayed: &[LogEntry], votes: &[AcceptRecord]) -> Acceptor {
    let shard = config.shard;
    let mut acceptor = empty_acceptor(config);
    for e in replayed {
        acceptor.on_committed(shard, &e.record);
    }
    for vote in votes {
        if let Some(keys) = vote.txn.piece(shard) {
            acceptor.restore(vote, keys);
        }
    }
    acceptor
}

/// A follower's answer to a fast-path dispatch of `txn` from `client` arriving at `now`,
/// from replica `me` of `shard` in `term`: a `FastAccept` once its record is durable (a
/// repeat goes out after the next sync), to the client and, for a cross-shard transaction,
/// to the other participants' leaders (DESIGN.md rule 17); or nothing when rule F0 refuses
/// it (the leader's answer takes rule 14's path).
pub(super) fn fast_accept(
    (acceptor, counts): (&mut Acceptor, &mut FastAcceptCounts),
    (shard, me, term): (ShardId, u32, u64),
    now: TimeUs,
    client: ClientId,
    txn: &Arc<Txn>,
    out: &mut Vec<LeaderOutput>,
) {
    let Some(keys) = txn.piece(shard) else { return };
    let refused = |count: &mut u64| *count += 1;
    let (accepted, record) = match acceptor.offer(now, txn, keys) {
        Ok(a) => {
            counts.accepted += 1;
            (a, Some(AcceptRecord { txn: txn.clone(), ts: txn.ts }.encode()))
        }
        Err(NotAccepted::Again(a)) => (a, None),
        Err(NotAccepted::Late) => return refused(&mut counts.late),
        Err(NotAccepted::Overtaken) => return refused(&mut counts.overtaken),
        Err(NotAccepted::Full) => return refused(&mut counts.full),
        Err(NotAccepted::Tangled) => return refused(&mut counts.tangled),
    };
    let Accepted { id, ts, order } = accepted;
    out.push(LeaderOutput::ToClientDurably {
        client,
        msg: ServerMsg::FastAccept { shard, replica: me, term, id, ts, order },
        record,
    });
    for other in txn.shards().filter(|s| *s != shard) {
        let batch =
            PeerBatch { from: shard, watermark: 0, items: vec![PeerItem::FastAccept { replica: me, term, id, ts }] };
        out.push(LeaderOutput::ToPeerDurably { shard: other, batch, records: Vec::new() });
    }
}
