//! Speculative execution (DESIGN.md rule 14) in the replicated world: leaders execute and
//! answer before their records commit, and whoever acts on a result or a proposal waits for
//! the proof that its log position is committed. These runs kill leaders right after a
//! speculative answer (its records may be on no follower yet), on a contended workload where
//! later transactions read the lost writes, and check that every answer a client was given
//! survives; and they show that each guard, removed, is caught.
//!
//! A failing seed prints the command that reruns it; `LUIGI_SIM_TRACE=1` prints every event.

mod common;

use luigi_sim::{failover_config, FailoverReport, FaultConfig, KillPoint, SimConfig};

/// A contended replicated run: 2 keys per shard, so later transactions read what a killed
/// leader wrote speculatively.
fn contended(seed: u64, cross_shard: f64) -> SimConfig {
    let mut c = failover_config(seed, 2).keys(4).cross_shard(cross_shard);
    c.txns = 150;
    c
}

fn run(test: &str, config: SimConfig, faults: &FaultConfig) -> FailoverReport {
    common::must_pass_replicated("speculation", test, config, faults)
}

#[test]
fn kills_right_after_speculative_answers_lose_nothing_a_client_was_told() {
    let mut total = FailoverReport::default();
    for seed in common::seeds(600..612) {
        let config = contended(seed, [0.0, 0.5][(seed % 2) as usize]);
        let r = run(
            "kills_right_after_speculative_answers_lose_nothing_a_client_was_told",
            config,
            &FaultConfig::kill_at(KillPoint::SpeculativeAnswer, 3),
        );
        total.absorb(&r);
    }
    eprintln!("{total:?}");
    assert!(total.kills >= 12, "the kill point came up: {total:?}");
}

#[test]
fn kills_right_after_speculative_answers_with_random_faults_and_lossy_links() {
    let mut total = FailoverReport::default();
    for seed in common::seeds(700..710) {
        let config = contended(seed, 0.3).drop_rate(0.05).reorder(seed % 2 == 0);
        let faults = FaultConfig { kill: Some(KillPoint::SpeculativeAnswer), kills: 3, ..FaultConfig::new() };
        total.absorb(&run("kills_right_after_speculative_answers_with_random_faults_and_lossy_links", config, &faults));
    }
    eprintln!("{total:?}");
    assert!(total.kills >= 10 && total.crashes > total.kills, "{total:?}");
}

/// Runs `seeds` of a contended run, mutated by `mutate`, with frequent random faults
/// (Raft-only cuts among them: a leader cut off from its followers still answers its
/// clients) and kills at `point`; returns how many the checks caught.
fn caught(seeds: std::ops::Range<u64>, point: KillPoint, cross_shard: f64, mutate: impl Fn(&mut SimConfig)) -> u64 {
    let mut caught = 0;
    for seed in seeds {
        let mut config = contended(seed, cross_shard);
        mutate(&mut config);
        let faults = FaultConfig {
            fault_gap: luigi_sim::Delay::new(20_000, 15_000),
            down: luigi_sim::Delay::new(40_000, 30_000),
            faults_until_us: 1_500_000,
            kill: Some(point),
            kills: 4,
            ..FaultConfig::new()
        };
        if common::caught_replicated(&config, &faults) {
            caught += 1;
        }
    }
    caught
}

#[test]
fn a_coordinator_that_trusts_unproven_answers_is_caught() {
    let n =
        caught(12..20, KillPoint::SpeculativeAnswer, 0.0, |c| c.coordinator.mutations.trust_unproven_answers = true);
    assert!(n > 0, "no seed caught a client told a result that was lost with its leader");
}

#[test]
fn a_leader_that_hides_its_answers_positions_is_caught() {
    let n = caught(0..12, KillPoint::SpeculativeAnswer, 0.0, |c| c.leader.mutations.hide_positions = true);
    assert!(n > 0, "no seed caught answers sent without the position they rest on");
}

#[test]
fn progress_reports_of_another_term_taken_as_proof_are_caught() {
    let n = caught(12..20, KillPoint::SpeculativeAnswer, 0.0, |c| {
        c.coordinator.mutations.accept_reports_of_any_term = true
    });
    assert!(n > 0, "no seed caught a stale-term progress report taken as proof");
}

#[test]
fn a_leader_that_trusts_unproven_proposals_is_caught() {
    let n = caught(0..12, KillPoint::ProposeSent, 1.0, |c| c.leader.mutations.trust_unproven_proposals = true);
    assert!(n > 0, "no seed caught a decision on a proposal lost with its leader");
}
