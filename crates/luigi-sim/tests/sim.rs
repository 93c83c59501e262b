//! Seeded simulation runs of the real protocol cores, checked end to end. About every other
//! seed of the sweeps mixes in read-only transactions at a snapshot (DESIGN.md rule 23,
//! `common::reads_on`; one replica per shard here, so the leaders serve them).
//!
//! Every seed-sweeping test honours `LUIGI_SIM_SEED=n` (run only seed `n`) and
//! `LUIGI_SIM_TRACE=1` (print every event), e.g.
//! `LUIGI_SIM_SEED=17 LUIGI_SIM_TRACE=1 cargo test -p luigi-sim --test sim many_seeds -- --nocapture`.

mod common;

use std::collections::HashSet;
use std::time::Instant;

use common::{seeds, Catch, Outcome, Trial};
use luigi_protocol::leader::Mutations;
use luigi_sim::{run, Delay, LinkConfig, Node, RunReport, SimConfig, ViolationKind, SEED_ENV};

/// Runs `config`; on a violation, fails with the violation and the command that reruns it.
fn must_pass(test: &str, config: SimConfig) -> RunReport {
    common::must_pass("sim", test, config)
}

/// A small run shaped by `seed`: 2-5 clients with 1-4 in flight over 20-50 keys, jittered
/// links, clock offsets from none to far beyond the coordinator's 200 us headroom, log commit
/// delays from none (LocalLog) to slow, FIFO or reordering links.
fn varied(seed: u64) -> SimConfig {
    let pick = |options: &[u64], salt: u64| options[((seed / salt) % options.len() as u64) as usize];
    let delay = pick(&[200, 1_000, 5_000], 5);
    let commit = pick(&[0, 500, 2_000], 13);
    SimConfig::new(seed)
        .clients(2 + (seed % 4) as u32)
        .in_flight(1 + (seed / 4 % 4) as usize)
        .txns(120)
        .keys(pick(&[20, 32, 50], 3))
        .delay(delay, pick(&[0, 100, 900], 7).min(delay))
        .clock_offset_max(pick(&[0, 150, 2_000, 10_000], 11))
        .reorder(seed % 2 == 1)
        .log_commit(commit, pick(&[0, 250, 1_500], 17).min(commit))
}

#[test]
fn many_seeds_one_shard() {
    let start = Instant::now();
    let seeds = seeds(0..200);
    let mut committed = 0;
    let mut bumped = 0;
    let mut read_only = 0;
    for &seed in &seeds {
        let report = must_pass("many_seeds_one_shard", common::with_reads_on_half(varied(seed)));
        assert_eq!(report.rejected, 0, "seed {seed}: nothing should be rejected: {report:?}");
        assert_eq!(report.committed, report.txns, "seed {seed}: {report:?}");
        committed += report.committed;
        bumped += report.bumped;
        read_only += report.read_only;
    }
    eprintln!(
        "many_seeds_one_shard: {} seeds, {committed} transactions committed ({bumped} bumped, {read_only} read-only) \
         in {:?}",
        seeds.len(),
        start.elapsed()
    );
    assert!(seeds.len() == 1 || read_only > 0, "no read-only transaction answered");
}

#[test]
fn several_shards_with_single_shard_transactions() {
    let start = Instant::now();
    let seeds = seeds(1_000..1_060);
    let mut read_only = 0;
    for &seed in &seeds {
        let shards = 2 + (seed % 3) as u32;
        let mut config = varied(seed).shards(shards).txns(200).clients(4);
        if seed % 2 == 0 {
            // Shard 1 is far away from every client (asymmetric per-link delays).
            for client in 1..=u64::from(config.clients) {
                let far = LinkConfig::reliable(Delay::new(8_000, 2_000));
                config.links.insert((Node::Client(client), Node::Leader(1)), far);
                config.links.insert((Node::Leader(1), Node::Client(client)), far);
            }
        }
        let report = must_pass("several_shards_with_single_shard_transactions", common::with_reads_on_half(config));
        assert_eq!(report.rejected, 0, "seed {seed}: {report:?}");
        assert_eq!(report.shard_hashes.len(), shards as usize);
        read_only += report.read_only;
    }
    eprintln!(
        "several_shards_with_single_shard_transactions: {} seeds ({read_only} read-only answered) in {:?}",
        seeds.len(),
        start.elapsed()
    );
    assert!(seeds.len() == 1 || read_only > 0, "no read-only transaction answered");
}

