//! (g) Many seeds of random faults: drops, reordering, partitions, isolated leaders, crashes and
//! restarts from durable state (on a `SimFs`: power losses, some in the middle of persisting a
//! ready, so the WAL's torn-tail repair and the hard state's rename run for real), log
//! compaction with snapshot catch-up. After every step the
//! harness checks that committed records are identical and identically ordered everywhere;
//! periodically it checks Raft's log matching property and that committed entries never
//! change. At the end the faults heal and the group must converge and make progress.

mod common;

use std::collections::BTreeSet;

use common::{Cluster, Rng, TICK};

/// What one seed exercised.
#[derive(Default, Debug)]
struct Stats {
    committed: usize,
    elections: usize,
    max_term: u64,
    snapshots_installed: u64,
    restarts: u64,
    persist_crashes: u64,
}

fn chaos(seed: u64, disk: Option<&std::path::Path>) -> Stats {
    let n = if seed.is_multiple_of(2) { 3 } else { 5 };
    let mut c = match disk {
        Some(root) => Cluster::with_disk(n, seed, root, luigi_wal::Durability::None),
        None => Cluster::new(n, seed),
    };
    let mut rng = Rng::new(seed.wrapping_mul(31));
    c.drop_per_mille = rng.range(0, 200);
    c.delay = (1, rng.range(2, 15));
    let max_down = (n - 1) / 2;
    for unit in 0..3000u64 {
        // Every replica that believes it leads gets proposals now and then (stale leaders too).
        if rng.chance(150) {
            for id in c.up_ids() {
                if c.log(id).is_leader() {
                    let _ = c.propose(id);
                }
            }
        }
        if unit % 50 == 0 {
            fault(&mut c, &mut rng, unit, max_down);
        }
        c.step();
        if unit % 25 == 0 {
            c.check_log_matching();
            c.check_committed_stable();
        }
    }
    heal_and_converge(&mut c, seed)
}

/// A random fault (or its end) at `unit`: a partition, an isolated leader, a crash (at
/// once, or in the middle of persisting; at most `max_down` replicas down), a restart, a
/// compaction, or nothing.
fn fault(c: &mut Cluster, rng: &mut Rng, unit: u64, max_down: u64) {
    let n = c.n;
    match rng.range(0, 9) {
        0 => {
            let side: BTreeSet<u64> = (1..=n).filter(|_| rng.chance(500)).collect();
            c.partition = Some(side);
        }
        1 | 2 => c.partition = None,
        3 => {
            if let Some(l) = c.leader() {
                c.isolated.insert(l);
            }
        }
        4 => c.isolated.clear(),
        5 | 8 => {
            let up = c.up_ids();
            if (n as usize - up.len()) < max_down as usize && c.crash_in_persist.is_none() {
                let victim = up[rng.range(0, up.len() as u64 - 1) as usize];
                if unit.is_multiple_of(100) {
                    c.crash(victim);
                } else {
                    c.crash_in_persist = Some(victim);
                }
            }
        }
        6 => {
            if let Some(&id) = c.crashed.iter().next() {
                c.restart(id);
            }
        }
        7 => {
            let up = c.up_ids();
            let id = up[rng.range(0, up.len() as u64 - 1) as usize];
            c.compact(id);
        }
        _ => {}
    }
}

/// Heals everything: the group must converge and still commit. What the seed exercised.
fn heal_and_converge(c: &mut Cluster, seed: u64) -> Stats {
    c.partition = None;
    c.isolated.clear();
    c.drop_per_mille = 0;
    c.crash_in_persist = None;
    let crashed: Vec<u64> = c.crashed.iter().copied().collect();
    for id in crashed {
        c.restart(id);
    }
    let leader = c.elect(200 * TICK);
    let (_, last) = c.propose(leader).expect("leader accepts");
    c.run_until(300 * TICK, |c| c.reference.last().is_some_and(|(_, r)| *r == last) && c.all_applied_equal())
        .unwrap_or_else(|| panic!("seed {seed}: no convergence after healing"));
    c.check_log_matching();
    c.check_committed_stable();
    Stats {
        committed: c.reference.len(),
        elections: c
            .trace
            .iter()
            .filter(|e| matches!(e, common::Event::Role { role: luigi_raft::Role::Leader, .. }))
            .count(),
        max_term: c.up_ids().iter().map(|&id| c.log(id).term()).max().unwrap_or(0),
        snapshots_installed: c.snapshots_installed,
        restarts: c.restarts,
        persist_crashes: c.persist_crashes,
    }
}

#[test]
fn g_fifty_seeds_of_faults_keep_the_log_consistent() {
    let mut total = Stats::default();
    for seed in 1..=50 {
        let s = chaos(seed, None);
        assert!(s.committed > 0, "seed {seed} committed nothing");
        total.committed += s.committed;
        total.elections += s.elections;
        total.max_term = total.max_term.max(s.max_term);
        total.snapshots_installed += s.snapshots_installed;
        total.restarts += s.restarts;
        total.persist_crashes += s.persist_crashes;
    }
    eprintln!("chaos over 50 seeds: {total:?}");
    // The faults really happened.
    assert!(total.committed > 50 * 20, "{total:?}");
    assert!(total.elections > 50 * 3, "{total:?}");
    assert!(total.snapshots_installed > 10, "{total:?}");
    assert!(total.restarts > 50, "{total:?}");
    assert!(total.persist_crashes > 20, "{total:?}");
}

#[test]
fn g_faults_with_disk_storage_recover_from_the_files() {
    // The same schedule through `DiskStorage` (no fsync: crashes here are process crashes):
    // conflicting suffixes are truncated in the WAL, snapshots installed and compacted on
    // disk, and every restart goes through `DiskStorage::open`.
    let mut total = Stats::default();
    for seed in 101..=106 {
        let tmp = tempfile::tempdir().unwrap();
        let s = chaos(seed, Some(tmp.path()));
        total.committed += s.committed;
        total.restarts += s.restarts;
        total.snapshots_installed += s.snapshots_installed;
    }
    eprintln!("chaos with disk over 6 seeds: {total:?}");
    assert!(total.restarts > 5, "{total:?}");
}
