//! What the hosted-workload test files share: the run and fault knobs drawn from a seed (the
//! seed runner is `common`'s).

#![allow(dead_code)] // each test file uses a subset

use luigi_sim::{failover_config, Delay, FaultConfig, KillPoint, Outage, SimConfig};

pub use crate::common::{must_pass_replicated as must_pass, one_seed, sweep};

/// How long a healed cluster with snapshots may take to converge, virtual µs. A follower
/// behind its leader's compaction needs a snapshot transfer, and on lossy links each lost
/// chunk or acknowledgement costs the transfer's acknowledgement timeout (over 1 s), so the
/// default 5 s is not enough (seed 7375 of `tpcc_faults_sweep` needed two transfers).
pub const SNAPSHOT_SETTLE_US: u64 = 30_000_000;

/// Seeds whose clients give up (3 attempts) while shards lose their majority: transactions
/// are reported unknown, and their resolution is the answer the checks use.
pub fn gives_up(seed: u64) -> bool {
    seed % 7 == 3
}

/// Seeds with frequent random faults (every 30 ± 25 ms for 1.5 s) and 3 kills.
pub fn harsh(seed: u64) -> bool {
    seed % 7 == 5
}

/// A replicated run's knobs drawn from `seed` for a hosted workload: `failover_config`'s
/// retries, 3-5 clients with 2-4 transactions in flight, `txns` transactions, a liveness
/// probe of 6, and by seed lossy or reordering client links, clock offsets up to ±20 ms,
/// proposals that differ often, leaders that refuse beyond 1-3 pending transactions, and
/// clients that give up ([`gives_up`]).
pub fn hosted_config(seed: u64, txns: u64) -> SimConfig {
    let pick = |n: u64, salt: u64| (seed / salt) % n;
    let mut c = failover_config(seed, 2)
        .clients(3 + pick(3, 17) as u32)
        .in_flight(2 + pick(3, 19) as usize)
        .txns(txns)
        .probe(6)
        .drop_rate([0.0, 0.0, 0.05, 0.1][pick(4, 5) as usize])
        .reorder(pick(2, 7) == 1)
        .clock_offset_max([0, 2_000, 20_000][pick(3, 11) as usize]);
    if pick(4, 13) == 0 {
        // Proposals differ often: no pings, no headroom (the second round runs a lot).
        c.ping_first = false;
        c.coordinator.headroom_us = 0;
        // Fixed: the adaptive headroom (rule 1) would learn the offsets and agree.
        c.coordinator.adaptive_headroom = false;
    }
    if gives_up(seed) {
        c.coordinator.max_attempts = 3;
    }
    if pick(5, 23) == 0 {
        // Leaders refuse beyond 1-3 pending transactions: rejections, and aborts of the
        // other participants of a refused cross-shard transaction.
        c.leader.max_pending = 1 + (seed % 3) as usize;
    }
    c
}

/// Faults drawn from `seed` for a run over `shards` shards:
/// - [`gives_up`] seeds: 3 replicas under random faults, and two shards in turn lose their
///   majority for 0.3-0.8 s;
/// - [`harsh`] seeds: 3 replicas under frequent random faults and 3 kills at a kill point;
/// - one seed in three otherwise: 1 replica per shard, killed at a kill point (it restarts
///   from its disk; its shard is down meanwhile);
/// - one seed in 13 otherwise: groups of 5 (two faulty replicas at a time), followers
///   snapshotting every 15 records;
/// - the others: 3 replicas under random crashes, isolations and Raft-only cuts, a kill point
///   on top every other seed, followers snapshotting every 40 records one seed in five.
pub fn hosted_faults(seed: u64, shards: u32) -> FaultConfig {
    const POINTS: [KillPoint; 6] = [
        KillPoint::PrepareCommitted,
        KillPoint::ProposeSent,
        KillPoint::Decided,
        KillPoint::Executed,
        KillPoint::CoordinatorPartial,
        KillPoint::SpeculativeAnswer,
    ];
    let point = POINTS[((seed / 3) % 6) as usize];
    if gives_up(seed) {
        let first = (seed / 7 % u64::from(shards)) as u32;
        let down_us = |k: u64| 300_000 + (seed.wrapping_mul(7919).wrapping_add(k * 104_729) % 500_000);
        let outages = vec![
            Outage { shard: first, at_us: 100_000, down_us: down_us(1) },
            Outage { shard: (first + 1) % shards, at_us: 900_000, down_us: down_us(2) },
        ];
        return FaultConfig { outages, faults_until_us: 1_500_000, liveness_us: 2_000_000, ..FaultConfig::new() };
    }
    if harsh(seed) {
        return FaultConfig {
            fault_gap: Delay::new(30_000, 25_000),
            down: Delay::new(60_000, 55_000),
            faults_until_us: 1_500_000,
            kill: Some(point),
            kills: 3,
            kill_gap_us: 50_000,
            ..FaultConfig::new()
        };
    }
    if seed % 3 == 2 {
        return FaultConfig { replicas: 1, kill: Some(point), kills: 2, ..FaultConfig::new() };
    }
    if seed % 13 == 6 {
        return FaultConfig {
            replicas: 5,
            snapshot_entries: Some(15),
            settle_us: SNAPSHOT_SETTLE_US,
            ..FaultConfig::new()
        };
    }
    let mut f = FaultConfig::new();
    if seed % 2 == 1 {
        f.kill = Some(point);
        f.kills = 2;
    }
    if seed.is_multiple_of(5) {
        f.snapshot_entries = Some(40);
        f.settle_us = SNAPSHOT_SETTLE_US;
    }
    f
}
