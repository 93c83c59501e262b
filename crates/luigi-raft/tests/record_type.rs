//! The Raft log holds bytes and offers a typed view for any record type: a protocol with
//! records of its own (here a small prepare/commit/abort enum, as an OCC or 2PL baseline
//! would log) replicates them through a 3-replica group, each replica persisting through a
//! `DiskStorage` on a simulated file system, and every replica takes the same committed
//! records in the same order, also after a restart from its disk. Records taken as a type they
//! do not decode to are a fatal error of the log, not a panic.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use luigi_raft::disk::DiskStorage;
use luigi_raft::{RaftConfig, RaftError, RaftLog, RecoveredState};
use luigi_txn::log::{LogEntry, LogIndex, ReplicatedLog};
use luigi_wal::fs::{Fs, SimFs};
use luigi_wal::WalOptions;
use serde::{Deserialize, Serialize};

/// Another protocol's log records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Op {
    Prepare { txn: u64, writes: Vec<(String, u64)> },
    Commit { txn: u64 },
    Abort { txn: u64 },
}

/// The `n`-th record a test proposes.
fn op(n: u64) -> Op {
    match n % 3 {
        0 => Op::Prepare { txn: n, writes: vec![(format!("key-{n}"), n * 7)] },
        1 => Op::Commit { txn: n - 1 },
        _ => Op::Abort { txn: n },
    }
}

/// Proposes `ops` through any log of `Op`s (the seam such a protocol would be written against).
fn propose_all<L: ReplicatedLog<Op>>(log: &mut L, ops: &[Op]) -> Vec<LogIndex> {
    ops.iter().map(|o| log.propose(o.clone()).expect("accepted")).collect()
}

struct Replica {
    log: RaftLog,
    disk: DiskStorage,
    /// Every record taken since the (re)start, in order.
    taken: Vec<LogEntry<Op>>,
}

/// Three replicas on their own simulated file systems, messages delivered in order at once.
struct Group {
    fs: Vec<Arc<dyn Fs>>,
    replicas: Vec<Option<Replica>>,
    wire: VecDeque<(u64, Vec<u8>)>,
}

impl Group {
    fn new() -> Self {
        let fs: Vec<Arc<dyn Fs>> = (1..=3).map(|id| Arc::new(SimFs::new(id)) as Arc<dyn Fs>).collect();
        let mut g = Group { fs, replicas: Vec::new(), wire: VecDeque::new() };
        for id in 1..=3 {
            let r = g.open(id);
            g.replicas.push(Some(r));
        }
        g
    }

    fn open(&self, id: u64) -> Replica {
        let dir = PathBuf::from(format!("/r{id}"));
        let (disk, recovered): (DiskStorage, RecoveredState) =
            DiskStorage::open_with(Arc::clone(&self.fs[(id - 1) as usize]), &dir, WalOptions::default())
                .expect("open disk");
        let log = RaftLog::new(RaftConfig::new(id, vec![1, 2, 3], 9), Some(recovered)).expect("log");
        Replica { log, disk, taken: Vec::new() }
    }

    fn replica(&mut self, id: u64) -> &mut Replica {
        self.replicas[(id - 1) as usize].as_mut().expect("up")
    }

    /// Drains the readies of `id` in the documented order, then takes its committed records.
    fn process(&mut self, id: u64) {
        let Some(r) = self.replicas[(id - 1) as usize].as_mut() else { return };
        while let Some(rd) = r.log.ready().expect("ready") {
            self.wire.extend(rd.messages.iter().map(|m| (m.to, m.bytes.clone())));
            r.disk.persist(&rd).expect("persist");
            self.wire.extend(rd.persisted_messages.iter().map(|m| (m.to, m.bytes.clone())));
            r.log.advance(rd.number);
        }
        r.log.take_committed(&mut r.taken);
    }

    /// One tick everywhere, then every message delivered (including those it causes).
    fn round(&mut self) {
        for id in 1..=3 {
            if let Some(r) = self.replicas[(id - 1) as usize].as_mut() {
                r.log.tick();
            }
            self.process(id);
        }
        while let Some((to, bytes)) = self.wire.pop_front() {
            if let Some(r) = self.replicas[(to - 1) as usize].as_mut() {
                r.log.step_bytes(&bytes).expect("step");
                self.process(to);
            }
        }
    }

