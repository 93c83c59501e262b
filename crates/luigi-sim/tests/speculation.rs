//! Speculative execution (DESIGN.md rule 14) in the replicated world: leaders execute and
//! answer before their records commit, and whoever acts on a result or a proposal waits for
//! the proof that its log position is committed. These runs kill leaders right after a
//! speculative answer (its records may be on no follower yet), on a contended workload where
//! later transactions read the lost writes, and check that every answer a client was given
//! survives; and they show that each guard, removed, is caught. About every other seed of the
//! kill sweeps mixes in read-only transactions at a snapshot (DESIGN.md rule 23,
//! `common::reads_on`), read from the nearest replicas, followers included.
//!
//! A failing seed prints the command that reruns it; `LUIGI_SIM_TRACE=1` prints every event.

mod common;

use common::{Catch, Trial};
use luigi_sim::{failover_config, FailoverReport, FaultConfig, KillPoint, SimConfig, ViolationKind};

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
        let config = common::with_reads_on_half(contended(seed, [0.0, 0.5][(seed % 2) as usize]));
        let r = run(
            "kills_right_after_speculative_answers_lose_nothing_a_client_was_told",
            config,
            &FaultConfig::kill_at(KillPoint::SpeculativeAnswer, 3),
        );
        total.absorb(&r);
    }
    eprintln!("{total:?}");
    assert!(total.kills >= 12, "the kill point came up: {total:?}");
    assert_reads_from_followers(&total);
}

#[test]
fn kills_right_after_speculative_answers_with_random_faults_and_lossy_links() {
    let mut total = FailoverReport::default();
    for seed in common::seeds(700..710) {
        let config = common::with_reads_on_half(contended(seed, 0.3).drop_rate(0.05).reorder(seed % 2 == 0));
        let faults = FaultConfig { kill: Some(KillPoint::SpeculativeAnswer), kills: 3, ..FaultConfig::new() };
        total.absorb(&run("kills_right_after_speculative_answers_with_random_faults_and_lossy_links", config, &faults));
    }
    eprintln!("{total:?}");
    assert!(total.kills >= 10 && total.crashes > total.kills, "{total:?}");
    assert_reads_from_followers(&total);
}

/// Over a sweep whose seeds mix in reads: some were answered, and some of their pieces by
/// followers.
fn assert_reads_from_followers(total: &FailoverReport) {
    if !common::one_seed() {
        assert!(total.read_only > 0 && total.snapshot_reads_by_followers > 0, "{total:?}");
    }
}

/// The mutation test `test`: `seeds` of a contended run, mutated by `mutate`, with frequent
/// random faults (Raft-only cuts among them: a leader cut off from its followers still
/// answers its clients) and kills at `point`, are caught as `catch` on some seed (which
/// passes unmutated).
fn caught(
    test: &str,
    seeds: std::ops::Range<u64>,
    point: KillPoint,
    cross_shard: f64,
    catch: Catch,
    mutate: impl Fn(&mut SimConfig),
) {
    let faults = FaultConfig {
        fault_gap: luigi_sim::Delay::new(20_000, 15_000),
        down: luigi_sim::Delay::new(40_000, 30_000),
        faults_until_us: 1_500_000,
        kill: Some(point),
        kills: 4,
        ..FaultConfig::new()
    };
    common::caught_as(
        "speculation",
        test,
        &common::seeds(seeds),
        catch,
        |seed| Trial::replicated(contended(seed, cross_shard), faults.clone()),
        |t| mutate(&mut t.config),
    );
}

#[test]
fn a_coordinator_that_trusts_unproven_answers_is_caught() {
    caught(
        "a_coordinator_that_trusts_unproven_answers_is_caught",
        60..101,
        KillPoint::SpeculativeAnswer,
        0.0,
        // A told result the committed logs do not hold (seeds 63, 79 and 100; seed 19 of
        // 12..20 until issue 26's marker reports and the clients' early resends on link
        // changes moved the traces; 16 of 12..300 catch it now).
        Catch::Kind(ViolationKind::NotDurable),
        |c| c.coordinator.mutations.trust_unproven_answers = true,
    );
}

#[test]
fn a_leader_that_hides_its_answers_positions_is_caught() {
    caught(
        "a_leader_that_hides_its_answers_positions_is_caught",
        0..12,
        KillPoint::SpeculativeAnswer,
        0.0,
        // A told result the committed logs do not hold (seeds 3 and 11; the others of the
        // range show the same loss otherwise: an answer repeated at another timestamp,
        // TimestampMismatch, or a timestamp at or below a published watermark, Invariant).
        Catch::Kind(ViolationKind::NotDurable),
        |c| c.leader.mutations.hide_positions = true,
    );
}

#[test]
fn progress_reports_of_another_term_taken_as_proof_are_caught() {
    caught(
        "progress_reports_of_another_term_taken_as_proof_are_caught",
        60..101,
        KillPoint::SpeculativeAnswer,
        0.0,
        // A told result the committed logs do not hold (seeds 79 and 100; seed 19 of 12..20
        // until issue 26's marker reports and the clients' early resends on link changes
        // moved the traces; 14 of 12..300 catch it now).
        Catch::Kind(ViolationKind::NotDurable),
        |c| c.coordinator.mutations.accept_reports_of_any_term = true,
    );
}

#[test]
fn a_leader_that_trusts_unproven_proposals_is_caught() {
    caught(
        "a_leader_that_trusts_unproven_proposals_is_caught",
        0..12,
        KillPoint::ProposeSent,
        1.0,
        // The lost proposal's shard proposes again, and the agreement's own assertion stops
        // the run before any check of the simulator sees it (seed 3; seeds 2 and 7 trip the
        // debug assertion that a participant's proposal never changes first).
        Catch::Panic("participants disagree on the final timestamp"),
        |c| c.leader.mutations.trust_unproven_proposals = true,
    );
}
