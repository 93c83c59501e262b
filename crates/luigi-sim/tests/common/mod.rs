//! Helpers shared by the seed-sweeping test files: seed selection, tracing, and the
//! cross-shard configurations.

#![allow(dead_code)] // each test file uses a subset

use luigi_sim::{run, run_replicated, FailoverReport, FaultConfig, Node, RunReport, SimConfig, SEED_ENV, TRACE_ENV};

/// The seeds to run: `range`, or only the one named by `LUIGI_SIM_SEED`.
pub fn seeds(range: std::ops::Range<u64>) -> Vec<u64> {
    match std::env::var(SEED_ENV) {
        Ok(s) => vec![s.trim().parse().unwrap_or_else(|_| panic!("{SEED_ENV}={s} is not a seed"))],
        Err(_) => range.collect(),
    }
}

/// The seeds of a sweep: `LUIGI_SIM_SWEEP` of them (default `count`) from
/// `LUIGI_SIM_SWEEP_FROM` (default `from`), or only `LUIGI_SIM_SEED`.
pub fn sweep(from: u64, count: u64) -> Vec<u64> {
    let env = |name: &str, default: u64| std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    let from = env("LUIGI_SIM_SWEEP_FROM", from);
    seeds(from..from + env("LUIGI_SIM_SWEEP", count))
}

/// Turns on event tracing when `LUIGI_SIM_TRACE` is set.
pub fn traced(mut config: SimConfig) -> SimConfig {
    config.trace = std::env::var(TRACE_ENV).is_ok_and(|v| v != "0");
    config
}

/// Runs `config` replicated with `faults` (a run with a deliberate bug) and says whether it
/// was caught: by a violation, or by a panic (an assertion in the code, or raft-rs's own).
pub fn caught_replicated(config: &SimConfig, faults: &FaultConfig) -> bool {
    let seed = config.seed;
    match std::panic::catch_unwind(|| run_replicated(config, faults)) {
        Ok(Ok(_)) => false,
        Ok(Err(v)) => {
            eprintln!("seed {seed}: caught {:?}: {}", v.kind, v.message.chars().take(200).collect::<String>());
            true
        }
        Err(_) => {
            eprintln!("seed {seed}: a panic (an assertion in the code, or raft-rs's) caught it");
            true
        }
    }
}

/// Runs `config`; on a violation, fails with the violation and the command that reruns it.
pub fn must_pass(file: &str, test: &str, config: SimConfig) -> RunReport {
    let seed = config.seed;
    match run(traced(config)) {
        Ok(report) => report,
        Err(v) => panic!(
            "{test}: {v}\n  rerun this seed alone: {SEED_ENV}={seed} cargo test -p luigi-sim \
             --test {file} {test} -- --nocapture (add {TRACE_ENV}=1 for every event)"
        ),
    }
}

/// Runs `config` replicated with `faults`; on a violation, fails with it and the command that
/// reruns the seed.
pub fn must_pass_replicated(file: &str, test: &str, config: SimConfig, faults: &FaultConfig) -> FailoverReport {
    let seed = config.seed;
    match run_replicated(&traced(config), faults) {
        Ok(report) => report,
        Err(v) => panic!(
            "{test}: {v}\n  rerun this seed alone: {SEED_ENV}={seed} cargo test -p luigi-sim \
             --test {file} {test} -- --nocapture (add {TRACE_ENV}=1 for every event)"
        ),
    }
}

/// A cross-shard run shaped by `seed`: 2-5 shards, 2-5 clients with 1-4 in flight, 2-6 keys
/// per shard, 30-100% cross-shard transactions (2 to all shards each), every directed link
/// with its own delay (50 us to 10 ms means, jitter up to 80%), clock offsets from none to
/// ±20 ms (100x the 200 us headroom), log commits from none to 2 ms, FIFO or reordering
/// client links, FIFO or reordering leader links (never lossy).
pub fn cross(seed: u64) -> SimConfig {
    let pick = |options: &[u64], salt: u64| options[((seed / salt) % options.len() as u64) as usize];
    let shards = 2 + (seed % 4) as u32;
    let (lo, hi) = [(50, 400), (200, 3_000), (1_000, 10_000)][pick(&[0, 1, 2], 3) as usize];
    let commit = pick(&[0, 300, 2_000], 7);
    let mut c = SimConfig::new(seed)
        .shards(shards)
        .clients(2 + (seed / 4 % 4) as u32)
        .in_flight(1 + (seed / 16 % 4) as usize)
        .txns(150)
        .keys(u64::from(shards) * pick(&[2, 3, 6], 5))
        .cross_shard([0.3, 0.6, 1.0][(seed / 11 % 3) as usize])
        .clock_offset_max(pick(&[0, 150, 2_000, 20_000], 13))
        .reorder(seed % 2 == 1)
        .log_commit(commit, commit / 2)
        .per_link_delays(lo, hi, pick(&[0, 20, 80], 17));
    c.peer_links_fifo = !seed.is_multiple_of(3);
    c
}

/// Every transaction cross-shard, leaders' clocks 5-35 ms apart, no headroom and no pings
/// (the coordinator's delay estimate would otherwise absorb the offsets): the participants'
/// proposals differ often, so the second round runs a lot.
pub fn skewed(seed: u64) -> SimConfig {
    let mut c = cross(seed).cross_shard(1.0).clock_offset_max(0).per_link_delays(200, 3_000, 90);
    c.ping_first = false;
    c.coordinator.headroom_us = 0;
    for s in 0..c.shards {
        let offset = ((seed * 7 + u64::from(s) * 13) % 8) as i64 * 5_000 - 17_500;
        c = c.clock_offset(Node::Leader(s), offset);
    }
    c
}

/// `cross(seed)` with 1-3 transactions pending per leader at most, so leaders refuse and the
/// other participants abort. Clients sit close to every leader (50-400 us) and leaders far
/// from each other (1.5-4 ms), so an agreement item never overtakes a dispatch: with a tiny
/// pending limit an early item would hit the known early-buffer bug (see `known_bugs.rs`).
pub fn refusing(seed: u64) -> SimConfig {
    let mut c = cross(seed).per_link_delays(50, 400, 50).peer_link_delays(1_500, 4_000, 20);
    c.leader.max_pending = 1 + (seed % 3) as usize;
    c
}
