//! Issue 26: one shard loses its majority for a long while (its serving leader crashes with
//! executions its followers had not yet applied), the others go on committing cross-shard
//! transactions among themselves, and the shard comes back. Its new leader finds the lost
//! executions prepared and asks the other participants (`Recover`); they keep the outcomes
//! it needs until its committed log has applied past them (`luigi_proto::leader::outcomes`,
//! DESIGN.md rules 7 and 9), so every transaction commits after the heal, and the
//! replicated world's checks and the checker pass.
//!
//! Main's bounded memory (the last 2^17 acknowledged final timestamps, emulated by
//! `Mutations::outcomes_fifo`) does not stall here, even scaled down to 16: with this
//! workload every other shard holds transactions of the down shard pending, so their
//! watermarks stop, their clients acknowledge nothing during the outage, and the memory does
//! not turn over before the shard's new leader asks. The transcript test
//! `leader::tests_outcomes::main_s_fifo_memory_loses_what_a_recovering_peer_needs` shows the
//! stall where a participant does go on acknowledging. The minute-long outage is
//! `minute_long_outage` (ignored: slow).

mod common;

use luigi_sim::{failover_config, run_replicated, FailoverReport, FaultConfig, Outage, SimConfig};

/// Shard 0 of 4 loses its majority at 100 ms for `down_us`; coordinators give up after 2
/// attempts (a transaction waiting on shard 0 is reported unknown and resolved after the
/// heal), so the other shards' cross-shard load goes on meanwhile.
fn outage(seed: u64, down_us: u64, clients: u32, txns: u64) -> (SimConfig, FaultConfig) {
    let mut config = failover_config(seed, 4).cross_shard(1.0).clients(clients).in_flight(4).txns(txns).keys(400);
    config.coordinator.max_attempts = 2;
    config.max_virtual_us = down_us + 60_000_000;
    config.max_events = u64::MAX;
    let outages = vec![Outage { shard: 0, at_us: 100_000, down_us }];
    let faults = FaultConfig {
        random_faults: false,
        outages,
        faults_until_us: 100_000 + down_us,
        liveness_us: 5_000_000,
        ..FaultConfig::new()
    };
    (config, faults)
}

const SEEDS: std::ops::Range<u64> = 7_000..7_004;
/// The scaled-down outage: 2 s without a majority, 8 clients with 4 transactions in flight.
const DOWN_US: u64 = 2_000_000;
const CLIENTS: u32 = 8;
const TXNS: u64 = 3_000;

#[test]
fn a_shard_down_for_seconds_under_cross_shard_load_recovers_and_everything_commits() {
    let mut total = FailoverReport::default();
    let started = std::time::Instant::now();
    for seed in common::seeds(SEEDS) {
        let (config, faults) = outage(seed, DOWN_US, CLIENTS, TXNS);
        match run_replicated(&common::traced(config), &faults) {
            Ok(r) => {
                eprintln!("seed {seed}: {r:?} after {:?}", started.elapsed());
                assert_eq!((r.outages, r.recover_acknowledged), (1, 0));
                total.absorb(&r);
            }
            Err(v) => panic!("seed {seed}: {v}"),
        }
    }
    eprintln!("kept outcomes answered {} recoveries; {total:?}", total.recover_kept);
    if std::env::var(luigi_sim::SEED_ENV).is_err() {
        assert!(total.recover_kept > 0, "no recovery needed an outcome past its answer: the scenario misses the rule");
    }
}

/// A minute without a majority (the outage), at this file's load: every
/// transaction commits after the heal. Slow in debug; run it with
/// `cargo test -p luigi-sim --test outage_outcomes minute -- --ignored --nocapture`.
#[test]
#[ignore = "a minute of virtual time with recoveries every 40 ms: over 20 minutes of real time on a loaded 2-core machine (debug)"]
fn minute_long_outage() {
    let seed = 7_100;
    let (config, faults) = outage(seed, 60_000_000, CLIENTS, TXNS);
    let started = std::time::Instant::now();
    match run_replicated(&config, &faults) {
        Ok(r) => {
            eprintln!("seed {seed}: {r:?} in {:?}", started.elapsed());
            assert_eq!((r.outages, r.recover_acknowledged), (1, 0));
        }
        Err(v) => panic!("seed {seed}: {v}"),
    }
}
