//! Cluster harness: n `RaftLog`s driven by a seeded message scheduler (delays, drops,
//! partitions, isolated and crashed replicas), with the invariant checks the tests share.
//!
//! Every replica persists through a real `DiskStorage`: by default on its own seeded `SimFs`
//! (in memory, fsync on), where a crash is a power loss (`SimFs::crash`: only what was synced
//! is sure to survive) followed by a reopen; with [`Cluster::with_disk`] on the real file system
//! in a directory per replica, where a crash is a process crash.
//!
//! Time is in abstract units; every replica ticks every [`TICK`] units; a message sent at `t`
//! arrives at `t + delay`, the delay drawn uniformly from `Cluster::delay` (inclusive), so
//! messages between the same pair may be reordered. Every event (a delivery, a tick, a
//! proposal) is followed by draining that replica's readies in the documented order.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use luigi_raft::disk::DiskStorage;
use luigi_raft::eraftpb::MessageType;
use luigi_raft::{OutMessage, RaftConfig, RaftError, RaftLog, RecoveredState, Role, SnapshotData};
use luigi_txn::log::{LogEntry, LogError, LogIndex, ReplicatedLog};
use luigi_wal::fs::{Fs, RealFs, SimFs};
use luigi_wal::{Durability, WalOptions};

/// The tests' log record (the Raft log knows no protocol's records; this stands in for one,
/// encoding to as many bytes as Luigi's `LogRecord::Floor`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TestRecord {
    /// A record naming a number.
    Floor {
        /// The number.
        ts: u64,
    },
}

/// Time units per tick.
pub const TICK: u64 = 10;

/// SplitMix64 for the scheduler (the crate's own is private).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.next_u64() % 1000 < per_mille
    }
}

/// A replica and what its state machine applied.
pub struct Node {
    pub log: RaftLog,
    pub disk: DiskStorage,
    /// Every record applied since the (re)start, in order, including those restored from a
    /// snapshot: the replica's state machine.
    pub applied: Vec<(LogIndex, TestRecord)>,
    /// Index of the last commit check.
    pub checked_commit: LogIndex,
}

/// Something observable for the determinism test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Role { now: u64, id: u64, term: u64, role: Role },
    Commit { now: u64, id: u64, index: LogIndex },
}

pub fn encode_state(applied: &[(LogIndex, TestRecord)]) -> Vec<u8> {
    postcard::to_stdvec(applied).expect("state encodes")
}

pub fn decode_state(data: &[u8]) -> Vec<(LogIndex, TestRecord)> {
    postcard::from_bytes(data).expect("state decodes")
}

/// A message in flight: `(arrival time, sequence number, from, to, bytes)`.
type InFlight = (u64, u64, u64, u64, Vec<u8>);

pub struct Cluster {
    pub n: u64,
    pub now: u64,
    pub rng: Rng,
    pub configs: Vec<RaftConfig>,
    pub nodes: Vec<Option<Node>>,
    /// Replicas down (crashed, not restarted yet).
    pub crashed: BTreeSet<u64>,
    /// The file system of each replica (index `id - 1`).
    pub fs: Vec<Arc<dyn Fs>>,
    /// The same, when simulated: a crash is then a power loss of it.
    pub sim: Vec<Option<SimFs>>,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    /// Replicas cut off from everyone (they keep running).
    pub isolated: BTreeSet<u64>,
    /// If set, only replicas on the same side of this set talk to each other.
    pub partition: Option<BTreeSet<u64>>,
    pub drop_per_mille: u64,
    pub delay: (u64, u64),
    pub sent: u64,
    pub sent_by_type: BTreeMap<i32, u64>,
    pub delivered: u64,
    pub trace: Vec<Event>,
    /// The committed record sequence every replica must agree with (longest seen).
    pub reference: Vec<(LogIndex, TestRecord)>,
    /// Term and data of every committed index any replica reported.
    pub committed_at: HashMap<LogIndex, (u64, Vec<u8>)>,
    /// The directory of each replica (on its own file system).
    pub dirs: Vec<PathBuf>,
    pub wal_options: WalOptions,
    /// Crash replica `id` right after it wrote (without syncing) the next ready with entries;
    /// the indexes it wrote are recorded in `unsynced`.
    pub crash_before_sync: Option<u64>,
    /// Crash replica `id` while it persists the next ready with entries: on a simulated file
    /// system its next fsync fails (the WAL batch reached the file, unsynced), then the power
    /// goes; on the real one, as `crash_before_sync`. The ready is never acknowledged.
    pub crash_in_persist: Option<u64>,
    pub unsynced: Vec<LogIndex>,
    /// Snapshots installed from a leader.
    pub snapshots_installed: u64,
    /// Restarts from durable state.
    pub restarts: u64,
    /// Crashes in the middle of persisting a ready (`crash_in_persist`).
    pub persist_crashes: u64,
    /// Replicas stopped by [`RaftError::LostEntries`], with the error.
    pub lost_entries: Vec<(u64, String)>,
    next_ts: u64,
}

