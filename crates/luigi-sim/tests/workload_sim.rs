//! Hosted workloads in the simulator: any `luigi_workloads::Workload` run by the simulated
//! clients (one generator each, multi-step business transactions followed), every replica
//! starting from the workload's population, under faults, and checked after every seed by the
//! workload-independent replay (every ordered transaction in timestamp order through the
//! workload's procedures, from the population, outputs and final stores compared), the
//! workload's own consistency check, liveness once the faults healed (a probe of new
//! transactions on the settled cluster) and every per-step check of the cluster model.
//!
//! Workloads: a small bank written here (`workload_sim/bank.rs`: transfers, audits, a
//! two-step rebalance), micro with a population (`MicroWorkload`) and TPC-C.
//!
//! `LUIGI_SIM_SEED=n` runs one seed of a sweep, `LUIGI_SIM_TRACE=1` prints every event,
//! `LUIGI_SIM_SWEEP=n` / `LUIGI_SIM_SWEEP_FROM=n` size the sweeps (`bank_faults_sweep`,
//! `micro_hosted_faults_sweep`, `tpcc_faults_sweep`), e.g.
//! `LUIGI_SIM_SWEEP=200 cargo test -p luigi-sim --test workload_sim tpcc -- --nocapture`.

#[path = "workload_sim/bank.rs"]
mod bank;
mod common;

use std::sync::Arc;
use std::time::Instant;

use luigi_proto::leader::Mutations;
use luigi_sim::{
    failover_config, run, run_replicated, FailoverReport, FaultConfig, KillPoint, SimConfig, ViolationKind, SEED_ENV,
    TRACE_ENV,
};
use luigi_workloads::micro::{MicroConfig, MicroWorkload, Placement, Spread};

use bank::{Bank, Broken};

const FILE: &str = "workload_sim";

/// Runs `config` over Raft groups with `faults`; on a violation (or a panic), fails with it
/// and the command that reruns the seed.
fn must_pass(test: &str, config: SimConfig, faults: &FaultConfig) -> FailoverReport {
    let seed = config.seed;
    let config = common::traced(config);
    let rerun = format!(
        "rerun this seed alone: {SEED_ENV}={seed} cargo test -p luigi-sim --test {FILE} {test} -- --nocapture \
         (add {TRACE_ENV}=1 for every event)"
    );
    match std::panic::catch_unwind(|| run_replicated(&config, faults)) {
        Ok(Ok(report)) => report,
        Ok(Err(v)) => panic!("{test}: {v}\n  {rerun}"),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{test}: seed {seed} panicked: {what}\n  {rerun}")
        }
    }
}

/// The seeds of a sweep: `LUIGI_SIM_SWEEP` of them (default `count`) from
/// `LUIGI_SIM_SWEEP_FROM` (default `from`), or only `LUIGI_SIM_SEED`.
fn sweep(from: u64, count: u64) -> Vec<u64> {
    let env = |name: &str, default: u64| std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    let from = env("LUIGI_SIM_SWEEP_FROM", from);
    common::seeds(from..from + env("LUIGI_SIM_SWEEP", count))
}

fn one_seed() -> bool {
    std::env::var(SEED_ENV).is_ok()
}

/// A replicated run's knobs drawn from `seed` for a hosted workload: `failover_config`'s
/// clients and retries, `txns` transactions, a liveness probe of 6, and by seed lossy or
/// reordering client links and clock offsets up to ±20 ms.
fn hosted_config(seed: u64, txns: u64) -> SimConfig {
    let pick = |n: u64, salt: u64| (seed / salt) % n;
    let mut c = failover_config(seed, 2)
        .txns(txns)
        .probe(6)
        .drop_rate([0.0, 0.0, 0.05][pick(3, 5) as usize])
        .reorder(pick(2, 7) == 1)
        .clock_offset_max([0, 2_000, 20_000][pick(3, 11) as usize]);
    if pick(4, 13) == 0 {
        // Proposals differ often: no pings, no headroom (the second round runs a lot).
        c.ping_first = false;
        c.coordinator.headroom_us = 0;
    }
    c
}

/// Faults drawn from `seed`: 3 replicas under random crashes, isolations and Raft-only cuts
/// (a kill point on top every other seed), or 1 replica per shard killed at a kill point (it
/// restarts from its disk; the shard is down meanwhile).
fn hosted_faults(seed: u64) -> FaultConfig {
    const POINTS: [KillPoint; 5] = [
        KillPoint::PrepareCommitted,
        KillPoint::ProposeSent,
        KillPoint::Decided,
        KillPoint::Executed,
        KillPoint::CoordinatorPartial,
    ];
    let point = POINTS[((seed / 3) % 5) as usize];
    if seed % 3 == 2 {
        return FaultConfig { replicas: 1, kill: Some(point), kills: 2, ..FaultConfig::new() };
    }
    let mut f = FaultConfig::new();
    if seed % 2 == 1 {
        f.kill = Some(point);
        f.kills = 2;
    }
    if seed.is_multiple_of(5) {
        f.snapshot_entries = Some(40);
    }
    f
}

/// The bank over 2 or 3 shards, few accounts so transactions conflict.
fn bank(seed: u64) -> Bank {
    let shards = 2 + (seed % 2) as u32;
    Bank::new(shards, 4 * u64::from(shards))
}

fn bank_config(seed: u64, workload: Bank) -> SimConfig {
    hosted_config(seed, 90).hosting(Arc::new(workload), seed)
}

