//! The fast path's parts together in the replicated world, without faults (DESIGN.md,
//! "Planned, not built: the fast path"): clients send every dispatch to every replica,
//! followers accept early transactions and answer `FastAccept` once the record is durable,
//! leaders mark unmoved answers with their order hash, and coordinators commit on the
//! accepts. The new leader's recovery of fast commits (R1-R3) is not built, so these runs
//! have no faults; the checker still holds every answer to the committed logs.
//!
//! A failing seed prints the command that reruns it; `LUIGI_SIM_TRACE=1` prints every event.

mod common;

use luigi_sim::{failover_config, FailoverReport, FaultConfig, SimConfig};

/// Two 3-replica shards, single-shard transactions over `keys` keys, clocks within 100 µs
/// (the fast path needs clocks close next to the one-way delays, as Tiga's does), and
/// `headroom_us` on top of the delay estimate.
fn fast(seed: u64, keys: u64, headroom_us: u64) -> SimConfig {
    let mut c = failover_config(seed, 2).keys(keys).cross_shard(0.0).clock_offset_max(100);
    c.leader.fast_path = true;
    c.coordinator.headroom_us = headroom_us;
    c
}

/// The runs of `seeds` with `keys` keys, without faults, summed.
fn runs(test: &str, seeds: std::ops::Range<u64>, keys: u64) -> FailoverReport {
    let faults = FaultConfig { random_faults: false, ..FaultConfig::new() };
    let mut total = FailoverReport::default();
    for seed in common::seeds(seeds) {
        total.absorb(&common::must_pass_replicated("fast_path", test, fast(seed, keys, 1_000), &faults));
    }
    eprintln!("{total:?}");
    total
}

#[test]
fn without_faults_most_uncontended_transactions_commit_on_the_fast_path_and_the_checks_hold() {
    let total =
        runs("without_faults_most_uncontended_transactions_commit_on_the_fast_path_and_the_checks_hold", 1..9, 4_000);
    assert!(total.committed > 0 && total.fast_commits * 2 > total.committed, "{total:?}");
}

#[test]
fn under_contention_fewer_commit_fast_and_every_answer_still_matches_the_logs() {
    let total = runs("under_contention_fewer_commit_fast_and_every_answer_still_matches_the_logs", 11..19, 4);
    assert!(total.committed > 0 && total.fast_commits < total.committed / 2, "{total:?}");
}

/// As [`runs`], with `faults`.
fn runs_with(test: &str, seeds: std::ops::Range<u64>, keys: u64, faults: &FaultConfig) -> FailoverReport {
    let mut total = FailoverReport::default();
    for seed in common::seeds(seeds) {
        total.absorb(&common::must_pass_replicated("fast_path", test, fast(seed, keys, 1_000), faults));
    }
    eprintln!("{total:?}");
    total
}

#[test]
fn leaders_killed_right_after_answering_lose_no_fast_commit() {
    let faults = FaultConfig::kill_at(luigi_sim::KillPoint::SpeculativeAnswer, 3);
    let total = runs_with("leaders_killed_right_after_answering_lose_no_fast_commit", 21..33, 40, &faults);
    assert!(total.kills >= 12 && total.fast_commits > 0, "{total:?}");
}

#[test]
fn random_faults_with_the_fast_path_on() {
    let total = runs_with("random_faults_with_the_fast_path_on", 41..53, 40, &FaultConfig::new());
    assert!(total.crashes > 0 && total.fast_commits > 0, "{total:?}");
}

#[test]
fn a_new_leader_that_skips_the_fast_recovery_is_caught() {
    // Found with random faults (seed 45: a Raft-only partition cut a leader off from its
    // followers while clients still reached all three; they fast-committed, and the new
    // leader never saw the PREPARE).
    let mut config = fast(45, 40, 1_000);
    config.leader.mutations.skip_fast_recovery = true;
    assert!(common::caught_replicated(&config, &FaultConfig::new()), "losing fast commits went unnoticed");
}

#[test]
#[ignore = "fails today: the known hole in DESIGN.md (a deposed leader's vote is not in its \
            accept set); un-ignore once it is closed"]
fn regression_seed_2379_a_fast_commit_lost_under_random_faults() {
    // Found by a release sweep of `random_faults_with_the_fast_path_on` over seeds 41..3041:
    // client 1's seq 59 on shard 1 is fast-committed at ts 84921 (leader R1.0's answer, both
    // followers' accepts). R1.0 is isolated, steps down and rebuilds; R1.2 wins term 3, asks
    // for accepts, and R1.0 answers first with an empty set (its vote was its PREPARE, not an
    // accept): the majority read {R1.2, R1.0} does not hold the transaction in every set, R3
    // skips it, and it is lost. Rerun with LUIGI_SIM_TRACE=1 to see every event.
    common::must_pass_replicated(
        "fast_path",
        "regression_seed_2379_a_fast_commit_lost_under_random_faults",
        fast(2379, 40, 1_000),
        &FaultConfig::new(),
    );
}