impl Cluster {
    /// `n` replicas, each on its own simulated file system (fsync on; crashes are power losses).
    pub fn new(n: u64, seed: u64) -> Self {
        Self::build(n, seed, None, |_| {})
    }

    /// `n` replicas, each persisting through a `DiskStorage` in its own subdirectory of `root`
    /// on the real file system (crashes are process crashes).
    pub fn with_disk(n: u64, seed: u64, root: &std::path::Path, durability: Durability) -> Self {
        let dirs: Vec<PathBuf> = (1..=n).map(|id| root.join(format!("r{id}"))).collect();
        Self::build_with(n, seed, Some(dirs), durability, |_| {})
    }

    /// `n` replicas on the real file system in `dirs`, or each on its own `SimFs` if `None`.
    pub fn build(n: u64, seed: u64, dirs: Option<Vec<PathBuf>>, tweak: impl Fn(&mut RaftConfig)) -> Self {
        Self::build_with(n, seed, dirs, Durability::Fsync, tweak)
    }

    fn build_with(
        n: u64,
        seed: u64,
        dirs: Option<Vec<PathBuf>>,
        durability: Durability,
        tweak: impl Fn(&mut RaftConfig),
    ) -> Self {
        let (sim, dirs): (Vec<Option<SimFs>>, Vec<PathBuf>) = match dirs {
            Some(dirs) => (vec![None; n as usize], dirs),
            None => (
                (1..=n).map(|id| Some(SimFs::new(seed.wrapping_mul(1000).wrapping_add(id)))).collect(),
                (1..=n).map(|id| PathBuf::from(format!("/r{id}"))).collect(),
            ),
        };
        let fs: Vec<Arc<dyn Fs>> = sim
            .iter()
            .map(|s| match s {
                Some(s) => Arc::new(s.clone()) as Arc<dyn Fs>,
                None => Arc::new(RealFs),
            })
            .collect();
        let voters: Vec<u64> = (1..=n).collect();
        let configs: Vec<RaftConfig> = voters
            .iter()
            .map(|&id| {
                let mut c = RaftConfig::new(id, voters.clone(), seed);
                tweak(&mut c);
                c
            })
            .collect();
        let mut c = Cluster {
            n,
            now: 0,
            rng: Rng::new(seed),
            configs,
            nodes: Vec::new(),
            crashed: BTreeSet::new(),
            fs,
            sim,
            queue: BinaryHeap::new(),
            seq: 0,
            isolated: BTreeSet::new(),
            partition: None,
            drop_per_mille: 0,
            delay: (1, 4),
            sent: 0,
            sent_by_type: BTreeMap::new(),
            delivered: 0,
            trace: Vec::new(),
            reference: Vec::new(),
            committed_at: HashMap::new(),
            dirs,
            wal_options: WalOptions { durability, ..WalOptions::default() },
            crash_before_sync: None,
            crash_in_persist: None,
            unsynced: Vec::new(),
            snapshots_installed: 0,
            restarts: 0,
            persist_crashes: 0,
            lost_entries: Vec::new(),
            next_ts: 1,
        };
        for id in 1..=n {
            if c.sim[(id - 1) as usize].is_none() {
                let dir = &c.dirs[(id - 1) as usize];
                assert!(!dir.exists(), "fresh replica directory {dir:?} already exists");
            }
            let node = c.start(id);
            c.nodes.push(Some(node));
        }
        c
    }

    /// The file system of replica `id`.
    pub fn fs_of(&self, id: u64) -> &Arc<dyn Fs> {
        &self.fs[(id - 1) as usize]
    }

    /// The simulated file system of replica `id` (panics on the real one).
    pub fn sim_of(&self, id: u64) -> &SimFs {
        self.sim[(id - 1) as usize].as_ref().expect("a simulated file system")
    }

