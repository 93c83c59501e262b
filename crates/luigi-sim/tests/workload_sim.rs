//! Hosted workloads in the simulator: any `luigi_workloads::Workload` run by the simulated
//! clients (one generator each, multi-step business transactions followed), every replica
//! starting from the workload's population, under faults, and checked after every seed by the
//! workload-independent replay (every ordered transaction in timestamp order through the
//! workload's procedures, from the population, outputs and final stores compared), the
//! workload's own consistency check, liveness once the faults healed (a probe of new
//! transactions on the settled cluster) and every per-step check of the cluster model. About
//! every other seed of each sweep takes the read-only path (DESIGN.md rule 23,
//! `common::reads_on`): transactions that declare no writes (the bank's audits, micro's
//! reads) read a snapshot at the nearest replicas, followers included.
//!
//! Workloads: a small bank written here (`workload_sim/bank.rs`: transfers, audits, a
//! two-step rebalance) and micro with a population (`MicroWorkload`); TPC-C is in
//! `tpcc_sim.rs`.
//!
//! `LUIGI_SIM_SEED=n` runs one seed of a sweep, `LUIGI_SIM_TRACE=1` prints every event,
//! `LUIGI_SIM_SWEEP=n` / `LUIGI_SIM_SWEEP_FROM=n` size the sweeps (`bank_faults_sweep`,
//! `micro_hosted_faults_sweep`; TPC-C's are in `tpcc_sim.rs`), e.g.
//! `LUIGI_SIM_SWEEP=200 cargo test -p luigi-sim --test workload_sim bank -- --nocapture`.

#[path = "workload_sim/bank.rs"]
mod bank;
mod common;
#[path = "workload_sim/support.rs"]
mod support;

use std::sync::Arc;
use std::time::Instant;

use luigi_protocol::leader::Mutations;
use luigi_sim::{FailoverReport, FaultConfig, KillPoint, SimConfig, ViolationKind};
use luigi_workloads::micro::{MicroConfig, MicroWorkload, Placement, Spread};

use bank::{Bank, Broken};
use common::{Catch, Trial, World};
use support::{hosted_config, hosted_faults, one_seed, sweep};

const FILE: &str = "workload_sim";

fn must_pass(test: &str, config: SimConfig, faults: &FaultConfig) -> FailoverReport {
    support::must_pass(FILE, test, config, faults)
}

/// The bank over 2 or 3 shards, few accounts so transactions conflict.
fn bank(seed: u64) -> Bank {
    let shards = 2 + (seed % 2) as u32;
    Bank::new(shards, 4 * u64::from(shards))
}

fn bank_config(seed: u64, workload: Bank) -> SimConfig {
    hosted_config(seed, 90).hosting(Arc::new(workload), seed)
}

/// `bank_config` with leaders that never refuse for want of room (the tests that break
/// the bank on purpose want its transactions to run).
fn roomy_bank_config(seed: u64, workload: Bank) -> SimConfig {
    let mut config = bank_config(seed, workload);
    config.leader.max_pending = SimConfig::new(seed).leader.max_pending;
    config
}

#[test]
fn bank_faults_sweep() {
    let started = Instant::now();
    let mut total = FailoverReport::default();
    let mut runs = 0;
    for seed in sweep(1, 24) {
        let workload = bank(seed);
        let shards = workload.shards;
        let config = common::with_reads_on_half(bank_config(seed, workload));
        let r = must_pass("bank_faults_sweep", config, &hosted_faults(seed, shards));
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
        assert_reads_from_followers(&total);
    }
}

/// Over a sweep whose seeds mix in reads: some were answered, and some of their pieces by
/// followers.
fn assert_reads_from_followers(total: &FailoverReport) {
    assert!(total.read_only > 0 && total.snapshot_reads_by_followers > 0, "{total:?}");
}

