//! The fast path's parts together in the replicated world, with and without faults (DESIGN.md,
//! "The fast path"): clients send every dispatch to every replica,
//! followers accept early transactions and answer `FastAccept` once the record is durable,
//! leaders mark unmoved answers with their order hash, and coordinators commit on the
//! accepts. With faults, a new leader recovers what may have been fast-committed (R1-R3)
//! before it serves; the checker holds every answer to the committed logs. About every other
//! seed of the fault sweeps mixes in read-only transactions at a snapshot (DESIGN.md rule 23,
//! `common::reads_on`), read from the nearest replicas, followers included.
//!
//! A failing seed prints the command that reruns it; `LUIGI_SIM_TRACE=1` prints every event.
//! `LUIGI_SIM_SWEEP=n` / `LUIGI_SIM_SWEEP_FROM=n` size the two fault sweeps (defaults: 12
//! seeds from 21 with kills, 12 from 41 with random faults), e.g.
//! `LUIGI_SIM_SWEEP=3000 cargo test --release -p luigi-sim --test fast_path random -- --nocapture`.

mod common;

use common::{Catch, Trial, World};
use luigi_protocol::coordinator::fast::FanOut;
use luigi_sim::{failover_config, FailoverReport, FaultConfig, SimConfig, ViolationKind};