    /// The directory of replica `id` on its file system.
    pub fn dir_of(&self, id: u64) -> &std::path::Path {
        &self.dirs[(id - 1) as usize]
    }

    /// Opens the storage of `id` as it is on its file system.
    pub fn open_disk(&self, id: u64) -> (DiskStorage, RecoveredState) {
        DiskStorage::open_with(Arc::clone(self.fs_of(id)), self.dir_of(id), self.wal_options.clone())
            .unwrap_or_else(|e| panic!("replica {id}: open disk storage: {e}"))
    }

    /// Builds a replica from its durable state.
    fn start(&self, id: u64) -> Node {
        let config = self.configs[(id - 1) as usize].clone();
        let (disk, recovered) = self.open_disk(id);
        let applied = recovered.snapshot.as_ref().map(|s| decode_state(&s.data)).unwrap_or_default();
        let log = RaftLog::new(config, Some(recovered)).expect("RaftLog::new");
        Node { log, disk, applied, checked_commit: 0 }
    }

    pub fn node(&self, id: u64) -> &Node {
        self.nodes[(id - 1) as usize].as_ref().expect("replica is up")
    }

    pub fn node_mut(&mut self, id: u64) -> &mut Node {
        self.nodes[(id - 1) as usize].as_mut().expect("replica is up")
    }

    pub fn log(&self, id: u64) -> &RaftLog {
        &self.node(id).log
    }

    pub fn is_up(&self, id: u64) -> bool {
        self.nodes[(id - 1) as usize].is_some()
    }

    pub fn up_ids(&self) -> Vec<u64> {
        (1..=self.n).filter(|&id| self.is_up(id)).collect()
    }

    fn connected(&self, a: u64, b: u64) -> bool {
        if !self.is_up(a) || !self.is_up(b) || self.isolated.contains(&a) || self.isolated.contains(&b) {
            return false;
        }
        match &self.partition {
            Some(side) => side.contains(&a) == side.contains(&b),
            None => true,
        }
    }

    /// The leader with the highest term among running replicas, if any.
    pub fn leader(&self) -> Option<u64> {
        self.up_ids().into_iter().filter(|&id| self.log(id).is_leader()).max_by_key(|&id| self.log(id).term())
    }

    /// The leader as the connected majority sees it: a leader that is not isolated.
    pub fn live_leader(&self) -> Option<u64> {
        self.up_ids()
            .into_iter()
            .filter(|&id| self.log(id).is_leader() && !self.isolated.contains(&id))
            .max_by_key(|&id| self.log(id).term())
    }

    fn send(&mut self, from: u64, msgs: Vec<OutMessage>) {
        for m in msgs {
            self.sent += 1;
            *self.sent_by_type.entry(m.msg_type as i32).or_default() += 1;
            if self.rng.chance(self.drop_per_mille) {
                continue;
            }
            let at = self.now + self.rng.range(self.delay.0, self.delay.1);
            self.seq += 1;
            self.queue.push(Reverse((at, self.seq, from, m.to, m.bytes)));
        }
    }

    /// Drains the readies of `id` and checks what it committed.
    pub fn process(&mut self, id: u64) {
        loop {
            let Some(node) = self.nodes[(id - 1) as usize].as_mut() else { return };
            let Some(rd) = node.log.ready().expect("ready") else { break };
            if let Some(rc) = rd.role_change {
                let term = node.log.term();
                self.trace.push(Event::Role { now: self.now, id, term, role: rc.role });
            }
            let mut rd = rd;
            let messages = std::mem::take(&mut rd.messages);
            self.send(id, messages);
            let node = self.nodes[(id - 1) as usize].as_mut().expect("up");
            if self.crash_before_sync == Some(id) && !rd.entries.is_empty() {
                // Crash after the write reached the WAL buffer but before any sync.
                node.disk.write(&rd).expect("write");
                self.unsynced = rd.entries.iter().map(|e| e.index).collect();
                self.crash_before_sync = None;
                self.crash(id);
                return;
            }
            if self.crash_in_persist == Some(id) && !rd.entries.is_empty() {
                // The power goes while the ready is being persisted: whatever reached the
                // files unsynced may or may not survive; nothing of it was acknowledged.
                if let Some(sim) = &self.sim[(id - 1) as usize] {
                    sim.fail_syncs(1);
                }
                let _ = node.disk.persist(&rd);
                self.crash_in_persist = None;
                self.persist_crashes += 1;
                self.crash(id);
                return;
            }
            node.disk.persist(&rd).unwrap_or_else(|e| panic!("replica {id}: persist: {e}"));
            if let Some(s) = &rd.snapshot {
                node.applied = decode_state(&s.data);
                self.snapshots_installed += 1;
            }
            let number = rd.number;
            let persisted = std::mem::take(&mut rd.persisted_messages);
            self.send(id, persisted);
            self.node_mut(id).log.advance(number);
        }
        self.check_commits(id);
    }