/// The bank over ideal logs (no faults; every per-execution and end-of-run check of that
/// model, the followers rebuilding each leader's store from the population included).
#[test]
fn bank_ideal_log_sweep() {
    let (mut committed, mut rolled_back, mut read_only) = (0, 0, 0);
    for seed in sweep(100, 20) {
        let config = common::cross(seed).txns(120).probe(4);
        let shards = config.shards.min(3);
        let config = config.hosting(Arc::new(Bank::new(shards, 3 * u64::from(shards))), seed);
        let r = common::must_pass(FILE, "bank_ideal_log_sweep", common::with_reads_on_half(config));
        committed += r.committed;
        rolled_back += r.proc_aborted;
        read_only += r.read_only;
    }
    if !one_seed() {
        assert!(committed > 0 && rolled_back > 0, "committed {committed}, rolled back {rolled_back}");
        assert!(read_only > 0, "no audit read a snapshot");
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
        let shards = 2 + (seed % 2) as u32;
        let config =
            common::with_reads_on_half(hosted_config(seed, 90).hosting(Arc::new(micro(shards)), seed ^ 0x5eed));
        let r = must_pass("micro_hosted_faults_sweep", config, &hosted_faults(seed, shards));
        total.absorb(&r);
    }
    eprintln!("hosted micro with faults: {total:?} in {:?}", started.elapsed());
    assert!(total.committed > 0, "{total:?}");
    if !one_seed() {
        assert_reads_from_followers(&total);
    }
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

/// A hosted population composes with the synthetic rows of `FaultConfig::population_bytes`
/// (snapshots then carry both, in many chunks): every replica starts from both, the replay
/// from the bank's alone.
#[test]
fn bank_with_a_synthetic_population_and_snapshots() {
    let faults = FaultConfig { snapshot_entries: Some(20), population_bytes: 2 << 20, ..FaultConfig::new() };
    let mut compactions = 0;
    for seed in common::seeds(40..43) {
        let r = must_pass("bank_with_a_synthetic_population_and_snapshots", bank_config(seed, bank(seed)), &faults);
        compactions += r.compactions;
    }
    assert!(compactions > 0, "no follower snapshotted");
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
    broken_bank_caught_as(
        "replay_catches_a_procedure_with_hidden_state",
        3,
        World::Replicated(FaultConfig::new()),
        Broken::HiddenState,
        ViolationKind::ResultMismatch,
    );
}

/// The mutation test `test`: on `seed`, the bank broken as `broken` is caught as `kind` in
/// `world`, and the correct bank passes.
fn broken_bank_caught_as(test: &str, seed: u64, world: World, broken: Broken, kind: ViolationKind) {
    let trial = |seed| match &world {
        World::Ideal => Trial::ideal(common::cross(seed).hosting(Arc::new(Bank::new(2, 4)), seed)),
        World::Replicated(faults) => Trial::replicated(roomy_bank_config(seed, bank(seed)), faults.clone()),
    };
    common::caught_as(FILE, test, &[seed], Catch::Kind(kind), trial, |t| {
        t.config = match &t.world {
            World::Ideal => common::cross(seed).hosting(Arc::new(Bank::new(2, 4).broken(broken)), seed),
            World::Replicated(_) => roomy_bank_config(seed, bank(seed).broken(broken)),
        }
    });
}

/// The workload's own check runs after the replay: a deterministic procedure that makes
/// money passes the replay (every replica and the replay agree) but not the bank's check.
#[test]
fn workload_check_catches_minted_money() {
    let test = "workload_check_catches_minted_money";
    let consistency = ViolationKind::Consistency;
    broken_bank_caught_as(test, 4, World::Replicated(FaultConfig::new()), Broken::MintsMoney, consistency);
    broken_bank_caught_as(test, 4, World::Ideal, Broken::MintsMoney, consistency);
}

/// The replay catches a protocol bug the Raft model has no other check for: leaders that
/// release a transaction although a conflicting one with a smaller timestamp is pending
/// execute conflicting transactions out of timestamp order.
#[test]
fn replay_catches_execution_out_of_timestamp_order() {
    common::caught_as(
        FILE,
        "replay_catches_execution_out_of_timestamp_order",
        &common::seeds(0..8),
        Catch::Kind(ViolationKind::ResultMismatch),
        |seed| {
            let mut config = roomy_bank_config(seed, Bank::new(2, 4));
            config.clients = 4;
            config.in_flight = 4;
            Trial::replicated(config, FaultConfig { random_faults: false, ..FaultConfig::new() })
        },
        |t| t.config.leader.mutations = Mutations { release_ignores_conflicts: true, ..Mutations::default() },
    );
}

/// The replay starts from the workload's population (the checker's `check_from`): a read of
/// a populated key answered with its initial value passes from the population and fails
/// from empty stores; a mutated output or a transaction rolled back on one participant only
/// fails from the population too.
#[test]
fn the_replay_starts_from_the_population_and_compares_outputs() {
    use std::collections::BTreeMap;

    use luigi_sim::checker::{check_from, AnswerRecord, CheckOptions, History, Moment, TxnRecord};
    use luigi_txn::client_core::TxnOutcome;
    use luigi_txn::types::TxnId;
    use luigi_workloads::Workload;

    let bank = Bank::new(2, 4);
    let registry = bank.registry();
    let initial: Vec<luigi_store::Store> = (0..2).map(|s| bank.populate(0, s)).collect();
    // An audit of accounts 0 (shard 0) and 1 (shard 1), answered from the population.
    let mut generator = bank.generator(1);
    let audit = std::iter::repeat_with(|| generator.next_txn().expect("draws"))
        .find(|t| t.procedure == "bank.audit" && t.pieces.len() == 2)
        .expect("a cross-shard audit");
    let results: Vec<(u32, Result<Vec<u8>, luigi_txn::msg::TxnError>)> = audit
        .pieces
        .iter()
        .map(|p| {
            let mut store = initial[p.shard as usize].clone();
            (p.shard, registry.execute(&audit.procedure, &audit.args, &mut store, &p.keys, p.shard).map_err(Into::into))
        })
        .collect();
    let record = |results: Vec<(u32, Result<Vec<u8>, luigi_txn::msg::TxnError>)>| History {
        txns: vec![TxnRecord {
            id: TxnId { client: 1, seq: 1 },
            procedure: audit.procedure.clone(),
            args: audit.args.clone(),
            pieces: audit.pieces.clone(),
            dispatched: Moment::at(0),
            answers: vec![AnswerRecord {
                at: Moment::at(10),
                outcome: TxnOutcome::Ordered { ts: 5, results },
                attempts: 1,
                read_only: false,
            }],
        }],
    };
    let stores: Vec<&luigi_store::Store> = initial.iter().collect();
    let check = |h: &History, from: &[luigi_store::Store]| {
        check_from(h, &BTreeMap::new(), &registry, from, &stores, CheckOptions::default())
    };
    check(&record(results.clone()), &initial).expect("the answers are the population's");
    let empty = vec![luigi_store::Store::new(); 2];
    let v = check(&record(results.clone()), &empty).expect_err("not from empty stores");
    assert_eq!(v.kind, ViolationKind::ResultMismatch, "{v}");
    let mut mutated = results.clone();
    if let Ok(out) = &mut mutated[1].1 {
        *out.last_mut().expect("an output") ^= 1;
    }
    let v = check(&record(mutated), &initial).expect_err("a mutated output");
    assert_eq!(v.kind, ViolationKind::ResultMismatch, "{v}");
    let mut half = results;
    half[0].1 = Err(luigi_txn::procedure::ProcError::UserAbort("only here".into()).into());
    let v = check(&record(half), &initial).expect_err("rolled back on one participant only");
    assert_eq!(v.kind, ViolationKind::ResultMismatch, "{v}");
}