#[test]
fn real_time_order_holds_across_shards_with_synchronized_clocks() {
    // With equal clocks, a transaction answered before another is dispatched has the smaller
    // timestamp even on another shard (its timestamp is at most its leader's clock when it
    // answered; the later one's is at least its leader's clock when it arrived).
    for seed in seeds(6_000..6_020) {
        let mut config = varied(seed).shards(2 + (seed % 3) as u32).clock_offset_max(0).delay(1_000, 900);
        config.check_realtime_across_shards = true;
        must_pass("real_time_order_holds_across_shards_with_synchronized_clocks", common::with_reads_on_half(config));
    }
}

#[test]
fn lossy_links_are_recovered_by_retries() {
    let (mut retries, mut read_only) = (0, 0);
    let runs = seeds(2_000..2_010);
    for &seed in &runs {
        let mut config = varied(seed).shards(1 + (seed % 2) as u32).drop_rate(0.05);
        config.coordinator.retry_timeout_us = 50_000;
        config.coordinator.max_attempts = 50;
        let report = must_pass("lossy_links_are_recovered_by_retries", common::with_reads_on_half(config));
        retries += report.retries;
        read_only += report.read_only;
    }
    assert!(retries > 0, "5% loss must force some retries");
    assert!(runs.len() == 1 || read_only > 0, "no read-only transaction answered");
}

#[test]
fn cross_shard_transactions_are_answered_consistently() {
    // A smoke test on the single-shard test shapes; `cross_shard.rs` has the thorough ones.
    for seed in seeds(3_000..3_010) {
        let config = varied(seed).shards(2 + (seed % 2) as u32).txns(80).cross_shard(0.5);
        let report = must_pass("cross_shard_transactions_are_answered_consistently", config);
        assert!(report.cross_shard > 0 && report.leaders.cross_decided > 0, "seed {seed}: {report:?}");
        assert_eq!(report.committed, report.txns, "seed {seed}: {report:?}");
    }
}

#[test]
fn same_seed_same_run_different_seed_different_trace() {
    // Lossy, reordering links and a retry timeout below the round trip: many dispatches are
    // retried, several in the same tick, which exercises every source of nondeterminism.
    let config = |seed| {
        let mut c = varied(seed).shards(2).in_flight(8).delay(1_000, 500).reorder(true).drop_rate(0.02);
        c.coordinator.retry_timeout_us = 1_500;
        c.coordinator.max_attempts = 1_000;
        c
    };
    let mut hashes = HashSet::new();
    for seed in seeds(4_000..4_012) {
        let a = must_pass("same_seed_same_run_different_seed_different_trace", config(seed));
        let b = must_pass("same_seed_same_run_different_seed_different_trace", config(seed));
        assert_eq!(a, b, "seed {seed} is not deterministic");
        assert!(a.retries > 0 && a.duplicates > 0, "seed {seed}: {a:?}");
        assert!(hashes.insert(a.trace_hash), "seed {seed}: trace hash {:#x} repeats", a.trace_hash);
    }
}

#[test]
fn checker_catches_release_ignoring_conflicts() {
    let mutated = Mutations { release_ignores_conflicts: true, ..Mutations::default() };
    // Cross-shard transactions wait for agreement in the hold queue: conflicting later ones
    // must wait behind them (single-shard ones are decided at admission, rule 14, and alone
    // rarely overlap in the queue). The execution-order check sees the inversion as it
    // happens, before any answer or final state is compared.
    let (_, first) = common::caught_as(
        "sim",
        "checker_catches_release_ignoring_conflicts",
        &seeds(5_000..5_005),
        Catch::Kind(ViolationKind::ExecutionOrder),
        |seed| Trial::ideal(SimConfig::new(seed).shards(2).cross_shard(0.5).clients(4).in_flight(4).txns(100).keys(20)),
        |t| t.config.leader.mutations = mutated,
    );
    let Outcome::Violated(v) = first else { unreachable!("caught as a kind of violation") };
    let text = v.to_string();
    assert!(text.contains(&format!("seed {}", v.seed.expect("seeded"))), "{text}");
    assert!(text.contains(SEED_ENV), "the message says how to rerun: {text}");
}

#[test]
fn a_run_that_cannot_finish_is_reported_as_stuck() {
    let mut config = SimConfig::new(7).txns(50);
    config.max_virtual_us = 3_000; // far too short for 50 transactions
    let v = run(config).expect_err("cannot finish");
    assert_eq!(v.kind, ViolationKind::Stuck, "{v}");
    assert!(v.message.contains("did not finish"), "{v}");
    assert!(v.to_string().contains("seed 7"), "{v}");
}

#[test]
fn invalid_configurations_are_refused() {
    let v = run(SimConfig::new(1).shards(4).keys(3)).expect_err("fewer keys than shards");
    assert_eq!(v.kind, ViolationKind::Config, "{v}");
    let v = run(SimConfig::new(1).clients(0)).expect_err("no clients");
    assert_eq!(v.kind, ViolationKind::Config, "{v}");
}