    fn check_commits(&mut self, id: u64) {
        let now = self.now;
        let node = self.nodes[(id - 1) as usize].as_mut().expect("up");
        let mut taken = Vec::new();
        node.log.take_committed(&mut taken);
        for LogEntry { index, record } in taken {
            if let Some(&(prev, _)) = node.applied.last() {
                assert!(index > prev, "replica {id}: committed index {index} after {prev}");
            }
            node.applied.push((index, record));
            self.trace.push(Event::Commit { now, id, index });
        }
        // Committed entries agree everywhere, forever.
        let commit = node.log.commit_index();
        let lo = (node.checked_commit + 1).max(node.log.first_index());
        for i in lo..=commit {
            if let Some(e) = node.log.entry(i) {
                let got = (e.term, e.data.to_vec());
                match self.committed_at.get(&i) {
                    Some(want) => assert_eq!(&got, want, "replica {id}: committed entry {i} differs"),
                    None => {
                        self.committed_at.insert(i, got);
                    }
                }
            }
        }
        node.checked_commit = node.checked_commit.max(commit);
        // Applied sequences are prefixes of one sequence.
        let applied = &node.applied;
        let common = applied.len().min(self.reference.len());
        assert_eq!(&applied[..common], &self.reference[..common], "replica {id}: applied sequence diverges");
        if applied.len() > self.reference.len() {
            self.reference.extend_from_slice(&applied[common..]);
        }
    }

    /// Advances time by one unit: deliveries, then (on tick boundaries) ticks.
    pub fn step(&mut self) {
        self.now += 1;
        while let Some(Reverse((at, ..))) = self.queue.peek() {
            if *at > self.now {
                break;
            }
            let Reverse((_, _, from, to, bytes)) = self.queue.pop().expect("peeked");
            if !self.connected(from, to) {
                continue;
            }
            self.delivered += 1;
            let node = self.node_mut(to);
            match node.log.step_bytes(&bytes) {
                Ok(()) => {}
                Err(e @ RaftError::LostEntries { .. }) => {
                    // Fatal for the replica, as in the server: it stops.
                    self.lost_entries.push((to, e.to_string()));
                    self.crash(to);
                    continue;
                }
                Err(e) => panic!("replica {to} rejected a message from {from}: {e}"),
            }
            self.process(to);
        }
        if self.now.is_multiple_of(TICK) {
            for id in self.up_ids() {
                self.node_mut(id).log.tick();
                self.process(id);
            }
        }
    }

    pub fn run(&mut self, units: u64) {
        for _ in 0..units {
            self.step();
        }
    }

    /// Runs until `pred` holds (checked every unit); returns the units it took.
    pub fn run_until(&mut self, max_units: u64, mut pred: impl FnMut(&Cluster) -> bool) -> Option<u64> {
        for u in 0..max_units {
            if pred(self) {
                return Some(u);
            }
            self.step();
        }
        pred(self).then_some(max_units)
    }

    /// Proposes `n` records, one per time unit, on whichever replica leads (electing one
    /// first when needed; proposals a replica refuses are retried); returns them.
    pub fn propose_n(&mut self, n: usize) -> Vec<(LogIndex, TestRecord)> {
        let mut out = Vec::new();
        while out.len() < n {
            let leader = self.elect(100 * TICK);
            if let Ok(p) = self.propose(leader) {
                out.push(p);
            }
            self.step();
        }
        out
    }

    /// Runs until the reference log holds `len` records and every replica applied the same
    /// ones, within `max_units`; panics otherwise.
    pub fn wait_all_applied(&mut self, len: usize, max_units: u64) {
        self.run_until(max_units, |c| c.reference.len() >= len && c.all_applied_equal()).unwrap_or_else(|| {
            panic!("not every replica applied {len} records (reference has {})", self.reference.len())
        });
    }

