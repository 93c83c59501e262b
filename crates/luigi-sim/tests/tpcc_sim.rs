//! TPC-C (`luigi_workloads::tpcc`) in the simulator: small warehouses over 2 or 3 shards of
//! 1 or 3 replicas, the standard mix with remote supply lines and remote payments raised so
//! that cross-shard transactions are common, under faults (random crashes, isolations and
//! Raft-only cuts, kill points, lossy and reordering links, clock skew). After every seed:
//! the replay of every ordered transaction through the TPC-C procedures from the population
//! (outputs and final stores), the twelve consistency conditions on the final stores,
//! liveness once the faults healed, and every per-step check of the cluster model. About every
//! other seed of each sweep takes the read-only path (DESIGN.md rule 23, `common::reads_on`):
//! Order-Status and Stock-Level read a snapshot at the nearest replicas, followers included.
//!
//! `LUIGI_SIM_SEED=n` runs one seed, `LUIGI_SIM_TRACE=1` prints every event,
//! `LUIGI_SIM_SWEEP=n` / `LUIGI_SIM_SWEEP_FROM=n` size `tpcc_faults_sweep` (default 40 seeds
//! from 1) and `tpcc_ideal_log_sweep` (default 9 from 50), e.g.
//! `LUIGI_SIM_SWEEP=500 cargo test -p luigi-sim --test tpcc_sim -- --nocapture`.

mod common;
#[path = "workload_sim/support.rs"]
mod support;

use std::sync::Arc;
use std::time::Instant;

use luigi_protocol::leader::Mutations;
use luigi_sim::{FailoverReport, FaultConfig, SimConfig, ViolationKind};
use luigi_store::{Key, Store, Value};
use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::{ProcCtx, ProcError, Procedure, Registry};
use luigi_txn::types::ShardId;
use luigi_workloads::tpcc::keys::{w_ytd_key, warehouse_of};
use luigi_workloads::tpcc::{Mix, TpccConfig, TpccLoad, TpccWorkload};
use luigi_workloads::{TxnGenerator, Workload};

use common::{Catch, Trial};
use support::{hosted_config, hosted_faults, one_seed, sweep};

const FILE: &str = "tpcc_sim";

/// TPC-C shaped by `seed`: 2 or 3 shards, as many warehouses or one more (at most 3), scale
/// 0.01 or 0.02, the standard mix with 10 % of supply lines and 50 % of payments remote, the
/// population drawn from the seed.
fn tpcc(seed: u64) -> TpccWorkload {
    let shards = 2 + (seed % 2) as u32;
    let warehouses = (shards + (seed / 2 % 2) as u32).min(3);
    let config = TpccConfig { warehouses, scale: [0.01, 0.02][(seed / 4 % 2) as usize], seed: seed ^ 0x7cc };
    let load = TpccLoad { mix: Mix::Standard, remote_item_pct: 10.0, remote_payment_pct: 50.0 };
    TpccWorkload::new(config, load, shards).expect("valid TPC-C configuration")
}

fn tpcc_config(seed: u64, txns: u64, workload: Arc<dyn Workload>, population_seed: u64) -> SimConfig {
    hosted_config(seed, txns).hosting(workload, population_seed)
}

fn hosted(seed: u64) -> SimConfig {
    let w = tpcc(seed);
    let population_seed = w.config().seed;
    tpcc_config(seed, 100, Arc::new(w), population_seed)
}

#[test]
fn tpcc_faults_sweep() {
    let started = Instant::now();
    let mut total = FailoverReport::default();
    let mut runs = 0u32;
    for seed in sweep(1, 40) {
        let at = Instant::now();
        let config = common::with_reads_on_half(hosted(seed));
        let faults = hosted_faults(seed, config.shards);
        let r = support::must_pass(FILE, "tpcc_faults_sweep", config, &faults);
        if one_seed() {
            eprintln!("{r:?} in {:?}", at.elapsed());
        }
        total.absorb(&r);
        runs += 1;
    }
    let per_seed = started.elapsed() / runs.max(1);
    eprintln!("TPC-C with faults: {runs} seeds in {:?} ({per_seed:?} a seed): {total:?}", started.elapsed());
    if !one_seed() {
        assert!(total.committed > 0 && total.crashes > 0 && total.kills > 0, "{total:?}");
        assert_reads_from_followers(&total);
    }
}

/// Over a sweep whose seeds mix in reads: some were answered, and some of their pieces by
/// followers.
fn assert_reads_from_followers(total: &FailoverReport) {
    assert!(total.read_only > 0 && total.snapshot_reads_by_followers > 0, "{total:?}");
}