#[test]
fn bank_faults_sweep() {
    let started = Instant::now();
    let mut total = FailoverReport::default();
    let mut runs = 0;
    for seed in sweep(1, 24) {
        let config = bank_config(seed, bank(seed));
        let r = must_pass("bank_faults_sweep", config, &hosted_faults(seed));
        if one_seed() {
            eprintln!("{r:?}");
        }
        total.absorb(&r);
        runs += 1;
    }
    eprintln!("bank with faults: {runs} seeds in {:?}: {total:?}", started.elapsed());
    if !one_seed() {
        assert!(total.committed > 0 && total.crashes > 0 && total.kills > 0, "{total:?}");
        assert!(total.txns > runs * (90 + 6), "no business transaction took a second step: {total:?}");
    }
}

/// The bank over ideal logs (no faults; every per-execution and end-of-run check of that
/// model, the followers rebuilding each leader's store from the population included).
#[test]
fn bank_ideal_log_sweep() {
    let (mut committed, mut rolled_back) = (0, 0);
    for seed in sweep(100, 20) {
        let config = common::cross(seed).txns(120).probe(4);
        let shards = config.shards.min(3);
        let config = config.hosting(Arc::new(Bank::new(shards, 3 * u64::from(shards))), seed);
        let r = common::must_pass(FILE, "bank_ideal_log_sweep", config);
        committed += r.committed;
        rolled_back += r.proc_aborted;
    }
    if !one_seed() {
        assert!(committed > 0 && rolled_back > 0, "committed {committed}, rolled back {rolled_back}");
    }
}

/// Micro over `shards` shards with a population, through the generic path (its own
/// generator, procedure and check): every key starts with a value, the replay starts from
/// them.
fn micro(shards: u32) -> MicroWorkload {
    let config = MicroConfig {
        keys: 6 * u64::from(shards),
        ops: 6,
        vary_ops: true,
        read_ratio: 0.5,
        cross_shard: 0.6,
        spread: Spread::Random,
        zipf: None,
        distinct_keys: false,
        placement: Placement::Modulo,
        populate: true,
    };
    MicroWorkload::new(config, shards).expect("valid micro configuration")
}

#[test]
fn micro_hosted_faults_sweep() {
    let started = Instant::now();
    let mut total = FailoverReport::default();
    for seed in sweep(1_000, 16) {
        let config = hosted_config(seed, 90).hosting(Arc::new(micro(2 + (seed % 2) as u32)), seed ^ 0x5eed);
        let r = must_pass("micro_hosted_faults_sweep", config, &hosted_faults(seed));
        total.absorb(&r);
    }
    eprintln!("hosted micro with faults: {total:?} in {:?}", started.elapsed());
    assert!(total.committed > 0, "{total:?}");
}

#[test]
fn micro_hosted_ideal_log() {
    for seed in common::seeds(200..206) {
        let config = common::cross(seed).probe(4);
        let shards = config.shards.min(3);
        let config = config.hosting(Arc::new(micro(shards)), seed);
        common::must_pass(FILE, "micro_hosted_ideal_log", config);
    }
}

#[test]
fn hosted_same_seed_same_trace() {
    let faults = FaultConfig { kill: Some(KillPoint::ProposeSent), kills: 2, ..FaultConfig::new() };
    let a = must_pass("hosted_same_seed_same_trace", bank_config(7, bank(7)), &faults);
    let b = must_pass("hosted_same_seed_same_trace", bank_config(7, bank(7)), &faults);
    assert_eq!(a, b, "same seed, same run");
    let c = must_pass("hosted_same_seed_same_trace", bank_config(9, bank(7)), &faults);
    assert_ne!(a.trace_hash, c.trace_hash, "another seed, another run");
}

/// The replay is not vacuous: a procedure whose output is not a function of the state and
/// its arguments (it counts its own runs) answers what no replay in timestamp order gives.
#[test]
fn replay_catches_a_procedure_with_hidden_state() {
    let config = bank_config(3, bank(3).broken(Broken::HiddenState));
    let v = run_replicated(&config, &FaultConfig::new()).expect_err("caught");
    assert_eq!(v.kind, ViolationKind::ResultMismatch, "{v}");
}

/// The workload's own check runs after the replay: a deterministic procedure that makes
/// money passes the replay (every replica and the replay agree) but not the bank's check.
#[test]
fn workload_check_catches_minted_money() {
    let config = bank_config(4, bank(4).broken(Broken::MintsMoney));
    let v = run_replicated(&config, &FaultConfig::new()).expect_err("caught");
    assert_eq!(v.kind, ViolationKind::Consistency, "{v}");
    let config = common::cross(4).hosting(Arc::new(Bank::new(2, 4).broken(Broken::MintsMoney)), 4);
    let v = run(config).expect_err("caught");
    assert_eq!(v.kind, ViolationKind::Consistency, "{v}");
}

/// The replay catches a protocol bug the Raft model has no other check for: leaders that
/// release a transaction although a conflicting one with a smaller timestamp is pending
/// execute conflicting transactions out of timestamp order.
#[test]
fn replay_catches_execution_out_of_timestamp_order() {
    let mut caught = Vec::new();
    for seed in 0..8 {
        let mut config = bank_config(seed, Bank::new(2, 4));
        config.leader.mutations = Mutations { release_ignores_conflicts: true, ..Mutations::default() };
        config.clients = 4;
        config.in_flight = 4;
        if let Err(v) = run_replicated(&config, &FaultConfig { random_faults: false, ..FaultConfig::new() }) {
            caught.push(v.kind);
        }
    }
    eprintln!("out-of-order release caught as {caught:?}");
    assert!(
        caught.iter().any(|k| matches!(k, ViolationKind::ResultMismatch | ViolationKind::StateMismatch)),
        "the replay never caught conflicting transactions executed out of timestamp order: {caught:?}"
    );
}