/// Two 3-replica shards, single-shard transactions over `keys` keys, clocks within 100 µs
/// (the fast path needs clocks close next to the one-way delays, as Tiga's does), and
/// `headroom_us` on top of the delay estimate.
fn fast(seed: u64, keys: u64, headroom_us: u64) -> SimConfig {
    let mut c = failover_config(seed, 2).keys(keys).cross_shard(0.0).clock_offset_max(100);
    c.leader.fast_path = true;
    // Every transaction asks for it: the most fast-path traffic to break.
    c.coordinator.fan_out = FanOut::Always;
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

#[test]
fn adaptive_clients_under_contention_sample_and_every_answer_still_matches_the_logs() {
    // Rule 20 in the world: on 4 keys few transactions commit fast, so each client soon asks
    // for the fast path for samples only; which dispatches ask changes nothing the checks see.
    let test = "adaptive_clients_under_contention_sample_and_every_answer_still_matches_the_logs";
    let mut total = FailoverReport::default();
    for seed in common::sweep(31, 3) {
        let mut config = fast(seed, 4, 1_000).clients(1).txns(1_500);
        config.coordinator.fan_out = FanOut::Adaptive;
        total.absorb(&common::must_pass_replicated("fast_path", test, config, &FaultConfig::new()));
    }
    eprintln!("{total:?}");
    let window = u64::from(luigi_protocol::coordinator::fast::FAN_OUT_WINDOW);
    let runs = total.txns / 1_500;
    assert!(total.fanned_out >= runs * window && total.fanned_out < total.txns / 2, "{total:?}");
    assert!(total.crashes > 0 && total.fast_commits > 0, "{total:?}");
}

/// Rule 1's adaptive headroom in the world: 2 shards x 3 replicas, every transaction
/// cross-shard over 4,000 keys, 8 clients x 8 in flight, links of 2 ms ± 1.6 ms (a 90th
/// percentile of the delay samples leaves some dispatches late), and a 200 µs configured
/// headroom. The same seeds with adaptation on and off: on, the coordinators
/// raise the headroom where dispatches arrive late, so fewer first answers arrive after
/// their timestamps and more transactions commit on the fast path; every check holds either
/// way.
#[test]
fn adaptive_headroom_cuts_late_arrivals_and_wins_fast_commits_on_jittery_links() {
    let test = "adaptive_headroom_cuts_late_arrivals_and_wins_fast_commits_on_jittery_links";
    let faults = FaultConfig { random_faults: false, ..FaultConfig::new() };
    let run = |adaptive: bool| {
        let mut total = FailoverReport::default();
        for seed in common::seeds(61..65) {
            let mut c = fast(seed, 4_000, 200).cross_shard(1.0).clients(8).in_flight(8).txns(800).delay(2_000, 1_600);
            c.coordinator.adaptive_headroom = adaptive;
            c.coordinator.retry_timeout_us = 400_000;
            total.absorb(&common::must_pass_replicated("fast_path", test, c, &faults));
        }
        eprintln!("adaptive {adaptive}: {total:?}");
        total
    };
    let (on, off) = (run(true), run(false));
    assert!(on.committed > 0 && off.committed > 0, "{on:?} {off:?}");
    // Seeds 61..65: 130 late first answers on, 210 off; 1,385 fast commits on, 1,236 off.
    let (late_on, late_off) = (on.late_arrivals, off.late_arrivals);
    assert!(late_on * 3 < late_off * 2, "late first answers: on {late_on} off {late_off}");
    assert!(on.fast_commits > off.fast_commits, "fast commits: on {} off {}", on.fast_commits, off.fast_commits);
    assert!(on.headroom_us_sum > off.headroom_us_sum, "it raised the stamped headroom");
}

/// As [`runs`], with `faults`, and reads mixed into about every other seed
/// (`common::with_reads_on_half`).
fn runs_with(test: &str, seeds: Vec<u64>, keys: u64, faults: &FaultConfig) -> FailoverReport {
    let mut total = FailoverReport::default();
    for seed in seeds {
        let config = common::with_reads_on_half(fast(seed, keys, 1_000));
        total.absorb(&common::must_pass_replicated("fast_path", test, config, faults));
    }
    eprintln!("{total:?}");
    assert_reads_from_followers(&total);
    total
}

/// Over a sweep whose seeds mix in reads: some were answered, and some of their pieces by
/// followers.
fn assert_reads_from_followers(total: &FailoverReport) {
    if !common::one_seed() {
        assert!(total.read_only > 0 && total.snapshot_reads_by_followers > 0, "{total:?}");
    }
}

#[test]
fn leaders_killed_right_after_answering_lose_no_fast_commit() {
    // Hostile fast dispatches to the followers before each kill (`hostile_fast.rs`): none
    // may execute.
    let faults = FaultConfig { hostile_fast: true, ..FaultConfig::kill_at(luigi_sim::KillPoint::SpeculativeAnswer, 3) };
    let total =
        runs_with("leaders_killed_right_after_answering_lose_no_fast_commit", common::sweep(21, 12), 40, &faults);
    assert!(total.kills >= 12 && total.fast_commits > 0 && total.hostile_sent > 0, "{total:?}");
}

#[test]
fn random_faults_with_the_fast_path_on() {
    let total = runs_with("random_faults_with_the_fast_path_on", common::sweep(41, 12), 40, &FaultConfig::new());
    assert!(total.crashes > 0 && total.fast_commits > 0, "{total:?}");
}

/// The mutation test `test`: random faults catch the broken rule `mutate` sets as `catch` on
/// some seed of `seeds` of `config` (and the same seed passes without it).
fn caught_as(
    test: &str,
    seeds: std::ops::Range<u64>,
    catch: Catch,
    config: impl Fn(u64) -> SimConfig,
    mutate: impl Fn(&mut SimConfig),
) {
    common::caught_as(
        "fast_path",
        test,
        &common::seeds(seeds),
        catch,
        |seed| Trial::replicated(config(seed), FaultConfig::new()),
        |t| mutate(&mut t.config),
    );
}

#[test]
fn a_new_leader_that_skips_the_fast_recovery_is_caught() {
    // Random faults catch it within a few seeds (the first catch, at seed 45, as NotDurable;
    // none of 46..90 does: a Raft-only partition cut a leader off from its followers while
    // clients still reached all three; they fast-committed, and the new leader never saw the
    // PREPARE). The range stops there, as the search that found it did.
    caught_as(
        "a_new_leader_that_skips_the_fast_recovery_is_caught",
        41..46,
        Catch::Kind(ViolationKind::NotDurable),
        |seed| fast(seed, 40, 1_000),
        |c| c.leader.mutations.skip_fast_recovery = true,
    );
}

#[test]
fn a_leader_that_answers_fast_without_its_vote_is_caught() {
    // Found by a release search with the mutation on (seed 389 while the recovery waited for
    // the no-op, 60 since it is computed at the election, 296 since a question for accepts
    // waits for the replica's term instead of being asked again, 2379 once a new leader's
    // floor promise left with its no-op; since followers that lost their leader tell each
    // other, none in seeds 41..10000 with 40 keys, and 2900 with 8; since tables are keyed
    // per process, none in 41..12000 with 8 keys, 41..8000 with 4, 41..6000 with 8 and 5 ms
    // of headroom, and 3363 with 8 keys and 2% of messages dropped; 4074 since the
    // simulator's clients resend early when their link to a replica goes down or comes up,
    // as the runtime client does: the first catch in 3364..; 2543 since the coordinators'
    // headroom adapts to late arrivals, DESIGN.md rule 1: `S_MUT=vote S_KEYS=8 S_DROP=0.02`,
    // the first catch in 41..): a deposed leader's PREPARE
    // truncated, its answer to the new leader's question without the transaction it had
    // answered fast; the transaction is lost (NotDurable).
    caught_as(
        "a_leader_that_answers_fast_without_its_vote_is_caught",
        2543..2544,
        Catch::Kind(ViolationKind::NotDurable),
        |seed| fast(seed, 8, 1_000).drop_rate(0.02),
        |c| c.leader.mutations.skip_leader_vote = true,
    );
}

#[test]
fn a_coordinator_that_commits_fast_on_different_order_hashes_is_caught() {
    // Found by a search (`S_MUT=order`: first catch at seed 540 with 40 keys since the
    // coordinators' headroom adapts to late arrivals, DESIGN.md rule 1; 279 since tables are
    // keyed per process; 354 since a new leader's floor promise leaves with its no-op; 157 since
    // questions for accepts wait for the replica's term, 106 since rules C and H, 123
    // before): after a failover, an answer no longer matches the serial replay of the
    // committed logs (ResultMismatch). Equal hashes are what make the followers' recent
    // order the leader's.
    caught_as(
        "a_coordinator_that_commits_fast_on_different_order_hashes_is_caught",
        540..541,
        Catch::Kind(ViolationKind::ResultMismatch),
        |seed| fast(seed, 40, 1_000),
        |c| c.coordinator.mutations.fast_ignores_order = true,
    );
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
fn regression_seed_1053_a_fast_commit_read_a_predecessor_recovery_loses() {
    // Found by a release sweep of `random_faults_with_the_fast_path_on` (seeds 41..6041, the
    // first failure): R0.0 executes W (c1/5, ts 313397, not fast-eligible) and then T (c2/6,
    // ts 313740), which reads W's writes; both followers accepted both, with equal order
    // hashes, so T commits fast. R0.1 wins term 2 and reads {its own set, R0.0's}: R0.0's
    // holds its vote for T but nothing for W (it voted only for its own fast answers), so
    // R3 recovers T at 313740 without W before it, and T's answer no longer matches.
    // Closed by rule C: W was not clean, so T is not fast (its answer takes rule 14's path).
    common::must_pass_replicated(
        "fast_path",
        "regression_seed_1053_a_fast_commit_read_a_predecessor_recovery_loses",
        fast(1053, 40, 1_000),
        &FaultConfig::new(),
    );
}

/// As [`fast`], with every transaction cross-shard (both shards): the cross-shard fast path
/// (DESIGN.md rules 16-19).
fn fast_cross(seed: u64, keys: u64) -> SimConfig {
    fast(seed, keys, 1_000).cross_shard(1.0)
}

/// The runs of `seeds` of [`fast_cross`] with `keys` keys and `faults`, summed; with `reads`,
/// reads are mixed into about every other seed (`common::with_reads_on_half`).
fn cross_runs(test: &str, seeds: Vec<u64>, keys: u64, faults: &FaultConfig, reads: bool) -> FailoverReport {
    let mut total = FailoverReport::default();
    for seed in seeds {
        let config = if reads { common::with_reads_on_half(fast_cross(seed, keys)) } else { fast_cross(seed, keys) };
        total.absorb(&common::must_pass_replicated("fast_path", test, config, faults));
    }
    eprintln!("{total:?}");
    if reads {
        assert_reads_from_followers(&total);
    }
    total
}

#[test]
fn without_faults_most_uncontended_cross_shard_transactions_commit_on_the_fast_path() {
    let faults = FaultConfig { random_faults: false, ..FaultConfig::new() };
    let total = cross_runs(
        "without_faults_most_uncontended_cross_shard_transactions_commit_on_the_fast_path",
        common::seeds(1..9),
        4_000,
        &faults,
        false,
    );
    assert!(total.committed > 0 && total.fast_commits * 2 > total.committed, "{total:?}");
    assert!(total.fast_proposals > 0, "rule 18: marked proposals used on their followers' accepts: {total:?}");
    assert!(total.early_commits > 0, "rule 21: fast commits on early answers: {total:?}");
}

#[test]
fn regression_seed_55_a_deposed_leader_executes_on_a_proposal_its_successor_superseded() {
    // Found with 5 ms of headroom (a search for rule 21's mutations): deposed leader R0.0
    // used shard 1's marked proposal (rule 18) and executed at 86605 after its successor
    // had prepared the transaction again at 1005551 and committed it. R0.0's own PREPARE
    // can never commit, so nothing it answers is ever proven: the checker's rule-4 check
    // took the successor's PREPARE for the executing leader's and flagged the execution.
    let config = fast(55, 40, 5_000).cross_shard(1.0);
    common::must_pass_replicated("fast_path", "regression_seed_55", config, &FaultConfig::new());
}

#[test]
fn cross_shard_proposers_killed_after_their_proposal_left_lose_no_fast_commit() {
    let faults = FaultConfig { hostile_fast: true, ..FaultConfig::kill_at(luigi_sim::KillPoint::ProposeSent, 3) };
    let total = cross_runs(
        "cross_shard_proposers_killed_after_their_proposal_left_lose_no_fast_commit",
        common::sweep(21, 12),
        40,
        &faults,
        true,
    );
    assert!(total.kills >= 12 && total.fast_commits > 0, "{total:?}");
}

#[test]
fn random_faults_with_the_cross_shard_fast_path_on() {
    let total = cross_runs(
        "random_faults_with_the_cross_shard_fast_path_on",
        common::sweep(41, 12),
        40,
        &FaultConfig::new(),
        true,
    );
    assert!(total.crashes > 0 && total.fast_commits > 0, "{total:?}");
}

#[test]
fn a_leader_that_uses_a_marked_proposal_without_every_accept_is_caught() {
    // Rule 18. Found by a release search (first catch at seed 45 with 40 keys since questions
    // for accepts wait for the replica's term; 56 before): a leader
    // decided on another shard's marked, unproven proposal that shard then lost; its new
    // leader learned of the transaction from a `Recover` and prepared it above its floor, so
    // the participants disagree on the final timestamp: a replica executed the transaction
    // before its shard durably adopted the final timestamp (NotDurable; an assertion in the
    // agreement caught it before the checks did, when the test was written).
    caught_as(
        "a_leader_that_uses_a_marked_proposal_without_every_accept_is_caught",
        45..46,
        Catch::Kind(ViolationKind::NotDurable),
        |seed| fast_cross(seed, 40),
        |c| c.leader.mutations.fast_trusts_marked_proposals = true,
    );
}

#[test]
fn a_coordinator_that_counts_an_early_answer_outside_a_fast_commit_is_caught() {
    // Rule 21. Found by a search (`S_MUT=early-alone`, first catch at seed 113 with 40 keys
    // since a serving leader's new term makes its peers resend their proposals, 8d01986; 217
    // before that, and 113 before a new leader's floor promise left with its no-op): an answer
    // no longer matches the sequential replay (ResultMismatch).
    caught_as(
        "a_coordinator_that_counts_an_early_answer_outside_a_fast_commit_is_caught",
        113..114,
        Catch::Kind(ViolationKind::ResultMismatch),
        |seed| fast_cross(seed, 40),
        |c| c.coordinator.mutations.early_answers_count_alone = true,
    );
}

/// Searches seeds for one where random faults catch a broken rule, for the tests above:
/// `S_MUT` (`c`, `h`, `f2`, `order`, `vote`; cross-shard: `marked`, `early-time`,
/// `early-alone`, and `none-cross`, no mutation) over `S_FROM..S_TO` with `S_KEYS` keys (default 40)
/// and `S_DROP` of the messages on client and Raft links lost (default none), with
/// `S_HEADROOM` µs of headroom in the coordinators' timestamps (default 1,000), stopping at
/// the first catch. Run in release, e.g.
/// `S_MUT=h S_FROM=41 S_TO=6000 cargo test --release -p luigi-sim --test fast_path
/// search_for_a_seed -- --ignored --nocapture`.
#[test]
#[ignore = "a search tool for the mutation tests, sized by S_MUT, S_FROM, S_TO, S_KEYS, S_DROP and S_HEADROOM"]
fn search_for_a_seed_that_catches_a_mutation() {
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("set {name}"));
    let (from, to): (u64, u64) = (env("S_FROM").parse().expect("S_FROM"), env("S_TO").parse().expect("S_TO"));
    let which = env("S_MUT");
    let keys: u64 = std::env::var("S_KEYS").map_or(40, |k| k.parse().expect("S_KEYS"));
    let drop_rate: f64 = std::env::var("S_DROP").map_or(0.0, |d| d.parse().expect("S_DROP"));
    let headroom_us: u64 = std::env::var("S_HEADROOM").map_or(1_000, |h| h.parse().expect("S_HEADROOM"));
    for seed in from..to {
        let mut config = fast(seed, keys, headroom_us).drop_rate(drop_rate);
        match which.as_str() {
            "c" => config.leader.mutations.fast_ignores_unclean_predecessors = true,
            "h" => config.leader.mutations.fast_hashes_direct_predecessors = true,
            "f2" => config.leader.mutations.fast_ignores_f2 = true,
            "order" => config.coordinator.mutations.fast_ignores_order = true,
            "vote" => config.leader.mutations.skip_leader_vote = true,
            "marked" => {
                config = config.cross_shard(1.0);
                config.leader.mutations.fast_trusts_marked_proposals = true;
            }
            "early-time" => {
                config = config.cross_shard(1.0);
                config.leader.mutations.early_before_its_time = true;
            }
            "early-alone" => {
                config = config.cross_shard(1.0);
                config.coordinator.mutations.early_answers_count_alone = true;
            }
            // No mutation: a sweep of the cross-shard fast path at this headroom and contention
            // (a catch is a bug).
            "none-cross" => config = config.cross_shard(1.0),
            other => panic!("S_MUT={other}: one of c, h, f2, order, vote, marked, early-time, early-alone, none-cross"),
        }
        let got = common::outcome(&config, &World::Replicated(FaultConfig::new()));
        if !got.passed() {
            eprintln!("CAUGHT {which} at seed {seed}: {}", got.summary());
            return;
        }
        if seed % 100 == 0 {
            eprintln!("at {seed}");
        }
    }
    panic!("{which} was not caught on seeds {from}..{to}");
}