/// TPC-C over ideal logs: the followers rebuild every leader's store from the population
/// and the log, and execution order per key is checked against timestamps and logs. The
/// network and clocks of `common::cross`, `common::skewed` (proposals differ, second rounds)
/// or `common::refusing` (leaders with 1-3 pending transactions refuse, others abort) by
/// seed.
#[test]
fn tpcc_ideal_log_sweep() {
    let (mut committed, mut rejected, mut read_only) = (0, 0, 0);
    for seed in sweep(50, 9) {
        let w = tpcc(seed);
        let population_seed = w.config().seed;
        let shape = [common::cross, common::skewed, common::refusing][(seed % 3) as usize];
        let config = shape(seed).txns(100).probe(4).hosting(Arc::new(w), population_seed);
        let r = common::must_pass(FILE, "tpcc_ideal_log_sweep", common::with_reads_on_half(config));
        committed += r.committed;
        rejected += r.rejected;
        read_only += r.read_only;
    }
    eprintln!("TPC-C over ideal logs: {committed} committed ({read_only} read-only), {rejected} rejected");
    assert!(one_seed() || read_only > 0, "no read-only transaction answered");
}

/// The replay catches TPC-C transactions executed out of timestamp order (leaders that
/// release a transaction while a conflicting one with a smaller timestamp is pending), which
/// nothing else checks in the Raft model.
#[test]
fn tpcc_replay_catches_execution_out_of_timestamp_order() {
    // Single-shard transactions are decided at admission (rule 14), so a conflicting one is
    // still pending when a later one is due only behind a cross-shard transaction's
    // agreement: seeds 7 and 11 had one until issue 26's marker reports moved the traces
    // (seeds 7..12 then ended Stuck with the mutation); of 7..40, seeds 12, 13, 16, 19, 20,
    // 30, 33, 37 and 39 showed the mismatch after that. Since answers wait only for
    // admission to close (rule 7, 2026-11-28), seeds 12..18 and 23 end Stuck with it (the
    // healed cluster does not converge) and 19..22 show the mismatch.
    common::caught_as(
        FILE,
        "tpcc_replay_catches_execution_out_of_timestamp_order",
        &common::seeds(19..21),
        // The replay's comparison of answers.
        Catch::Kind(ViolationKind::ResultMismatch),
        |seed| {
            let mut config = hosted(seed).clock_offset_max(0);
            config.leader.max_pending = SimConfig::new(seed).leader.max_pending;
            config.clients = 4;
            config.in_flight = 4;
            Trial::replicated(config, FaultConfig { random_faults: false, settle_us: 1_000_000, ..FaultConfig::new() })
        },
        |t| t.config.leader.mutations = Mutations { release_ignores_conflicts: true, ..Mutations::default() },
    );
}

/// TPC-C whose Payment loses W_YTD (it deletes the row it should add to), deterministic so
/// every replica and the replay agree; the twelve conditions do not.
struct LosesYtd(TpccWorkload);

struct DeleteYtd;

impl Procedure for DeleteYtd {
    fn execute(&self, ctx: &mut dyn ProcCtx, _args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let ytd: Vec<Key> = ctx
            .keys()
            .writes
            .iter()
            .filter(|k| warehouse_of(k).is_some_and(|w| **k == w_ytd_key(w)))
            .cloned()
            .collect();
        for k in ytd {
            ctx.delete(&k)?;
        }
        Ok(Vec::new())
    }
}

impl Workload for LosesYtd {
    fn name(&self) -> &'static str {
        "tpcc-loses-ytd"
    }

    fn register(&self, registry: &mut Registry) {
        self.0.register(registry);
        registry.register(luigi_workloads::tpcc::procedures::PAYMENT, Arc::new(DeleteYtd));
    }

    fn partitioner(&self) -> Arc<dyn Partitioner> {
        self.0.partitioner()
    }

    fn generator(&self, seed: u64) -> Box<dyn TxnGenerator> {
        self.0.generator(seed)
    }

    fn population(&self, seed: u64, shard: ShardId) -> Vec<(Key, Value)> {
        self.0.population(seed, shard)
    }

    fn check(&self, seed: u64, stores: &[&Store]) -> Result<(), String> {
        self.0.check(seed, stores)
    }
}

#[test]
fn tpcc_conditions_catch_a_payment_that_loses_w_ytd() {
    let test = "tpcc_conditions_catch_a_payment_that_loses_w_ytd";
    let workload = |broken: bool| -> Arc<dyn Workload> {
        if broken {
            Arc::new(LosesYtd(tpcc(2)))
        } else {
            Arc::new(tpcc(2))
        }
    };
    let replicated = |broken| {
        let mut config = tpcc_config(2, 40, workload(broken), 1);
        config.leader.max_pending = SimConfig::new(2).leader.max_pending;
        Trial::replicated(config, FaultConfig::new())
    };
    let consistency = Catch::Kind(ViolationKind::Consistency);
    common::caught_as(FILE, test, &[2], consistency, |_| replicated(false), |t| *t = replicated(true));
    let ideal = |broken| Trial::ideal(common::cross(2).txns(40).hosting(workload(broken), 1));
    common::caught_as(FILE, test, &[2], consistency, |_| ideal(false), |t| *t = ideal(true));
}
