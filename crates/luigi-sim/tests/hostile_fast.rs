//! Hostile fast-path dispatches in the recovery sweeps (issue 26, DESIGN.md rule 22): just
//! before each leader kill, a hostile client sends the followers of the shard, on the fast
//! path, a dispatch of every shape a replica refuses as malformed (a shard that does not
//! exist, a shard twice, unsorted keys, a key twice, a key both read and written) and two
//! well-formed ones stamped an hour ahead of their clocks and at `u64::MAX`
//! ([`luigi_sim::hostile_dispatches`]). The leader never sees them. No replica may ever
//! execute one (the replicated world's checks flag it), and the shards commit on (the
//! liveness check and the final convergence). About every other seed mixes in read-only
//! transactions at a snapshot (DESIGN.md rule 23, `common::reads_on`), read from the nearest
//! replicas, followers included.
//!
//! A failing seed prints the command that reruns it; `LUIGI_SIM_TRACE=1` prints every event.
//! `LUIGI_SIM_SWEEP=n` / `LUIGI_SIM_SWEEP_FROM=n` size the sweep (default 12 seeds from 6001).

mod common;

use common::{Catch, Trial};
use luigi_protocol::coordinator::fast::FanOut;
use luigi_sim::{failover_config, FailoverReport, FaultConfig, KillPoint, SimConfig, ViolationKind};

/// Two 3-replica shards with the fast path (every dispatch fanned out), clocks within
/// 100 µs, half of the transactions cross-shard.
fn config(seed: u64) -> SimConfig {
    let mut c = failover_config(seed, 2).keys(40).cross_shard(0.5).clock_offset_max(100);
    c.leader.fast_path = true;
    c.coordinator.fan_out = FanOut::Always;
    c.coordinator.headroom_us = 1_000;
    c
}

/// Three kills at a leader kill point drawn from `seed`, hostile dispatches before each.
fn faults(seed: u64) -> FaultConfig {
    const POINTS: [KillPoint; 5] = [
        KillPoint::PrepareCommitted,
        KillPoint::ProposeSent,
        KillPoint::Decided,
        KillPoint::Executed,
        KillPoint::SpeculativeAnswer,
    ];
    FaultConfig { hostile_fast: true, ..FaultConfig::kill_at(POINTS[(seed % 5) as usize], 3) }
}

#[test]
fn hostile_fast_dispatches_before_leader_kills_are_never_executed_and_the_shards_commit_on() {
    let test = "hostile_fast_dispatches_before_leader_kills_are_never_executed_and_the_shards_commit_on";
    let mut total = FailoverReport::default();
    for seed in common::sweep(6_001, 12) {
        let config = common::with_reads_on_half(config(seed));
        total.absorb(&common::must_pass_replicated("hostile_fast", test, config, &faults(seed)));
    }
    eprintln!("{total:?}");
    assert!(total.kills >= 12 && total.hostile_sent >= 12 * 7 && total.committed > 0, "{total:?}");
    if !common::one_seed() {
        assert!(total.read_only > 0 && total.snapshot_reads_by_followers > 0, "{total:?}");
    }
}

/// The sweep is not vacuous: followers that accept without the admission check
/// (`Mutations::skip_fast_accept_check`, or the check's call deleted from the fast accept in
/// `luigi-protocol`'s `replica.rs`, which was tried by hand and fails the same way) accept the
/// two transactions stamped ahead; the new leader recovers them from every follower's
/// accepts and prepares them, and its watermark waits for them: no transaction is answered
/// for 10 s (Stuck). Caught on seed 6001, the sweep's first, as on each of 6001..6020.
#[test]
fn followers_that_accept_without_the_admission_check_are_caught() {
    common::caught_as(
        "hostile_fast",
        "followers_that_accept_without_the_admission_check_are_caught",
        &common::seeds(6_001..6_002),
        Catch::Kind(ViolationKind::Stuck),
        |seed| Trial::replicated(config(seed), faults(seed)),
        |t| t.config.leader.mutations.skip_fast_accept_check = true,
    );
}
