//! The fast path's parts together in the replicated world, with and without faults (DESIGN.md,
//! "The fast path"): clients send every dispatch to every replica,
//! followers accept early transactions and answer `FastAccept` once the record is durable,
//! leaders mark unmoved answers with their order hash, and coordinators commit on the
//! accepts. With faults, a new leader recovers what may have been fast-committed (R1-R3)
//! before it serves; the checker holds every answer to the committed logs.
//!
//! A failing seed prints the command that reruns it; `LUIGI_SIM_TRACE=1` prints every event.
//! `LUIGI_SIM_SWEEP=n` / `LUIGI_SIM_SWEEP_FROM=n` size the two fault sweeps (defaults: 12
//! seeds from 21 with kills, 12 from 41 with random faults), e.g.
//! `LUIGI_SIM_SWEEP=3000 cargo test --release -p luigi-sim --test fast_path random -- --nocapture`.

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
fn runs_with(test: &str, seeds: Vec<u64>, keys: u64, faults: &FaultConfig) -> FailoverReport {
    let mut total = FailoverReport::default();
    for seed in seeds {
        total.absorb(&common::must_pass_replicated("fast_path", test, fast(seed, keys, 1_000), faults));
    }
    eprintln!("{total:?}");
    total
}

#[test]
fn leaders_killed_right_after_answering_lose_no_fast_commit() {
    let faults = FaultConfig::kill_at(luigi_sim::KillPoint::SpeculativeAnswer, 3);
    let total =
        runs_with("leaders_killed_right_after_answering_lose_no_fast_commit", common::sweep(21, 12), 40, &faults);
    assert!(total.kills >= 12 && total.fast_commits > 0, "{total:?}");
}

#[test]
fn random_faults_with_the_fast_path_on() {
    let total = runs_with("random_faults_with_the_fast_path_on", common::sweep(41, 12), 40, &FaultConfig::new());
    assert!(total.crashes > 0 && total.fast_commits > 0, "{total:?}");
}

/// Whether random faults catch the broken rule `mutate` sets on some seed of `seeds`.
fn caught_on_some_seed(seeds: std::ops::Range<u64>, mutate: impl Fn(&mut SimConfig)) -> bool {
    seeds.into_iter().any(|seed| {
        let mut config = fast(seed, 40, 1_000);
        mutate(&mut config);
        common::caught_replicated(&config, &FaultConfig::new())
    })
}

#[test]
fn a_new_leader_that_skips_the_fast_recovery_is_caught() {
    // Random faults catch it within a few dozen seeds (the first catch, at seed 45: a
    // Raft-only partition cut a leader off from its followers while clients still reached
    // all three; they fast-committed, and the new leader never saw the PREPARE).
    let caught = caught_on_some_seed(41..90, |c| c.leader.mutations.skip_fast_recovery = true);
    assert!(caught, "losing fast commits went unnoticed on seeds 41..90");
}

#[test]
fn a_leader_that_answers_fast_without_its_vote_is_caught() {
    // Found by a release search with the mutation on (seed 389 while the recovery waited for
    // the no-op, seed 60 since it is computed at the election): a deposed leader's PREPARE
    // truncated, its answer to the new leader's question without the transaction it had
    // answered fast; the transaction is lost (NotDurable).
    let caught = caught_on_some_seed(55..65, |c| c.leader.mutations.skip_leader_vote = true);
    assert!(caught, "a leader's lost vote went unnoticed on seeds 55..65");
}

#[test]
fn a_coordinator_that_commits_fast_on_different_order_hashes_is_caught() {
    // Found by a release search (first catch at seed 123 with 40 keys): after a failover,
    // an answer no longer matches the serial replay of the committed logs (ResultMismatch).
    // Equal hashes are what make the followers' recent order the leader's.
    let caught = caught_on_some_seed(120..126, |c| c.coordinator.mutations.fast_ignores_order = true);
    assert!(caught, "fast commits on differing order hashes went unnoticed on seeds 120..126");
}

#[test]
fn a_leader_that_marks_answers_fast_without_rule_f2_is_caught() {
    // Rare under random faults: a release search found seed 2838 while the recovery waited
    // for the no-op, and seed 4992 (none in 41..4000 with 8 or 40 keys) since it runs at the
    // election. A transaction answered fast although a conflicting one above it was
    // admitted first; after a failover an answer no longer matches the serial replay.
    let caught = caught_on_some_seed(4992..4993, |c| c.leader.mutations.fast_ignores_f2 = true);
    assert!(caught, "answers marked fast without F2 went unnoticed at seed 4992");
}

#[test]
fn regression_seed_2379_a_fast_commit_lost_under_random_faults() {
    // Found by a release sweep of `random_faults_with_the_fast_path_on` over seeds 41..3041:
    // client 1's seq 59 on shard 1 is fast-committed at ts 84921 (leader R1.0's answer, both
    // followers' accepts). R1.0 is isolated, steps down and rebuilds; R1.2 wins term 3, asks
    // for accepts, and R1.0 answers first with an empty set (its vote was its PREPARE, not an
    // accept): the majority read {R1.2, R1.0} does not hold the transaction in every set, R3
    // skips it, and it is lost. Closed by the leader's vote in its accept log and by
    // answering only from the question's term. Rerun with LUIGI_SIM_TRACE=1 to see every
    // event.
    common::must_pass_replicated(
        "fast_path",
        "regression_seed_2379_a_fast_commit_lost_under_random_faults",
        fast(2379, 40, 1_000),
        &FaultConfig::new(),
    );
}

#[test]
#[ignore = "fails today: hole 3 in DESIGN.md (a fast commit rests on a predecessor that was not \
            fast itself and that recovery does not find in every set read); un-ignore once closed"]
fn regression_seed_1053_a_fast_commit_read_a_predecessor_recovery_loses() {
    // Found by a release sweep of `random_faults_with_the_fast_path_on` (seeds 41..6041, the
    // first failure): R0.0 executes W (c1/5, ts 313397, not fast-eligible) and then T (c2/6,
    // ts 313740), which reads W's writes; both followers accepted both, with equal order
    // hashes, so T commits fast. R0.1 wins term 2 and reads {its own set, R0.0's}: R0.0's
    // holds its vote for T but nothing for W (it voted only for its own fast answers), so
    // R3 recovers T at 313740 without W before it, and T's answer no longer matches.
    common::must_pass_replicated(
        "fast_path",
        "regression_seed_1053_a_fast_commit_read_a_predecessor_recovery_loses",
        fast(1053, 40, 1_000),
        &FaultConfig::new(),
    );
}