    /// A fresh record (unique timestamp).
    pub fn record(&mut self) -> TestRecord {
        let ts = self.next_ts;
        self.next_ts += 1;
        TestRecord::Floor { ts }
    }

    /// Proposes a fresh record on `id` and drains its readies.
    pub fn propose(&mut self, id: u64) -> Result<(LogIndex, TestRecord), LogError> {
        let record = self.record();
        let r = self.node_mut(id).log.propose(record.clone());
        self.process(id);
        r.map(|i| (i, record))
    }

    /// Proposes `k` fresh records on `id` in one go (as a shell does within one event), then
    /// drains its readies once.
    pub fn propose_batch(&mut self, id: u64, k: usize) -> Result<Vec<(LogIndex, TestRecord)>, LogError> {
        let mut out = Vec::new();
        for _ in 0..k {
            let record = self.record();
            let index = self.node_mut(id).log.propose(record.clone())?;
            out.push((index, record));
        }
        self.process(id);
        Ok(out)
    }

    /// Runs until some leader is known; returns its id.
    pub fn elect(&mut self, max_units: u64) -> u64 {
        self.run_until(max_units, |c| c.live_leader().is_some()).expect("a leader is elected");
        self.live_leader().expect("leader")
    }

    /// Stops replica `id`, keeping only what it made durable: its process dies (buffered
    /// writes are lost) and, on a simulated file system with fsync on, the power goes too.
    pub fn crash(&mut self, id: u64) {
        let node = self.nodes[(id - 1) as usize].take().expect("replica is up");
        drop(node);
        if let Some(sim) = &self.sim[(id - 1) as usize] {
            if self.wal_options.durability == Durability::Fsync {
                sim.crash();
            }
        }
        self.crashed.insert(id);
    }

    /// Restarts a crashed replica from its durable state.
    pub fn restart(&mut self, id: u64) {
        assert!(self.crashed.remove(&id), "replica is crashed");
        let node = self.start(id);
        self.nodes[(id - 1) as usize] = Some(node);
        self.restarts += 1;
        self.process(id);
    }

    /// Every running replica applied exactly `reference`.
    pub fn all_applied_equal(&self) -> bool {
        self.up_ids().iter().all(|&id| self.node(id).applied == self.reference)
    }

    /// Raft's log matching property over every pair of running replicas: if two logs hold an
    /// entry with the same index and term, they are identical up to it.
    pub fn check_log_matching(&self) {
        let ids = self.up_ids();
        for (k, &a) in ids.iter().enumerate() {
            for &b in &ids[k + 1..] {
                let (la, lb) = (self.log(a), self.log(b));
                let lo = la.first_index().max(lb.first_index());
                let hi = la.last_index().min(lb.last_index());
                let Some(top) = (lo..=hi).rev().find(|&i| la.term_at(i) == lb.term_at(i)) else { continue };
                for i in lo..=top {
                    let (ea, eb) = (la.entry(i).expect("held"), lb.entry(i).expect("held"));
                    assert_eq!(ea, eb, "log matching violated between {a} and {b} at {i} (match at {top})");
                }
            }
        }
    }

    /// Every running replica's committed log prefix agrees with `committed_at`.
    pub fn check_committed_stable(&self) {
        for id in self.up_ids() {
            let log = self.log(id);
            for i in log.first_index()..=log.commit_index() {
                if let (Some(e), Some(want)) = (log.entry(i), self.committed_at.get(&i)) {
                    assert_eq!(&(e.term, e.data.to_vec()), want, "replica {id}: committed entry {i} changed");
                }
            }
        }
    }

    /// Messages sent of one type.
    pub fn sent_of(&self, t: MessageType) -> u64 {
        self.sent_by_type.get(&(t as i32)).copied().unwrap_or(0)
    }

    /// Compacts replica `id`'s log up to the last record it applied, with its applied records
    /// as the state; `None` if there is nothing new to compact.
    pub fn compact(&mut self, id: u64) -> Option<SnapshotData> {
        let node = self.node_mut(id);
        let index = node.applied.last().map_or(0, |(i, _)| *i);
        if index <= node.log.snapshot_index() {
            return None;
        }
        let data = encode_state(&node.applied);
        let snap = node.log.compact(index, data).expect("compact");
        node.disk.save_snapshot(&snap).expect("save snapshot");
        Some(snap)
    }
}
