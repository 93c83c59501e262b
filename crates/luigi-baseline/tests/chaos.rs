//! Baseline leaders under seeded chaos: messages delayed, reordered and lost, logs that commit
//! late, leaders that crash (losing what their log had not committed) and are replaced, clients
//! that retry. After the faults heal, everything is decided (no prepared piece, no lock left)
//! and a probe commits on every shard. Checked:
//!
//! - every participant's answers to one transaction agree, and a retry's answer is the first's;
//! - a transaction answered committed is installed on every participant (its `Local` or
//!   `Commit` record is committed there), one answered aborted or failed on none;
//! - an installed cross-shard transaction is installed on every participant (atomicity);
//! - per shard, the order of installs is a serial order for that shard's declared keys; the
//!   union of those orders has no cycle (serializability), and replaying the installed
//!   transactions in one topological order through a sequential model gives every committed
//!   answer's outputs and every shard's final store.
//!
//! `LUIGI_BASELINE_CHAOS_SEEDS=n` runs n seeds per mode (default 60).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::*;
use luigi_baseline::{BaseRecord, Mode};
use luigi_protocol::log::LogEntry;
use luigi_store::Store;
use luigi_txn::keyhash::key_hash;
use luigi_txn::msg::{TxnError, TxnReply};
use luigi_txn::procedure::Registry;
use luigi_txn::types::{ShardId, Txn, TxnId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SHARDS: u32 = 3;
const KEYS: u64 = 12;

fn seeds() -> u64 {
    std::env::var("LUIGI_BASELINE_CHAOS_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(60)
}

struct Run {
    c: Cluster,
    rng: ChaCha8Rng,
    txns: BTreeMap<TxnId, Arc<Txn>>,
    /// Committed histories of crashed leaders are in the new leaders' logs; this is the
    /// current history per shard once the run ends.
    answers: BTreeMap<(TxnId, ShardId), TxnReply>,
}

impl Run {
    fn new(mode: Mode, seed: u64) -> Self {
        Run {
            c: Cluster::new(SHARDS, mode),
            rng: ChaCha8Rng::seed_from_u64(seed),
            txns: BTreeMap::new(),
            answers: BTreeMap::new(),
        }
    }

    fn random_txn(&mut self, seq: u64) -> Arc<Txn> {
        let ops: usize = self.rng.gen_range(1..=4);
        let mut keys = BTreeSet::new();
        let mut list = Vec::new();
        for _ in 0..ops {
            let k = self.rng.gen_range(0..KEYS);
            if keys.insert(k) {
                let write = self.rng.gen_bool(0.6).then(|| seq * 100 + k);
                list.push((k, write));
            }
        }
        micro(seq, SHARDS, &list)
    }

    fn home(&self, txn: &Txn) -> ShardId {
        match self.c.config[0].mode {
            Mode::Direct => unreachable!("direct is not run here"),
            Mode::Occ | Mode::TwoPl => txn.pieces[0].shard,
        }
    }

    /// Collects final answers; a second final answer must equal the first.
    fn collect(&mut self) {
        for r in self.c.take_replies() {
            if matches!(r.outcome, Err(TxnError::NotLeader { .. } | TxnError::Busy(_))) {
                continue;
            }
            let t = &self.txns[&r.id];
            // A single-shard read logs nothing: a retry runs it again (the client keeps one answer).
            let rerun = !t.is_cross_shard() && t.pieces[0].keys.writes.is_empty();
            match self.answers.get(&(r.id, r.shard)) {
                Some(first) if rerun => {
                    let _ = first;
                }
                Some(first) => assert_eq!(first.outcome, r.outcome, "{:?} answered twice, differently", r.id),
                None => {
                    self.answers.insert((r.id, r.shard), r);
                }
            }
        }
    }

    fn step_faulty(&mut self, seq: &mut u64) {
        let roll: u32 = self.rng.gen_range(0..100);
        match roll {
            0..=14 => {
                *seq += 1;
                let t = self.random_txn(*seq);
                self.txns.insert(t.id, t.clone());
                let home = self.home(&t);
                self.c.dispatch(home, t);
            }
            // Deliver one message, not necessarily the oldest; some are lost.
            15..=54 if !self.c.net.is_empty() => {
                let i = self.rng.gen_range(0..self.c.net.len());
                let (to, batch) = self.c.net.remove(i).unwrap();
                if self.rng.gen_bool(0.97) {
                    self.c.net.push_front((to, batch));
                    self.c.deliver_one();
                }
            }
            55..=74 => {
                // One shard's log commits a prefix of what is pending.
                let s = self.rng.gen_range(0..SHARDS);
                if let Some(l) = self.c.leaders[s as usize].as_mut() {
                    let n = self.rng.gen_range(0..=l.log().pending.len());
                    l.log_mut().commit_prefix(n);
                }
                self.c.tick_all();
            }
            75..=89 => self.c.advance(self.rng.gen_range(1_000..400_000)),
            90..=92 => {
                // A retry of an unanswered transaction (same id) at its home.
                let unanswered: Vec<TxnId> =
                    self.txns.keys().filter(|id| !self.answers.keys().any(|(a, _)| a == *id)).copied().collect();
                if !unanswered.is_empty() {
                    let id = unanswered[self.rng.gen_range(0..unanswered.len())];
                    let t = self.txns[&id].clone();
                    let home = self.home(&t);
                    self.c.dispatch(home, t);
                }
            }
            93..=94 => {
                // A leader crashes and a new one takes over from what its log committed.
                let s = self.rng.gen_range(0..SHARDS);
                if self.c.leaders[s as usize].is_some() {
                    let history = self.c.crash(s);
                    self.c.net.retain(|(to, _)| *to != s);
                    self.c.elect(s, history);
                }
            }
            _ => {}
        }
        self.collect();
    }

    fn heal(&mut self) {
        for _ in 0..40 {
            self.c.settle();
            self.c.advance(1_100_000);
            self.collect();
        }
        self.c.settle();
        self.collect();
    }
}

fn history(c: &mut Cluster, s: ShardId) -> Vec<LogEntry<BaseRecord>> {
    c.leader(s).log().history.clone()
}

/// After a run: liveness, atomicity and agreement of the answers with the installs, and
/// serializability (the install orders replayed through a model).
fn check(run: &mut Run, seed: u64, mode: Mode) {
    let c = &mut run.c;
    // Liveness: everything decided, no lock left.
    for s in 0..SHARDS {
        let l = c.leader(s);
        assert!(l.state().prepared().is_empty(), "{mode:?} seed {seed}: shard {s} still has prepared pieces");
        assert_eq!(l.pending_len(), 0, "{mode:?} seed {seed}: shard {s} still has work");
    }
    let installs = installs(c);
    let installed: BTreeMap<TxnId, BTreeSet<ShardId>> = installs.iter().fold(BTreeMap::new(), |mut m, (s, ids)| {
        for id in ids {
            m.entry(*id).or_insert_with(BTreeSet::new).insert(*s);
        }
        m
    });
    check_answers(run, &installed, seed, mode);
    let order = serial_order(run, &installs, &installed, seed, mode);
    check_replay(run, &order, seed, mode);
}

/// Installs per shard, in log order.
fn installs(c: &mut Cluster) -> BTreeMap<ShardId, Vec<TxnId>> {
    let mut installs: BTreeMap<ShardId, Vec<TxnId>> = BTreeMap::new();
    for s in 0..SHARDS {
        let h = history(c, s);
        let mut seen = BTreeSet::new();
        for e in &h {
            if let BaseRecord::Local { id, .. } | BaseRecord::Commit { id } = &e.record {
                if !seen.insert(*id) {
                    continue; // a duplicate commit record (a decision logged twice) installs nothing new
                }
                installs.entry(s).or_default().push(*id);
            }
        }
    }
    installs
}

/// Answers agree across participants and with the installs (`installed`: where each
/// transaction was installed).
fn check_answers(run: &Run, installed: &BTreeMap<TxnId, BTreeSet<ShardId>>, seed: u64, mode: Mode) {
    for (id, txn) in &run.txns {
        let answers: Vec<&TxnReply> = txn.shards().filter_map(|s| run.answers.get(&(*id, s))).collect();
        let committed_answers = answers.iter().filter(|r| r.outcome.is_ok()).count();
        let participants: BTreeSet<ShardId> = txn.shards().collect();
        let writes_somewhere = installed.get(id);
        // A single-shard read logs nothing.
        let logs_nothing = !txn.is_cross_shard() && txn.pieces[0].keys.writes.is_empty();
        if committed_answers > 0 {
            assert_eq!(
                committed_answers,
                answers.len(),
                "{mode:?} seed {seed}: {id:?} answered both ways: {answers:?}"
            );
        }
        if committed_answers > 0 && !logs_nothing {
            assert_eq!(
                writes_somewhere,
                Some(&participants),
                "{mode:?} seed {seed}: {id:?} answered committed, installed on {writes_somewhere:?}"
            );
        } else if !answers.is_empty() {
            let read_only_fail = answers.iter().all(|r| matches!(r.outcome, Err(TxnError::Proc(_))));
            assert!(
                writes_somewhere.is_none() || read_only_fail,
                "{mode:?} seed {seed}: {id:?} answered {answers:?} but installed on {writes_somewhere:?}"
            );
        }
        if let Some(on) = writes_somewhere {
            assert_eq!(on, &participants, "{mode:?} seed {seed}: {id:?} installed on {on:?} only (atomicity)");
        }
    }
}

/// A serial order of the installed transactions: the per-shard conflict orders have no
/// common cycle.
fn serial_order(
    run: &Run,
    installs: &BTreeMap<ShardId, Vec<TxnId>>,
    installed: &BTreeMap<TxnId, BTreeSet<ShardId>>,
    seed: u64,
    mode: Mode,
) -> Vec<TxnId> {
    let mut edges: BTreeMap<TxnId, BTreeSet<TxnId>> = BTreeMap::new();
    let mut indegree: BTreeMap<TxnId, usize> = installed.keys().map(|id| (*id, 0)).collect();
    for (s, ids) in installs {
        for (i, a) in ids.iter().enumerate() {
            for b in &ids[i + 1..] {
                if conflict(&run.txns[a], &run.txns[b], *s) && edges.entry(*a).or_default().insert(*b) {
                    *indegree.get_mut(b).unwrap() += 1;
                }
            }
        }
    }
    let mut order = Vec::new();
    let mut ready: BTreeSet<TxnId> = indegree.iter().filter(|(_, d)| **d == 0).map(|(id, _)| *id).collect();
    while let Some(id) = ready.pop_first() {
        order.push(id);
        for b in edges.get(&id).cloned().unwrap_or_default() {
            let d = indegree.get_mut(&b).unwrap();
            *d -= 1;
            if *d == 0 {
                ready.insert(b);
            }
        }
    }
    assert_eq!(
        order.len(),
        installed.len(),
        "{mode:?} seed {seed}: the install orders have a cycle (not serializable)"
    );
    order
}

/// Replays `order` through a model: the committed answers and the leaders' final stores
/// are the replay's.
fn check_replay(run: &mut Run, order: &[TxnId], seed: u64, mode: Mode) {
    let registry: Registry = registry();
    let mut model: Vec<Store> = (0..SHARDS).map(|_| Store::new()).collect();
    for id in order {
        let t = &run.txns[id];
        for p in &t.pieces {
            let out = registry.execute(&t.procedure, &t.args, &mut model[p.shard as usize], &p.keys, p.shard);
            if let Some(r) = run.answers.get(&(*id, p.shard)) {
                if r.outcome.is_ok() {
                    assert_eq!(
                        r.outcome.as_ref().ok(),
                        out.as_ref().ok(),
                        "{mode:?} seed {seed}: {id:?} on shard {}: answer differs from the replay",
                        p.shard
                    );
                }
            }
        }
    }
    for s in 0..SHARDS {
        assert_eq!(
            run.c.leader(s).state().store(),
            &model[s as usize],
            "{mode:?} seed {seed}: shard {s}'s store differs from the replay"
        );
    }
}

fn conflict(a: &Txn, b: &Txn, s: ShardId) -> bool {
    let (Some(ka), Some(kb)) = (a.piece(s), b.piece(s)) else { return false };
    let hashes = |ks: &Vec<Vec<u8>>| ks.iter().map(|k| key_hash(k)).collect::<BTreeSet<u64>>();
    let (ra, wa, rb, wb) = (hashes(&ka.reads), hashes(&ka.writes), hashes(&kb.reads), hashes(&kb.writes));
    !wa.is_disjoint(&wb) || !wa.is_disjoint(&rb) || !ra.is_disjoint(&wb)
}

fn run(mode: Mode, seed: u64) -> (usize, usize) {
    let mut run = Run::new(mode, seed);
    let mut seq = 0;
    for _ in 0..1_500 {
        run.step_faulty(&mut seq);
    }
    run.heal();
    // A probe per shard commits once healed.
    for s in 0..SHARDS {
        seq += 1;
        let t = micro(seq, SHARDS, &[(u64::from(s), Some(1))]);
        run.txns.insert(t.id, t.clone());
        run.c.dispatch(s, t);
    }
    run.heal();
    for s in 0..SHARDS {
        let id = TxnId { client: CLIENT, seq: seq - u64::from(SHARDS - 1 - s) };
        let r =
            run.answers.get(&(id, s)).unwrap_or_else(|| panic!("{mode:?} seed {seed}: probe on shard {s} unanswered"));
        assert!(r.outcome.is_ok(), "{mode:?} seed {seed}: probe on shard {s}: {:?}", r.outcome);
    }
    check(&mut run, seed, mode);
    let committed = run.answers.values().filter(|r| r.outcome.is_ok()).map(|r| r.id).collect::<BTreeSet<_>>().len();
    (run.txns.len(), committed)
}

#[test]
fn occ_and_2pl_stay_atomic_and_serializable_under_chaos() {
    for mode in [Mode::Occ, Mode::TwoPl] {
        let (mut txns, mut committed) = (0, 0);
        for seed in 0..seeds() {
            let (t, c) = run(mode, seed);
            txns += t;
            committed += c;
        }
        assert!(committed * 10 > txns, "{mode:?}: only {committed} of {txns} transactions committed");
        println!("{mode:?}: {} seeds, {txns} transactions, {committed} committed", seeds());
    }
}