    fn run_until(&mut self, mut done: impl FnMut(&Group) -> bool) {
        for _ in 0..1_000 {
            if done(self) {
                return;
            }
            self.round();
        }
        panic!("not reached within 1000 rounds");
    }

    fn taken(&self, id: u64) -> &[LogEntry<Op>] {
        &self.replicas[(id - 1) as usize].as_ref().expect("up").taken
    }
}

#[test]
fn a_group_replicates_records_of_another_type_in_the_same_order_everywhere() {
    let mut g = Group::new();
    g.replica(1).log.campaign().expect("campaign");
    g.run_until(|g| g.replicas.iter().flatten().any(|r| r.log.is_leader() && r.log.has_committed_in_term()));
    let leader = (1..=3).find(|&id| g.replica(id).log.is_leader()).expect("a leader");

    // A follower refuses proposals, whatever the record type.
    let follower = if leader == 1 { 2 } else { 1 };
    assert_eq!(g.replica(follower).log.propose(op(0)), Err(luigi_txn::log::LogError::NotLeader));

    let ops: Vec<Op> = (0..30).map(op).collect();
    let mut indexes = Vec::new();
    for chunk in ops.chunks(7) {
        indexes.extend(propose_all(&mut g.replica(leader).log, chunk));
        g.process(leader);
        g.round();
    }
    g.run_until(|g| (1..=3).all(|id| g.taken(id).len() == ops.len()));

    let expected: Vec<LogEntry<Op>> =
        indexes.iter().zip(&ops).map(|(&index, record)| LogEntry { index, record: record.clone() }).collect();
    for id in 1..=3 {
        assert_eq!(g.taken(id), expected.as_slice(), "replica {id} took other records or another order");
    }
    // The replay decodes to the same records.
    let replay = g.replica(3).log.replay().expect("replay");
    assert_eq!(replay.records::<Op>().expect("records"), expected);
    let one_by_one: Result<Vec<_>, _> = replay.records_one_by_one::<Op>().collect();
    assert_eq!(one_by_one.expect("records one by one"), expected, "the same records, decoded as taken");

    // Restarted from its disk, a replica hands every committed record back again.
    g.replicas[2] = None;
    let restarted = g.open(3);
    g.replicas[2] = Some(restarted);
    g.run_until(|g| g.taken(3).len() == ops.len());
    assert_eq!(g.taken(3), expected.as_slice());
}

/// The node's log knows no record type: the bytes proposed are the record's postcard encoding,
/// handed back as they were, and a record taken as a type it does not decode to stops the
/// taking there (nothing after it is handed out), is reported by the log's every ready and by
/// `undecodable` as `BadEntry` naming its index, and panics nowhere.
#[test]
fn a_record_that_does_not_decode_is_a_fatal_error_not_a_panic() {
    let mut log = RaftLog::new(RaftConfig::new(1, vec![1], 9), None).expect("log");
    log.campaign().expect("campaign");
    let settle = |log: &mut RaftLog| {
        while let Some(rd) = log.ready().expect("ready") {
            log.advance(rd.number);
        }
    };
    settle(&mut log);
    let first = log.propose(op(0)).expect("proposed");
    let garbage = log.propose_bytes(vec![0xff; 3]).expect("proposed");
    let last = log.propose(op(1)).expect("proposed");
    // The bytes are postcard's, as the entries have always been on disk and on the wire.
    assert_eq!(log.entry(first).expect("held").data.to_vec(), postcard::to_stdvec(&op(0)).unwrap());
    settle(&mut log);
    let mut taken: Vec<LogEntry<Op>> = Vec::new();
    log.take_committed(&mut taken);
    assert_eq!(taken, vec![LogEntry { index: first, record: op(0) }], "taken up to the bad record");
    let fatal = |e: Option<RaftError>| matches!(e, Some(RaftError::BadEntry { index, .. }) if index == garbage);
    assert!(fatal(log.undecodable()), "{:?}", log.undecodable());
    assert!(fatal(log.ready().err()), "every ready reports it");
    log.take_committed(&mut taken);
    assert_eq!(taken.len(), 1, "nothing after it is handed out");
    assert!(last > garbage);
}
